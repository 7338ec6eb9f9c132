/* What the test programs that act as a CUDA application share: the part of nccl.h they
 * call (fakenccl provides it; from NCCL's documented API), and what the CUDA driver does
 * in cuInit to load an injection library. Included by cuda_host.c and device_job.c; the
 * tests compile them with tests/c on the include path (compile_against_fakenccl). */
#ifndef SF_TESTS_FAKE_DRIVER_H
#define SF_TESTS_FAKE_DRIVER_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
extern int ncclGetUniqueId(ncclUniqueId *id);
extern int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern int ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);
extern int ncclCommDestroy(ncclComm_t comm);

typedef int (*InitializeInjectionFn)(void);

/* The InitializeInjection of the library named by CUDA_INJECTION64_PATH, dlopened as the
 * driver does; NULL when the variable is unset (nothing to inject). A library that does
 * not load or lacks the entry point ends the program with status 1 and one stderr line
 * naming `program`. */
static inline InitializeInjectionFn cuda_injection(const char *program) {
    const char *injection = getenv("CUDA_INJECTION64_PATH");
    if (!injection) return NULL;
    void *library = dlopen(injection, RTLD_NOW);
    if (!library) {
        fprintf(stderr, "%s: dlopen(%s): %s\n", program, injection, dlerror());
        exit(1);
    }
    InitializeInjectionFn initialize = (InitializeInjectionFn)dlsym(library, "InitializeInjection");
    if (!initialize) {
        fprintf(stderr, "%s: no InitializeInjection in %s\n", program, injection);
        exit(1);
    }
    return initialize;
}

#endif
