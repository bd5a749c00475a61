/* The unit-test runner: forks one child per registered test, kills it after
 * a timeout (DDPRUN_TEST_TIMEOUT seconds, default 60), and prints one line
 * per test. `runner NAME...` runs only the named tests; otherwise $TESTS,
 * when set, runs only those whose name contains it (as tests/run filters
 * its scripts). Exit status is 1 if any test failed. */
#include "common/clock.h"
#include "tests/unit/test.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 1024

typedef struct {
    const char *name;
    test_fn fn;
    const char *file;
} test_case;

static test_case tests[MAX_TESTS];
static int ntests;
static char tmpdir[256];
static int result_fd = -1; /* child writes its failure message here */

void test_register(const char *name, test_fn fn, const char *file) {
    if (ntests < MAX_TESTS) tests[ntests++] = (test_case){name, fn, file};
}

static void report(const char *msg) {
    if (result_fd >= 0) {
        ssize_t w = write(result_fd, msg, strlen(msg));
        (void)w;
    }
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "F%s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    report(msg);
    _exit(1);
}

void test_skip(const char *why) {
    char msg[512];
    snprintf(msg, sizeof msg, "S%s", why);
    report(msg);
    _exit(0);
}

const char *test_tmpdir(void) { return tmpdir; }

const char *test_path(const char *name) {
    static char p[4][512];
    static int k;
    char *s = p[k++ % 4];
    snprintf(s, sizeof p[0], "%s/%s", tmpdir, name);
    return s;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Runs one test in a child; returns 0 passed, 1 failed, 2 skipped. */
static int run_one(const test_case *t, int timeout_s, const char *suite) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/ddprun-test-%d-XXXXXX", (int)getpid());
    if (!mkdtemp(tmpdir)) return 1;
    double t0 = (clock_now_ns() / 1e6);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        result_fd = fds[1];
        setpgid(0, 0);
        alarm((unsigned)timeout_s);
        t->fn();
        exit(0); /* not _exit: LeakSanitizer checks at exit */
    }
    close(fds[1]);
    /* The test's end first, then its message: a process the test forked
     * and left behind (a failed test skips its clean-up) holds the pipe
     * open, so reading to the end of it could wait forever. Everything the
     * test wrote is in the pipe by the time it has exited. */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    kill(-pid, SIGKILL); /* anything the test started and left behind */
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    char msg[1024] = {0};
    size_t got = 0;
    ssize_t n;
    while (got < sizeof msg - 1 && (n = read(fds[0], msg + got, sizeof msg - 1 - got)) > 0)
        got += (size_t)n;
    close(fds[0]);
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    double ms = (clock_now_ns() / 1e6) - t0;
    if (msg[0] == 'S') {
        printf("skip %s/%s: %s\n", suite, t->name, msg + 1);
        return 2;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && msg[0] == 0) {
        printf("ok   %s/%s (%.0f ms)\n", suite, t->name, ms);
        return 0;
    }
    if (msg[0] == 'F')
        printf("FAIL %s/%s: %s\n", suite, t->name, msg + 1);
    else if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        printf("FAIL %s/%s: timed out after %d s\n", suite, t->name, timeout_s);
    else if (WIFSIGNALED(status))
        printf("FAIL %s/%s: killed by signal %d (%s)\n", suite, t->name, WTERMSIG(status),
               strsignal(WTERMSIG(status)));
    else
        printf("FAIL %s/%s: exit status %d\n", suite, t->name, WEXITSTATUS(status));
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    const char *env = getenv("DDPRUN_TEST_TIMEOUT");
    int timeout_s = env ? atoi(env) : 60;
    const char *suite = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
    const char *pattern = getenv("TESTS");
    int failed = 0;
    for (int i = 0; i < ntests; i++) {
        int wanted = argc < 2 && (!pattern || strstr(tests[i].name, pattern));
        for (int a = 1; a < argc; a++) wanted |= strcmp(argv[a], tests[i].name) == 0;
        if (wanted && run_one(&tests[i], timeout_s, suite) == 1) failed++;
    }
    return failed ? 1 : 0;
}

static int stderr_mem = -1, stderr_saved = -1;

void test_stderr_begin(void) {
    fflush(stderr);
    stderr_mem = memfd_create("stderr", 0);
    stderr_saved = dup(STDERR_FILENO);
    if (stderr_mem < 0 || stderr_saved < 0) test_fail(__FILE__, __LINE__, "cannot capture stderr");
    dup2(stderr_mem, STDERR_FILENO);
}

char *test_stderr_end(void) {
    fflush(stderr);
    dup2(stderr_saved, STDERR_FILENO);
    close(stderr_saved);
    off_t n = lseek(stderr_mem, 0, SEEK_END);
    char *out = calloc(1, (size_t)n + 1);
    if (!out || pread(stderr_mem, out, (size_t)n, 0) != (ssize_t)n)
        test_fail(__FILE__, __LINE__, "cannot read what stderr got");
    close(stderr_mem);
    stderr_mem = stderr_saved = -1;
    return out;
}
