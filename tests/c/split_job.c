/* A two-rank job over fakenccl (each rank a fork+exec of this program with RANK set, as a
 * launcher starts ranks) whose calls NCCL turns into
 * other tasks: per round an AlltoAll (2N point-to-point tasks), a Broadcast (an AllGatherV
 * task from NCCL 2.29.2), an AllReduce and a Send/Recv pair, so the profiler door's
 * records can be checked against the calls the application made. Exits 0 when every call
 * succeeded in every rank. Argument: the number of rounds (default 2). */
#include "fake_job.h"

enum { ncclFloat32 = 7, ncclSum = 0, RANKS = 2 };

extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);
extern ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);
extern ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, int dtype, ncclComm_t c, void *stream);
extern ncclResult_t ncclSend(const void *s, size_t n, int dtype, int peer, ncclComm_t c, void *stream);
extern ncclResult_t ncclRecv(void *r, size_t n, int dtype, int peer, ncclComm_t c, void *stream);
extern ncclResult_t ncclGroupStart(void);
extern ncclResult_t ncclGroupEnd(void);


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

int main(int argc, char **argv) { return job_main(argc, argv, RANKS, "2", run_rank); }
