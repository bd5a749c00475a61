/* See worker_group.h. Each worker runs in its own session and process
 * group (UV_PROCESS_DETACHED), so a signal to the group reaches whatever
 * it started too; it is exec'd through our own binary's `__exec-worker`
 * entry, which sets PR_SET_PDEATHSIG so the worker dies with its agent
 * even when the agent is killed with SIGKILL. */
#include "agent/worker_group.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent/numa_binding.h"
#include "common/clock.h"
#include "common/log.h"

#define DRAIN_MS 2000

/* Every worker has exited and said all it had to say. Whatever its
 * process group still holds (a grandchild left behind) is killed, so the
 * job leaves no orphans. */
static void check_idle(worker_group *g) {
    if (g->idle || g->nrunning > 0 || g->noutputs > 0) return;
    g->idle = 1;
    uv_timer_stop(&g->kill_timer);
    uv_timer_stop(&g->drain_timer);
    for (int i = 0; i < g->n; i++)
        if (g->w[i].pid > 0) kill(-g->w[i].pid, SIGKILL);
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
    if (g->on_exit) g->on_exit(g, w);
    if (g->nrunning == 0 && g->noutputs > 0) uv_timer_start(&g->drain_timer, on_drain_timeout, DRAIN_MS, 0);
    check_idle(g);
}

static void on_output_eof(worker_output *o) {
    worker_group *g = o->owner;
    if (g->noutputs > 0) g->noutputs--;
    check_idle(g);
}

worker_group *worker_group_new(uv_loop_t *loop, const char *exec_helper) {
    worker_group *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->loop = loop;
    g->exec_helper = exec_helper;
    uv_timer_init(loop, &g->kill_timer);
    uv_timer_init(loop, &g->drain_timer);
    g->kill_timer.data = g->drain_timer.data = g;
    return g;
}

static int spawn_one(worker_group *g, worker *w, const worker_spec *s, char *err, size_t errlen) {
    int rc = worker_output_init(&w->out, g->loop, &s->out);
    if (rc == 0) rc = worker_output_init(&w->err, g->loop, &s->err);
    if (rc) {
        snprintf(err, errlen, "cannot open the log files of local rank %d: %s", w->local_rank,
                 strerror(-rc));
        return rc;
    }
    w->out.owner = w->err.owner = g;
    w->out.on_eof = w->err.on_eof = on_output_eof;
    int argc = 0;
    while (s->argv[argc]) argc++;
    char **args = calloc((size_t)argc + 3, sizeof *args);
    if (!args) return -ENOMEM;
    args[0] = (char *)g->exec_helper;
    args[1] = "__exec-worker";
    memcpy(args + 2, s->argv, (size_t)argc * sizeof *args);
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_IGNORE},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&w->out.pipe},
        {.flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE, .data.stream = (uv_stream_t *)&w->err.pipe},
    };
    uv_process_options_t po = {.exit_cb = on_proc_exit, .file = g->exec_helper, .args = args,
                               .env = s->env, .flags = UV_PROCESS_DETACHED, .stdio_count = 3,
                               .stdio = stdio};
    w->proc.data = w;
    rc = uv_spawn(g->loop, &w->proc, &po);
    free(args);
    if (rc) {
        snprintf(err, errlen, "cannot start local rank %d (%s): %s", w->local_rank, s->argv[0],
                 uv_strerror(rc));
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

int worker_group_start(worker_group *g, int n, const worker_spec *specs, char *err,
                       size_t errlen) {
    g->w = calloc((size_t)n, sizeof *g->w);
    if (!g->w) return -ENOMEM;
    g->n = n;
    for (int i = 0; i < n; i++) {
        worker *w = &g->w[i];
        w->group = g;
        w->local_rank = i;
        w->global_rank = specs[i].global_rank;
        snprintf(w->error_file, sizeof w->error_file, "%s", specs[i].error_file);
        int rc = spawn_one(g, w, &specs[i], err, errlen);
        if (rc) {
            worker_group_stop(g, SIGKILL, 0);
            return rc;
        }
    }
    return 0;
}

static void on_kill_timeout(uv_timer_t *t) {
    worker_group *g = t->data;
    for (int i = 0; i < g->n; i++) {
        if (!g->w[i].running) continue;
        log_warn("local rank %d (pid %d) did not stop within the shutdown timeout; sending "
                 "SIGKILL", g->w[i].local_rank, g->w[i].pid);
        kill(-g->w[i].pid, SIGKILL);
    }
}

void worker_group_stop(worker_group *g, int sig, double timeout_s) {
    g->stopping = 1;
    for (int i = 0; i < g->n; i++)
        if (g->w[i].running) kill(-g->w[i].pid, sig);
    if (g->nrunning > 0 && sig != SIGKILL)
        uv_timer_start(&g->kill_timer, on_kill_timeout, (uint64_t)(timeout_s * 1000), 0);
    check_idle(g);
}

static void on_handle_closed(uv_handle_t *h) {
    worker_group *g = h->data;
    if (--g->nhandles > 0) return;
    free(g->w);
    free(g);
}

void worker_group_free(worker_group *g) {
    g->nhandles += 2; /* the timers */
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
}

int worker_exec_helper(char **argv) {
    /* Dies with the agent; if the agent is already gone, do not start. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *agent = getenv("DDPRUN_AGENT_PID");
    if (agent && getppid() != (pid_t)atoi(agent)) return 1;
    unsetenv("DDPRUN_AGENT_PID");
    char why[300];
    if (numa_bind_from_env(why, sizeof why)) /* run unbound rather than not at all */
        fprintf(stderr, "ddprun: warning: --numa-binding: %s; running unbound\n", why);
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, "ddprun: cannot run '%s': %s\n", argv[0], strerror(e));
    return e == ENOENT ? 127 : 126;
}
