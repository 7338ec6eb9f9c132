/* A host process with SIGBUS of its own, for the library's SIGBUS guard (tests/host_safety.rs).
 *
 *   host_sigbus fault DISPOSITION KIND DIR
 *     sets SIGBUS to DISPOSITION (default, ignore, siginfo, plain), makes one NCCL call (the
 *     library starts and maps its log), says whether a SIGBUS handler is now installed,
 *     then raises SIGBUS itself: KIND mmap (a store past the end of its own truncated file
 *     in DIR) or raise (raise(SIGBUS)). Its handlers say what they got and _exit(42/43).
 *   host_sigbus later JOB_DIR
 *     makes one NCCL call (the library installs its guard), then installs its own SIGBUS
 *     handler that passes every SIGBUS on to the action it replaced, as chaining handlers
 *     do, truncates its own log (JOB_DIR/pid-<pid>.sflog, under SF_FORCE=1) and waits
 *     for the collector's next stores into it.
 *   host_sigbus start
 *     makes one NCCL call (the library starts) and prints its resident memory then
 *     (`VmRSS: N kB`, from /proc/self/status), for measuring what the start costs.
 *   host_sigbus shm PATH MIB
 *     maps MIB MiB of a new shared file at PATH and touches every page, as a program
 *     sharing tensors through /dev/shm does; dies of SIGBUS when the filesystem is full. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern int ncclGetVersion(int *version);

static volatile char *expected_addr;

static void say(const char *line) {
    ssize_t written = write(1, line, strlen(line));
    (void)written;
}

static void on_siginfo(int sig, siginfo_t *info, void *context) {
    (void)context;
    if (sig == SIGBUS && info->si_code == SI_TKILL)
        say("own siginfo handler: raised\n");
    else if (sig == SIGBUS && (volatile char *)info->si_addr == expected_addr)
        say("own siginfo handler: si_addr is the store's\n");
    else
        say("own siginfo handler: wrong siginfo\n");
    _exit(42);
}

static void on_plain(int sig) {
    say(sig == SIGBUS ? "own plain handler: SIGBUS\n" : "own plain handler: wrong signal\n");
    _exit(43);
}

static int set_disposition(const char *how) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    sigemptyset(&action.sa_mask);
    if (strcmp(how, "default") == 0)
        action.sa_handler = SIG_DFL;
    else if (strcmp(how, "ignore") == 0)
        action.sa_handler = SIG_IGN;
    else if (strcmp(how, "siginfo") == 0) {
        action.sa_sigaction = on_siginfo;
        action.sa_flags = SA_SIGINFO;
    } else if (strcmp(how, "plain") == 0)
        action.sa_handler = on_plain;
    else
        return -1;
    return sigaction(SIGBUS, &action, NULL);
}

static int fault(const char *how, const char *kind, const char *dir) {
    if (set_disposition(how) != 0) {
        fprintf(stderr, "bad disposition %s\n", how);
        return 2;
    }
    int version = 0;
    ncclGetVersion(&version);
    struct sigaction now;
    sigaction(SIGBUS, NULL, &now);
    int installed = (now.sa_flags & SA_SIGINFO) && now.sa_sigaction != on_siginfo;
    printf("library handler installed: %s\n", installed ? "yes" : "no");
    fflush(stdout);
    if (strcmp(kind, "raise") == 0) {
        raise(SIGBUS);
        say("survived raise\n");
        return 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/own-mapping", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        perror("own file");
        return 2;
    }
    char *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED || ftruncate(fd, 0) != 0) {
        perror("own mapping");
        return 2;
    }
    expected_addr = map + 100;
    *expected_addr = 1;
    say("survived its own fault\n");
    return 0;
}

static struct sigaction replaced;

static void on_sigbus_pass_on(int sig, siginfo_t *info, void *context) {
    say("app handler: passing SIGBUS on\n");
    if ((replaced.sa_flags & SA_SIGINFO) && replaced.sa_sigaction != NULL) {
        replaced.sa_sigaction(sig, info, context);
        return;
    }
    signal(SIGBUS, SIG_DFL); /* the default: the fault re-executes and kills */
}

static int later(const char *job_dir) {
    int version = 0;
    ncclGetVersion(&version);
    struct sigaction action;
    memset(&action, 0, sizeof action);
    sigemptyset(&action.sa_mask);
    action.sa_sigaction = on_sigbus_pass_on;
    action.sa_flags = SA_SIGINFO;
    if (sigaction(SIGBUS, &action, &replaced) != 0)
        return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/pid-%d.sflog", job_dir, (int)getpid());
    if (truncate(path, 0) != 0) {
        perror(path);
        return 2;
    }
    usleep(500 * 1000);
    say("survived\n");
    return 0;
}

static int shm(const char *path, long mib) {
    size_t len = (size_t)mib << 20;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("shm file");
        return 2;
    }
    char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        perror("shm mapping");
        return 2;
    }
    for (size_t page = 0; page < len; page += 4096)
        map[page] = 1;
    printf("shm user: %ld MiB touched\n", mib);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "fault") == 0)
        return fault(argv[2], argv[3], argv[4]);
    if (argc == 3 && strcmp(argv[1], "later") == 0)
        return later(argv[2]);
    if (argc == 2 && strcmp(argv[1], "start") == 0) {
        int version = 0;
        ncclGetVersion(&version);
        FILE *status = fopen("/proc/self/status", "r");
        char line[256];
        while (status != NULL && fgets(line, sizeof line, status) != NULL)
            if (strncmp(line, "VmRSS:", 6) == 0)
                fputs(line, stdout);
        return status == NULL;
    }
    if (argc == 4 && strcmp(argv[1], "shm") == 0)
        return shm(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: host_sigbus fault default|ignore|siginfo|plain mmap|raise DIR | later JOB_DIR | start | shm PATH MIB\n");
    return 2;
}
