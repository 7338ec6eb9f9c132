/* A two-rank job over fakenccl (each rank a fork+exec of this program with RANK set) whose
 * buffers NCCL may run on the copy engines: the communicator comes from
 * ncclCommInitRankConfig with CTAPolicy NCCL_CTA_POLICY_ZERO (CE_JOB_PLAIN=1: from
 * ncclCommInitRank, so NCCL_CTA_POLICY decides), two buffers are registered as
 * NCCL_WIN_COLL_SYMMETRIC windows, and per round it calls, in this order: AllGather on the
 * windows, AllGather on plain buffers, AlltoAll on the windows, Gather (root 0) on the
 * windows, AllReduce on the windows, Scatter (root 1) from a plain buffer into a window.
 * Every result is checked. Exits 0 when every rank succeeded. Argument: rounds (default 1). */
#include "fake_job.h"
#include <limits.h>

typedef void *ncclWindow_t;
enum { ncclFloat32 = 7, ncclSum = 0, RANKS = 2, N = 4 };
/* nccl.h 2.32.3's ncclConfig_t, NCCL_CONFIG_INITIALIZER's magic, NCCL_CTA_POLICY_ZERO and
 * NCCL_WIN_COLL_SYMMETRIC. */
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking, cgaClusterSize, minCTAs, maxCTAs;
    const char *netName;
    int splitShare, trafficClass;
    const char *commName;
    int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched, graphUsageMode,
        numRmaCtx, maxP2pPeers, graphStreamOrdering;
} ncclConfig_t;
#define CONFIG_MAGIC 0xcafebeefu
#define CTA_POLICY_ZERO 0x02
#define WIN_COLL_SYMMETRIC 0x01

extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *c);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int flags);
extern ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);
extern ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int dtype, ncclComm_t c, void *stream);
extern ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, int dtype, ncclComm_t c, void *stream);
extern ncclResult_t ncclGather(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);
extern ncclResult_t ncclScatter(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);

#define EXPECT(cond)                                                             \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "rank %d: %s is false\n", rank, #cond);              \
            return 1;                                                            \
        }                                                                        \
    } while (0)

static float sym_send[N * RANKS], sym_recv[N * RANKS], plain_send[N * RANKS], plain_recv[N * RANKS];

static int run_rank(ncclUniqueId id, int rank, int rounds) {
    ncclComm_t comm = NULL;
    const char *plain = getenv("CE_JOB_PLAIN");
    if (plain && *plain == '1') {
        CHECK(ncclCommInitRank(&comm, RANKS, id, rank));
    } else {
        ncclConfig_t config = {sizeof(ncclConfig_t), CONFIG_MAGIC, 23203, INT_MIN, INT_MIN, INT_MIN, INT_MIN, NULL,
                               INT_MIN, INT_MIN, NULL, INT_MIN, CTA_POLICY_ZERO, INT_MIN, INT_MIN, INT_MIN, INT_MIN,
                               INT_MIN, INT_MIN, INT_MIN, INT_MIN};
        CHECK(ncclCommInitRankConfig(&comm, RANKS, id, rank, &config));
    }
    ncclWindow_t ws, wr;
    CHECK(ncclCommWindowRegister(comm, sym_send, sizeof sym_send, &ws, WIN_COLL_SYMMETRIC));
    CHECK(ncclCommWindowRegister(comm, sym_recv, sizeof sym_recv, &wr, WIN_COLL_SYMMETRIC));
    for (int i = 0; i < rounds; i++) {
        for (int k = 0; k < N * RANKS; k++) sym_send[k] = plain_send[k] = (float)(100 * rank + k);
        CHECK(ncclAllGather(sym_send, sym_recv, N, ncclFloat32, comm, NULL));
        EXPECT(sym_recv[N + 1] == 101.0f);
        CHECK(ncclAllGather(plain_send, plain_recv, N, ncclFloat32, comm, NULL));
        EXPECT(plain_recv[N + 1] == 101.0f);
        CHECK(ncclAlltoAll(sym_send, sym_recv, N, ncclFloat32, comm, NULL));
        EXPECT(sym_recv[N] == (float)(100 + N * rank));
        CHECK(ncclGather(sym_send, sym_recv, N, ncclFloat32, 0, comm, NULL));
        EXPECT(rank != 0 || sym_recv[N + 2] == 102.0f);
        CHECK(ncclAllReduce(sym_send, sym_recv, N, ncclFloat32, ncclSum, comm, NULL));
        EXPECT(sym_recv[1] == 102.0f);
        CHECK(ncclScatter(plain_send, sym_recv, N, ncclFloat32, 1, comm, NULL));
        EXPECT(sym_recv[0] == (float)(100 + N * rank));
    }
    CHECK(ncclCommWindowDeregister(comm, ws));
    CHECK(ncclCommWindowDeregister(comm, wr));
    CHECK(ncclCommDestroy(comm));
    return 0;
}

int main(int argc, char **argv) { return job_main(argc, argv, RANKS, "1", run_rank); }
