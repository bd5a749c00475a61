/* See file_timer.h. */
#include "agent/file_timer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"

#define CHECK_MS 100   /* how often deadlines are looked at (torch: 0.1 s) */
#define MAX_TIMERS 4096

typedef struct {
    pid_t pid;
    char scope[256];
    double expires; /* seconds since the epoch */
    int sig;
    double kill_at; /* expired: the stacks were asked for, the kill comes then (0: not yet) */
} timer_entry;

struct file_timer {
    uv_loop_t *loop;
    char path[1024];
    int rfd, wfd;     /* the FIFO's read end, and a writer of our own so that */
                      /* it never reads end-of-file between clients */
    uv_poll_t poll;
    uv_timer_t tick;
    int nhandles;
    buf_t partial;    /* the start of a line not yet ended */
    timer_entry *timers;
    int n;
    file_timer_owner_fn owner;
    void *ctx;
    pid_t reaped;
    double reaped_expires;
    char reaped_scope[256];
    int (*ask)(void *ctx); /* before a kill: the stacks (file_timer_before_kill) */
    double grace;
    double asked_until;    /* a round of stacks is being written until then */
};

void file_timer_before_kill(file_timer *t, int (*ask)(void *ctx), double grace_s) {
    if (!t) return;
    t->ask = ask;
    t->grace = grace_s;
}

static void drop(file_timer *t, int i) { t->timers[i] = t->timers[--t->n]; }

static timer_entry *find(file_timer *t, pid_t pid, const char *scope) {
    for (int i = 0; i < t->n; i++)
        if (t->timers[i].pid == pid && strcmp(t->timers[i].scope, scope) == 0)
            return &t->timers[i];
    return NULL;
}

/* One request line: acquire (or renew) or release a timer. */
static void handle_line(file_timer *t, const char *line, size_t n) {
    json_error_t jerr;
    json_t *req = json_loadb(line, n, 0, &jerr);
    json_int_t pid = 0, sig = 0;
    const char *scope = NULL;
    double expires = 0;
    if (!req || json_unpack(req, "{s:I, s:s, s:F, s?I}", "pid", &pid, "scope_id", &scope,
                            "expiration_time", &expires, "signal", &sig) != 0 ||
        pid <= 0) {
        log_warn("worker watchdog: a request it cannot read ignored: %.*s", (int)(n > 200 ? 200 : n),
                 line);
        json_decref(req);
        return;
    }
    timer_entry *e = find(t, (pid_t)pid, scope);
    if (expires < 0) {
        if (e) drop(t, (int)(e - t->timers));
    } else if (e || t->n < MAX_TIMERS) {
        if (!e) {
            e = &t->timers[t->n++];
            e->pid = (pid_t)pid;
            snprintf(e->scope, sizeof e->scope, "%s", scope);
        }
        e->expires = expires;
        e->sig = (int)sig;
        e->kill_at = 0; /* renewed: whatever was pending is off */
    }
    json_decref(req);
}

static void on_readable(uv_poll_t *p, int status, int events) {
    file_timer *t = p->data;
    (void)events;
    if (status < 0) return;
    char chunk[4096];
    ssize_t r;
    while ((r = read(t->rfd, chunk, sizeof chunk)) > 0) {
        buf_append(&t->partial, chunk, (size_t)r);
        char *start = (char *)t->partial.data, *end = start + t->partial.len, *nl;
        while ((nl = memchr(start, '\n', (size_t)(end - start))) != NULL) {
            handle_line(t, start, (size_t)(nl - start));
            start = nl + 1;
        }
        size_t rest = (size_t)(end - start);
        memmove(t->partial.data, start, rest);
        t->partial.len = rest;
    }
}

/* Every CHECK_MS: the expired timers' processes get their signal; timers
 * of processes that are gone are dropped. */
static void on_tick(uv_timer_t *h) {
    file_timer *t = h->data;
    double now = clock_wall_s();
    for (int i = 0; i < t->n;) {
        timer_entry *e = &t->timers[i];
        if (kill(e->pid, 0) != 0 && errno == ESRCH) {
            drop(t, i);
            continue;
        }
        if (e->expires > now || e->sig <= 0) {
            i++;
            continue;
        }
        char who[128];
        pid_t pid = e->pid;
        if (!t->owner(t->ctx, pid, who, sizeof who)) {
            log_warn("worker watchdog: timer '%s' of pid %d expired, but that process is not "
                     "one of this agent's workers: left alone", e->scope, (int)pid);
            drop(t, i);
            continue;
        }
        if (e->kill_at == 0) { /* first seen expired: the stacks, then the kill */
            if (t->ask && now >= t->asked_until) {
                int n = t->ask(t->ctx);
                if (n > 0) {
                    t->asked_until = now + t->grace;
                    log_error("worker watchdog: %s ran past its deadline in '%s': asked %d "
                              "worker%s for %s stacks (in their logs) before SIG%s",
                              who, e->scope, n, n == 1 ? "" : "s", n == 1 ? "its" : "their",
                              sigabbrev_np(e->sig));
                }
            }
            /* (a round under way covers the others that expire meanwhile) */
            e->kill_at = t->asked_until > now ? t->asked_until : now;
        }
        if (e->kill_at > now) {
            i++;
            continue;
        }
        log_error("worker watchdog: %s ran past its deadline in '%s' (%.1f s ago): sending "
                  "SIG%s", who, e->scope, now - e->expires, sigabbrev_np(e->sig));
        /* of several killed at once, the one that ran out first: the others
         * (waiting for it in a collective) ran out because of it */
        if (!t->reaped || e->expires < t->reaped_expires) {
            t->reaped = pid, t->reaped_expires = e->expires;
            snprintf(t->reaped_scope, sizeof t->reaped_scope, "%s", e->scope);
        }
        kill(pid, e->sig);
        for (int k = t->n - 1; k >= 0; k--) /* the process's other timers go with it */
            if (t->timers[k].pid == pid) drop(t, k);
        i = 0;
    }
}

int file_timer_killed(file_timer *t, pid_t pid, char *scope, size_t len) {
    if (len) scope[0] = '\0';
    if (!t || !t->reaped || t->reaped != pid) return 0;
    if (len) snprintf(scope, len, "%s", t->reaped_scope);
    t->reaped = 0;
    return 1;
}

file_timer *file_timer_start(uv_loop_t *loop, const char *path, file_timer_owner_fn owner,
                             void *ctx, char *err, size_t errlen) {
    file_timer *t = calloc(1, sizeof *t);
    if (t) t->timers = calloc(MAX_TIMERS, sizeof *t->timers);
    if (!t || !t->timers) {
        free(t);
        snprintf(err, errlen, "out of memory for the worker watchdog");
        return NULL;
    }
    snprintf(t->path, sizeof t->path, "%s", path);
    t->loop = loop, t->owner = owner, t->ctx = ctx;
    t->rfd = t->wfd = -1;
    unlink(path);
    if (mkfifo(path, 0600) != 0 || (t->rfd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 ||
        (t->wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "cannot make the worker watchdog's pipe %s: %s", path,
                 strerror(errno));
        if (t->rfd >= 0) close(t->rfd);
        unlink(path);
        free(t->timers);
        free(t);
        return NULL;
    }
    uv_poll_init(loop, &t->poll, t->rfd);
    uv_timer_init(loop, &t->tick);
    t->poll.data = t->tick.data = t;
    uv_poll_start(&t->poll, UV_READABLE, on_readable);
    uv_timer_start(&t->tick, on_tick, CHECK_MS, CHECK_MS);
    return t;
}

static void on_closed(uv_handle_t *h) {
    file_timer *t = h->data;
    if (--t->nhandles > 0) return;
    buf_free(&t->partial);
    free(t->timers);
    free(t);
}

void file_timer_stop(file_timer *t) {
    if (!t) return;
    unlink(t->path);
    close(t->wfd);
    t->nhandles = 2;
    uv_close((uv_handle_t *)&t->poll, on_closed);
    uv_close((uv_handle_t *)&t->tick, on_closed);
    /* the read end after the poll handle lets go of it */
    int rfd = t->rfd;
    t->rfd = -1;
    close(rfd);
}
