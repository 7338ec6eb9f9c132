/*
 * A CPU stand-in for a job built with NVIDIA's header-only NVTX v3, for tests/nvtx.rs.
 *
 * It does what every nvtx3 module does on its first NVTX call: read NVTX_INJECTION64_PATH,
 * dlopen it, look up InitializeInjectionNvtx2 and call it with the module's own export-table
 * accessor; the tool fills the module's function slots, and every later NVTX call goes
 * through those slots (a NULL slot is a no-op). Two modules attach, from two threads at once,
 * as libtorch and NCCL each carry their own copy of NVTX. Then a training loop pushes and
 * pops steps, stages and foreign ranges through every kind of call the tool serves, while
 * worker threads push and pop ranges of their own.
 *
 * The declarations below are our own, written from the layouts nvtx3's headers define.
 * Prints what it saw on stdout, one `key=value` per line; exits 1 if the two modules were
 * not attached alike.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wchar.h>

typedef void (*any_fn)(void);
typedef const void *(*get_export_table_fn)(uint32_t export_table_id);
typedef int (*initialize_injection_fn)(get_export_table_fn get_export_table);
typedef int (*get_module_function_table_fn)(int module, any_fn ***table, unsigned *size);

/* NvtxExportTableCallbacks, id 1 (NVTX_ETID_CALLBACKS). */
struct export_table_callbacks {
    size_t struct_size;
    get_module_function_table_fn get_module_function_table;
};

/* nvtxEventAttributes_t, version 2. */
struct event_attributes {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t color_type;
    uint32_t color;
    int32_t payload_type;
    int32_t reserved0;
    union { uint64_t ull; int64_t ll; double d; } payload;
    int32_t message_type;
    union { const char *ascii; const wchar_t *unicode; void *registered; } message;
};
_Static_assert(sizeof(struct event_attributes) == 48, "nvtxEventAttributes_t is 48 bytes");

enum { MESSAGE_ASCII = 1, MESSAGE_UNICODE = 2, MESSAGE_REGISTERED = 3 };
enum { MODULE_CORE = 1, MODULE_CORE2 = 5 };
/* Callback ids run from 1 to 15 in both modules; the tables have one more, NULL, entry. */
enum { SLOTS = 16 };
enum {
    CORE_MARK_A = 2, CORE_RANGE_START_EX = 4, CORE_RANGE_START_A = 5, CORE_RANGE_END = 7,
    CORE_RANGE_PUSH_EX = 8, CORE_RANGE_PUSH_A = 9, CORE_RANGE_PUSH_W = 10, CORE_RANGE_POP = 11,
};
enum {
    CORE2_DOMAIN_RANGE_START_EX = 2, CORE2_DOMAIN_RANGE_END = 3, CORE2_DOMAIN_RANGE_PUSH_EX = 4,
    CORE2_DOMAIN_RANGE_POP = 5, CORE2_DOMAIN_REGISTER_STRING_A = 10, CORE2_DOMAIN_CREATE_A = 12,
};
#define NO_PUSH_POP_TRACKING (-2)

/* One module's NVTX globals. */
struct module {
    any_fn core[SLOTS];
    any_fn core2[SLOTS];
    any_fn *core_table[SLOTS + 1];
    any_fn *core2_table[SLOTS + 1];
    struct export_table_callbacks callbacks;
    int attached;
};

static struct module modules[2];

/* nvtx3 fills every slot with an initializing stub first; this stands in for them. */
static void init_stub(void) {}

static int get_module_function_table(struct module *m, int module, any_fn ***table, unsigned *size) {
    any_fn **chosen;
    switch (module) {
    case MODULE_CORE: chosen = m->core_table; break;
    case MODULE_CORE2: chosen = m->core2_table; break;
    default: return 0; /* CUDA, OpenCL, CUDART and SYNC are not offered here */
    }
    if (size) *size = SLOTS; /* entries in the table, the final NULL excluded */
    if (table) *table = chosen;
    return 1;
}

/* NVTX's accessors take no context: each module has its own pair. */
#define MODULE_ACCESSORS(i)                                                                  \
    static int get_module_function_table_##i(int module, any_fn ***table, unsigned *size) {  \
        return get_module_function_table(&modules[i], module, table, size);                  \
    }                                                                                        \
    static const void *get_export_table_##i(uint32_t id) {                                   \
        return id == 1 ? &modules[i].callbacks : NULL;                                       \
    }
MODULE_ACCESSORS(0)
MODULE_ACCESSORS(1)

static const get_export_table_fn export_tables[2] = {get_export_table_0, get_export_table_1};
static const get_module_function_table_fn module_tables[2] = {get_module_function_table_0,
                                                              get_module_function_table_1};

/* nvtxInitOnce for module i: load, initialize, then turn every slot the tool left alone
 * (or all of them, without a tool) into a no-op. */
static int attach(int i) {
    struct module *m = &modules[i];
    m->callbacks.struct_size = sizeof m->callbacks;
    m->callbacks.get_module_function_table = module_tables[i];
    for (int id = 1; id < SLOTS; id++) {
        m->core[id] = m->core2[id] = init_stub;
        m->core_table[id] = &m->core[id];
        m->core2_table[id] = &m->core2[id];
    }
    int ok = 0;
    const char *path = getenv("NVTX_INJECTION64_PATH");
    if (path) {
        void *library = dlopen(path, RTLD_LAZY);
        initialize_injection_fn init =
            library ? (initialize_injection_fn)dlsym(library, "InitializeInjectionNvtx2") : NULL;
        ok = init ? init(export_tables[i]) : 0;
        if (library && !ok) dlclose(library);
    }
    for (int id = 1; id < SLOTS; id++) {
        if (!ok || m->core[id] == init_stub) m->core[id] = NULL;
        if (!ok || m->core2[id] == init_stub) m->core2[id] = NULL;
    }
    m->attached = ok;
    return ok;
}

/* The NVTX API of one module, as nvtx3's inline functions implement it. */
#define SLOT(m, table, id, type) ((type)(m)->table[id])
static int push_a(struct module *m, const char *message) {
    int (*f)(const char *) = SLOT(m, core, CORE_RANGE_PUSH_A, int (*)(const char *));
    return f ? f(message) : NO_PUSH_POP_TRACKING;
}
static int push_w(struct module *m, const wchar_t *message) {
    int (*f)(const wchar_t *) = SLOT(m, core, CORE_RANGE_PUSH_W, int (*)(const wchar_t *));
    return f ? f(message) : NO_PUSH_POP_TRACKING;
}
static int push_ex(struct module *m, const struct event_attributes *a) {
    int (*f)(const struct event_attributes *) =
        SLOT(m, core, CORE_RANGE_PUSH_EX, int (*)(const struct event_attributes *));
    return f ? f(a) : NO_PUSH_POP_TRACKING;
}
static int pop(struct module *m) {
    int (*f)(void) = SLOT(m, core, CORE_RANGE_POP, int (*)(void));
    return f ? f() : NO_PUSH_POP_TRACKING;
}
static uint64_t start_a(struct module *m, const char *message) {
    uint64_t (*f)(const char *) = SLOT(m, core, CORE_RANGE_START_A, uint64_t (*)(const char *));
    return f ? f(message) : 0;
}
static uint64_t start_ex(struct module *m, const struct event_attributes *a) {
    uint64_t (*f)(const struct event_attributes *) =
        SLOT(m, core, CORE_RANGE_START_EX, uint64_t (*)(const struct event_attributes *));
    return f ? f(a) : 0;
}
static void end(struct module *m, uint64_t id) {
    void (*f)(uint64_t) = SLOT(m, core, CORE_RANGE_END, void (*)(uint64_t));
    if (f) f(id);
}
static void mark_a(struct module *m, const char *message) {
    void (*f)(const char *) = SLOT(m, core, CORE_MARK_A, void (*)(const char *));
    if (f) f(message);
}
static void *domain_create_a(struct module *m, const char *name) {
    void *(*f)(const char *) = SLOT(m, core2, CORE2_DOMAIN_CREATE_A, void *(*)(const char *));
    return f ? f(name) : NULL;
}
static void *register_string_a(struct module *m, void *domain, const char *text) {
    void *(*f)(void *, const char *) =
        SLOT(m, core2, CORE2_DOMAIN_REGISTER_STRING_A, void *(*)(void *, const char *));
    return f ? f(domain, text) : NULL;
}
static int domain_push_ex(struct module *m, void *domain, const struct event_attributes *a) {
    int (*f)(void *, const struct event_attributes *) =
        SLOT(m, core2, CORE2_DOMAIN_RANGE_PUSH_EX, int (*)(void *, const struct event_attributes *));
    return f ? f(domain, a) : NO_PUSH_POP_TRACKING;
}
static int domain_pop(struct module *m, void *domain) {
    int (*f)(void *) = SLOT(m, core2, CORE2_DOMAIN_RANGE_POP, int (*)(void *));
    return f ? f(domain) : NO_PUSH_POP_TRACKING;
}
static uint64_t domain_start_ex(struct module *m, void *domain, const struct event_attributes *a) {
    uint64_t (*f)(void *, const struct event_attributes *) =
        SLOT(m, core2, CORE2_DOMAIN_RANGE_START_EX, uint64_t (*)(void *, const struct event_attributes *));
    return f ? f(domain, a) : 0;
}
static void domain_end(struct module *m, void *domain, uint64_t id) {
    void (*f)(void *, uint64_t) = SLOT(m, core2, CORE2_DOMAIN_RANGE_END, void (*)(void *, uint64_t));
    if (f) f(domain, id);
}

static struct event_attributes ascii(const char *text) {
    struct event_attributes a;
    memset(&a, 0, sizeof a);
    a.version = 2;
    a.size = sizeof a;
    a.message_type = MESSAGE_ASCII;
    a.message.ascii = text;
    return a;
}

static struct event_attributes registered(void *handle) {
    struct event_attributes a = ascii(NULL);
    a.message_type = MESSAGE_REGISTERED;
    a.message.registered = handle;
    return a;
}

static void sleep_ms(double ms) {
    struct timespec t = {(time_t)(ms / 1000), (long)((ms - 1000 * (time_t)(ms / 1000)) * 1e6)};
    while (nanosleep(&t, &t) != 0) {
    }
}

static pthread_barrier_t attach_barrier;

static void *attach_thread(void *arg) {
    pthread_barrier_wait(&attach_barrier);
    attach((int)(intptr_t)arg);
    return NULL;
}

static atomic_int stop_workers;

/* Ranges of another thread, open across the main thread's stage boundaries: with a stack
 * shared between threads their pops would end the main thread's stages. */
static void *worker(void *arg) {
    int i = (int)(intptr_t)arg;
    struct module *m = &modules[i % 2];
    void *domain = domain_create_a(m, "worker");
    struct event_attributes inner = ascii("worker.decode");
    while (!atomic_load(&stop_workers)) {
        push_a(m, "worker.batch");
        push_w(m, L"worker.batch");
        domain_push_ex(m, domain, &inner);
        sleep_ms(0.3 + 0.2 * i);
        domain_pop(m, domain);
        pop(m);
        pop(m);
    }
    return NULL;
}

static int count_stagefrontier(struct dl_phdr_info *info, size_t size, void *count) {
    (void)size;
    if (strstr(info->dlpi_name, "libstagefrontier")) ++*(int *)count;
    return 0;
}

static void print_slots(const char *name, any_fn *slots) {
    printf("%s=", name);
    const char *sep = "";
    for (int id = 1; id < SLOTS; id++) {
        if (slots[id]) {
            printf("%s%d", sep, id);
            sep = ",";
        }
    }
    printf("\n");
}

int main(void) {
    /* Two modules initialize at once, from two threads. */
    pthread_t attachers[2];
    pthread_barrier_init(&attach_barrier, NULL, 2);
    for (intptr_t i = 0; i < 2; i++) pthread_create(&attachers[i], NULL, attach_thread, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(attachers[i], NULL);
    struct module *m0 = &modules[0], *m1 = &modules[1];
    printf("attached=%d,%d\n", m0->attached, m1->attached);
    print_slots("core_slots", m0->core);
    print_slots("core2_slots", m0->core2);
    int same = !memcmp(m0->core, m1->core, sizeof m0->core) && !memcmp(m0->core2, m1->core2, sizeof m0->core2);
    printf("same_callbacks=%d\n", same);
    int objects = 0;
    dl_iterate_phdr(count_stagefrontier, &objects);
    printf("stagefrontier_objects=%d\n", objects);
    if (m0->attached != m1->attached || !same) {
        fprintf(stderr, "nvtx_host: the tool did not attach both modules alike\n");
        return 1;
    }

    pthread_t workers[3];
    for (intptr_t i = 0; i < 3; i++) pthread_create(&workers[i], NULL, worker, (void *)i);

    void *app = domain_create_a(m0, "app");
    void *nccl = domain_create_a(m0, "NCCL");
    void *optim = register_string_a(m1, domain_create_a(m1, "app"), "optim.step_cpu_wall");
    const char *step_names[] = {"step", "step", "step:5", "step 6"};
    for (int step = 0; step < 4; step++) {
        /* The step, through either module, as Ex or A. */
        struct event_attributes step_range = ascii(step_names[step]);
        int step_level = step == 1 ? push_ex(m1, &step_range) : push_a(m0, step_names[step]);

        /* data.next_wait with a foreign range nested inside. */
        int data_level = push_a(m0, "data.next_wait");
        int fetch_level = push_a(m0, "dataloader.fetch");
        sleep_ms(6);
        int fetch_popped = pop(m0);
        int data_popped = pop(m0);
        if (step == 0) {
            printf("levels=%d,%d,%d,%d,%d\n", step_level, data_level, fetch_level, fetch_popped, data_popped);
        }

        /* Never stages: a wide string, a structure too small to hold a message, a mark,
         * a process range of another name. */
        push_w(m0, L"host.extra");
        struct event_attributes small = ascii("host.extra");
        small.size = 8;
        push_ex(m0, &small);
        push_ex(m1, NULL);
        mark_a(m0, "host.extra");
        struct event_attributes other = ascii("not.a.stage");
        uint64_t other_id = start_ex(m1, &other);
        sleep_ms(1);
        end(m1, other_id);
        pop(m1);
        pop(m0);
        pop(m0);

        /* model.fwd_loss_cpu_wall as `fwd`, renamed by SF_NVTX_STAGES, from the second module. */
        struct event_attributes fwd = ascii("fwd");
        push_ex(m1, &fwd);
        sleep_ms(3);
        pop(m1);

        /* model.backward_cpu_wall in a domain, with an NCCL-domain range and a default-domain
         * range inside it; the default-domain one outlives the backward stage. */
        struct event_attributes bwd = ascii("model.backward_cpu_wall");
        struct event_attributes allreduce = ascii("ncclAllReduce");
        domain_push_ex(m0, app, &bwd);
        domain_push_ex(m0, nccl, &allreduce);
        push_a(m0, "aten::mm");
        sleep_ms(8);
        domain_pop(m0, nccl);
        domain_pop(m0, app);

        /* callbacks.cpu_wall as a process range, started while aten::mm is still open. */
        uint64_t callbacks = start_a(m0, "callbacks.cpu_wall");
        pop(m0);
        sleep_ms(1);
        end(m0, callbacks);

        /* optim.step_cpu_wall through a registered string, as a domain process range in the
         * last step and a domain push/pop before. */
        struct event_attributes optim_range = registered(optim);
        if (step == 3) {
            uint64_t id = domain_start_ex(m1, app, &optim_range);
            sleep_ms(2);
            domain_end(m1, app, id);
            push_a(m0, "host.extra");
            sleep_ms(1);
            pop(m0);
        } else {
            domain_push_ex(m1, app, &optim_range);
            sleep_ms(2);
            domain_pop(m1, app);
        }

        if (step == 1) pop(m1); else pop(m0);
    }
    printf("unmatched_pop=%d\n", pop(m0));

    atomic_store(&stop_workers, 1);
    for (int i = 0; i < 3; i++) pthread_join(workers[i], NULL);
    printf("done\n");
    return 0;
}
