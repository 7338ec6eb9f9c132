/* Drives the NCCL C API through the dynamic linker, as an application does, and prints
 * every return code and result value, so a run under LD_PRELOAD=libstagefrontier.so can be
 * compared line by line with a run without it. Declares the few NCCL types it needs. */
#include <stdio.h>
#include <stddef.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;
enum { ncclInt32 = 2, ncclFloat32 = 7 };
enum { ncclSum = 0, ncclMax = 2 };

extern ncclResult_t ncclGetVersion(int *version);
extern ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);
extern ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, void *config);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclCommCount(ncclComm_t comm, int *count);
extern ncclResult_t ncclCommUserRank(ncclComm_t comm, int *rank);
extern ncclResult_t ncclCommCuDevice(ncclComm_t comm, int *device);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);
extern ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int dtype, int root, ncclComm_t c, void *stream);
extern ncclResult_t ncclSend(const void *s, size_t n, int dtype, int peer, ncclComm_t c, void *stream);
extern ncclResult_t ncclGroupStart(void);
extern ncclResult_t ncclGroupEnd(void);

#define SHOW(call) printf("%-60s -> %d\n", #call, (int)(call))

int main(void) {
    int version = 0, count = -1, rank = -1, device = -1;
    SHOW(ncclGetVersion(&version));
    printf("version %d\n", version);
    SHOW(ncclGetVersion(NULL));

    ncclUniqueId id;
    ncclComm_t comm = NULL;
    SHOW(ncclGetUniqueId(&id));
    SHOW(ncclCommInitRank(&comm, 1, id, 0));
    SHOW(ncclCommInitRank(&comm, 1, id, 5));
    SHOW(ncclCommCount(comm, &count));
    SHOW(ncclCommUserRank(comm, &rank));
    SHOW(ncclCommCuDevice(comm, &device));
    printf("count %d rank %d\n", count, rank);

    float x[4] = {1, 2, 3, 4}, y[4] = {0};
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL));
    printf("allreduce %g %g %g %g\n", y[0], y[1], y[2], y[3]);
    SHOW(ncclAllReduce(x, y, 4, 99, ncclSum, comm, NULL));
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, 42, comm, NULL));
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, NULL, NULL));
    SHOW(ncclAllReduce(x, y, 0, ncclFloat32, ncclSum, comm, NULL));
    SHOW(ncclBroadcast(x, y, 4, ncclFloat32, 3, comm, NULL));
    SHOW(ncclSend(x, 4, ncclFloat32, 7, comm, NULL));
    SHOW(ncclGroupEnd());
    SHOW(ncclGroupStart());
    SHOW(ncclGroupStart());
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, ncclMax, comm, NULL));
    SHOW(ncclGroupEnd());
    SHOW(ncclGroupEnd());

    ncclComm_t half = NULL, none = (ncclComm_t)1;
    SHOW(ncclCommSplit(comm, 0, 0, &half, NULL));
    SHOW(ncclCommSplit(comm, -1, 0, &none, NULL));
    printf("split %s nocolor %s\n", half ? "comm" : "null", none ? "comm" : "null");
    SHOW(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, half, NULL));

    ncclComm_t pair[2] = {NULL, NULL};
    int in[2][2] = {{1, 2}, {10, 20}}, out[2][2] = {{0}};
    SHOW(ncclCommInitAll(pair, 2, NULL));
    SHOW(ncclGroupStart());
    for (int i = 0; i < 2; i++) SHOW(ncclAllReduce(in[i], out[i], 2, ncclInt32, ncclSum, pair[i], NULL));
    SHOW(ncclGroupEnd());
    printf("initall %d %d %d %d\n", out[0][0], out[0][1], out[1][0], out[1][1]);

    SHOW(ncclCommDestroy(pair[0]));
    SHOW(ncclCommDestroy(pair[1]));
    SHOW(ncclCommDestroy(half));
    SHOW(ncclCommDestroy(comm));
    return 0;
}
