/* See stacks.h. The signal comes to the process, and so to one of its
 * threads; that one sends it on to every other thread of the process
 * (tgkill, the thread ids read from /proc/self/task with the raw getdents64
 * system call: nothing that allocates), and each thread writes its own
 * backtrace, taking turns through a lock that is a single atomic flag.
 * backtrace() is called once at installation, so that its first call's
 * loading of the unwinder does not happen inside the handler. */
#include "worker/train/stacks.h"
#include "common/ddprun_env.h"

#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int stack_signal;
static int my_rank;
static _Atomic int64_t step_now = -1;
static atomic_flag writing = ATOMIC_FLAG_INIT;
static _Atomic int round_leader; /* the thread that fans the signal out, while it does */
static const coll_record *_Atomic record;

void stacks_note_record(const coll_record *r) { atomic_store(&record, r); }

void stacks_note_step(int64_t step) { atomic_store_explicit(&step_now, step, memory_order_relaxed); }

static void put(const char *s) {
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t k = write(STDERR_FILENO, s, n);
        if (k <= 0) return;
        s += k, n -= (size_t)k;
    }
}

/* A number in decimal without printf (not async-signal-safe). */
static void put_num(long long v) {
    char b[24], *p = b + sizeof b;
    int neg = v < 0;
    unsigned long long u = neg ? (unsigned long long)(-(v + 1)) + 1 : (unsigned long long)v;
    *--p = '\0';
    do *--p = (char)('0' + u % 10); while ((u /= 10) && p > b + 1);
    if (neg) *--p = '-';
    put(p);
}

static void own_stack(pid_t tid) {
    void *frames[64];
    int n = backtrace(frames, 64);
    while (atomic_flag_test_and_set(&writing)) {
    }
    put("ddp-train: rank ");
    put_num(my_rank);
    put(", thread ");
    put_num(tid);
    put(":\n");
    backtrace_symbols_fd(frames + 2, n > 2 ? n - 2 : 0, STDERR_FILENO); /* without the handler */
    atomic_flag_clear(&writing);
}

struct linux_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

static void fan_out(pid_t self) {
    int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    char buf[4096];
    long n;
    pid_t pid = getpid();
    while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
        for (long at = 0; at < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + at);
            at += d->d_reclen;
            long tid = 0;
            for (const char *c = d->d_name; *c >= '0' && *c <= '9'; c++) tid = tid * 10 + (*c - '0');
            if (tid > 0 && tid != self) syscall(SYS_tgkill, pid, (pid_t)tid, stack_signal);
        }
    }
    close(fd);
}

static void on_signal(int sig, siginfo_t *si, void *uc) {
    (void)sig, (void)uc;
    pid_t self = (pid_t)syscall(SYS_gettid);
    /* sent by another process (the agent): this thread leads the round */
    if (si->si_code != SI_TKILL && atomic_exchange(&round_leader, self) == 0) {
        while (atomic_flag_test_and_set(&writing)) {
        }
        put("ddp-train: rank ");
        put_num(my_rank);
        put(": the stacks of every thread, asked for by the launcher (step ");
        put_num(atomic_load_explicit(&step_now, memory_order_relaxed));
        put(" under way");
        uint64_t entered, done;
        coll_record_position(atomic_load(&record), &entered, &done);
        if (entered) {
            put("; collective #");
            put_num((long long)entered);
            put(entered == done ? " finished" : " entered, not finished");
        }
        put(")\n");
        atomic_flag_clear(&writing);
        own_stack(self);
        fan_out(self);
        atomic_store(&round_leader, 0);
        return;
    }
    own_stack(self);
}

void stacks_install(int rank) {
    const char *v = getenv(DDPRUN_ENV_STACK_SIGNAL);
    int sig = v ? atoi(v) : 0;
    if (sig < SIGRTMIN || sig > SIGRTMAX) return;
    void *warm[2];
    backtrace(warm, 2);
    stack_signal = sig, my_rank = rank;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
}
