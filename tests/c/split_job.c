/* A two-rank job over fakenccl (each rank a fork+exec of this program with RANK set, as a
 * launcher starts ranks) whose calls NCCL turns into
 * other tasks: per round an AlltoAll (2N point-to-point tasks), a Broadcast (an AllGatherV
 * task from NCCL 2.29.2), an AllReduce and a Send/Recv pair, so the profiler door's
 * records can be checked against the calls the application made. Exits 0 when every call
 * succeeded in every rank. Argument: the number of rounds (default 2). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;
enum { ncclFloat32 = 7, ncclSum = 0, RANKS = 2 };

extern ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);
extern ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);
extern ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, int dtype, ncclComm_t c, void *stream);
extern ncclResult_t ncclSend(const void *s, size_t n, int dtype, int peer, ncclComm_t c, void *stream);
extern ncclResult_t ncclRecv(void *r, size_t n, int dtype, int peer, ncclComm_t c, void *stream);
extern ncclResult_t ncclGroupStart(void);
extern ncclResult_t ncclGroupEnd(void);

#define CHECK(call)                                                              \
    do {                                                                         \
        ncclResult_t rc_ = (call);                                               \
        if (rc_ != 0) {                                                          \
            fprintf(stderr, "rank %d: %s -> %d\n", rank, #call, (int)rc_);       \
            return 1;                                                            \
        }                                                                        \
    } while (0)

static int run_rank(ncclUniqueId id, int rank, int rounds) {
    ncclComm_t comm = NULL;
    CHECK(ncclCommInitRank(&comm, RANKS, id, rank));
    float x[4 * RANKS] = {1, 2, 3, 4, 5, 6, 7, 8}, y[4 * RANKS] = {0};
    int peer = 1 - rank;
    for (int i = 0; i < rounds; i++) {
        CHECK(ncclAlltoAll(x, y, 4, ncclFloat32, comm, NULL));
        CHECK(ncclBroadcast(x, y, 4, ncclFloat32, 0, comm, NULL));
        CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL));
        CHECK(ncclGroupStart());
        CHECK(ncclSend(x, 4, ncclFloat32, peer, comm, NULL));
        CHECK(ncclRecv(y, 4, ncclFloat32, peer, comm, NULL));
        CHECK(ncclGroupEnd());
    }
    CHECK(ncclCommDestroy(comm));
    return 0;
}

/* argv: [rounds] to launch the job; rounds rank hex-id for one rank. */
int main(int argc, char **argv) {
    const char *rounds = argc > 1 ? argv[1] : "2";
    ncclUniqueId id;
    if (argc == 4) {
        for (size_t i = 0; i < sizeof id.internal; i++) {
            unsigned byte = 0;
            if (sscanf(argv[3] + 2 * i, "%2x", &byte) != 1) return 2;
            id.internal[i] = (char)byte;
        }
        return run_rank(id, atoi(argv[2]), atoi(rounds));
    }
    if (ncclGetUniqueId(&id) != 0) return 2;
    char hex[2 * sizeof id.internal + 1];
    for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    pid_t pids[RANKS];
    for (int r = 0; r < RANKS; r++) {
        char rank[8];
        snprintf(rank, sizeof rank, "%d", r);
        pids[r] = fork();
        if (pids[r] < 0) return 2;
        if (pids[r] == 0) {
            setenv("RANK", rank, 1);
            setenv("WORLD_SIZE", "2", 1);
            execl("/proc/self/exe", argv[0], rounds, rank, hex, (char *)NULL);
            _exit(127);
        }
    }
    int failed = 0;
    for (int r = 0; r < RANKS; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed;
}
