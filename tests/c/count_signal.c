/* Counts the deliveries of one signal (TERM or INT, argv[1]): prints "ready" once its
 * handler is in place, waits until 1 s after the first delivery (room for a second copy
 * to arrive), then prints "<name>=<count>" and exits 0. The handler counts every
 * delivery: the signal is blocked while it runs, so a copy that arrives meanwhile is
 * delivered, and counted, after it. Used by tests/run_cli.rs. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t count;

static void on_signal(int sig) {
    (void)sig;
    count++;
}

int main(int argc, char **argv) {
    int sig = argc > 1 && strcmp(argv[1], "INT") == 0 ? SIGINT : SIGTERM;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, NULL);
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < 600 && count == 0; i++) {
        struct timespec tick = {0, 50 * 1000 * 1000};
        nanosleep(&tick, NULL);
    }
    struct timespec rest = {1, 0};
    while (nanosleep(&rest, &rest) != 0) {
    }
    printf("%s=%d\n", argc > 1 ? argv[1] : "TERM", (int)count);
    return 0;
}
