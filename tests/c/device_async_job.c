/* Two ranks over fakenccl on the fake CUDA runtime (tests/fixtures/fakecuda), as a GPU job
 * runs: the allreduce is enqueued on a stream and returns at once; the waiting happens on
 * the device and the host blocks later, in cudaStreamSynchronize and a device-to-host copy.
 * Linked against libcudart.so.13 (fakecuda) and libnccl.so.2 (fakenccl).
 *
 *   device_async_job MODE      launches ranks 0 and 1 as `device_async_job MODE HEX-ID RANK`
 *
 * MODE late:  after a first allreduce that lines the ranks up, each rank runs a compute kernel
 *             (sim_fwd_0), then a second allreduce; rank 1 enqueues it LATE_MS after rank 0, so
 *             rank 0's NCCL kernel spins that long on the device.
 * MODE stuck: as late, then each rank launches sim_bwd_stuck, which never completes, on a
 *             second stream and ends HOLD_MS later without waiting for it.
 * MODE group: as late, then a send to and a receive from the peer in one ncclGroupStart/End
 *             group, one kernel launched by the group's end. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../fixtures/fakecuda/fakecuda.h"
#include "fake_job.h"

extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, ncclComm_t comm,
                                  cudaStream_t stream);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclSend(const void *send, size_t count, int dtype, int peer, ncclComm_t comm, cudaStream_t stream);
extern ncclResult_t ncclRecv(void *recv, size_t count, int dtype, int peer, ncclComm_t comm, cudaStream_t stream);
extern ncclResult_t ncclGroupStart(void);
extern ncclResult_t ncclGroupEnd(void);

enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0, COUNT = 1024, LATE_MS = 300, HOLD_MS = 1500 };

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int run_rank(const char *mode, ncclUniqueId id, int rank) {
    ncclComm_t comm;
    CHECK(ncclCommInitRank(&comm, 2, id, rank));
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, 1));
    static float send[COUNT], recv[COUNT];
    for (int i = 0; i < COUNT; i++) send[i] = (float)(i + rank);
    /* The ranks start at different times: the first allreduce, waited for, lines them up. */
    CHECK(ncclAllReduce(send, recv, COUNT, NCCL_FLOAT32, NCCL_SUM, comm, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(fakecuda_launch_kernel(stream, "sim_fwd_0", 2000000) == 0);
    if (rank == 1) sleep_ms(LATE_MS);
    CHECK(ncclAllReduce(send, recv, COUNT, NCCL_FLOAT32, NCCL_SUM, comm, stream));
    CHECK(cudaStreamSynchronize(stream));
    float first = -1;
    CHECK(cudaMemcpy(&first, recv, sizeof first, cudaMemcpyDeviceToHost));
    if (first != 1.0f) {
        fprintf(stderr, "rank %d: allreduce gave %f, not 1\n", rank, first);
        return 1;
    }
    if (strcmp(mode, "group") == 0) {
        CHECK(ncclGroupStart());
        CHECK(ncclSend(send, COUNT, NCCL_FLOAT32, 1 - rank, comm, stream));
        CHECK(ncclRecv(recv, COUNT, NCCL_FLOAT32, 1 - rank, comm, stream));
        CHECK(ncclGroupEnd());
        CHECK(cudaStreamSynchronize(stream));
    }
    CHECK(ncclCommDestroy(comm));
    if (strcmp(mode, "stuck") == 0) {
        cudaStream_t other;
        CHECK(cudaStreamCreateWithFlags(&other, 1));
        CHECK(fakecuda_launch_kernel(other, "sim_bwd_stuck", UINT64_MAX) == 0);
        sleep_ms(HOLD_MS);
    }
    printf("rank %d done\n", rank);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2) {
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) != 0) return 2;
        char hex[2 * sizeof id.internal + 1];
        job_id_to_hex(&id, hex);
        const char *args[] = {argv[1], hex};
        return job_launch(argv, 2, args, 2);
    }
    if (argc != 4) {
        fprintf(stderr, "usage: device_async_job late|stuck|group\n");
        return 2;
    }
    ncclUniqueId id;
    if (job_id_from_hex(argv[2], &id) != 0) return 2;
    int rank = atoi(argv[3]);
    return run_rank(argv[1], id, rank);
}
