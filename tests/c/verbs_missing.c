/*
 * A program that finds libibverbs' verbs at run time without linking it, as programs that
 * probe for RDMA support do. Under the preloaded library, dlsym(RTLD_DEFAULT) finds the
 * library's exports: while libibverbs is not loaded they must fail as a missing verb
 * would (NULL or -1, errno ENOSYS); once argv[1] (fakeverbs) is loaded privately
 * (RTLD_LOCAL, so only through the handle), they must reach it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

typedef struct ibv_context *(*open_fn)(struct ibv_device *);
typedef int (*close_fn)(struct ibv_context *);
typedef struct ibv_qp *(*create_qp_fn)(struct ibv_pd *, struct ibv_qp_init_attr *);

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: verbs_missing LIBIBVERBS\n");
        return 2;
    }
    open_fn open_device = (open_fn)dlsym(RTLD_DEFAULT, "ibv_open_device");
    close_fn close_device = (close_fn)dlsym(RTLD_DEFAULT, "ibv_close_device");
    create_qp_fn create_qp = (create_qp_fn)dlsym(RTLD_DEFAULT, "ibv_create_qp");
    if (!open_device || !close_device || !create_qp) {
        printf("not exported\n");
        return 0;
    }
    errno = 0;
    struct ibv_context *ctx = open_device(NULL);
    printf("missing open -> %s errno %s\n", ctx ? "context" : "NULL", strerror(errno));
    errno = 0;
    int rc = close_device(NULL);
    printf("missing close -> %d errno %s\n", rc, strerror(errno));
    errno = 0;
    struct ibv_qp *qp = create_qp(NULL, NULL);
    printf("missing create_qp -> %s errno %s\n", qp ? "qp" : "NULL", strerror(errno));

    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "verbs_missing: %s\n", dlerror());
        return 2;
    }
    struct ibv_device **(*get_device_list)(int *) = (struct ibv_device * *(*)(int *))dlsym(lib, "ibv_get_device_list");
    struct ibv_pd *(*alloc_pd)(struct ibv_context *) = (struct ibv_pd * (*)(struct ibv_context *))dlsym(lib, "ibv_alloc_pd");
    int n = 0;
    struct ibv_device **devices = get_device_list(&n);
    ctx = open_device(devices[0]);
    printf("loaded open -> %s\n", ctx ? ctx->device->name : "NULL");
    struct ibv_qp_init_attr attr = {.qp_type = IBV_QPT_RC};
    qp = ctx ? create_qp(alloc_pd(ctx), &attr) : NULL;
    printf("loaded create_qp -> %s\n", qp ? "qp" : "NULL");
    printf("loaded close -> %d\n", ctx ? close_device(ctx) : -1);
    return 0;
}
