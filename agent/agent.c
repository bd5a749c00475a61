/* The agent (see agent.h). Two threads:
 *
 *  - the main thread runs a libuv loop: signals, the worker processes and
 *    their output, and the decisions (agent_* functions below);
 *  - the rendezvous thread makes the blocking store calls: it joins a
 *    round, then watches it (peers alive, failures elsewhere, nodes
 *    waiting), and posts what it learns to the main thread through a
 *    small mailbox and a uv_async.
 *
 * A local worker failure is announced by the main thread itself (one
 * COMPARE_SET on its own store connection) so that the other agents hear
 * of it within a round trip; the rendezvous thread sees the same key and
 * starts the next round while the main thread is still stopping workers. */
#include "agent/agent.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "agent/agent_store.h"
#include "agent/events.h"
#include "agent/failure.h"
#include "agent/file_timer.h"
#include "agent/node_status.h"
#include "agent/metrics.h"
#include "agent/metrics_http.h"
#include "agent/numa_binding.h"
#include "agent/worker_env.h"
#include "agent/worker_group.h"
#include "common/fdlimit.h"
#include "common/fs.h"
#include "common/clock.h"
#include "common/log.h"
#include "rendezvous/rdzv.h"

extern char **environ; /* the base of every worker's environment */

typedef enum { ST_RDZV, ST_RUNNING, ST_STOPPING, ST_BARRIER, ST_SHUTDOWN } agent_state;
typedef enum { EV_ROUND, EV_RESTART, EV_BARRIER, EV_LOST } ev_kind;

#define MAX_EVENTS 16
#define MAX_FAILURES 256

typedef struct {
    ev_kind kind;
    int rc;
    rdzv_event why;
    rdzv_result res; /* scalars only: res.nodes belongs to the other thread */
    char err[512];
} agent_event;

typedef struct {
    const agent_config *cfg;
    const char *exe;
    uv_loop_t *loop;
    uv_signal_t sigs[AGENT_MAX_SIGNALS]; /* --signals-to-handle */
    uv_async_t wake;
    pthread_t rthread;
    int rthread_started;
    pthread_mutex_t mu; /* guards the mailbox and the commands */
    agent_event evq[MAX_EVENTS];
    int nev;
    int cmd_barrier;
    rdzv *rd;
    agent_store store; /* where the job's store is; its host when this agent serves it */
    char hostname[256];
    char log_root[2048];
    char tmp_root[256]; /* without --log-dir: our own directory, removed at exit */
    worker_group *wg;
    agent_state state;
    rdzv_result cur;
    int have_pending;
    rdzv_result pending;
    int exit_code;
    int shutdown_signal;
    int spent_restarts; /* restarts are spent after this many: the summary is due at the end */
    failure fails[MAX_FAILURES];
    int nfails;
    numa_plan numa; /* --numa-binding: each local rank's CPUs (numa.n 0: none) */
    double group_started; /* wall clock, s: when the current workers started */
    file_timer *watchdog; /* TORCHELASTIC_ENABLE_FILE_TIMER=1: torch's FileTimerServer */
    char watchdog_path[400];
    event_log *events;     /* <log root>/events.jsonl (and stderr with --event-log-handler console) */
    double joining_since;  /* wall clock, s: when it began to join the present round */
    double state_since;    /* wall clock, s: when the published state last changed */
    const char *told;      /* the state last published */
    char (*last_exit)[128]; /* per local rank: how its last worker ended */
    int store_lost;        /* the rendezvous is gone: publish nothing more */
    uv_timer_t status_timer; /* publishes a burst of changes once (tell) */
    int prev_group_size;   /* the last round's node count (0: none yet) */
    agent_metrics *metrics;  /* --metrics-port or a health check port: NULL when neither */
    metrics_http *http[2];   /* /metrics; /health on a port of its own */
    char metrics_dir[480];   /* DDPRUN_METRICS_DIR: where the ranks write theirs ("": none) */
} agent;

/* Every change of the agent's state goes through here: the metrics'
 * ddprun_agent_state and the health check follow it. */
static void set_state(agent *a, agent_state st) {
    static const metrics_state as_metrics[] = {
        [ST_RDZV] = METRICS_RENDEZVOUS, [ST_RUNNING] = METRICS_RUNNING,
        [ST_STOPPING] = METRICS_STOPPING, [ST_BARRIER] = METRICS_FINISHED,
        [ST_SHUTDOWN] = METRICS_SHUTDOWN};
    a->state = st;
    metrics_set_state(a->metrics, as_metrics[st]);
}


/* ---- the rendezvous thread ---------------------------------------------- */

static void post(agent *a, ev_kind kind, int rc, rdzv_event why, const rdzv_result *res,
                 const char *err) {
    pthread_mutex_lock(&a->mu);
    if (a->nev < MAX_EVENTS) {
        agent_event *e = &a->evq[a->nev++];
        memset(e, 0, sizeof *e);
        e->kind = kind;
        e->rc = rc;
        e->why = why;
        if (res) e->res = *res;
        e->res.nodes = NULL;
        if (err) snprintf(e->err, sizeof e->err, "%s", err);
    }
    pthread_mutex_unlock(&a->mu);
    uv_async_send(&a->wake);
}


static void *rdzv_thread(void *arg) {
    agent *a = arg;
    for (;;) {
        rdzv_result res;
        char err[512] = "";
        memset(&res, 0, sizeof res);
        double t0 = clock_now_s();
        int rc = rdzv_next(a->rd, &res, err, sizeof err);
        if (rc == 0) metrics_round(a->metrics, clock_now_s() - t0);
        post(a, EV_ROUND, rc, RDZV_EV_NONE, &res, err);
        if (rc) return NULL;
        for (;;) {
            pthread_mutex_lock(&a->mu);
            int barrier = a->cmd_barrier;
            pthread_mutex_unlock(&a->mu);
            if (barrier) {
                rc = rdzv_exit_barrier(a->rd, a->cfg->rdzv.join_timeout);
                post(a, EV_BARRIER, rc, RDZV_EV_NONE, NULL, NULL);
                return NULL;
            }
            rdzv_event ev;
            rc = rdzv_watch(a->rd, 1000, &ev);
            if (rc) {
                rdzv_lost_message(a->rd, rc, err, sizeof err);
                post(a, EV_LOST, rc, RDZV_EV_NONE, NULL, err);
                return NULL;
            }
            if (ev == RDZV_EV_FAILURE || ev == RDZV_EV_MEMBERSHIP) {
                post(a, EV_RESTART, 0, ev, NULL, NULL);
                break;
            }
        }
    }
}

/* ---- workers --------------------------------------------------------------- */

static int console_shown(const agent_config *c, int local_rank) {
    if (!c->local_ranks_filter) return 1;
    for (int i = 0; i < c->n_local_ranks_filter; i++)
        if (c->local_ranks_filter[i] == local_rank) return 1;
    return 0;
}

/* Where one stream of one worker goes: --redirects sends it to its file
 * only, --tee to the file and the console (prefixed, and the lines that
 * match --duplicate-*-filters to the attempt's filtered_*.log too),
 * neither to the console alone. */
static void stream_opts(agent *a, int local_rank, int which, const char *file, char *prefix,
                        const char *dup_file, worker_output_opts *o) {
    const agent_config *c = a->cfg;
    int redirect = stream_for_rank(&c->redirects, local_rank) & which;
    int tee = stream_for_rank(&c->tee, local_rank) & which;
    o->file = redirect || tee ? file : NULL;
    o->console_fd = (redirect && !tee) || !console_shown(c, local_rank)
                        ? -1
                        : (which == STREAM_OUT ? 1 : 2);
    o->prefix = tee ? prefix : NULL;
    o->dup_filters = c->dup_filters[which == STREAM_OUT ? 0 : 1].items;
    o->dup_file = tee ? dup_file : NULL;
}

/* A worker's console prefix: torchrun's template, default
 * "[${role_name}${local_rank}]:". */
static void line_prefix(const agent *a, int local_rank, char *out, size_t len) {
    const agent_config *c = a->cfg;
    worker_prefix_vars v = {.role_name = c->role, .local_rank = local_rank,
                            .rank = a->cur.rank_offset + local_rank, .hostname = a->hostname};
    const char *t = c->log_line_prefix_template ? c->log_line_prefix_template
                                                : "[${role_name}${local_rank}]:";
    worker_output_prefix(t, &v, out, len, NULL, 0);
}

static void on_workers_started(worker_group *g);
static void on_worker_exit(worker_group *g, worker *w);
static void on_group_idle(worker_group *g);
static void tell(agent *a, const char *state);
static void record_event(agent *a, const char *name, const char *node_state, json_t *extra);

/* The ranks of an earlier group wrote their metrics under their old
 * ranks: gone before the new group writes its own. */
static void clear_rank_metrics(agent *a) {
    if (!a->metrics_dir[0]) return;
    DIR *d = opendir(a->metrics_dir);
    struct dirent *e;
    char path[2600];
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "rank_", 5) == 0) {
            snprintf(path, sizeof path, "%s/%s", a->metrics_dir, e->d_name);
            unlink(path);
        }
    if (d) closedir(d);
}

static int start_workers(agent *a) {
    const agent_config *c = a->cfg;
    int n = c->nproc_per_node, rc = 0;
    clear_rank_metrics(a);
    char dir[3072];
    /* Per rank: the worker group opens these files when it spawns. */
    char(*out_file)[3200] = calloc((size_t)n, sizeof *out_file);
    char(*err_file)[3200] = calloc((size_t)n, sizeof *err_file);
    char(*prefix)[256] = calloc((size_t)n, sizeof *prefix);
    char dup_file[2][3200];
    worker_spec *specs = calloc((size_t)n, sizeof *specs);
    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN];
    worker_env_ctx ctx = {.cfg = c, .round = &a->cur, .store_addr = a->store.addr,
                          .store_port = a->store.port, .agent_pid = (int)getpid(),
                          .timer_file = a->watchdog ? a->watchdog_path : NULL,
                          .metrics_dir = a->metrics_dir, .numa = &a->numa};
    if (!specs || !out_file || !err_file || !prefix) rc = -ENOMEM;
    snprintf(dup_file[0], sizeof dup_file[0], "%s/attempt_%d/filtered_stdout.log", a->log_root,
             a->cur.restart_count);
    snprintf(dup_file[1], sizeof dup_file[1], "%s/attempt_%d/filtered_stderr.log", a->log_root,
             a->cur.restart_count);
    for (int i = 0; rc == 0 && i < n; i++) {
        snprintf(dir, sizeof dir, "%s/attempt_%d/%d", a->log_root, a->cur.restart_count, i);
        if ((rc = fs_mkdir_p(dir))) {
            log_error("cannot create the log directory %s: %s", dir, strerror(-rc));
            break;
        }
        snprintf(specs[i].error_file, sizeof specs[i].error_file, "%s/error.json", dir);
        unlink(specs[i].error_file); /* a stale one would be blamed for this attempt */
        snprintf(out_file[i], sizeof out_file[i], "%s/stdout.log", dir);
        snprintf(err_file[i], sizeof err_file[i], "%s/stderr.log", dir);
        line_prefix(a, i, prefix[i], sizeof prefix[i]);
        stream_opts(a, i, STREAM_OUT, out_file[i], prefix[i], dup_file[0], &specs[i].out);
        stream_opts(a, i, STREAM_ERR, err_file[i], prefix[i], dup_file[1], &specs[i].err);
        int nv = worker_env_vars(&ctx, i, specs[i].error_file, vars);
        specs[i].env = worker_env_build(environ, vars, nv);
        specs[i].argv = c->argv;
        specs[i].global_rank = a->cur.rank_offset + i;
        if (!specs[i].env) rc = -ENOMEM;
    }
    if (rc == 0 && !(a->wg = worker_group_new(a->loop, a->exe))) {
        log_error("out of memory starting the workers");
        rc = -ENOMEM;
    }
    if (rc == 0) {
        a->wg->on_started = on_workers_started;
        a->wg->on_exit = on_worker_exit;
        a->wg->on_idle = on_group_idle;
        a->wg->data = a;
        set_state(a, ST_RUNNING); /* before the first exit can be seen */
        a->nfails = 0;
        metrics_group_started(a->metrics, n, a->cur.round, a->cur.world_size,
                              a->cur.group_world_size, a->cur.restart_count);
        char err[512] = "";
        a->group_started = clock_wall_s();
        rc = worker_group_start(a->wg, n, specs, err, sizeof err); /* takes the envs */
        if (rc) log_error("%s", err);
    } else {
        for (int i = 0; specs && i < n; i++) free(specs[i].env);
    }
    free(specs);
    free(out_file);
    free(err_file);
    free(prefix);
    return rc;
}

/* Every worker of the group runs (a large group starts over several turns
 * of the loop). */
static void on_workers_started(worker_group *g) {
    agent *a = g->data;
    const agent_config *c = a->cfg;
    int n = g->n;
    log_info("started %d worker%s on %s: node rank %d of %d, global ranks %d-%d of %d, "
             "restart %d of %d (round %d)",
             n, n == 1 ? "" : "s", a->hostname, a->cur.group_rank, a->cur.group_world_size,
             a->cur.rank_offset, a->cur.rank_offset + n - 1, a->cur.world_size,
             a->cur.restart_count, c->max_restarts, a->cur.round);
    json_t *pids = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(pids, json_integer(g->w[i].pid));
    record_event(a, "ddprun.agent.workers_started", "RUNNING",
                json_pack("{s:i, s:i, s:i, s:o}", "local_world_size", n, "first_global_rank",
                          a->cur.rank_offset, "world_size", a->cur.world_size, "pids", pids));
    tell(a, a->state == ST_RUNNING ? "running" : a->told);
}

/* ---- what the agent tells: `ddprun status` and the event log ----------------- */

/* Publishes this agent's status now (its state: the last one told). */
static void publish_status(agent *a) {
    uv_timer_stop(&a->status_timer);
    if (!a->rd || a->store_lost || !a->told) return;
    const agent_config *c = a->cfg;
    int member = a->cur.group_world_size > 0 && a->state != ST_RDZV;
    node_status st = {.agent_id = rdzv_agent_id(a->rd), .host = a->hostname, .role = c->role,
                      .state = a->told, .pid = (int)getpid(),
                      .node_rank = member ? a->cur.group_rank : -1, .round = a->cur.round,
                      .group_world_size = member ? a->cur.group_world_size : 0,
                      .world_size = member ? a->cur.world_size : 0,
                      .restart_count = a->cur.restart_count, .max_restarts = c->max_restarts,
                      .nproc = c->nproc_per_node, .min_nodes = c->min_nodes,
                      .max_nodes = c->max_nodes, .since = a->state_since, .wg = a->wg,
                      .last_exit = a->last_exit};
    char *json = node_status_json(&st);
    int rc = json ? rdzv_publish_status(a->rd, 0, json) : -ENOMEM;
    if (rc) log_debug("cannot publish this node's status: %s", strerror(-rc));
    free(json);
}

static void on_status_timer(uv_timer_t *t) { publish_status(t->data); }

/* Notes this agent's state for `ddprun status` (see node_status.h). What
 * changes in a burst (the group starting, its workers exiting one after
 * another) goes out once, STATUS_COALESCE_MS after the first change: on
 * etcd each write is a raft commit. */
#define STATUS_COALESCE_MS 500
static void tell(agent *a, const char *state) {
    if (!a->told || strcmp(a->told, state) != 0) a->state_since = clock_wall_s();
    a->told = state;
    if (!uv_is_active((uv_handle_t *)&a->status_timer))
        uv_timer_start(&a->status_timer, on_status_timer, STATUS_COALESCE_MS, 0);
}

/* An agent event: torchrun's rendezvous event fields, plus `extra`'s
 * (taken). */
static void record_event(agent *a, const char *name, const char *node_state, json_t *extra) {
    const agent_config *c = a->cfg;
    char master[300] = "";
    if (a->cur.master_store[0]) snprintf(master, sizeof master, "%s", a->cur.master_store);
    else if (a->cur.group_world_size > 0)
        snprintf(master, sizeof master, "%s:%d", a->store.addr, a->store.port);
    json_t *md = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s, s:i, s:i, s:i}", "run_id",
                           c->rdzv_id, "hostname", a->hostname, "pid", (int)getpid(), "role",
                           c->role, "rdzv_backend", c->rdzv_backend->name, "node_state", node_state,
                           "master_endpoint", master, "rank",
                           a->cur.group_world_size > 0 ? a->cur.group_rank : -1,
                           "round", a->cur.round, "restart_count", a->cur.restart_count);
    if (md && extra) json_object_update(md, extra);
    json_decref(extra);
    if (md) event_log_write(a->events, name, "AGENT", md);
}

static void joining(agent *a) {
    a->joining_since = clock_wall_s();
    tell(a, "rendezvous");
    record_event(a, "ddprun.rendezvous.joining", "INIT", NULL);
}

/* ---- decisions --------------------------------------------------------------- */

static void report_exhausted(agent *a, int restarts);

static void finish(agent *a, int code) {
    /* The summary comes last, once every worker has stopped, so that it
     * is not lost among what the stopping workers and the agent say. */
    if (a->spent_restarts) report_exhausted(a, a->spent_restarts);
    const char *how = code == 0 ? "succeeded" : code >= 128 ? "stopped" : "failed";
    tell(a, how);
    publish_status(a); /* the last word, at once */
    record_event(a, "ddprun.agent.shutdown", code == 0 ? "SUCCEEDED" : "FAILED",
                json_pack("{s:i, s:s}", "exit_code", code, "outcome", how));
    a->exit_code = code;
    uv_stop(a->loop);
}

static const char *program_name(const agent_config *c) {
    for (int i = 0; c->argv[i]; i++) {
        const char *s = c->argv[i];
        if (s[0] != '-' && strcmp(s, "python3") != 0 && !strstr(s, "python")) return s;
    }
    return c->argv[0];
}

/* Restarts are spent: print torchrun's summary from every node's failures
 * of the last round that failed. */
static void report_exhausted(agent *a, int restarts) {
    log_error("the worker group failed %d time%s; --max-restarts=%d is spent", restarts,
              restarts == 1 ? "" : "s", a->cfg->max_restarts);
    char *all = rdzv_failures(a->rd, 0);
    failure *fs = calloc(MAX_FAILURES, sizeof *fs); /* too large for the stack */
    if (!fs) {
        free(all);
        return;
    }
    int n = 0, last_round = -1;
    for (char *line = all ? strtok(all, "\n") : NULL; line && n < MAX_FAILURES;
         line = strtok(NULL, "\n")) {
        if (failure_from_json(line, &fs[n]) != 0) continue;
        if (fs[n].round > last_round) last_round = fs[n].round;
        n++;
    }
    free(all);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (fs[i].round == last_round) fs[k++] = fs[i];
        else failure_free(&fs[i]);
    }
    if (k == 0) /* the store had none: fall back to what this node saw */
        for (int i = 0; i < a->nfails; i++) fs[k++] = a->fails[i], a->fails[i].message = NULL,
                                             a->fails[i].traceback = NULL;
    failure_print_summary(stderr, program_name(a->cfg), fs, k);
    for (int i = 0; i < k; i++) failure_free(&fs[i]);
    free(fs);
}

static void stop_workers(agent *a, int sig) {
    if (a->wg && !a->wg->idle) worker_group_stop(a->wg, sig, a->cfg->shutdown_timeout);
}

static void round_formed(agent *a) {
    const rdzv_result *r = &a->cur;
    record_event(a, "ddprun.rendezvous.round_formed", "RUNNING",
                json_pack("{s:i, s:i, s:f}", "group_world_size", r->group_world_size,
                          "world_size", r->world_size, "duration_s",
                          clock_wall_s() - a->joining_since));
    if (a->prev_group_size && a->prev_group_size != r->group_world_size)
        record_event(a, "ddprun.agent.scale", "RUNNING",
                    json_pack("{s:i, s:i}", "from_nodes", a->prev_group_size, "to_nodes",
                              r->group_world_size));
    a->prev_group_size = r->group_world_size;
}

static void on_round(agent *a, const agent_event *e) {
    if (e->rc == -ECANCELED) {
        a->spent_restarts = e->res.restart_count > 0 ? e->res.restart_count : 1;
        /* the workers still stopping get their grace period, then the agent ends */
        set_state(a, ST_SHUTDOWN);
        a->shutdown_signal = 0;
        a->exit_code = 1;
        if (!a->wg || a->wg->idle) finish(a, 1);
        return;
    }
    if (e->rc == RDZV_NOT_NEEDED) { /* a spare whose job is done: nothing failed */
        log_info("%s", e->err);
        set_state(a, ST_SHUTDOWN);
        finish(a, 0);
        return;
    }
    if (e->rc) {
        log_error("%s", e->err);
        stop_workers(a, SIGTERM);
        set_state(a, ST_SHUTDOWN);
        a->shutdown_signal = 0;
        a->exit_code = 1;
        if (!a->wg || a->wg->idle) finish(a, 1);
        return;
    }
    if (a->wg && !a->wg->idle) { /* the old group is still stopping */
        a->pending = e->res;
        a->have_pending = 1;
        return;
    }
    a->cur = e->res;
    round_formed(a);
    if (start_workers(a) != 0) finish(a, 1);
}

static void on_restart(agent *a, rdzv_event why) {
    if (a->state != ST_RUNNING) return; /* already stopping for our own failure */
    log_info("%s; stopping the local workers and re-forming the group",
             why == RDZV_EV_FAILURE ? "a worker failed on another node"
                                    : "the group's membership changed");
    set_state(a, ST_STOPPING);
    record_event(a, "ddprun.agent.restart", "RUNNING",
                json_pack("{s:s}", "why", why == RDZV_EV_FAILURE ? "a worker failed on another node"
                                                                 : "the membership changed"));
    tell(a, "stopping");
    stop_workers(a, SIGTERM);
}

static void on_barrier(agent *a, int rc) {
    if (rc == -ECANCELED)
        log_warn("another node failed after this node's workers finished; leaving anyway");
    else if (rc)
        log_warn("exit barrier: not every node finished in time (%s); leaving anyway",
                 strerror(-rc));
    finish(a, 0);
}

static void on_wake(uv_async_t *h) {
    agent *a = h->data;
    agent_event evs[MAX_EVENTS];
    pthread_mutex_lock(&a->mu);
    int n = a->nev;
    memcpy(evs, a->evq, (size_t)n * sizeof evs[0]);
    a->nev = 0;
    pthread_mutex_unlock(&a->mu);
    for (int i = 0; i < n; i++) {
        if (a->state == ST_SHUTDOWN && evs[i].kind != EV_ROUND) continue;
        switch (evs[i].kind) {
        case EV_ROUND:
            if (a->state != ST_SHUTDOWN) on_round(a, &evs[i]);
            break;
        case EV_RESTART: on_restart(a, evs[i].why); break;
        case EV_BARRIER: on_barrier(a, evs[i].rc); break;
        case EV_LOST:
            log_error("%s", evs[i].err);
            a->store_lost = 1;
            set_state(a, ST_SHUTDOWN);
            a->exit_code = 1;
            stop_workers(a, SIGTERM);
            if (!a->wg || a->wg->idle) finish(a, 1);
            break;
        }
    }
}

/* --event-log-handler console: the worker's end as torchrun's event. */
static void record_worker_event(const agent *a, const worker *w, const char *state,
                                const char *raw_error) {
    const agent_config *c = a->cfg;
    worker_event e = {.run_id = c->rdzv_id, .role = c->role, .hostname = a->hostname,
                      .rdzv_backend = c->rdzv_backend->name, .state = state,
                      .global_rank = w->global_rank, .group_rank = a->cur.group_rank,
                      .pid = w->pid, .agent_restarts = a->cur.restart_count,
                      .exit_code = w->term_signal ? -w->term_signal : w->exit_status,
                      .run_time_s = w->exit_time - a->group_started, .raw_error = raw_error};
    event_worker_status(a->events, &e);
}

static void note_exit(agent *a, const worker *w) {
    if (!a->last_exit || w->local_rank >= a->cfg->nproc_per_node) return;
    char *s = a->last_exit[w->local_rank];
    if (w->term_signal)
        snprintf(s, sizeof a->last_exit[0], "signal SIG%s (round %d)", sigabbrev_np(w->term_signal),
                 a->cur.round);
    else
        snprintf(s, sizeof a->last_exit[0], "exit code %d (round %d)", (int)w->exit_status,
                 a->cur.round);
}

static void on_worker_exit(worker_group *g, worker *w) {
    agent *a = g->data;
    int failed = w->term_signal != 0 || w->exit_status != 0;
    note_exit(a, w);
    metrics_worker_exited(a->metrics, w->local_rank,
                          a->state != ST_RUNNING ? METRICS_W_TERMINATED
                          : failed               ? METRICS_W_FAILED
                                                 : METRICS_W_SUCCEEDED);
    if (!failed || a->state != ST_RUNNING) {
        record_worker_event(a, w, a->state == ST_RUNNING ? "SUCCEEDED" : "TERMINATED", NULL);
        tell(a, a->told ? a->told : "running");
        return;
    }
    failure *f = &a->fails[a->nfails < MAX_FAILURES ? a->nfails++ : MAX_FAILURES - 1];
    failure_from_exit(f, a->hostname, w->global_rank, w->local_rank, w->pid, w->exit_status,
                      w->term_signal, w->exit_time, w->error_file, a->cur.round);
    char scope[256];
    int reaped = file_timer_take_reaped(a->watchdog, scope, sizeof scope) == w->pid;
    metrics_worker_failed(a->metrics, f->exitcode, reaped);
    if (reaped) {
        char *why = NULL;
        if (asprintf(&why, "%s: stopped by the worker watchdog, '%s' ran past its deadline",
                     f->message, scope) > 0) {
            free(f->message);
            f->message = why;
        }
    }
    record_worker_event(a, w, "FAILED", f->message);
    log_error("local rank %d (rank %d, pid %d) failed: %s; stopping the group", w->local_rank,
              w->global_rank, w->pid, f->message);
    set_state(a, ST_STOPPING);
    stop_workers(a, SIGTERM);
    record_event(a, "ddprun.agent.restart", "FAILED",
                json_pack("{s:s, s:i, s:i}", "why", f->message, "failed_rank", w->global_rank,
                          "failed_pid", w->pid));
    tell(a, "stopping");
    char *json = failure_to_json(f);
    int rc = json ? rdzv_record_failure(a->rd, 0, json) : -ENOMEM;
    free(json);
    if (rc == 0) rc = rdzv_end_round(a->rd, 0, RDZV_EV_FAILURE);
    if (rc) log_error("cannot tell the other nodes about the failure: %s", strerror(-rc));
}

static void on_group_idle(worker_group *g) {
    agent *a = g->data;
    if (a->state == ST_SHUTDOWN) {
        finish(a, a->shutdown_signal ? 128 + a->shutdown_signal : a->exit_code);
        return;
    }
    if (a->state == ST_RUNNING) { /* every worker exited 0 */
        if (a->cur.group_world_size > 1)
            log_info("all %d local workers finished; waiting for the other nodes", g->n);
        set_state(a, ST_BARRIER);
        tell(a, "finishing");
        pthread_mutex_lock(&a->mu);
        a->cmd_barrier = 1;
        pthread_mutex_unlock(&a->mu);
        rdzv_poke(a->rd, 0);
        return;
    }
    if (a->state != ST_STOPPING) return;
    worker_group_free(a->wg);
    a->wg = NULL;
    set_state(a, ST_RDZV);
    joining(a);
    if (a->have_pending) {
        a->have_pending = 0;
        a->cur = a->pending;
        round_formed(a);
        if (start_workers(a) != 0) finish(a, 1);
    }
}

static void on_signal(uv_signal_t *s, int signum) {
    agent *a = s->data;
    if (a->state == ST_SHUTDOWN && a->shutdown_signal) {
        log_warn("SIG%s again: killing the workers now", sigabbrev_np(signum));
        stop_workers(a, SIGKILL);
        return;
    }
    log_info("SIG%s received: forwarding it to the workers (SIGKILL after %g s)",
             sigabbrev_np(signum), a->cfg->shutdown_timeout);
    set_state(a, ST_SHUTDOWN);
    a->shutdown_signal = signum;
    if (!a->wg || a->wg->idle) {
        finish(a, 128 + signum);
        return;
    }
    stop_workers(a, signum);
}

/* ---- run ------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* Without --log-dir nobody asked for the files (the error files have been
 * read by then): leave nothing behind in /tmp. */
static void remove_tmp_root(agent *a) {
    if (a->tmp_root[0]) nftw(a->tmp_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int make_log_root(agent *a) {
    const agent_config *c = a->cfg;
    if (c->log_dir) {
        snprintf(a->log_root, sizeof a->log_root, "%s/%s", c->log_dir, c->rdzv_id);
    } else {
        char tmpl[256];
        snprintf(tmpl, sizeof tmpl, "/tmp/ddprun_%d_XXXXXX", (int)getpid());
        if (!mkdtemp(tmpl)) return -errno;
        snprintf(a->tmp_root, sizeof a->tmp_root, "%s", tmpl);
        snprintf(a->log_root, sizeof a->log_root, "%s/%s", tmpl, c->rdzv_id);
    }
    int rc = fs_mkdir_p(a->log_root);
    if (rc) log_error("cannot create the log directory %s: %s", a->log_root, strerror(-rc));
    return rc;
}

static int open_event_log(agent *a) {
    char path[2200], err[2400];
    snprintf(path, sizeof path, "%s/events.jsonl", a->log_root);
    a->events = event_log_open(path, a->cfg->event_log_console, err, sizeof err);
    if (!a->events) {
        log_error("%s", err);
        return -EIO;
    }
    a->last_exit = calloc((size_t)a->cfg->nproc_per_node, sizeof *a->last_exit);
    return a->last_exit ? 0 : -ENOMEM;
}

/* The rendezvous renewed the heartbeat (on its thread). */
static void on_beat(void *ctx, int64_t now_ms) {
    metrics_heartbeat(((agent *)ctx)->metrics, (double)now_ms / 1000);
}

/* etcd-v3: node rank 0's own store serves the workers; what workers of an
 * earlier round with the same restart count left there goes before the
 * rendezvous lets the other nodes start theirs (on its thread; the c10d
 * rendezvous does this for its store itself). */
static int clear_own_store(void *ctx, int restart_count) {
    agent *a = ctx;
    rdzv_kv *kv = NULL;
    int rc = rdzv_kv_store_open("127.0.0.1", a->store.port, 2000, &kv);
    if (rc == 0) rc = rdzv_clear_worker_keys(kv, restart_count);
    if (rc) log_warn("cannot clear the workers' keys of an earlier round: %s", strerror(-rc));
    kv_close(kv);
    return 0; /* the round goes on: a fresh store has nothing to clear */
}

static int open_rendezvous(agent *a) {
    const agent_config *c = a->cfg;
    unsigned flags = c->rdzv_backend->flags;
    int fixed = (flags & RDZV_FIXED_RANKS) != 0, apart = !(flags & RDZV_IN_JOB_STORE);
    char own[300];
    snprintf(own, sizeof own, "%s:%d", a->store.addr, a->store.port);
    /* A cluster member that does not answer within half a heartbeat is
     * passed over before the leases notice. */
    int member_ms = (int)(c->rdzv.keep_alive_interval * 500);
    rdzv_opts o = {.backend = c->rdzv_backend,
                   .where = agent_config_rdzv_endpoint(c, (int)(c->rdzv.join_timeout * 1000),
                                                       member_ms > 1000 ? member_ms : 1000),
                   .key_prefix = c->rdzv.key_prefix, .store_addr = apart ? own : NULL,
                   .run_id = c->rdzv_id, .min_nodes = c->min_nodes, .max_nodes = c->max_nodes,
                   .node_rank = fixed && c->node_rank < 0 ? 0 : c->node_rank,
                   .strict_ranks = fixed,
                   .nproc = c->nproc_per_node, .hostname = a->hostname,
                   .join_timeout = c->rdzv.join_timeout,
                   .last_call_timeout = c->rdzv.last_call_timeout,
                   .heartbeat = c->rdzv.keep_alive_interval, .max_restarts = c->max_restarts,
                   .on_beat = on_beat,
                   .clear_own_store = apart && a->store.host ? clear_own_store : NULL, .ctx = a};
    if (!apart) { /* the job's store: this agent's own, or where it was found */
        o.where.host = a->store.host ? "127.0.0.1" : a->store.addr;
        o.where.port = a->store.port;
    }
    char err[512];
    int rc = rdzv_open(&o, &a->rd, err, sizeof err);
    if (rc) log_error("%s", err);
    return rc;
}

/* --numa-binding: the CPUs of every local rank, chosen once (the machine
 * does not change between restarts) and said. */
static int plan_numa_binding(agent *a) {
    const agent_config *c = a->cfg;
    if (c->numa_binding == NUMA_NONE) return 0;
    int n = c->nproc_per_node, *gpu = calloc((size_t)n, sizeof *gpu);
    if (!gpu) return -ENOMEM;
    for (int i = 0; i < n; i++) { /* the GPU CUDA numbers as local rank i, if known */
        char g[64], *end;
        long v = strtol(worker_env_gpu(c->env.cuda_visible_devices, i, g, sizeof g), &end, 10);
        gpu[i] = *end || v < 0 ? -1 : (int)v;
    }
    char err[512];
    int rc = numa_plan_make(c->numa_binding, n, gpu, &a->numa, err, sizeof err);
    free(gpu);
    if (rc) {
        log_error("%s", err);
        return rc;
    }
    for (int i = 0; i < n; i++)
        log_info("--numa-binding %s: local rank %d on CPUs %s (%s)",
                 numa_mode_name(c->numa_binding), i, a->numa.cpus[i], a->numa.near[i]);
    if (!a->numa.this_system)
        log_warn("--numa-binding: the topology read is not this machine's (HWLOC_SYNTHETIC or "
                 "HWLOC_XMLFILE is set): the plan above is not applied");
    return 0;
}

/* The watchdog may signal a process only if it is one of this agent's
 * workers or something it started (its process group is the worker's). */
static int watchdog_owner(void *ctx, pid_t pid, char *name, size_t len) {
    agent *a = ctx;
    pid_t pg = getpgid(pid);
    for (int i = 0; a->wg && i < a->wg->n; i++) {
        const worker *w = &a->wg->w[i];
        if (w->running && w->pid > 0 && (pid == w->pid || pg == w->pid)) {
            snprintf(name, len, "local rank %d (rank %d, pid %d)", w->local_rank, w->global_rank,
                     (int)pid);
            return 1;
        }
    }
    return 0;
}

/* torchrun's TORCHELASTIC_ENABLE_FILE_TIMER=1: serve torch's FileTimer
 * requests on TORCHELASTIC_TIMER_FILE (or a new FIFO), which the workers
 * are told. */
static int start_watchdog(agent *a) {
    const agent_env *env = &a->cfg->env;
    if (!env->file_timer) return 0;
    if (env->timer_file)
        snprintf(a->watchdog_path, sizeof a->watchdog_path, "%s", env->timer_file);
    else
        snprintf(a->watchdog_path, sizeof a->watchdog_path, "%s/watchdog_timer_%d_%ld",
                 env->tmpdir, (int)getpid(), (long)time(NULL));
    char err[1300];
    a->watchdog = file_timer_start(a->loop, a->watchdog_path, watchdog_owner, a, err, sizeof err);
    if (!a->watchdog) {
        log_error("TORCHELASTIC_ENABLE_FILE_TIMER=1: %s", err);
        return -EIO;
    }
    log_info("worker watchdog: serving torch's FileTimer requests on %s", a->watchdog_path);
    return 0;
}


/* --metrics-port and the health check port (--health-check-port or
 * torchrun's TORCHELASTIC_HEALTH_CHECK_PORT): the registry, the ranks'
 * directory, and one server, or two when the ports differ. */
static int start_metrics(agent *a) {
    const agent_config *c = a->cfg;
    if (c->metrics_port < 0 && c->health_port < 0) return 0;
    if (c->metrics_port >= 0) {
        if (snprintf(a->metrics_dir, sizeof a->metrics_dir, "%s/metrics", a->log_root) >=
            (int)sizeof a->metrics_dir) {
            log_error("--metrics-port: the metrics directory under %s would be longer than %zu "
                      "characters; choose a shorter --log-dir", a->log_root,
                      sizeof a->metrics_dir - 1);
            return -ENAMETOOLONG;
        }
        int rc = fs_mkdir_p(a->metrics_dir);
        if (rc) {
            log_error("cannot create the metrics directory %s: %s", a->metrics_dir,
                      strerror(-rc));
            return rc;
        }
    }
    metrics_opts mo = {.run_id = c->rdzv_id, .role = c->role, .node = a->hostname,
                       .rank_dir = a->metrics_dir[0] ? a->metrics_dir : NULL,
                       .heartbeat_interval = c->rdzv.keep_alive_interval,
                       .max_restarts = c->max_restarts};
    if (!(a->metrics = metrics_new(&mo))) return -ENOMEM;
    int shared = c->metrics_port > 0 && c->health_port == c->metrics_port;
    /* A port given without a host listens on loopback only: anyone who can
     * reach the port sees the job's state, so every interface (0.0.0.0 or
     * [::]) is something to ask for. The default lives here alone: the
     * launcher leaves the host NULL, and metrics_http takes what it is given. */
    const char *loopback = "127.0.0.1";
    metrics_http_opts o[2] = {
        {.setting = shared ? "--metrics-port (also the health check port)" : "--metrics-port",
         .host = c->metrics_host ? c->metrics_host : loopback, .port = c->metrics_port,
         .metrics = 1, .health = shared},
        {.setting = c->health_setting[0] ? c->health_setting : "--health-check-port",
         .host = c->health_host ? c->health_host : loopback, .port = c->health_port,
         .health = 1}};
    for (int i = 0; i < 2; i++) {
        if (o[i].port < 0 || (i == 1 && shared)) continue;
        char err[512];
        int port = 0, rc = metrics_http_start(&o[i], a->metrics, &a->http[i], &port, err,
                                              sizeof err);
        if (rc) {
            log_error("%s", err);
            return rc;
        }
        int v6 = strchr(o[i].host, ':') != NULL; /* a URL brackets an IPv6 address */
        log_info("%s: serving http://%s%s%s:%d/%s", o[i].setting, v6 ? "[" : "", o[i].host,
                 v6 ? "]" : "", port, i == 0 ? "metrics" : "health");
    }
    return 0;
}

int agent_run(const agent_config *cfg, const char *self_exe) {
    agent *a = calloc(1, sizeof *a);
    if (!a) return 1;
    a->cfg = cfg;
    a->exe = self_exe;
    a->loop = uv_default_loop();
    pthread_mutex_init(&a->mu, NULL);
    /* --local-addr names this node as the others know it: in the
     * rendezvous (host order, ranks) and in failure reports. */
    if (cfg->local_addr)
        snprintf(a->hostname, sizeof a->hostname, "%s", cfg->local_addr);
    else
        gethostname(a->hostname, sizeof a->hostname);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < cfg->nsignals; i++) {
        uv_signal_init(a->loop, &a->sigs[i]);
        a->sigs[i].data = a;
        uv_signal_start(&a->sigs[i], on_signal, cfg->signals[i]);
    }
    uv_async_init(a->loop, &a->wake, on_wake);
    a->wake.data = a;
    uv_timer_init(a->loop, &a->status_timer);
    a->status_timer.data = a;
    int code = 1;
    char why[256];
    fdlimit_raise(); /* the workers' pipes and logs, and the store's connections */
    if (worker_group_fits(cfg->nproc_per_node, why, sizeof why) != 0) {
        log_error("--nproc-per-node %d: %s", cfg->nproc_per_node, why);
        goto out;
    }
    if (make_log_root(a) || open_event_log(a) || start_metrics(a) || plan_numa_binding(a) ||
        start_watchdog(a) || agent_store_setup(cfg, a->hostname, &a->store) ||
        open_rendezvous(a))
        goto out;
    if (cfg->nproc_per_node > 1 && !cfg->env.omp_num_threads_set)
        log_info("setting OMP_NUM_THREADS=1 for each worker (set it yourself to tune)");
    set_state(a, ST_RDZV);
    joining(a);
    pthread_create(&a->rthread, NULL, rdzv_thread, a);
    a->rthread_started = 1;
    uv_run(a->loop, UV_RUN_DEFAULT);
    code = a->exit_code;
    if (code < 128) /* not when a signal asked us to stop */
        agent_store_linger(&a->store, cfg->rdzv_id, rdzv_agent_id(a->rd));
out:
    fflush(stdout);
    metrics_http_stop(a->http[0]);
    metrics_http_stop(a->http[1]);
    remove_tmp_root(a);
    event_log_close(a->events);
    free(a->last_exit);
    numa_plan_free(&a->numa);
    file_timer_stop(a->watchdog);
    /* The rendezvous thread may be blocked in the store: the process exit
     * ends it. The embedded store goes with the process. */
    return code;
}
