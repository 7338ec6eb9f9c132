/* A three-rank job over fakenccl (each rank a fork+exec of this program with RANK set, as a
 * launcher starts ranks) whose rooted calls NCCL turns into point-to-point tasks: per round
 * a Gather and a Scatter rooted at rank 1 (2.28.3), an AllReduce and a Send/Recv ring in
 * one group, so the profiler door's records can be checked against the calls the
 * application made. Every Gather and Scatter checks the data it received. Exits 0 when
 * every call succeeded in every rank. Argument: the number of rounds (default 2). */
#include "fake_job.h"

enum { ncclFloat32 = 7, ncclSum = 0, RANKS = 3, ROOT = 1, N = 4 };

extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);
extern ncclResult_t ncclGather(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);
extern ncclResult_t ncclScatter(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);
extern ncclResult_t ncclSend(const void *s, size_t n, int dtype, int peer, ncclComm_t c, void *stream);
extern ncclResult_t ncclRecv(void *r, size_t n, int dtype, int peer, ncclComm_t c, void *stream);
extern ncclResult_t ncclGroupStart(void);
extern ncclResult_t ncclGroupEnd(void);


static int run_rank(ncclUniqueId id, int rank, int rounds) {
    ncclComm_t comm = NULL;
    CHECK(ncclCommInitRank(&comm, RANKS, id, rank));
    float mine[N], all[N * RANKS], got[N];
    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < N; k++) mine[k] = (float)(100 * rank + k);
        CHECK(ncclGather(mine, all, N, ncclFloat32, ROOT, comm, NULL));
        for (int r = 0; rank == ROOT && r < RANKS; r++)
            if (all[N * r + 1] != (float)(100 * r + 1)) {
                fprintf(stderr, "rank %d: gathered %g from rank %d\n", rank, all[N * r + 1], r);
                return 1;
            }
        for (int k = 0; k < N * RANKS; k++) all[k] = (float)(1000 + k);
        CHECK(ncclScatter(all, got, N, ncclFloat32, ROOT, comm, NULL));
        if (got[0] != (float)(1000 + N * rank)) {
            fprintf(stderr, "rank %d: scattered %g\n", rank, got[0]);
            return 1;
        }
        CHECK(ncclAllReduce(mine, got, N, ncclFloat32, ncclSum, comm, NULL));
        CHECK(ncclGroupStart());
        CHECK(ncclSend(mine, N, ncclFloat32, (rank + 1) % RANKS, comm, NULL));
        CHECK(ncclRecv(got, N, ncclFloat32, (rank + RANKS - 1) % RANKS, comm, NULL));
        CHECK(ncclGroupEnd());
    }
    CHECK(ncclCommDestroy(comm));
    return 0;
}

int main(int argc, char **argv) { return job_main(argc, argv, RANKS, "2", run_rank); }
