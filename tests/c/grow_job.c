/* A job over fakenccl that grows a communicator (ncclCommGrow, 2.29.2): ranks 0 and 1 make
 * a two-rank communicator, rank 0 asks it for a grow id (ncclCommGetUniqueId) and hands it
 * to rank 2 through a file, then the three grow it as nccl.h 2.32.3 says: rank 0 (the
 * root) with its communicator and the id, rank 1 with its communicator alone, rank 2 with
 * the id and its new rank. Then `rounds` AllReduces run on the grown communicator, their
 * sums checked. Each rank is a fork+exec of this program with RANK and WORLD_SIZE=3 set.
 * Arguments: rounds (default 3); a rank gets rounds parent-hex-id grow-id-file rank. */
#include <string.h>
#include <time.h>

#include "fake_job.h"

enum { ncclFloat32 = 7, ncclSum = 0, RANKS = 3, OLD = 2 };

extern ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
extern ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId *id);
extern ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId *id, int rank, ncclComm_t *newcomm,
                                 void *config);
extern ncclResult_t ncclCommDestroy(ncclComm_t comm);
extern ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int dtype, int op, ncclComm_t c, void *stream);

static int run_rank(int rank, int rounds, const char *parent_hex, const char *grow_file) {
    ncclUniqueId grow_id;
    ncclComm_t grown = NULL, parent = NULL;
    char hex[2 * sizeof grow_id.internal + 1];
    if (rank < OLD) {
        ncclUniqueId id;
        if (job_id_from_hex(parent_hex, &id) != 0) return 2;
        CHECK(ncclCommInitRank(&parent, OLD, id, rank));
        if (rank == 0) {
            CHECK(ncclCommGetUniqueId(parent, &grow_id));
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "%s.tmp", grow_file);
            FILE *f = fopen(tmp, "w");
            if (!f) return 2;
            job_id_to_hex(&grow_id, hex);
            fputs(hex, f);
            fclose(f);
            if (rename(tmp, grow_file) != 0) return 2;
            CHECK(ncclCommGrow(parent, RANKS, &grow_id, -1, &grown, NULL));
        } else {
            CHECK(ncclCommGrow(parent, RANKS, NULL, -1, &grown, NULL));
        }
    } else {
        FILE *f = NULL;
        for (int tries = 0; !f && tries < 3000; tries++) {
            f = fopen(grow_file, "r");
            if (!f) nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
        }
        if (!f || !fgets(hex, sizeof hex, f) || job_id_from_hex(hex, &grow_id) != 0) return 2;
        fclose(f);
        CHECK(ncclCommGrow(NULL, RANKS, &grow_id, rank, &grown, NULL));
    }
    float x[4] = {1, 2, 3, (float)rank}, y[4] = {0};
    for (int i = 0; i < rounds; i++) {
        CHECK(ncclAllReduce(x, y, 4, ncclFloat32, ncclSum, grown, NULL));
        if (y[1] != 2.0f * RANKS || y[3] != 3.0f) {
            fprintf(stderr, "rank %d: sum %g %g\n", rank, y[1], y[3]);
            return 1;
        }
    }
    CHECK(ncclCommDestroy(grown));
    if (parent) CHECK(ncclCommDestroy(parent));
    return 0;
}

int main(int argc, char **argv) {
    const char *rounds = argc > 1 ? argv[1] : "3";
    if (argc == 5) return run_rank(atoi(argv[4]), atoi(rounds), argv[2], argv[3]);
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != 0) return 2;
    char hex[2 * sizeof id.internal + 1], grow_file[256];
    job_id_to_hex(&id, hex);
    snprintf(grow_file, sizeof grow_file, "/tmp/sf-grow-id-%d", (int)getpid());
    unlink(grow_file);
    const char *args[] = {rounds, hex, grow_file};
    int failed = job_launch(argv, RANKS, args, 3);
    unlink(grow_file);
    return failed;
}
