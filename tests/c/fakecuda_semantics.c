/* Checks the fake CUDA runtime (tests/fixtures/fakecuda) against the CUDA semantics its
 * header promises, and fakenccl's asynchronous launches on it. Linked against
 * libcudart.so.13 (fakecuda) and libnccl.so.2 (fakenccl).
 *
 *   fakecuda_semantics CASE
 *
 * CASE: fifo, fork, runtime_end, wait_event, sync_blocks, launch_queue, injection, clock,
 * nccl_async, nccl_group_async, nccl_two_streams, nccl_profiler (with NCCL_PROFILER_PLUGIN=STATIC_PLUGIN: the
 * program is its own profiler plugin), cupti. Prints what it measured and exits 0 when every check held, 1 with
 * "FAIL: ..." lines otherwise. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../fixtures/fakecuda/fakecuda.h"

static int failures;

#define CHECK(cond, ...)                                                                                     \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            printf("FAIL: %s:%d: %s: ", __FILE__, __LINE__, #cond);                                        \
            printf(__VA_ARGS__);                                                                             \
            printf("\n");                                                                                    \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static double ms_since(uint64_t t0) { return (double)(mono_ns() - t0) / 1e6; }

/* ---- work kernels ------------------------------------------------------------------------ */

/* Appends its tag to a shared log when it runs, with the time. */
struct tagged {
    int tag;
    _Atomic int *log;
    _Atomic int *n;
    uint64_t *at;
};

static void log_body(void *arg) {
    struct tagged *t = arg;
    int i = atomic_fetch_add(t->n, 1);
    t->log[i] = t->tag;
    if (t->at) *t->at = mono_ns();
}

/* Returns once *flag is set: a kernel whose end is decided at run time. */
static void wait_flag_body(void *arg) {
    _Atomic int *flag = arg;
    while (!atomic_load(flag)) sleep_ms(1);
}

static void host_fn(void *arg) { log_body(arg); }

static int case_fifo(void) {
    cudaStream_t s;
    cudaEvent_t before, after;
    CHECK(cudaStreamCreate(&s) == cudaSuccess, "create");
    cudaEventCreate(&before), cudaEventCreate(&after);
    _Atomic int log[4] = {0}, n = 0;
    uint64_t b_at = 0;
    struct tagged b = {2, log, &n, &b_at}, c = {3, log, &n, NULL}, d = {4, log, &n, NULL};
    int src = 5, dst = 0, seen_by_c = -1;
    uint64_t t0 = mono_ns();
    cudaEventRecord(before, s);
    CHECK(fakecuda_launch_kernel(s, "kernel_a", 100000000) != 0, "launch a");
    cudaEventRecord(after, s);
    CHECK(fakecuda_launch_work(s, "work_b", log_body, &b) != 0, "launch b");
    CHECK(cudaMemcpyAsync(&dst, &src, sizeof src, cudaMemcpyHostToDevice, s) == cudaSuccess, "copy");
    CHECK(cudaMemcpyAsync(&seen_by_c, &dst, sizeof dst, cudaMemcpyDeviceToDevice, s) == cudaSuccess, "copy 2");
    CHECK(fakecuda_launch_work(s, "work_c", log_body, &c) != 0, "launch c");
    CHECK(cudaLaunchHostFunc(s, host_fn, &d) == cudaSuccess, "host fn");
    double launch_ms = ms_since(t0);
    CHECK(launch_ms < 50, "the launches took %.1f ms", launch_ms);
    CHECK(dst == 0, "an async copy ran before the kernel ahead of it");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    CHECK(n == 3 && log[0] == 2 && log[1] == 3 && log[2] == 4, "order %d %d %d (n=%d)", log[0], log[1], log[2],
          (int)n);
    CHECK(dst == 5 && seen_by_c == 5, "the copies, in order: %d %d", dst, seen_by_c);
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, before, after) == cudaSuccess && ms >= 95, "kernel_a took %.1f ms by its events",
          ms);
    double b_ms = (double)(b_at - t0) / 1e6;
    CHECK(b_ms >= 95, "work_b ran %.1f ms after the launch, before kernel_a's 100 ms ended", b_ms);
    printf("fifo: launches %.2f ms, work_b at %.1f ms\n", launch_ms, b_ms);
    return 0;
}

/* A launcher that used the runtime may fork its ranks: the child's streams start empty. */
static int case_fork(void) {
    cudaStream_t s;
    cudaStreamCreate(&s);
    fakecuda_launch_kernel(s, "parent_long", 1000000000);
    pid_t child = fork();
    if (child == 0) {
        uint64_t t0 = mono_ns();
        fakecuda_launch_kernel(s, "child_short", 1000000);
        cudaStreamSynchronize(s);
        _exit(ms_since(t0) < 500 ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child waited for its parent's kernel (status %d)",
          status);
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "the parent's kernel is still running");
    return 0;
}

static int case_runtime_end(void) {
    cudaStream_t s;
    cudaEvent_t e;
    CHECK(cudaStreamCreate(&s) == cudaSuccess, "create");
    CHECK(cudaEventCreate(&e) == cudaSuccess, "event");
    CHECK(cudaEventQuery(e) == cudaSuccess, "a never-recorded event is complete");
    _Atomic int flag = 0;
    CHECK(fakecuda_launch_work(s, "wait_for_host", wait_flag_body, &flag) != 0, "launch");
    CHECK(cudaEventRecord(e, s) == cudaSuccess, "record");
    sleep_ms(100);
    CHECK(cudaEventQuery(e) == cudaErrorNotReady, "event before the kernel ended");
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "stream before the kernel ended");
    atomic_store(&flag, 1);
    uint64_t t0 = mono_ns();
    CHECK(cudaEventSynchronize(e) == cudaSuccess, "event sync");
    double sync_ms = ms_since(t0);
    CHECK(cudaEventQuery(e) == cudaSuccess, "event after the kernel ended");
    CHECK(cudaStreamQuery(s) == cudaSuccess, "stream after");
    CHECK(sync_ms < 100, "event sync took %.1f ms after the flag", sync_ms);
    printf("runtime_end: event sync %.1f ms after the flag\n", sync_ms);
    return 0;
}

static int case_wait_event(void) {
    cudaStream_t a, b;
    cudaEvent_t e;
    CHECK(cudaStreamCreateWithFlags(&a, 1) == cudaSuccess, "a");
    CHECK(cudaStreamCreateWithFlags(&b, 1) == cudaSuccess, "b");
    CHECK(cudaEventCreate(&e) == cudaSuccess, "event");
    _Atomic int flag = 0, log[2] = {0}, n = 0;
    uint64_t ran_at = 0;
    struct tagged t = {1, log, &n, &ran_at};
    fakecuda_launch_work(a, "hold_a", wait_flag_body, &flag);
    cudaEventRecord(e, a);
    uint64_t t0 = mono_ns();
    CHECK(cudaStreamWaitEvent(b, e, 0) == cudaSuccess, "wait");
    fakecuda_launch_work(b, "after_a", log_body, &t);
    double host_ms = ms_since(t0);
    /* Had the host waited for the event it would never have got here (it sets the flag). */
    CHECK(host_ms < 20, "cudaStreamWaitEvent + launch held the host %.2f ms", host_ms);
    sleep_ms(100);
    CHECK(n == 0, "stream b ran before stream a reached the event");
    uint64_t released = mono_ns();
    atomic_store(&flag, 1);
    CHECK(cudaStreamSynchronize(b) == cudaSuccess, "sync b");
    CHECK(n == 1 && ran_at >= released, "b's kernel ran after a's released it");
    printf("wait_event: host %.3f ms\n", host_ms);
    return 0;
}

static int case_sync_blocks(void) {
    cudaStream_t blocking, nonblocking;
    CHECK(cudaStreamCreate(&blocking) == cudaSuccess, "blocking");
    CHECK(cudaStreamCreateWithFlags(&nonblocking, 1) == cudaSuccess, "nonblocking");
    uint64_t t0 = mono_ns();
    fakecuda_launch_kernel(blocking, "k100", 100000000);
    CHECK(cudaStreamSynchronize(blocking) == cudaSuccess, "stream sync");
    double stream_ms = ms_since(t0);
    CHECK(stream_ms >= 95, "cudaStreamSynchronize returned after %.1f ms of a 100 ms kernel", stream_ms);

    t0 = mono_ns();
    fakecuda_launch_kernel(nonblocking, "k100", 100000000);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "device sync");
    double device_ms = ms_since(t0);
    CHECK(device_ms >= 95, "cudaDeviceSynchronize returned after %.1f ms", device_ms);

    /* A device-to-host copy waits for the blocking stream's kernel (legacy default stream). */
    int src = 42, dst = 0;
    t0 = mono_ns();
    fakecuda_launch_kernel(blocking, "k100", 100000000);
    CHECK(cudaMemcpy(&dst, &src, sizeof src, cudaMemcpyDeviceToHost) == cudaSuccess, "memcpy");
    double copy_ms = ms_since(t0);
    CHECK(copy_ms >= 95 && dst == 42, "D2H copy returned after %.1f ms with %d", copy_ms, dst);

    /* ... but not for a non-blocking stream's. */
    t0 = mono_ns();
    fakecuda_launch_kernel(nonblocking, "k300", 300000000);
    CHECK(cudaMemcpy(&dst, &src, sizeof src, cudaMemcpyDeviceToHost) == cudaSuccess, "memcpy 2");
    double copy2_ms = ms_since(t0);
    CHECK(copy2_ms < 100, "D2H copy waited %.1f ms for a non-blocking stream", copy2_ms);
    cudaDeviceSynchronize();
    printf("sync_blocks: stream %.1f device %.1f copy %.1f copy-nonblocking %.1f ms\n", stream_ms, device_ms, copy_ms,
           copy2_ms);
    return 0;
}

/* Run with FAKECUDA_LAUNCH_QUEUE=4. */
static int case_launch_queue(void) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, 1);
    uint64_t t0 = mono_ns();
    for (int i = 0; i < 4; i++) fakecuda_launch_kernel(s, "k50", 50000000);
    double four_ms = ms_since(t0);
    fakecuda_launch_kernel(s, "k50", 50000000);
    double fifth_ms = ms_since(t0);
    CHECK(four_ms < 20, "four launches into a queue of four took %.1f ms", four_ms);
    CHECK(fifth_ms >= 45, "the fifth launch returned after %.1f ms, before the first kernel ended", fifth_ms);
    cudaStreamSynchronize(s);
    printf("launch_queue: four %.1f ms, fifth %.1f ms\n", four_ms, fifth_ms);
    return 0;
}

/* Run with CUDA_INJECTION64_PATH naming fakecuda_injection.so. */
static int case_injection(void) {
    CHECK(dlsym(RTLD_DEFAULT, "injection_calls") == NULL, "the injection library was loaded before any runtime call");
    int n = 0;
    cudaGetDeviceCount(&n);
    _Atomic int *calls = dlsym(RTLD_DEFAULT, "injection_calls");
    CHECK(calls != NULL, "the first runtime call did not load the injection library");
    if (!calls) return 0;
    CHECK(*calls == 1, "InitializeInjection called %d times after the first call", (int)*calls);
    cudaStream_t s;
    cudaStreamCreate(&s);
    fakecuda_launch_kernel(s, "k", 1000);
    cudaStreamSynchronize(s);
    CHECK(*calls == 1, "InitializeInjection called %d times in all", (int)*calls);
    printf("injection: %d call(s)\n", (int)*calls);
    return 0;
}

static int case_clock(void) {
    uint64_t host = mono_ns(), device = fakecuda_device_clock_ns();
    double offset_s = ((double)device - (double)host) / 1e9;
    CHECK(offset_s >= 1.0 || offset_s <= -1.0, "device clock offset %.3f s", offset_s);
    uint64_t later = fakecuda_device_clock_ns();
    CHECK(later >= device, "device clock went back");
    printf("clock: offset %.3f s\n", offset_s);
    return 0;
}

/* ---- fakenccl on the fake runtime --------------------------------------------------------- */

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, ncclComm_t comm, cudaStream_t s);
int ncclCommDestroy(ncclComm_t comm);
int ncclSend(const void *send, size_t count, int dtype, int peer, ncclComm_t comm, cudaStream_t s);
int ncclRecv(void *recv, size_t count, int dtype, int peer, ncclComm_t comm, cudaStream_t s);
int ncclGroupStart(void);
int ncclGroupEnd(void);
int ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist);

enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0, COUNT = 1024, LATE_MS = 200 };

struct rank_args {
    int rank;
    ncclUniqueId id;
    double call_ms, sync_ms;
    int ok;
    pthread_t thread;
};

static void *nccl_rank(void *arg) {
    struct rank_args *r = arg;
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 2, r->id, r->rank) != 0) return NULL;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, 1);
    float *send = malloc(COUNT * sizeof(float)), *recv = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) send[i] = (float)(i + 1000 * (r->rank + 1)), recv[i] = -1;
    if (r->rank == 1) sleep_ms(LATE_MS);
    uint64_t t0 = mono_ns();
    int rc = ncclAllReduce(send, recv, COUNT, NCCL_FLOAT32, NCCL_SUM, comm, s);
    r->call_ms = ms_since(t0);
    int early = recv[0] != -1; /* the result cannot be there before the late peer arrived */
    t0 = mono_ns();
    cudaStreamSynchronize(s);
    r->sync_ms = ms_since(t0);
    int right = 1;
    for (int i = 0; i < COUNT; i++) right &= recv[i] == (float)(2 * i + 3000);
    r->ok = rc == 0 && right && !(r->rank == 0 && early);
    ncclCommDestroy(comm);
    free(send);
    free(recv);
    return NULL;
}

static int run_ranks(void *(*body)(void *), struct rank_args r[2]);

static int case_nccl_async(void) {
    struct rank_args r[2] = {0};
    run_ranks(nccl_rank, r);
    printf("nccl_async: call %.3f / %.3f ms, sync %.1f / %.1f ms\n", r[0].call_ms, r[1].call_ms, r[0].sync_ms,
           r[1].sync_ms);
    return 0;
}

/* A send and a receive between the two ranks in one group: one kernel, enqueued. */
static void *group_rank(void *arg) {
    struct rank_args *r = arg;
    ncclComm_t comm;
    if (ncclCommInitRank(&comm, 2, r->id, r->rank) != 0) return NULL;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, 1);
    int *send = malloc(COUNT * sizeof(int)), *recv = malloc(COUNT * sizeof(int));
    for (int i = 0; i < COUNT; i++) send[i] = i + 100000 * r->rank, recv[i] = -1;
    if (r->rank == 1) sleep_ms(LATE_MS);
    uint64_t t0 = mono_ns();
    ncclGroupStart();
    int rc = ncclSend(send, COUNT, 2 /* int32 */, 1 - r->rank, comm, s);
    rc |= ncclRecv(recv, COUNT, 2, 1 - r->rank, comm, s);
    rc |= ncclGroupEnd();
    r->call_ms = ms_since(t0);
    t0 = mono_ns();
    cudaStreamSynchronize(s);
    r->sync_ms = ms_since(t0);
    int right = 1;
    for (int i = 0; i < COUNT; i++) right &= recv[i] == i + 100000 * (1 - r->rank);
    r->ok = rc == 0 && right;
    ncclCommDestroy(comm);
    free(send);
    free(recv);
    return NULL;
}

static int run_ranks(void *(*body)(void *), struct rank_args r[2]) {
    r[0].rank = 0, r[1].rank = 1;
    CHECK(ncclGetUniqueId(&r[0].id) == 0, "unique id");
    r[1].id = r[0].id;
    for (int i = 0; i < 2; i++) pthread_create(&r[i].thread, NULL, body, &r[i]);
    for (int i = 0; i < 2; i++) pthread_join(r[i].thread, NULL);
    for (int i = 0; i < 2; i++) CHECK(r[i].ok, "rank %d: the exchange failed or was wrong", i);
    /* Rank 0's peer comes LATE_MS later: its call must not wait for it. (Rank 1's peer is
     * there; its bound only says it did not block either.) */
    CHECK(r[0].call_ms < 1.0, "rank 0: the NCCL call held the host %.3f ms", r[0].call_ms);
    CHECK(r[1].call_ms < LATE_MS / 4, "rank 1: the NCCL call held the host %.3f ms", r[1].call_ms);
    CHECK(r[0].sync_ms >= LATE_MS * 0.75, "rank 0's stream synchronize waited only %.1f ms for its late peer",
          r[0].sync_ms);
    return 0;
}

static int case_nccl_group_async(void) {
    struct rank_args r[2] = {0};
    run_ranks(group_rank, r);
    printf("nccl_group_async: group %.3f / %.3f ms, sync %.1f / %.1f ms\n", r[0].call_ms, r[1].call_ms, r[0].sync_ms,
           r[1].sync_ms);
    return 0;
}

/* One thread drives both ranks of an ncclCommInitAll clique in one group, each on its own
 * stream: one kernel on the first op's stream, the other stream joined to it both ways. */
static int case_nccl_two_streams(void) {
    ncclComm_t comms[2];
    CHECK(ncclCommInitAll(comms, 2, NULL) == 0, "init all");
    cudaStream_t s[2];
    float *send[2], *recv[2];
    for (int r = 0; r < 2; r++) {
        cudaStreamCreateWithFlags(&s[r], 1);
        send[r] = malloc(COUNT * sizeof(float)), recv[r] = malloc(COUNT * sizeof(float));
        for (int i = 0; i < COUNT; i++) send[r][i] = (float)(i + 1000 * (r + 1)), recv[r][i] = -1;
    }
    fakecuda_launch_kernel(s[0], "ahead_on_stream_0", LATE_MS * 1000000ull);
    uint64_t t0 = mono_ns();
    ncclGroupStart();
    for (int r = 0; r < 2; r++) ncclAllReduce(send[r], recv[r], COUNT, NCCL_FLOAT32, NCCL_SUM, comms[r], s[r]);
    int rc = ncclGroupEnd();
    double call_ms = ms_since(t0);
    CHECK(rc == 0 && call_ms < LATE_MS / 4, "group end: %d after %.1f ms", rc, call_ms);
    t0 = mono_ns();
    cudaStreamSynchronize(s[1]);
    double sync_ms = ms_since(t0);
    CHECK(sync_ms >= LATE_MS * 0.75, "stream 1 was not joined to stream 0's kernel: synchronized in %.1f ms", sync_ms);
    for (int r = 0; r < 2; r++) {
        int right = 1;
        for (int i = 0; i < COUNT; i++) right &= recv[r][i] == (float)(2 * i + 3000);
        CHECK(right, "rank %d's result after synchronizing stream 1", r);
    }
    for (int r = 0; r < 2; r++) ncclCommDestroy(comms[r]), free(send[r]), free(recv[r]);
    printf("nccl_two_streams: group end %.3f ms, stream 1 sync %.1f ms\n", call_ms, sync_ms);
    return 0;
}

/* ---- the profiler plugin fakenccl drives (NCCL_PROFILER_PLUGIN=STATIC_PLUGIN, v5) ------------ */

enum { P_COLL = 1 << 1, P_PROXY_OP = 1 << 3, P_KERNEL_CH = 1 << 6, KERNEL_CH_STOP = 22, EVENTS = 256 };
struct prof_event {
    uint64_t type;
    int rank;
    pthread_t started_on;
    uint64_t p_start, p_stop; /* KernelCh: device timer at start and at KernelChStop */
    int stopped;
};
static struct prof_event events[EVENTS];
static _Atomic int nevents;

static int prof_init(void **ctx, uint64_t id, int *mask, const char *name, int nnodes, int nranks, int rank,
                     void *log) {
    (void)id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)log;
    *ctx = events;
    *mask = P_COLL | P_PROXY_OP | P_KERNEL_CH;
    return 0;
}

/* ncclProfilerEventDescr_v5_t's head (type u64, parent, rank) and kernelCh (channelId, pTimer). */
static int prof_start(void *ctx, void **handle, void *descr) {
    (void)ctx;
    const uint8_t *d = descr;
    int i = atomic_fetch_add(&nevents, 1);
    if (i >= EVENTS) {
        *handle = NULL;
        return 0;
    }
    struct prof_event *e = &events[i];
    memcpy(&e->type, d, 8);
    memcpy(&e->rank, d + 16, 4);
    e->started_on = pthread_self();
    if (e->type == P_KERNEL_CH) memcpy(&e->p_start, d + 32, 8);
    *handle = e;
    return 0;
}

static int prof_stop(void *handle) {
    if (handle) ((struct prof_event *)handle)->stopped = 1;
    return 0;
}

static int prof_record(void *handle, int state, void *args) {
    struct prof_event *e = handle;
    if (e && e->type == P_KERNEL_CH && state == KERNEL_CH_STOP && args) memcpy(&e->p_stop, args, 8);
    return 0;
}

static int prof_finalize(void *ctx) {
    (void)ctx;
    return 0;
}

__attribute__((visibility("default"))) const struct {
    const char *name;
    void *init, *start, *stop, *record, *finalize;
} ncclProfiler_v5 = {"fakecuda_semantics", (void *)prof_init, (void *)prof_start, (void *)prof_stop,
                     (void *)prof_record, (void *)prof_finalize};

/* Run with NCCL_PROFILER_PLUGIN=STATIC_PLUGIN FAKENCCL_PROFILER_VERSION=5: KernelCh events
 * come from where the kernel runs (not the thread that called NCCL), on the device clock,
 * and the early rank's channels span its wait for the late peer. */
static int case_nccl_profiler(void) {
    struct rank_args r[2] = {0};
    uint64_t device_before = fakecuda_device_clock_ns();
    run_ranks(nccl_rank, r);
    int kernel_ch = 0, proxy = 0, coll = 0;
    for (int i = 0; i < nevents && i < EVENTS; i++) {
        struct prof_event *e = &events[i];
        int caller = pthread_equal(e->started_on, r[e->rank & 1].thread);
        if (e->type == P_COLL) {
            coll++;
            CHECK(caller, "a Coll event not started by the thread that called NCCL");
        }
        if (e->type == P_PROXY_OP) proxy++;
        if (e->type != P_KERNEL_CH) continue;
        kernel_ch++;
        CHECK(!caller, "rank %d: a KernelCh event started on the thread that called NCCL", e->rank);
        CHECK(e->stopped && e->p_stop >= e->p_start && e->p_start >= device_before,
              "rank %d: KernelCh %llu..%llu not on the device clock (from %llu)", e->rank,
              (unsigned long long)e->p_start, (unsigned long long)e->p_stop, (unsigned long long)device_before);
        if (e->rank == 0)
            CHECK(e->p_stop - e->p_start >= LATE_MS * 750000ull, "rank 0's channel ran %.1f ms, not its wait",
                  (double)(e->p_stop - e->p_start) / 1e6);
    }
    CHECK(coll == 2, "%d Coll events", coll);
    CHECK(kernel_ch == 8, "%d KernelCh events (2 ranks x 2 channels x send and receive peers)", kernel_ch);
    CHECK(proxy > 0, "no ProxyOp event");
    printf("nccl_profiler: %d Coll, %d KernelCh, %d ProxyOp events\n", coll, kernel_ch, proxy);
    return 0;
}

/* ---- fakecupti on the fake runtime -------------------------------------------------------- */

/* CUpti_CallbackData's fields this test reads (cupti_callbacks.h). */
struct cb_data {
    uint32_t site;
    const char *function;
    const void *params;
    void *result;
    const char *symbol;
    void *context;
    uint32_t context_uid;
    uint64_t *correlation_data;
    uint32_t correlation;
};

enum { SEEN_MAX = 256 };
static struct seen_call {
    uint32_t domain, cbid, site, correlation;
    char symbol[64];
    int data_kept; /* EXIT found what ENTER wrote in correlationData */
} seen[SEEN_MAX];
static _Atomic int nseen;

static void on_callback(void *userdata, uint32_t domain, uint32_t cbid, const void *cbdata) {
    (void)userdata;
    const struct cb_data *d = cbdata;
    int i = atomic_fetch_add(&nseen, 1);
    if (i >= SEEN_MAX) return;
    seen[i] = (struct seen_call){domain, cbid, d->site, d->correlation, "", 0};
    if (d->symbol) snprintf(seen[i].symbol, sizeof seen[i].symbol, "%s", d->symbol);
    if (d->correlation_data && d->site == 0) *d->correlation_data = 0xfeed0000u + d->correlation;
    if (d->correlation_data && d->site == 1) seen[i].data_kept = *d->correlation_data == 0xfeed0000u + d->correlation;
}

/* Records handed back by fakecupti, copied out: kind, and the fields of each kind. */
struct record {
    uint32_t kind, type_or_copy, stream, correlation;
    uint64_t start, end, bytes;
    char name[64];
};
static struct record records[SEEN_MAX];
static int nrecords;

static void buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *size = 1 << 20;
    *buffer = aligned_alloc(8, *size);
    *max_records = 0;
}

static int (*next_record)(uint8_t *, size_t, void **);

static void buffer_completed(void *ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
    (void)ctx, (void)stream, (void)size;
    void *at = NULL;
    while (next_record(buffer, valid, &at) == 0 && nrecords < SEEN_MAX) {
        const uint8_t *r = at;
        struct record *out = &records[nrecords++];
        memset(out, 0, sizeof *out);
        memcpy(&out->kind, r, 4);
        if (out->kind == 10) { /* CONCURRENT_KERNEL */
            const char *name;
            memcpy(&out->start, r + 16, 8), memcpy(&out->end, r + 24, 8), memcpy(&out->stream, r + 48, 4);
            memcpy(&out->correlation, r + 92, 4), memcpy(&name, r + 104, sizeof name);
            snprintf(out->name, sizeof out->name, "%s", name ? name : "");
        } else if (out->kind == 38) { /* SYNCHRONIZATION */
            memcpy(&out->type_or_copy, r + 4, 4), memcpy(&out->start, r + 8, 8), memcpy(&out->end, r + 16, 8);
            memcpy(&out->correlation, r + 24, 4), memcpy(&out->stream, r + 32, 4);
        } else if (out->kind == 1) { /* MEMCPY */
            out->type_or_copy = r[4];
            memcpy(&out->bytes, r + 8, 8), memcpy(&out->start, r + 16, 8), memcpy(&out->end, r + 24, 8);
            memcpy(&out->correlation, r + 44, 4);
        }
    }
    free(buffer);
}

static int count_records(uint32_t kind) {
    int n = 0;
    for (int i = 0; i < nrecords; i++) n += records[i].kind == kind;
    return n;
}

static int case_cupti(void) {
    /* libcupti.so.13 beside the runtime, as a CUPTI client finds it. */
    Dl_info info;
    CHECK(dladdr((void *)cudaGetDeviceCount, &info) && info.dli_fname, "dladdr");
    char path[4096];
    snprintf(path, sizeof path, "%s", info.dli_fname);
    char *slash = strrchr(path, '/');
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libcupti.so.13");
    void *lib = dlopen(path, RTLD_NOW);
    CHECK(lib != NULL, "dlopen %s: %s", path, dlerror());
    if (!lib) return 0;
    int (*subscribe)(void **, void *, void *) = dlsym(lib, "cuptiSubscribe");
    int (*enable_callback)(uint32_t, void *, uint32_t, uint32_t) = dlsym(lib, "cuptiEnableCallback");
    int (*register_callbacks)(void *, void *) = dlsym(lib, "cuptiActivityRegisterCallbacks");
    int (*activity_enable)(uint32_t) = dlsym(lib, "cuptiActivityEnable");
    int (*flush)(uint32_t) = dlsym(lib, "cuptiActivityFlushAll");
    int (*timestamp)(uint64_t *) = dlsym(lib, "cuptiGetTimestamp");
    next_record = dlsym(lib, "cuptiActivityGetNextRecord");
    void *sub = NULL;
    CHECK(subscribe(&sub, (void *)on_callback, NULL) == 0, "subscribe");
    CHECK(enable_callback(1, sub, 2, 211) == 0, "enable cudaLaunchKernel");
    CHECK(enable_callback(1, sub, 2, 131) == 0, "enable cudaStreamSynchronize");
    CHECK(register_callbacks((void *)buffer_requested, (void *)buffer_completed) == 0, "register");
    CHECK(activity_enable(10) == 0 && activity_enable(38) == 0 && activity_enable(1) == 0, "activity");

    uint64_t cupti_now = 0;
    timestamp(&cupti_now);
    int64_t apart = (int64_t)(cupti_now - fakecuda_device_clock_ns());
    CHECK(apart > -1000000000 && apart < 1000000000, "cuptiGetTimestamp is %lld ns off the device clock",
          (long long)apart);

    cudaStream_t s;
    cudaEvent_t e;
    cudaStreamCreate(&s);
    cudaEventCreate(&e); /* its callback is not enabled */
    uint32_t k = fakecuda_launch_kernel(s, "k_cupti", 100000000);
    CHECK(k != 0, "launch");
    flush(0);
    CHECK(count_records(10) == 0, "a kernel record before the kernel completed");
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "sync");
    int src = 7, dst = 0;
    cudaMemcpy(&dst, &src, sizeof src, cudaMemcpyDeviceToHost);
    flush(0);

    CHECK(count_records(10) == 1, "%d kernel records after the kernel completed", count_records(10));
    for (int i = 0; i < nrecords; i++) {
        struct record *r = &records[i];
        if (r->kind == 10) {
            CHECK(r->correlation == k && strcmp(r->name, "k_cupti") == 0 && r->stream == fakecuda_stream_id(s),
                  "kernel record corr %u (launch %u) name %s stream %u", r->correlation, k, r->name, r->stream);
            CHECK(r->end - r->start >= 95000000, "kernel ran %llu ns", (unsigned long long)(r->end - r->start));
            CHECK(r->start >= cupti_now, "the kernel record is not on the device clock");
        }
        if (r->kind == 38)
            CHECK(r->type_or_copy == 3 && r->stream == fakecuda_stream_id(s) && r->end - r->start >= 50000000,
                  "sync record type %u stream %u lasted %llu ns", r->type_or_copy, r->stream,
                  (unsigned long long)(r->end - r->start));
        if (r->kind == 1) CHECK(r->type_or_copy == 2 && r->bytes == sizeof src, "memcpy record");
    }
    CHECK(count_records(38) == 1, "%d synchronization records", count_records(38));
    CHECK(count_records(1) == 1, "%d memcpy records", count_records(1));

    int launch_enter = 0, launch_exit = 0, sync_enter = 0, sync_exit = 0, other = 0;
    for (int i = 0; i < nseen && i < SEEN_MAX; i++) {
        struct seen_call *c = &seen[i];
        if (c->domain == 2 && c->cbid == 211) {
            CHECK(c->correlation == k && strcmp(c->symbol, "k_cupti") == 0, "launch callback corr %u symbol %s",
                  c->correlation, c->symbol);
            if (c->site == 1) CHECK(c->data_kept, "correlationData not kept from ENTER to EXIT");
            c->site == 0 ? launch_enter++ : launch_exit++;
        } else if (c->domain == 2 && c->cbid == 131) {
            c->site == 0 ? sync_enter++ : sync_exit++;
        } else {
            other++;
        }
    }
    CHECK(launch_enter == 1 && launch_exit == 1 && sync_enter == 1 && sync_exit == 1,
          "launch %d/%d sync %d/%d callbacks", launch_enter, launch_exit, sync_enter, sync_exit);
    CHECK(other == 0, "%d callbacks that were not enabled", other);
    printf("cupti: %d records, %d callbacks\n", nrecords, (int)nseen);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CASE\n", argv[0]);
        return 2;
    }
    static const struct {
        const char *name;
        int (*run)(void);
    } cases[] = {
        {"fifo", case_fifo},
        {"fork", case_fork},
        {"runtime_end", case_runtime_end},
        {"wait_event", case_wait_event},
        {"sync_blocks", case_sync_blocks},
        {"launch_queue", case_launch_queue},
        {"injection", case_injection},
        {"clock", case_clock},
        {"nccl_async", case_nccl_async},
        {"nccl_group_async", case_nccl_group_async},
        {"nccl_two_streams", case_nccl_two_streams},
        {"nccl_profiler", case_nccl_profiler},
        {"cupti", case_cupti},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(argv[1], cases[i].name) != 0) continue;
        cases[i].run();
        return failures ? 1 : 0;
    }
    fprintf(stderr, "unknown case %s\n", argv[1]);
    return 2;
}
