/*
 * A minimal NCCL profiler plugin for tests/profiler_plugin.rs, loaded through
 * SF_CHAIN_PROFILER behind libstagefrontier's profiler door. It counts every call, checks
 * that every handle and parent it is given is one of its own, and at exit writes the counts
 * to $CHAIN_COUNT_FILE.<pid>. Exports ncclProfiler_v1, _v4, _v5, _v6 and _v7 (the three
 * init shapes); the event mask it asks for is $CHAIN_MASK (default 0xff).
 *
 * As NVIDIA's example plugin does (ext-profiler/example/plugin.c at v2.27.7-1), it calls
 * the logger NCCL passes to a v4+ init unconditionally, and keeps the activation-mask
 * pointer from init: with $CHAIN_MASK_LATER=M it writes M through that pointer after its
 * $CHAIN_MASK_AFTER-th (default 10th) startEvent, as a plugin changing its mask at run time.
 * The same plugin runs as NCCL's only plugin or chained behind libstagefrontier: the counts
 * must be the same.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static atomic_long n_init, n_start, n_stop, n_record, n_finalize, bad_parent, bad_handle, bad_ctx;
static atomic_long by_type[16];
static char arena[1 << 20];
static atomic_uint next_handle;
static int context_token;
static int *volatile mask_ptr;
typedef void (*logger_t)(int level, unsigned long flags, const char *file, int line, const char *fmt, ...);

static int owns(void *p) { return (char *)p >= arena && (char *)p < arena + sizeof arena; }

static int mask(void) {
    const char *m = getenv("CHAIN_MASK");
    return m && *m ? (int)strtol(m, NULL, 0) : 0xff;
}

static int init_common(void **ctx, int *m) {
    atomic_fetch_add(&n_init, 1);
    *ctx = &context_token;
    *m = mask();
    mask_ptr = m;
    return 0;
}

/* NCCL_INFO level 3, NCCL_INIT flag 1, as the example logs its init. */
static void say_init(void *logfn) { ((logger_t)logfn)(3, 1, __FILE__, __LINE__, "chain-test: init"); }

__attribute__((unused)) static int init_v1(void **ctx, int *m) { return init_common(ctx, m); }
__attribute__((unused)) static int init_v4(void **ctx, int *m, const char *name, uint64_t hash, int nnodes, int nranks, int rank, void *logfn) {
    (void)name, (void)hash, (void)nnodes, (void)nranks, (void)rank;
    say_init(logfn);
    return init_common(ctx, m);
}
__attribute__((unused)) static int init_v5(void **ctx, uint64_t id, int *m, const char *name, int nnodes, int nranks, int rank, void *logfn) {
    (void)id, (void)name, (void)nnodes, (void)nranks, (void)rank;
    say_init(logfn);
    return init_common(ctx, m);
}

static int start_common(void *ctx, void **handle, uint64_t type, void *parent) {
    long n = atomic_fetch_add(&n_start, 1) + 1;
    const char *later = getenv("CHAIN_MASK_LATER"), *after = getenv("CHAIN_MASK_AFTER");
    if (later && *later && n == (after && *after ? atol(after) : 10)) *mask_ptr = (int)strtol(later, NULL, 0);
    if (ctx != &context_token) atomic_fetch_add(&bad_ctx, 1);
    if (parent && !owns(parent)) atomic_fetch_add(&bad_parent, 1);
    for (int b = 0; b < 16; b++)
        if (type == (1ull << b)) atomic_fetch_add(&by_type[b], 1);
    *handle = &arena[atomic_fetch_add(&next_handle, 1) % sizeof arena];
    return 0;
}

/* Every descriptor: type (uint8_t up to v4, uint64_t from v5), then void* parentObj at 8. */
__attribute__((unused)) static int start_u8(void *ctx, void **handle, void *descr) {
    return start_common(ctx, handle, *(uint8_t *)descr, *(void **)((char *)descr + 8));
}
__attribute__((unused)) static int start_u64(void *ctx, void **handle, void *descr) {
    return start_common(ctx, handle, *(uint64_t *)descr, *(void **)((char *)descr + 8));
}
static int stop(void *handle) {
    atomic_fetch_add(&n_stop, 1);
    if (!owns(handle)) atomic_fetch_add(&bad_handle, 1);
    return 0;
}
static int record(void *handle, int state, void *args) {
    (void)state, (void)args;
    atomic_fetch_add(&n_record, 1);
    if (!owns(handle)) atomic_fetch_add(&bad_handle, 1);
    return 0;
}
static int finalize(void *ctx) {
    atomic_fetch_add(&n_finalize, 1);
    if (ctx != &context_token) atomic_fetch_add(&bad_ctx, 1);
    return 0;
}

struct table { const char *name; void *init; void *start, *stop, *record, *finalize; };
/* -DONLY=N exports ncclProfiler_vN alone, as plugins built for one NCCL do (NVIDIA's NCCL
 * Inspector exports v5 only). */
#define EXPORT(N, INIT, START)                                                                                      \
    __attribute__((visibility("default"))) struct table ncclProfiler_v##N = {"chain-test", (void *)INIT, (void *)START, \
                                                                            (void *)stop, (void *)record, (void *)finalize};
#if !defined(ONLY) || ONLY == 1
EXPORT(1, init_v1, start_u8)
#endif
#if !defined(ONLY) || ONLY == 4
EXPORT(4, init_v4, start_u8)
#endif
#if !defined(ONLY) || ONLY == 5
EXPORT(5, init_v5, start_u64)
#endif
#if !defined(ONLY) || ONLY == 6
EXPORT(6, init_v5, start_u64)
#endif
#if !defined(ONLY) || ONLY == 7
EXPORT(7, init_v5, start_u64)
#endif

__attribute__((destructor)) static void report(void) {
    const char *base = getenv("CHAIN_COUNT_FILE");
    if (!base || atomic_load(&n_init) == 0) return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", base, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "init=%ld start=%ld stop=%ld record=%ld finalize=%ld bad_parent=%ld bad_handle=%ld bad_ctx=%ld",
            atomic_load(&n_init), atomic_load(&n_start), atomic_load(&n_stop), atomic_load(&n_record),
            atomic_load(&n_finalize), atomic_load(&bad_parent), atomic_load(&bad_handle), atomic_load(&bad_ctx));
    for (int b = 0; b < 16; b++) fprintf(f, " type%d=%ld", b, atomic_load(&by_type[b]));
    fprintf(f, "\n");
    fclose(f);
}
