/* A multi-rank training job with GPU work, for the device-evidence chain end to end: every
 * rank marks its steps and the default stages with the C marker API, synchronises in
 * backward through an NCCL allreduce (fakenccl), and, as the CUDA driver would, loads the
 * CUDA injection library (CUDA_INJECTION64_PATH) and launches its forward kernels through
 * fakecupti's asynchronous-GPU hooks. Without CUDA_INJECTION64_PATH nothing loads CUPTI:
 * the same job runs with host timing only.
 *
 *   device_job --ranks N --steps S --case supported|host|spill [--slow-rank R]
 *
 * Without RANK in the environment it is the launcher: it makes the NCCL unique id and runs
 * N copies of itself with RANK, LOCAL_RANK, WORLD_SIZE and the id, and exits 0 when all
 * did. Per step (ms; the slow rank's value after the slash):
 *
 *   case       data  forward host  forward kernels        backward
 *   supported   4    10 / 60       2 x 4 / 10 x 5         allreduce, 8
 *   host        4    10 / 60       2 x 4 / 2 x 2          allreduce, 8
 *   spill       6     2            10 x 5                 synchronize, allreduce, 8
 *
 * then optim.step_cpu_wall, 3 ms. Forward's kernels are launched 0.2 ms into the stage
 * (the model's host code before its first kernel), on one stream, back to back. In
 * `spill` every rank's kernels outlast its 2 ms forward and its backward waits for them
 * (cudaDeviceSynchronize) before the allreduce: the GPU time surfaces in backward. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_driver.h"

#define UNIQUE_ID_ENV "DEVICE_JOB_UNIQUE_ID"
static const char *KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_forward";

/* The marker API and fakecupti's hooks, each NULL when its library is not loaded. */
static void (*step_begin)(int64_t);
static void (*step_end)(void);
static void (*stage_begin)(const char *);
static void (*stage_end)(const char *);
static uint32_t (*launch_kernel)(const char *, uint32_t, uint64_t);
static void (*synchronize)(void);

struct plan {
    long data_us, forward_us, kernels, kernel_us;
    int sync_in_backward;
};

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

static void stage(const char *name, int begin) {
    if (begin && stage_begin) stage_begin(name);
    if (!begin && stage_end) stage_end(name);
}

static int plan_for(const char *which, int slow, struct plan *p) {
    if (!strcmp(which, "supported")) *p = (struct plan){4000, slow ? 60000 : 10000, slow ? 10 : 2, slow ? 5000 : 4000, 0};
    else if (!strcmp(which, "host")) *p = (struct plan){4000, slow ? 60000 : 10000, 2, slow ? 2000 : 4000, 0};
    else if (!strcmp(which, "spill")) *p = (struct plan){6000, 2000, 10, 5000, 1};
    else return -1;
    return 0;
}

static int run_rank(int rank, int world, int steps, const struct plan *p) {
    /* What the CUDA driver does in cuInit. */
    InitializeInjectionFn initialize = cuda_injection("device_job");
    if (initialize && initialize() != 1) {
        fprintf(stderr, "device_job: InitializeInjection from %s failed\n", getenv("CUDA_INJECTION64_PATH"));
        return 1;
    }
    step_begin = (void (*)(int64_t))dlsym(RTLD_DEFAULT, "sf_step_begin");
    step_end = (void (*)(void))dlsym(RTLD_DEFAULT, "sf_step_end");
    stage_begin = (void (*)(const char *))dlsym(RTLD_DEFAULT, "sf_stage_begin");
    stage_end = (void (*)(const char *))dlsym(RTLD_DEFAULT, "sf_stage_end");
    launch_kernel = (uint32_t (*)(const char *, uint32_t, uint64_t))dlsym(RTLD_DEFAULT, "fakecupti_launch_kernel");
    synchronize = (void (*)(void))dlsym(RTLD_DEFAULT, "fakecupti_synchronize");

    const char *hex = getenv(UNIQUE_ID_ENV);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    for (size_t i = 0; hex && i < sizeof id.internal && sscanf(hex + 2 * i, "%2hhx", (unsigned char *)&id.internal[i]) == 1; i++) {}
    ncclComm_t comm = NULL;
    if (ncclCommInitRank(&comm, world, id, rank)) return 1;
    float x[256] = {1}, y[256];

    for (int s = 0; s < steps; s++) {
        if (step_begin) step_begin(s);
        stage("data.next_wait", 1);
        sleep_us(p->data_us);
        stage("data.next_wait", 0);

        stage("model.fwd_loss_cpu_wall", 1);
        sleep_us(200);
        for (long k = 0; k < p->kernels && launch_kernel; k++) launch_kernel(KERNEL, 7, (uint64_t)p->kernel_us * 1000);
        sleep_us(p->forward_us - 200);
        stage("model.fwd_loss_cpu_wall", 0);

        stage("model.backward_cpu_wall", 1);
        if (p->sync_in_backward && synchronize) synchronize();
        if (ncclAllReduce(x, y, 256, 7, 0, comm, NULL)) return 1;
        sleep_us(8000);
        stage("model.backward_cpu_wall", 0);

        stage("optim.step_cpu_wall", 1);
        sleep_us(3000);
        stage("optim.step_cpu_wall", 0);
        if (step_end) step_end();
    }
    /* A job's last act on the GPU: wait for its work, so every kernel completes. */
    if (synchronize) synchronize();
    ncclCommDestroy(comm);
    printf("rank %d: %d steps, fakecupti %s\n", rank, steps, launch_kernel ? "loaded" : "not loaded");
    return 0;
}

static int launch(int ranks, char **argv) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id)) return 1;
    char hex[2 * sizeof id.internal + 1];
    for (size_t i = 0; i < sizeof id.internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    char world[16];
    snprintf(world, sizeof world, "%d", ranks);
    pid_t launcher = getpid();
    for (int r = 0; r < ranks; r++) {
        pid_t child = fork();
        if (child < 0) return 1;
        if (child == 0) {
            /* A rank must not outlive the launcher: its peers would wait forever. */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != launcher) _exit(1);
            char rank[16];
            snprintf(rank, sizeof rank, "%d", r);
            setenv("RANK", rank, 1);
            setenv("LOCAL_RANK", rank, 1);
            setenv("WORLD_SIZE", world, 1);
            setenv(UNIQUE_ID_ENV, hex, 1);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
    }
    int failed = 0, status = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    return failed;
}

int main(int argc, char **argv) {
    int ranks = 4, steps = 12, slow_rank = 2;
    const char *which = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ranks")) ranks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--case")) which = argv[i + 1];
        else if (!strcmp(argv[i], "--slow-rank")) slow_rank = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "device_job: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    struct plan plan;
    const char *rank = getenv("RANK");
    if (!which || ranks < 1 || plan_for(which, rank && atoi(rank) == slow_rank, &plan)) {
        fprintf(stderr, "usage: device_job --ranks N --steps S --case supported|host|spill [--slow-rank R]\n");
        return 2;
    }
    if (!rank) return launch(ranks, argv);
    setvbuf(stdout, NULL, _IONBF, 0);
    return run_rank(atoi(rank), ranks, steps, &plan);
}
