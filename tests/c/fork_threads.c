/* Forks while many threads make their first NCCL calls, for tests/hostile_process.rs
 * (issue 24, point 3). PyTorch does this: DataLoader workers fork while the NCCL watchdog
 * thread polls.
 *
 *   fork_threads THREADS FORKS
 *
 * THREADS threads each create a 1-rank communicator, then call a dozen entry points, in
 * waves: at the start of each wave every thread calls the wave's entry point for the first
 * time, all released at once, while one more thread forks FORKS children as fast as it can.
 * Each child calls an entry point no parent thread calls (ncclCommCuDevice, on a NULL
 * communicator: fakenccl answers ncclInvalidArgument) and _exit(0)s. A child not gone
 * within 10 s hung; it is killed.
 * Prints "fork_threads: ok" and exits 0 when no child hung; otherwise prints
 * "fork_threads: N of M children hung" and exits 3 (2: an NCCL call failed). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;
enum { ncclFloat32 = 7, ncclSum = 0 };

extern ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommCount(ncclComm_t comm, int *count);
extern ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank);
extern ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *device);
extern ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *error);
extern ncclResult_t ncclCommFinalize(ncclComm_t comm);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclGroupStart(void);
extern ncclResult_t ncclGroupEnd(void);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);
extern ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);
extern ncclResult_t ncclReduce(const void *s, void *r, size_t n, int dtype, int op, int root, ncclComm_t c,
                               void *stream);
extern ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int dtype, ncclComm_t c, void *stream);
extern ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c,
                                      void *stream);
extern ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, int dtype, ncclComm_t c, void *stream);

#define MAX_THREADS 256
#define MAX_FORKS 1024
#define CHECK(call)                                                        \
    do {                                                                   \
        int rc_ = (call);                                                  \
        if (rc_ != 0) {                                                    \
            fprintf(stderr, "fork_threads: %s -> %d\n", #call, rc_);       \
            exit(2);                                                       \
        }                                                                  \
    } while (0)

#define WAVES 12

static pthread_barrier_t wave;
static ncclUniqueId ids[MAX_THREADS];
static pid_t children[MAX_FORKS * WAVES];
static int forks;

/* Wave `w` of one thread's calls on `comm` (wave 0 creates it, the last destroys it). */
static void call_wave(int w, ncclComm_t *comm, ncclUniqueId *id) {
    float x[4] = {1, 2, 3, 4}, y[4];
    int value = 0;
    ncclResult_t error = 0;
    switch (w) {
    case 0: CHECK(ncclCommInitRank(comm, 1, *id, 0)); break;
    case 1: CHECK(ncclCommCount(*comm, &value)); break;
    case 2: CHECK(ncclCommUserRank(*comm, &value)); break;
    case 3: CHECK(ncclCommGetAsyncError(*comm, &error)); break;
    case 4: CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, *comm, NULL)); break;
    case 5: CHECK(ncclBroadcast(x, y, 4, ncclFloat32, 0, *comm, NULL)); break;
    case 6: CHECK(ncclReduce(x, y, 4, ncclFloat32, ncclSum, 0, *comm, NULL)); break;
    case 7: CHECK(ncclAllGather(x, y, 4, ncclFloat32, *comm, NULL)); break;
    case 8: CHECK(ncclReduceScatter(x, y, 4, ncclFloat32, ncclSum, *comm, NULL)); break;
    case 9: CHECK(ncclAlltoAll(x, y, 1, ncclFloat32, *comm, NULL)); break;
    case 10:
        CHECK(ncclGroupStart());
        CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, *comm, NULL));
        CHECK(ncclGroupEnd());
        break;
    default:
        CHECK(ncclCommFinalize(*comm));
        CHECK(ncclCommDestroy(*comm));
    }
}

static void *calls(void *arg) {
    ncclComm_t comm = NULL;
    for (int w = 0; w < WAVES; w++) {
        pthread_barrier_wait(&wave);
        call_wave(w, &comm, arg);
    }
    return NULL;
}

static void *forker(void *arg) {
    int per_wave = *(int *)arg;
    for (int w = 0; w < WAVES; w++) {
        pthread_barrier_wait(&wave);
        for (int i = 0; i < per_wave; i++) {
            pid_t pid = fork();
            if (pid == 0) {
                int device = 0;
                (void)ncclCommCuDevice(NULL, &device);
                _exit(0);
            }
            if (pid > 0) children[forks++] = pid;
        }
    }
    return NULL;
}

/* How many children are still running 10 s from now; those are killed. */
static int hung_children(void) {
    struct timespec tick = {0, 10 * 1000 * 1000};
    int running = forks;
    for (int i = 0; i < 1000 && running > 0; i++) {
        for (int c = 0; c < forks; c++) {
            if (children[c] > 0 && waitpid(children[c], NULL, WNOHANG) == children[c]) {
                children[c] = 0;
                running--;
            }
        }
        if (running > 0) nanosleep(&tick, NULL);
    }
    for (int c = 0; c < forks; c++) {
        if (children[c] > 0) {
            kill(children[c], SIGKILL);
            waitpid(children[c], NULL, 0);
        }
    }
    return running;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 32;
    int wanted = argc > 2 ? atoi(argv[2]) : 4;
    if (threads < 1 || threads > MAX_THREADS || wanted < 1 || wanted > MAX_FORKS) {
        fprintf(stderr, "usage: fork_threads THREADS(1-%d) FORKS(1-%d)\n", MAX_THREADS, MAX_FORKS);
        return 2;
    }
    for (int t = 0; t < threads; t++) CHECK(ncclGetUniqueId(&ids[t]));
    pthread_t workers[MAX_THREADS + 1];
    pthread_barrier_init(&wave, NULL, (unsigned)threads + 1);
    for (int t = 0; t < threads; t++) pthread_create(&workers[t], NULL, calls, &ids[t]);
    pthread_create(&workers[threads], NULL, forker, &wanted);
    for (int t = 0; t <= threads; t++) pthread_join(workers[t], NULL);
    int hung = hung_children();
    if (hung > 0) {
        printf("fork_threads: %d of %d children hung\n", hung, forks);
        return 3;
    }
    printf("fork_threads: ok\n");
    return 0;
}
