/* See worker_group.h. Each worker runs in its own session and process
 * group (UV_PROCESS_DETACHED), so a signal to the group reaches whatever
 * it started too; it is exec'd through ddprun-exec (worker_exec.h), which
 * sets PR_SET_PDEATHSIG so the worker dies with its agent even when the
 * agent is killed with SIGKILL. */
#include "agent/worker_group.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "agent/orphans.h"
#include "common/clock.h"
#include "common/ddprun_env.h"
#include "common/log.h"

#define DRAIN_MS 2000
#define SPAWN_BATCH 8 /* workers spawned per turn of the loop */
#define FDS_PER_WORKER 6 /* two pipes, two log files, the two filtered logs */

/* Whatever the workers left behind is ended: their process groups, and
 * every process below the agent (a daemon in a session of its own). */
static void end_leftovers(worker_group *g) {
    pid_t *groups = calloc((size_t)g->n + 1, sizeof *groups), pids[8];
    int ngroups = 0;
    for (int i = 0; i < g->n; i++)
        if (g->w[i].pid > 0 && kill(-g->w[i].pid, SIGKILL) == 0 && groups)
            groups[ngroups++] = g->w[i].pid;
    int n = orphans_end(groups, ngroups, pids, 8);
    free(groups);
    if (n == 0) return;
    char list[128] = "";
    for (int i = 0, k = 0; i < n && i < 8 && k < (int)sizeof list; i++)
        k += snprintf(list + k, sizeof list - (size_t)k, "%s%d", i ? ", " : "", (int)pids[i]);
    log_warn("ended %d process%s the workers left behind (pid %s%s)", n, n == 1 ? "" : "es",
             list, n > 8 ? ", ..." : "");
}

/* Every worker has exited and said all it had to say: nothing of the
 * group may outlive it. */
static void check_idle(worker_group *g) {
    if (g->idle || g->starting || g->nrunning > 0 || g->noutputs > 0) return;
    g->idle = 1;
    uv_timer_stop(&g->kill_timer);
    uv_timer_stop(&g->drain_timer);
    end_leftovers(g);
    if (g->on_idle) g->on_idle(g);
}

static void on_drain_timeout(uv_timer_t *t) {
    worker_group *g = t->data;
    /* Something (a grandchild) keeps a pipe open: stop waiting for it. */
    g->noutputs = 0;
    check_idle(g);
}

static void on_proc_exit(uv_process_t *p, int64_t status, int sig) {
    worker *w = p->data;
    worker_group *g = w->group;
    w->running = 0;
    w->exit_status = status;
    w->term_signal = sig;
    w->exit_time = clock_wall_s();
    g->nrunning--;
    worker_output_drain(&w->out); /* its last lines, before its end is judged */
    worker_output_drain(&w->err);
    if (g->on_exit) g->on_exit(g, w);
    if (g->nrunning == 0 && g->noutputs > 0) uv_timer_start(&g->drain_timer, on_drain_timeout, DRAIN_MS, 0);
    check_idle(g);
}

static void on_output_eof(worker_output *o) {
    worker_group *g = o->owner;
    if (g->noutputs > 0) g->noutputs--;
    check_idle(g);
}

int worker_group_fits(int n, char *err, size_t errlen) {
    struct rlimit procs, fds;
    if (n > WORKER_GROUP_MAX) {
        snprintf(err, errlen, "%d workers on one node is more than ddprun starts (at most %d)",
                 n, WORKER_GROUP_MAX);
        return -E2BIG;
    }
    if (geteuid() != 0 && getrlimit(RLIMIT_NPROC, &procs) == 0 &&
        procs.rlim_cur != RLIM_INFINITY && (rlim_t)n >= procs.rlim_cur) {
        snprintf(err, errlen, "%d workers, but this user may run only %llu processes "
                 "(RLIMIT_NPROC; raise it with `ulimit -u`)", n,
                 (unsigned long long)procs.rlim_cur);
        return -EAGAIN;
    }
    rlim_t need = (rlim_t)n * FDS_PER_WORKER + 64;
    if (getrlimit(RLIMIT_NOFILE, &fds) == 0 && fds.rlim_cur != RLIM_INFINITY &&
        need > fds.rlim_cur) {
        snprintf(err, errlen, "%d workers need about %llu open files in the agent, but it may "
                 "open only %llu (RLIMIT_NOFILE; raise it with `ulimit -n`)", n,
                 (unsigned long long)need, (unsigned long long)fds.rlim_cur);
        return -EMFILE;
    }
    return 0;
}

worker_group *worker_group_new(uv_loop_t *loop, const char *exec_helper) {
    worker_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->loop = loop;
    g->exec_helper = exec_helper;
    uv_timer_init(loop, &g->kill_timer);
    uv_timer_init(loop, &g->drain_timer);
    uv_idle_init(loop, &g->spawner);
    g->kill_timer.data = g->drain_timer.data = g->spawner.data = g;
    orphans_adopt();
    return g;
}

/* Opens a worker's log files and readies its pipes. */
static int open_outputs(worker_group *g, worker *w, const worker_spec *s, char *err,
                        size_t errlen) {
    int rc = worker_output_init(&w->out, g->loop, &s->out);
    if (rc == 0) rc = worker_output_init(&w->err, g->loop, &s->err);
    if (rc) {
        snprintf(err, errlen, "cannot open the log files of local rank %d: %s", w->local_rank,
                 strerror(-rc));
        return rc;
    }
    w->out.owner = w->err.owner = g;
    w->out.on_eof = w->err.on_eof = on_output_eof;
    return 0;
}

static void free_env(worker *w) {
    free(w->env);
    w->env = NULL;
}

static void on_handle_closed(uv_handle_t *h);

static int spawn_one(worker_group *g, worker *w, char *err, size_t errlen) {
    int argc = 0;
    while (w->argv[argc]) argc++;
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return -ENOMEM;
    args[0] = (char *)g->exec_helper;
    args[1] = "__exec-worker";
    memcpy(args + 2, w->argv, (size_t)argc * sizeof *args);
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&w->out.pipe},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&w->err.pipe},
    };
    uv_process_options_t po = {.exit_cb = on_proc_exit, .file = g->exec_helper, .args = args,
                               .env = w->env, .flags = UV_PROCESS_DETACHED, .stdio_count = 3,
                               .stdio = stdio};
    w->proc.data = w;
    int rc = uv_spawn(g->loop, &w->proc, &po);
    free(args);
    free_env(w);
    if (rc) {
        snprintf(err, errlen, "cannot start local rank %d (%s): %s", w->local_rank, w->argv[0],
                 uv_strerror(rc));
        /* A failed uv_spawn leaves the handle initialised: it is closed all the same. */
        w->proc.data = g;
        g->nhandles++;
        uv_close((uv_handle_t *)&w->proc, on_handle_closed);
        return rc;
    }
    g->nhandles++; /* the process handle */
    w->pid = w->proc.pid;
    w->running = 1;
    g->nrunning++;
    g->noutputs += 2;
    worker_output_start(&w->out);
    worker_output_start(&w->err);
    return 0;
}

/* Spawns up to `max` more workers; stops at the first failure. */
static int spawn_some(worker_group *g, int max, char *err, size_t errlen) {
    for (int k = 0; k < max && g->nstarted < g->n; k++) {
        int rc = spawn_one(g, &g->w[g->nstarted], err, errlen);
        if (rc) return rc;
        g->nstarted++;
    }
    return 0;
}

static void done_starting(worker_group *g) {
    g->starting = 0;
    uv_idle_stop(&g->spawner);
    if (!g->stopping && g->on_started) g->on_started(g);
    check_idle(g);
}

/* A later spawn failed: that worker counts as one that exited with 127
 * (as a shell says "command not found"), so the agent handles it as any
 * failure, and the rest are not started. */
static void fail_to_spawn(worker_group *g, const char *why) {
    worker *w = &g->w[g->nstarted++];
    log_error("%s", why);
    w->exit_status = 127;
    w->exit_time = clock_wall_s();
    g->stopping = 1; /* no on_started; the exit is told first, then the group may idle */
    if (g->on_exit) g->on_exit(g, w);
    done_starting(g);
}

static void on_spawn_turn(uv_idle_t *h) {
    worker_group *g = h->data;
    char err[512];
    if (g->stopping) {
        done_starting(g);
        return;
    }
    if (spawn_some(g, SPAWN_BATCH, err, sizeof err) != 0) fail_to_spawn(g, err);
    else if (g->nstarted == g->n) done_starting(g);
}

int worker_group_start(worker_group *g, int n, const worker_spec *specs, char *err,
                       size_t errlen) {
    g->w = calloc((size_t)n, sizeof *g->w);
    if (!g->w) {
        for (int i = 0; i < n; i++) free(specs[i].env);
        snprintf(err, errlen, "out of memory for %d workers", n);
        return -ENOMEM;
    }
    g->n = n;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        worker *w = &g->w[i];
        w->group = g;
        w->local_rank = i;
        w->global_rank = specs[i].global_rank;
        w->argv = specs[i].argv;
        w->env = specs[i].env;
        snprintf(w->error_file, sizeof w->error_file, "%s", specs[i].error_file);
        if (rc == 0) rc = open_outputs(g, w, &specs[i], err, errlen);
    }
    g->starting = 1;
    if (rc == 0) rc = spawn_some(g, SPAWN_BATCH, err, errlen);
    if (rc) {
        g->starting = 0;
        worker_group_stop(g, SIGKILL, 0);
        return rc;
    }
    if (g->nstarted < g->n) uv_idle_start(&g->spawner, on_spawn_turn);
    else done_starting(g);
    return 0;
}

static void on_kill_timeout(uv_timer_t *t) {
    worker_group *g = t->data;
    double grace = g->before_kill && !g->kill_delayed ? g->before_kill(g) : 0;
    if (grace > 0) {
        g->kill_delayed = 1;
        for (int i = 0; i < g->n; i++)
            if (g->w[i].running)
                log_warn("local rank %d (pid %d) did not stop within the shutdown timeout; asked "
                         "for its stacks (in its log), SIGKILL in %g s",
                         g->w[i].local_rank, g->w[i].pid, grace);
        uv_timer_start(&g->kill_timer, on_kill_timeout, (uint64_t)(grace * 1000), 0);
        return;
    }
    for (int i = 0; i < g->n; i++) {
        if (!g->w[i].running) continue;
        log_warn("local rank %d (pid %d) did not stop within the shutdown timeout; sending "
                 "SIGKILL", g->w[i].local_rank, g->w[i].pid);
        kill(-g->w[i].pid, SIGKILL);
    }
}

void worker_group_stop(worker_group *g, int sig, double timeout_s) {
    g->stopping = 1; /* the spawner starts no more */
    for (int i = 0; i < g->n; i++)
        if (g->w[i].running) kill(-g->w[i].pid, sig);
    if (g->nrunning > 0 && sig != SIGKILL)
        uv_timer_start(&g->kill_timer, on_kill_timeout, (uint64_t)(timeout_s * 1000), 0);
    check_idle(g);
}

static void on_handle_closed(uv_handle_t *h) {
    worker_group *g = h->data;
    /* (a failed spawn's handle may close long before worker_group_free) */
    if (--g->nhandles > 0 || !g->freeing) return;
    for (int i = 0; i < g->n; i++) free_env(&g->w[i]); /* the ones never spawned */
    free(g->w);
    free(g);
}

void worker_group_free(worker_group *g) {
    g->freeing = 1;
    g->nhandles += 3; /* the timers and the spawner */
    for (int i = 0; i < g->n; i++) {
        worker *w = &g->w[i];
        w->out.pipe.data = w->err.pipe.data = g;
        g->nhandles += worker_output_close(&w->out, on_handle_closed);
        g->nhandles += worker_output_close(&w->err, on_handle_closed);
        if (w->pid > 0) {
            w->proc.data = g;
            uv_close((uv_handle_t *)&w->proc, on_handle_closed);
        }
    }
    uv_close((uv_handle_t *)&g->kill_timer, on_handle_closed);
    uv_close((uv_handle_t *)&g->drain_timer, on_handle_closed);
    uv_close((uv_handle_t *)&g->spawner, on_handle_closed);
}
