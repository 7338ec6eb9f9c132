/* Acts as the CUDA driver towards an injection library, then as the GPU through fakecupti:
 * dlopens CUDA_INJECTION64_PATH and calls its InitializeInjection (twice: the driver may
 * initialise again, the library must act once), runs kernels through fakecupti's test
 * hook, and makes NCCL calls through fakenccl, as a training job's rank would.
 *
 *   cuda_host [--kernels N] [--name NAME] [--copy-bytes B] [--nccl N] [--settle-ms MS]
 *             [--fork-ms MS]
 *
 * --settle-ms waits that long after InitializeInjection, as a job's setup would.
 * --fork-ms forks a child that lives MS milliseconds, then exits through exit(3) (so its
 * atexit handlers run) and prints "child <pid>". Prints every InitializeInjection result
 * and how many records fakecupti wrote. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_driver.h"

typedef int (*RunKernels)(int count, const char *name, uint32_t stream, uint64_t duration_ns, uint64_t copy_bytes);

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    int kernels = 0, nccl = 0;
    long fork_ms = -1, settle_ms = 0;
    uint64_t copy_bytes = 0;
    const char *name = "sm90_xmma_gemm_bf16bf16_bf16f32";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--kernels")) kernels = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--name")) name = argv[i + 1];
        else if (!strcmp(argv[i], "--copy-bytes")) copy_bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--nccl")) nccl = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fork-ms")) fork_ms = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--settle-ms")) settle_ms = atol(argv[i + 1]);
        else {
            fprintf(stderr, "cuda_host: unknown argument %s\n", argv[i]);
            return 2;
        }
    }

    InitializeInjectionFn initialize = cuda_injection("cuda_host");
    if (initialize) {
        printf("InitializeInjection -> %d\n", initialize());
        printf("InitializeInjection -> %d\n", initialize());
        sleep_ms(settle_ms);
    }

    ncclUniqueId id;
    ncclComm_t comm = NULL;
    float x[4] = {1, 2, 3, 4}, y[4];
    if (nccl > 0 && (ncclGetUniqueId(&id) || ncclCommInitRank(&comm, 1, id, 0))) return 1;

    RunKernels run = (RunKernels)dlsym(RTLD_DEFAULT, "fakecupti_run_kernels");
    int written = 0;
    for (int i = 0; i < kernels || i < nccl; i++) {
        if (i < kernels && run) written += run(1, name, 7, 20000, copy_bytes);
        if (i < nccl && ncclAllReduce(x, y, 4, 7, 0, comm, NULL)) return 1;
    }
    printf("fakecupti %s, %d records written\n", run ? "loaded" : "not loaded", written);
    if (comm) ncclCommDestroy(comm);

    if (fork_ms >= 0) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            printf("child %d\n", (int)getpid());
            sleep_ms(fork_ms);
            exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
    return 0;
}
