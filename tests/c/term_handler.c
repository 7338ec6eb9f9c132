/* A program with or without its own SIGTERM handler, for tests/process_end.rs.
 *
 *   term_handler handled|default
 *
 * `handled` installs a plain SIGTERM handler first; then, in both modes, the program
 * starts the preloaded library (sf_recording, found with dlsym), sends itself SIGTERM
 * (delivered before kill returns) and prints "handled=<0|1>". In `handled` mode it then
 * kills itself with SIGKILL, so that nothing after the signal can touch the log; in
 * `default` mode SIGTERM has already ended it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t handled;

static void on_term(int sig) {
    (void)sig;
    handled = 1;
}

int main(int argc, char **argv) {
    int own = argc > 1 && strcmp(argv[1], "handled") == 0;
    if (own) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = on_term;
        sigemptyset(&action.sa_mask);
        sigaction(SIGTERM, &action, NULL);
    }
    int (*recording)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "sf_recording");
    if (recording == NULL || !recording()) {
        fprintf(stderr, "term_handler: the library does not record\n");
        return 2;
    }
    kill(getpid(), SIGTERM);
    printf("handled=%d\n", (int)handled);
    fflush(stdout);
    if (own) raise(SIGKILL);
    return 3;
}
