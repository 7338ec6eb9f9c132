/* Processes that copy a rank mid-flight, for tests/hostile_process.rs.
 *
 *   fork_clone fork-during-init MS   a second thread makes the first NCCL calls (the library
 *                                    starts); MS ms later the main thread forks, and the
 *                                    child makes NCCL calls of its own. Exit 3 if the child
 *                                    is not done within 20 s (it hung in the library).
 *   fork_clone raw-clone             allreduces on a 1-rank communicator, then a child made
 *                                    by a raw clone() (no fork handlers run) creates its own
 *                                    communicator, allreduces 16 elements and exit()s
 *                                    without destroying it; then
 *                                    the parent allreduces again.
 * Prints "fork_clone: ok" when everything returned ncclSuccess. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;
enum { ncclFloat32 = 7, ncclSum = 0 };

extern ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);

#define CHECK(call)                                                        \
    do {                                                                   \
        int rc_ = (call);                                                  \
        if (rc_ != 0) {                                                    \
            fprintf(stderr, "fork_clone: %s -> %d\n", #call, rc_);         \
            exit(2);                                                       \
        }                                                                  \
    } while (0)

static void allreduces(ncclComm_t comm, size_t n, int times) {
    float x[16] = {1}, y[16];
    for (int i = 0; i < times; i++) CHECK(ncclAllReduce(x, y, n, ncclFloat32, ncclSum, comm, NULL));
}

static ncclComm_t one_rank_comm(void) {
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    CHECK(ncclGetUniqueId(&id));
    CHECK(ncclCommInitRank(&comm, 1, id, 0));
    return comm;
}

static void *first_calls(void *arg) {
    (void)arg;
    ncclComm_t comm = one_rank_comm();
    allreduces(comm, 4, 3);
    CHECK(ncclCommDestroy(comm));
    return NULL;
}

/* Waits for `pid` at most `seconds`; kills it and returns -1 if it is still running. */
static int wait_bounded(pid_t pid, int seconds) {
    for (int i = 0; i < seconds * 100; i++) {
        int status = 0;
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static int fork_during_init(int ms) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, first_calls, NULL) != 0) return 2;
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    pid_t pid = fork();
    if (pid == 0) {
        ncclComm_t comm = one_rank_comm();
        allreduces(comm, 16, 3);
        CHECK(ncclCommDestroy(comm));
        exit(0);
    }
    int status = wait_bounded(pid, 20);
    if (status != 0) {
        fprintf(stderr, "fork_clone: the forked child %s\n", status < 0 ? "hung (killed after 20 s)" : "failed");
        return 3;
    }
    pthread_join(thread, NULL);
    return 0;
}

static int raw_clone(void) {
    ncclComm_t comm = one_rank_comm();
    allreduces(comm, 4, 3);
    /* clone(2) itself, not glibc's fork(): no pthread_atfork handler runs in the child. */
    long pid = syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
    if (pid == 0) {
        ncclComm_t mine = one_rank_comm();
        allreduces(mine, 16, 3);
        exit(0); /* no ncclCommDestroy; exit runs the atexit handlers inherited from the parent */
    }
    if (pid < 0 || wait_bounded((pid_t)pid, 20) != 0) return 3;
    allreduces(comm, 4, 3);
    CHECK(ncclCommDestroy(comm));
    return 0;
}

int main(int argc, char **argv) {
    int rc = 2;
    if (argc == 3 && strcmp(argv[1], "fork-during-init") == 0) rc = fork_during_init(atoi(argv[2]));
    if (argc == 2 && strcmp(argv[1], "raw-clone") == 0) rc = raw_clone();
    if (rc == 0) printf("fork_clone: ok\n");
    return rc;
}
