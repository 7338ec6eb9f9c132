/* What the multi-rank C jobs over fakenccl share: NCCL's handle types as nccl.h declares
 * them, a CHECK that ends a rank on the first failed call, the unique id as hex on a
 * command line, and the launcher that starts each rank as a fork+exec of the program with
 * RANK and WORLD_SIZE set, as a launcher starts ranks. */
#ifndef SF_FAKE_JOB_H
#define SF_FAKE_JOB_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;

extern ncclResult_t ncclGetUniqueId(ncclUniqueId *id);

/* In a function with an int `rank`: prints the failed call and returns 1. */
#define CHECK(call)                                                              \
    do {                                                                         \
        ncclResult_t rc_ = (call);                                               \
        if (rc_ != 0) {                                                          \
            fprintf(stderr, "rank %d: %s -> %d\n", rank, #call, (int)rc_);       \
            return 1;                                                            \
        }                                                                        \
    } while (0)

static inline void job_id_to_hex(const ncclUniqueId *id, char hex[2 * sizeof id->internal + 1]) {
    for (size_t i = 0; i < sizeof id->internal; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->internal[i]);
}

static inline int job_id_from_hex(const char *hex, ncclUniqueId *id) {
    for (size_t i = 0; i < sizeof id->internal; i++) {
        unsigned byte = 0;
        if (sscanf(hex + 2 * i, "%2x", &byte) != 1) return -1;
        id->internal[i] = (char)byte;
    }
    return 0;
}

/* Starts `ranks` ranks, each as `argv[0] ARGS... RANK`, and waits for them: 0 when every
 * rank exited 0. A rank dies with the launcher (a test that kills it ends the job). */
static inline int job_launch(char **argv, int ranks, const char *const *args, int nargs) {
    pid_t pids[64];
    if (ranks > 64 || nargs > 8) return 2;
    char world[12];
    snprintf(world, sizeof world, "%d", ranks);
    for (int r = 0; r < ranks; r++) {
        char rank[12];
        snprintf(rank, sizeof rank, "%d", r);
        pids[r] = fork();
        if (pids[r] < 0) return 2;
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            setenv("RANK", rank, 1);
            setenv("WORLD_SIZE", world, 1);
            char *child[11] = {argv[0]};
            for (int i = 0; i < nargs; i++) child[1 + i] = (char *)args[i];
            child[1 + nargs] = rank;
            execv("/proc/self/exe", child);
            _exit(127);
        }
    }
    int failed = 0;
    for (int r = 0; r < ranks; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return failed;
}

/* The main of a job whose ranks need only the unique id: `PROG [rounds]` launches
 * `ranks` ranks, each run as `PROG rounds hex-id rank` and handed to `run_rank`. */
static inline int job_main(int argc, char **argv, int ranks, const char *default_rounds,
                           int (*run_rank)(ncclUniqueId id, int rank, int rounds)) {
    const char *rounds = argc > 1 ? argv[1] : default_rounds;
    ncclUniqueId id;
    if (argc == 4) {
        if (job_id_from_hex(argv[2], &id) != 0) return 2;
        return run_rank(id, atoi(argv[3]), atoi(rounds));
    }
    if (ncclGetUniqueId(&id) != 0) return 2;
    char hex[2 * sizeof id.internal + 1];
    job_id_to_hex(&id, hex);
    const char *args[] = {rounds, hex};
    return job_launch(argv, ranks, args, 2);
}

#endif
