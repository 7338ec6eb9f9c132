/* A process that records under its launcher's RANK, then declares another rank, as a
 * child of torch.multiprocessing.spawn does when a stray RANK is in its environment and
 * something starts the library before init_process_group. For tests/preload.rs.
 *
 *   declare_rank RANK WORLD_SIZE
 *
 * Starts the preloaded library (sf_recording), records step 0, prints "started", waits
 * for a line on stdin, declares RANK of WORLD_SIZE (sf_declare_rank), records step 1,
 * prints "declared" and exits 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: declare_rank RANK WORLD_SIZE\n");
        return 2;
    }
    int (*recording)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sf_recording");
    int (*declare)(int, int) = (int (*)(int, int))dlsym(RTLD_DEFAULT, "sf_declare_rank");
    void (*step_begin)(int64_t) = (void (*)(int64_t))dlsym(RTLD_DEFAULT, "sf_step_begin");
    void (*step_end)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "sf_step_end");
    if (!recording || !declare || !step_begin || !step_end) {
        fprintf(stderr, "declare_rank: the library is not loaded\n");
        return 2;
    }
    recording();
    step_begin(0);
    step_end();
    printf("started\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL) return 2;
    declare(atoi(argv[1]), atoi(argv[2]));
    step_begin(1);
    step_end();
    printf("declared\n");
    fflush(stdout);
    return 0;
}
