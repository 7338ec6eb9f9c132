/* One rank whose threads all make their first NCCL calls at once, for tests/preload.rs
 * (issue 24, point 4): the library starts on the first of them, and the others race it.
 *
 *   first_calls RANK NRANKS SEED THREADS CALLS
 *
 * THREADS threads are released together; thread t creates communicator t of NRANKS ranks
 * (every rank derives its unique id from SEED and t, so the same thread of every rank
 * joins the same communicator), makes CALLS allreduces on it and destroys it: CALLS + 2
 * calls per thread. Prints "first_calls: ok" when every call returned ncclSuccess. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
typedef int ncclResult_t;
enum { ncclFloat32 = 7, ncclSum = 0 };

extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);

#define MAX_THREADS 256
#define CHECK(call)                                                        \
    do {                                                                   \
        int rc_ = (call);                                                  \
        if (rc_ != 0) {                                                    \
            fprintf(stderr, "first_calls: %s -> %d\n", #call, rc_);        \
            exit(2);                                                       \
        }                                                                  \
    } while (0)

static pthread_barrier_t start;
static int rank, nranks, calls;
static uint64_t seed;

static void *thread_calls(void *arg) {
    uint64_t t = (uint64_t)(uintptr_t)arg;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    /* fakenccl's unique id: its magic, then 16 bytes naming the rendezvous. */
    memcpy(id.internal, "FAKENCCL", 8);
    memcpy(id.internal + 8, &seed, sizeof seed);
    memcpy(id.internal + 16, &t, sizeof t);
    float x[4] = {1, 2, 3, 4}, y[4];
    ncclComm_t comm = NULL;
    pthread_barrier_wait(&start);
    CHECK(ncclCommInitRank(&comm, nranks, id, rank));
    for (int i = 0; i < calls; i++) CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, comm, NULL));
    CHECK(ncclCommDestroy(comm));
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: first_calls RANK NRANKS SEED THREADS CALLS\n");
        return 2;
    }
    rank = atoi(argv[1]);
    nranks = atoi(argv[2]);
    seed = strtoull(argv[3], NULL, 10);
    int threads = atoi(argv[4]);
    calls = atoi(argv[5]);
    if (threads < 1 || threads > MAX_THREADS || calls < 0 || rank < 0 || rank >= nranks) return 2;
    pthread_t workers[MAX_THREADS];
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) pthread_create(&workers[t], NULL, thread_calls, (void *)(uintptr_t)t);
    for (int t = 0; t < threads; t++) pthread_join(workers[t], NULL);
    printf("first_calls: ok\n");
    return 0;
}
