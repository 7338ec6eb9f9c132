/* Drives the entry points NCCL added after the classic API (nccl.h 2.32.3's signatures),
 * one process with a thread per rank, and prints every return code, so a run under
 * LD_PRELOAD=libstagefrontier.so can be compared line by line with a run without it.
 * Also ends groups that fail and simulated groups, which must close them. */
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef void *ncclWindow_t;
typedef int ncclResult_t;
typedef struct { size_t size; unsigned int magic, version; float estimatedTime; } ncclSimInfo_t;
typedef struct { int opCnt, peer, sigIdx, ctx; } ncclWaitSignalDesc_t;
/* The head of nccl.h's ncclConfig_t through `blocking` (fakenccl reads no further here;
 * `size` tells it how much there is). */
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking;
} ncclConfigHead_t;
enum { ncclFloat32 = 7 };
enum { ncclSum = 0 };

extern ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, void *config);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, void *st);
extern ncclResult_t ncclGroupStart(void);
extern ncclResult_t ncclGroupEnd(void);
extern ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo);
extern ncclResult_t ncclAllReduceConfig(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c, void *st,
                                        const void *config);
extern ncclResult_t ncclBroadcastConfig(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, void *st,
                                        const void *config);
extern ncclResult_t ncclReduceConfig(const void *s, void *r, size_t n, int dt, int op, int root, ncclComm_t c,
                                     void *st, const void *config);
extern ncclResult_t ncclAllGatherConfig(const void *s, void *r, size_t n, int dt, ncclComm_t c, void *st,
                                        const void *config);
extern ncclResult_t ncclReduceScatterConfig(const void *s, void *r, size_t n, int dt, int op, ncclComm_t c,
                                            void *st, const void *config);
extern ncclResult_t ncclAlltoAllConfig(const void *s, void *r, size_t n, int dt, ncclComm_t c, void *st,
                                       const void *config);
extern ncclResult_t ncclGatherConfig(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, void *st,
                                     const void *config);
extern ncclResult_t ncclScatterConfig(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, void *st,
                                      const void *config);
extern ncclResult_t ncclGather(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, void *st);
extern ncclResult_t ncclScatter(const void *s, void *r, size_t n, int dt, int root, ncclComm_t c, void *st);
extern ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                             ncclUniqueId *commIds, void *config);
extern ncclResult_t ncclCommShrink(ncclComm_t comm, int *exclude, int n, ncclComm_t *newcomm, void *config,
                                   int flags);
extern ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *id);
extern ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *id, int rank,
                                 ncclComm_t *newcomm, void *config);
extern ncclResult_t ncclCommFinalize(ncclComm_t comm);
extern ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *err);
extern ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags);
extern ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
extern ncclResult_t ncclCommResume(ncclComm_t comm);
extern ncclResult_t ncclCommRegister(ncclComm_t comm, void *buff, size_t size, void **handle);
extern ncclResult_t ncclCommDeregister(ncclComm_t comm, void *handle);
extern ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int flags);
extern ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
extern ncclResult_t ncclPutSignal(const void *s, size_t n, int dt, int peer, ncclWindow_t win, size_t off, int sig,
                                  int ctx, unsigned int flags, ncclComm_t c, void *st);
extern ncclResult_t ncclSignal(int peer, int sig, int ctx, unsigned int flags, ncclComm_t c, void *st);
extern ncclResult_t ncclWaitSignal(int n, ncclWaitSignalDesc_t *descs, ncclComm_t c, void *st);

#define SHOW(call) printf("%-60s -> %d\n", #call, (int)(call))
#define RANKS 3

/* Per-thread work: rank r of three; results go to these arrays, printed by main. */
static ncclUniqueId ids[2], grow_id;
static ncclComm_t world[RANKS], scalable[RANKS], shrunk[RANKS], grown[RANKS + 1];
static int rc_scalable[RANKS], rc_init[RANKS], rc_shrink[RANKS], rc_grow[RANKS + 1];
static pthread_barrier_t barrier;

static void *rank_main(void *arg) {
    int r = (int)(size_t)arg;
    rc_scalable[r] = ncclCommInitRankScalable(&scalable[r], RANKS, r, 2, ids, NULL);
    rc_init[r] = ncclCommInitRank(&world[r], RANKS, ids[1], r);
    int exclude[1] = {2};
    if (r != 2) rc_shrink[r] = ncclCommShrink(world[r], exclude, 1, &shrunk[r], NULL, 0);
    /* The two remaining ranks grow back to three with a new rank; the excluded one is gone. */
    if (r == 0) (void)ncclCommGetUniqueId(shrunk[0], &grow_id);
    pthread_barrier_wait(&barrier);
    if (r != 2) rc_grow[r] = ncclCommGrow(shrunk[r], RANKS, r == 0 ? &grow_id : NULL, -1, &grown[r], NULL);
    return NULL;
}

static void *new_rank_main(void *arg) {
    (void)arg;
    pthread_barrier_wait(&barrier);
    rc_grow[RANKS] = ncclCommGrow(NULL, RANKS, &grow_id, RANKS - 1, &grown[RANKS], NULL);
    return NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    SHOW(ncclGetUniqueId(&id));
    SHOW(ncclCommInitRank(&comm, 1, id, 0));

    /* A group whose call failed: the end fails and still closes the group. */
    SHOW(ncclGroupStart());
    SHOW(ncclAllReduce(x, y, 4, 99, ncclSum, comm, NULL));
    SHOW(ncclGroupEnd());
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL));
    /* A simulated end closes the group and launches nothing. */
    ncclSimInfo_t sim = {sizeof(ncclSimInfo_t), 0x74685283u, 23203, -1.0f};
    y[0] = 0;
    SHOW(ncclGroupStart());
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL));
    SHOW(ncclGroupSimulateEnd(&sim));
    printf("simulated %s, estimate %s\n", y[0] == 0 ? "nothing ran" : "ran", sim.estimatedTime > 0 ? "set" : "unset");
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL));
    SHOW(ncclGroupEnd());

    SHOW(ncclAllReduceConfig(x, y, 4, ncclFloat32, ncclSum, comm, NULL, NULL));
    SHOW(ncclBroadcastConfig(x, y, 4, ncclFloat32, 0, comm, NULL, NULL));
    SHOW(ncclReduceConfig(x, y, 4, ncclFloat32, ncclSum, 0, comm, NULL, NULL));
    SHOW(ncclAllGatherConfig(x, y, 4, ncclFloat32, comm, NULL, NULL));
    SHOW(ncclReduceScatterConfig(x, y, 4, ncclFloat32, ncclSum, comm, NULL, NULL));
    SHOW(ncclAlltoAllConfig(x, y, 4, ncclFloat32, comm, NULL, NULL));
    SHOW(ncclGatherConfig(x, y, 4, ncclFloat32, 0, comm, NULL, NULL));
    SHOW(ncclScatterConfig(x, y, 4, ncclFloat32, 0, comm, NULL, NULL));
    y[0] = 0;
    SHOW(ncclGather(x, y, 4, ncclFloat32, 0, comm, NULL));
    SHOW(ncclScatter(x, y, 4, ncclFloat32, 0, comm, NULL));
    SHOW(ncclGather(x, y, 4, ncclFloat32, 5, comm, NULL));
    printf("gather %g %g %g %g\n", y[0], y[1], y[2], y[3]);

    ncclResult_t async = -1;
    void *handle = NULL;
    ncclWindow_t win = NULL;
    ncclWaitSignalDesc_t desc = {1, 0, 0, 0};
    SHOW(ncclCommGetAsyncError(comm, &async));
    printf("async error %d\n", (int)async);
    SHOW(ncclCommGetAsyncError(NULL, &async));
    SHOW(ncclCommRegister(comm, x, sizeof x, &handle));
    SHOW(ncclCommDeregister(comm, handle));
    SHOW(ncclCommWindowRegister(comm, y, sizeof y, &win, 0));
    SHOW(ncclPutSignal(x, 4, ncclFloat32, 0, win, 0, 0, 0, 0, comm, NULL));
    SHOW(ncclSignal(0, 0, 0, 0, comm, NULL));
    SHOW(ncclWaitSignal(1, &desc, comm, NULL));
    SHOW(ncclCommWindowDeregister(comm, win));
    SHOW(ncclCommSuspend(comm, 1));
    SHOW(ncclCommResume(comm));
    SHOW(ncclCommRevoke(comm, 0));
    SHOW(ncclCommFinalize(comm));
    SHOW(ncclCommDestroy(comm));

    /* A nonblocking communicator: its init returns ncclInProgress and the program polls
     * ncclCommGetAsyncError until that clears, as PyTorch's nonblocking path does. */
    ncclUniqueId nb_id;
    ncclComm_t nb = NULL;
    ncclConfigHead_t nb_config = {sizeof nb_config, 0xcafebeefu, 23203, 0};
    SHOW(ncclGetUniqueId(&nb_id));
    SHOW(ncclCommInitRankConfig(&nb, 1, nb_id, 0, &nb_config));
    ncclResult_t nb_state = 7;
    int nb_polls = 0;
    while (nb_state == 7 && nb_polls < 100 && ncclCommGetAsyncError(nb, &nb_state) == 0) nb_polls++;
    printf("nonblocking init: %d polls, state %d\n", nb_polls, nb_state);
    SHOW(ncclCommDestroy(nb));

    SHOW(ncclGetUniqueId(&ids[0]));
    SHOW(ncclGetUniqueId(&ids[1]));
    pthread_t threads[RANKS + 1];
    pthread_barrier_init(&barrier, NULL, RANKS + 1);
    for (size_t r = 0; r < RANKS; r++) pthread_create(&threads[r], NULL, rank_main, (void *)r);
    pthread_create(&threads[RANKS], NULL, new_rank_main, NULL);
    for (int r = 0; r <= RANKS; r++) pthread_join(threads[r], NULL);
    for (int r = 0; r < RANKS; r++)
        printf("rank %d scalable %d init %d shrink %d grow %d\n", r, rc_scalable[r], rc_init[r], rc_shrink[r],
               rc_grow[r]);
    printf("new rank grow %d\n", rc_grow[RANKS]);
    for (int r = 0; r < RANKS; r++) {
        ncclCommDestroy(scalable[r]);
        ncclCommDestroy(world[r]);
        if (shrunk[r]) ncclCommDestroy(shrunk[r]);
    }
    for (int r = 0; r <= RANKS; r++)
        if (grown[r]) ncclCommDestroy(grown[r]);
    return 0;
}
