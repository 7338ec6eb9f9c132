/*
 * Uses libibverbs the way NCCL does: dlopen the library privately, look every verb up with
 * dlvsym(handle, name, "IBVERBS_1.1"), then post with the header's inline ibv_post_send /
 * ibv_post_recv and poll with ibv_poll_cq (which call through context->ops). Run over
 * fakeverbs (argv[1] is its path). It prints every return code and, per QP, what it posted
 * and what completed, so a test can compare runs with and without the library and the
 * library's counters with the program's own. argv[2]: ms to sleep at the end with
 * completions stopped and work requests in flight (default 0).
 *
 * Built with -DLINKED and linked against fakeverbs (-l:libibverbs.so.1), it instead calls
 * every verb directly through the PLT, as a program linked against rdma-core does (NCCL
 * built with rdma-core, perftest); argv[1] is then ignored. `verbs_app --bench N` (LINKED
 * only) times N ibv_post_send + ibv_poll_cq pairs through the context's ops (the door's
 * wrappers when SF_VERBS=1) against N pairs on fakeverbs' own entries, in one run.
 *
 * QP A (device 0, sq_sig_all 0): rounds of [100 B unsignaled, 200 B unsignaled, signaled],
 * one 4096 B receive (fakeverbs completes it with 2048 B); then one send that completes
 * with an error, and a list whose second WR the provider rejects.
 * QP B (device 1, sq_sig_all 1): two unsignaled-flag 512 B sends per round, both complete.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define VERSION "IBVERBS_1.1"
#define ROUNDS 40
#define MAX_WR 1024

#ifdef LINKED
/* fakeverbs' own: completions stop while on; its provider entries, for the benchmark. */
void fakeverbs_hold_completions(int on);
int fakeverbs_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int fakeverbs_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
#define VERB(name) name
#else
static void *lib;

static void *verb(const char *name, const char *version) {
    void *f = dlvsym(lib, name, version);
    if (!f) {
        fprintf(stderr, "verbs_app: %s@%s: %s\n", name, version, dlerror());
        exit(2);
    }
    return f;
}

static struct ibv_device **(*p_ibv_get_device_list)(int *);
static struct ibv_context *(*p_ibv_open_device)(struct ibv_device *);
static int (*p_ibv_close_device)(struct ibv_context *);
static struct ibv_pd *(*p_ibv_alloc_pd)(struct ibv_context *);
static struct ibv_cq *(*p_ibv_create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
static struct ibv_qp *(*p_ibv_create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
static void (*p_fakeverbs_hold_completions)(int);
#define VERB(name) p_##name

static void look_up_verbs(const char *path) {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "verbs_app: %s\n", dlerror());
        exit(2);
    }
    p_ibv_get_device_list = verb("ibv_get_device_list", VERSION);
    p_ibv_open_device = verb("ibv_open_device", VERSION);
    p_ibv_close_device = verb("ibv_close_device", VERSION);
    p_ibv_alloc_pd = verb("ibv_alloc_pd", VERSION);
    p_ibv_create_cq = verb("ibv_create_cq", VERSION);
    p_ibv_create_qp = verb("ibv_create_qp", VERSION);
    p_fakeverbs_hold_completions = verb("fakeverbs_hold_completions", "FAKEVERBS_1.0");
}
#endif

struct tally {
    uint32_t qp_num;
    long posted, completed, errors, bytes_posted, bytes_completed;
};

static struct tally tallies[2];
static long bytes_of[MAX_WR]; /* bytes a send WR's completion carries, by wr_id */
static uint64_t next_wr_id = 1;
static char buffer[8192];

static struct tally *tally_of(uint32_t qp_num) {
    for (int i = 0; i < 2; i++)
        if (tallies[i].qp_num == qp_num) return &tallies[i];
    fprintf(stderr, "verbs_app: completion of unknown QP %u\n", qp_num);
    exit(2);
}

static void poll_all(struct ibv_cq *cq, long expected) {
    struct ibv_wc wc[8];
    for (long got = 0; got < expected;) {
        int n = ibv_poll_cq(cq, 8, wc);
        if (n < 0) {
            printf("poll_cq -> %d\n", n);
            exit(1);
        }
        for (int i = 0; i < n; i++, got++) {
            struct tally *t = tally_of(wc[i].qp_num);
            t->completed++;
            if (wc[i].status != IBV_WC_SUCCESS) {
                t->errors++;
                continue;
            }
            t->bytes_completed += (wc[i].opcode & IBV_WC_RECV) ? (long)wc[i].byte_len : bytes_of[wc[i].wr_id];
        }
    }
}

/* One send WR of `len` bytes (or num_sge SGEs of it); posted and bytes tallied by the caller. */
static void fill_send(struct ibv_send_wr *wr, struct ibv_sge *sge, uint32_t len, int signaled, uint32_t lkey) {
    memset(wr, 0, sizeof *wr);
    sge->addr = (uintptr_t)buffer;
    sge->length = len;
    sge->lkey = lkey;
    wr->wr_id = next_wr_id++;
    wr->sg_list = sge;
    wr->num_sge = 1;
    wr->opcode = IBV_WR_RDMA_WRITE;
    wr->send_flags = signaled ? IBV_SEND_SIGNALED : 0;
}

static void print_tallies(const char *when) {
    for (int i = 0; i < 2; i++) {
        struct tally *t = &tallies[i];
        printf("%s qp %u posted %ld completed %ld errors %ld bytes_posted %ld bytes_completed %ld in_flight %ld\n", when,
               t->qp_num, t->posted, t->completed, t->errors, t->bytes_posted, t->bytes_completed,
               t->posted - t->completed);
    }
}

#ifdef LINKED
#define BENCH_ROUND 1000

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* n signaled 64 B sends, each posted and its completion polled: through the context's ops
   as the header's inline verbs call them (the door's wrappers when it counts), or on
   fakeverbs' own entries (`provider`). */
static void pairs(struct ibv_qp *qp, struct ibv_cq *cq, long n, int provider) {
    struct ibv_sge sge = {.addr = (uintptr_t)buffer, .length = 64, .lkey = 1};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE}, *bad = NULL;
    wr.send_flags = IBV_SEND_SIGNALED;
    struct ibv_wc wc;
    for (long i = 0; i < n; i++) {
        wr.wr_id = next_wr_id++;
        int rc = provider ? fakeverbs_post_send(qp, &wr, &bad) : ibv_post_send(qp, &wr, &bad);
        int got = provider ? fakeverbs_poll_cq(cq, 1, &wc) : ibv_poll_cq(cq, 1, &wc);
        if (rc || got != 1) {
            fprintf(stderr, "verbs_app: bench post -> %d, poll -> %d\n", rc, got);
            exit(1);
        }
    }
}

/* Two QPs of one context, each with its own CQ; rounds of BENCH_ROUND pairs alternate
   between the two paths so both see the same machine. */
static int bench(long n) {
    if (n < BENCH_ROUND) {
        fprintf(stderr, "usage: verbs_app --bench N (N >= %d pairs per path)\n", BENCH_ROUND);
        return 2;
    }
    int count = 0;
    struct ibv_device **devices = ibv_get_device_list(&count);
    struct ibv_context *ctx = ibv_open_device(devices[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq[2];
    struct ibv_qp *qp[2];
    for (int path = 0; path < 2; path++) {
        cq[path] = ibv_create_cq(ctx, 64, NULL, NULL, 0);
        struct ibv_qp_init_attr attr = {.send_cq = cq[path], .recv_cq = cq[path], .qp_type = IBV_QPT_RC};
        attr.cap.max_send_wr = attr.cap.max_recv_wr = 64;
        attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
        qp[path] = ibv_create_qp(pd, &attr);
        if (!cq[path] || !qp[path]) {
            fprintf(stderr, "verbs_app: bench setup failed\n");
            return 1;
        }
    }
    for (int path = 0; path < 2; path++) pairs(qp[path], cq[path], 20 * BENCH_ROUND, path);
    double ns[2] = {0, 0};
    long rounds = n / BENCH_ROUND;
    for (long r = 0; r < rounds; r++) {
        for (int path = 0; path < 2; path++) {
            double t0 = now_ns();
            pairs(qp[path], cq[path], BENCH_ROUND, path);
            ns[path] += now_ns() - t0;
        }
    }
    double ops = ns[0] / (rounds * BENCH_ROUND), provider = ns[1] / (rounds * BENCH_ROUND);
    printf("pairs %ld ops %.1f ns/pair provider %.1f ns/pair added %.1f ns/pair ratio %.2f\n",
           rounds * BENCH_ROUND, ops, provider, ops - provider, ops / provider);
    return ibv_close_device(ctx);
}
#endif

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: verbs_app LIBIBVERBS|- [STALL_MS] | verbs_app --bench N\n");
        return 2;
    }
#ifdef LINKED
    if (!strcmp(argv[1], "--bench")) return bench(argc > 2 ? atol(argv[2]) : 0);
#else
    look_up_verbs(argv[1]);
#endif
    long stall_ms = argc > 2 ? atol(argv[2]) : 0;
    int n = 0;
    struct ibv_device **devices = VERB(ibv_get_device_list)(&n);
    printf("devices %d %s %s\n", n, devices[0]->name, devices[1]->name);
    struct ibv_cq *cq[2];
    struct ibv_qp *qp[2];
    for (int d = 0; d < 2; d++) {
        struct ibv_context *ctx = VERB(ibv_open_device)(devices[d]);
        struct ibv_pd *pd = VERB(ibv_alloc_pd)(ctx);
        cq[d] = VERB(ibv_create_cq)(ctx, 4096, NULL, NULL, 0);
        struct ibv_qp_init_attr attr = {.send_cq = cq[d], .recv_cq = cq[d], .qp_type = IBV_QPT_RC, .sq_sig_all = d};
        attr.cap.max_send_wr = attr.cap.max_recv_wr = 512;
        attr.cap.max_send_sge = attr.cap.max_recv_sge = 4;
        qp[d] = VERB(ibv_create_qp)(pd, &attr);
        if (!ctx || !pd || !cq[d] || !qp[d]) {
            fprintf(stderr, "verbs_app: device %d setup failed\n", d);
            return 1;
        }
        tallies[d].qp_num = qp[d]->qp_num;
        printf("device %d qp %u\n", d, qp[d]->qp_num);
    }

    struct ibv_send_wr wr[3], *bad = NULL;
    struct ibv_sge sge[3 * 5];
    for (int round = 0; round < ROUNDS; round++) {
        uint32_t last = 1000 + round;
        fill_send(&wr[0], &sge[0], 100, 0, 1);
        fill_send(&wr[1], &sge[1], 200, 0, 1);
        fill_send(&wr[2], &sge[2], last, 1, 1);
        wr[0].next = &wr[1];
        wr[1].next = &wr[2];
        bytes_of[wr[2].wr_id] = 300 + last;
        int rc = ibv_post_send(qp[0], &wr[0], &bad);
        tallies[0].posted += 1;
        tallies[0].bytes_posted += 300 + last;

        struct ibv_sge rsge = {.addr = (uintptr_t)buffer, .length = 4096, .lkey = 1};
        struct ibv_recv_wr rwr = {.wr_id = next_wr_id++, .sg_list = &rsge, .num_sge = 1}, *rbad = NULL;
        int rrc = ibv_post_recv(qp[0], &rwr, &rbad);
        tallies[0].posted += 1;
        tallies[0].bytes_posted += 4096;

        fill_send(&wr[0], &sge[0], 512, 0, 1);
        fill_send(&wr[1], &sge[1], 512, 0, 1);
        wr[0].next = &wr[1];
        bytes_of[wr[0].wr_id] = bytes_of[wr[1].wr_id] = 512;
        int brc = ibv_post_send(qp[1], &wr[0], &bad);
        tallies[1].posted += 2;
        tallies[1].bytes_posted += 1024;
        if (rc || rrc || brc) printf("round %d post -> %d %d %d\n", round, rc, rrc, brc);
        poll_all(cq[0], 2);
        poll_all(cq[1], 2);
    }

    /* A send that completes with an error. */
    fill_send(&wr[0], &sge[0], 64, 1, 0xdead);
    printf("error send -> %d\n", ibv_post_send(qp[0], &wr[0], &bad));
    tallies[0].posted += 1;
    tallies[0].bytes_posted += 64;
    poll_all(cq[0], 1);

    /* A list whose second WR has more SGEs than the provider takes: only the first posts. */
    fill_send(&wr[0], &sge[0], 10, 1, 1);
    fill_send(&wr[1], &sge[1], 20, 1, 1);
    fill_send(&wr[2], &sge[7], 30, 1, 1);
    wr[1].sg_list = &sge[1];
    wr[1].num_sge = 5;
    wr[0].next = &wr[1];
    wr[1].next = &wr[2];
    bytes_of[wr[0].wr_id] = 10;
    int rc = ibv_post_send(qp[0], &wr[0], &bad);
    printf("rejected list -> %d bad=%d\n", rc, bad == &wr[1] ? 1 : -1);
    tallies[0].posted += 1;
    tallies[0].bytes_posted += 10;
    poll_all(cq[0], 1);
    print_tallies("healthy");

    /* Completions stop: five sends stay in flight. */
    VERB(fakeverbs_hold_completions)(1);
    for (int i = 0; i < 5; i++) {
        fill_send(&wr[0], &sge[0], 64, 1, 1);
        if (ibv_post_send(qp[0], &wr[0], &bad)) printf("stalled post -> failed\n");
        tallies[0].posted += 1;
        tallies[0].bytes_posted += 64;
    }
    struct ibv_wc wc[8];
    int polled = 0;
    for (int i = 0; i < 100; i++) polled += ibv_poll_cq(cq[0], 8, wc);
    printf("stalled polls found %d\n", polled);
    struct timespec pause = {stall_ms / 1000, (stall_ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
    print_tallies("final");
    printf("close -> %d\n", VERB(ibv_close_device)(qp[1]->context));
    return 0;
}
