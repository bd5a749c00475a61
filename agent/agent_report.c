/* What the agent tells (see agent_report.h): its status for `ddprun
 * status`, its events for the event log, and torchrun's failure summary. */
#include "agent/agent_report.h"

#include <errno.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/events.h"
#include "agent/node_status.h"
#include "common/clock.h"
#include "common/log.h"

struct agent_report {
    agent_report_opts o;
    rdzv *rd;                  /* where the status goes (NULL: not yet) */
    agent_speed *speed;        /* the straggler marks (NULL: none) */
    event_log *events;
    rdzv_result cur;           /* the round (its nodes are not kept) */
    int in_round, running;     /* the node's standing in it */
    const worker_group *wg;    /* the workers, or NULL */
    double group_started;      /* wall clock, s: when they started */
    double joining_since;      /* wall clock, s: when the node began to join the round */
    const char *told;          /* the state last published (a literal) */
    double state_since;        /* wall clock, s: when it changed */
    char (*last_exit)[128];    /* per local rank: how its last worker ended */
    int store_lost;            /* the rendezvous is gone: nothing more is published */
    uv_timer_t coalesce;       /* publishes a burst of changes once */
    uv_timer_t refresh;        /* and again every 10 s while the workers run */
    int open_handles;          /* r is freed when both are closed */
    _Atomic int gen;           /* bumped by each publication from the loop */
};

/* While the workers run, the status (its goodput, the workers' standing)
 * is published again every STATUS_REFRESH_MS, off the loop. */
#define STATUS_REFRESH_MS 10000
static void on_refresh(uv_timer_t *t);

int agent_report_start(uv_loop_t *loop, const agent_report_opts *o, agent_report **out) {
    agent_report *r = calloc(1, sizeof *r);
    if (!r || !(r->last_exit = calloc((size_t)o->cfg->nproc_per_node, sizeof *r->last_exit))) {
        free(r);
        log_error("cannot set up the agent: out of memory");
        return -ENOMEM;
    }
    r->o = *o;
    char path[2200], err[2400];
    snprintf(path, sizeof path, "%s/events.jsonl", o->log_root);
    if (!(r->events = event_log_open(path, o->cfg->event_log_console, err, sizeof err))) {
        log_error("%s", err);
        free(r->last_exit);
        free(r);
        return -EIO;
    }
    uv_timer_init(loop, &r->coalesce);
    uv_timer_init(loop, &r->refresh);
    r->coalesce.data = r->refresh.data = r;
    r->open_handles = 2;
    uv_timer_start(&r->refresh, on_refresh, STATUS_REFRESH_MS, STATUS_REFRESH_MS);
    *out = r;
    return 0;
}

void agent_report_rendezvous(agent_report *r, rdzv *rd) { r->rd = rd; }
void agent_report_speed(agent_report *r, agent_speed *speed) { r->speed = speed; }

void agent_report_round(agent_report *r, const rdzv_result *cur) {
    r->cur = *cur;
    r->cur.nodes = NULL;
}

void agent_report_standing(agent_report *r, int in_round, int running) {
    r->in_round = in_round;
    r->running = running;
}

void agent_report_group(agent_report *r, const worker_group *wg, double started) {
    r->wg = wg;
    r->group_started = started;
}

void agent_report_store_lost(agent_report *r) { r->store_lost = 1; }

/* This agent's status (its state: the last one told), as JSON (malloc'd). */
static char *status_json(agent_report *r) {
    const agent_config *c = r->o.cfg;
    int member = r->cur.group_world_size > 0 && r->in_round;
    goodput_view gp;
    agent_goodput_view(r->o.gp, &gp);
    node_status st = {.agent_id = rdzv_agent_id(r->rd), .host = r->o.hostname, .role = c->role,
                      .state = r->told, .pid = (int)getpid(),
                      .node_rank = member ? r->cur.group_rank : -1, .round = r->cur.round,
                      .group_world_size = member ? r->cur.group_world_size : 0,
                      .world_size = member ? r->cur.world_size : 0,
                      .restart_count = r->cur.restart_count, .max_restarts = c->max_restarts,
                      .nproc = c->nproc_per_node, .min_nodes = c->min_nodes,
                      .max_nodes = c->max_nodes, .since = r->state_since, .wg = r->wg,
                      .last_exit = r->last_exit,
                      .slow = r->speed ? agent_speed_marks(r->speed) : NULL, .goodput = &gp};
    return node_status_json(&st);
}

void agent_report_publish(agent_report *r) {
    uv_timer_stop(&r->coalesce);
    if (!r->rd || r->store_lost || !r->told) return;
    atomic_fetch_add(&r->gen, 1); /* a refresh still out is older: dropped */
    char *json = status_json(r);
    int rc = json ? rdzv_publish_status(r->rd, 0, json) : -ENOMEM;
    if (rc) log_debug("cannot publish this node's status: %s", strerror(-rc));
    free(json);
}

static void on_coalesced(uv_timer_t *t) { agent_report_publish(t->data); }

typedef struct {
    agent_report *r;
    int gen; /* r->gen when it was made */
    char *json;
} refresh;

static void publish_aside(void *ctx, void *arg) {
    (void)ctx;
    refresh *f = arg;
    agent_report *r = f->r;
    if (atomic_load(&r->gen) != f->gen) return; /* the loop published since */
    int rc = rdzv_publish_status(r->rd, r->o.side_conn, f->json);
    if (rc) log_debug("cannot publish this node's status: %s", strerror(-rc));
}

static void published_aside(void *ctx, void *arg) {
    (void)ctx;
    refresh *f = arg;
    free(f->json);
    free(f);
}

static void on_refresh(uv_timer_t *t) {
    agent_report *r = t->data;
    if (!r->rd || r->store_lost || !r->told || !r->running) return;
    refresh *f = malloc(sizeof *f);
    if (!f) return;
    f->r = r;
    f->gen = atomic_load(&r->gen);
    f->json = status_json(r);
    if (!f->json || side_calls_run(r->o.side, publish_aside, published_aside, f) != 0)
        published_aside(NULL, f);
}

/* Notes this agent's state for `ddprun status` (see node_status.h). What
 * changes in a burst (the group starting, its workers exiting one after
 * another) goes out once, STATUS_COALESCE_MS after the first change: on
 * etcd each write is a raft commit. */
#define STATUS_COALESCE_MS 500
void agent_report_tell(agent_report *r, const char *state) {
    if (!r->told || strcmp(r->told, state) != 0) r->state_since = clock_wall_s();
    r->told = state;
    if (!uv_is_active((uv_handle_t *)&r->coalesce))
        uv_timer_start(&r->coalesce, on_coalesced, STATUS_COALESCE_MS, 0);
}

void agent_report_again(agent_report *r) { agent_report_tell(r, r->told ? r->told : "running"); }

const char *agent_report_told(const agent_report *r) { return r->told; }

void agent_report_event(agent_report *r, const char *name, const char *node_state,
                        json_t *extra) {
    const agent_config *c = r->o.cfg;
    char master[300] = "";
    if (r->cur.master_store[0]) snprintf(master, sizeof master, "%s", r->cur.master_store);
    else if (r->cur.group_world_size > 0)
        snprintf(master, sizeof master, "%s:%d", r->o.store->addr, r->o.store->port);
    json_t *md = json_pack("{s:s, s:s, s:i, s:s, s:s, s:s, s:s, s:i, s:i, s:i}", "run_id",
                           c->rdzv_id, "hostname", r->o.hostname, "pid", (int)getpid(), "role",
                           c->role, "rdzv_backend", c->rdzv_backend->name, "node_state", node_state,
                           "master_endpoint", master, "rank",
                           r->cur.group_world_size > 0 ? r->cur.group_rank : -1,
                           "round", r->cur.round, "restart_count", r->cur.restart_count);
    if (md && extra) json_object_update(md, extra);
    json_decref(extra);
    if (md) event_log_write(r->events, name, "AGENT", md);
}

void agent_report_joining(agent_report *r) {
    r->joining_since = clock_wall_s();
    agent_report_tell(r, "rendezvous");
    agent_report_event(r, "ddprun.rendezvous.joining", "INIT", NULL);
}

double agent_report_joining_since(const agent_report *r) { return r->joining_since; }

static const char *program_name(const agent_config *c) {
    for (int i = 0; c->argv[i]; i++) {
        const char *s = c->argv[i];
        if (s[0] != '-' && strcmp(s, "python3") != 0 && !strstr(s, "python")) return s;
    }
    return c->argv[0];
}

/* How many failures the summary reads. */
#define SUMMARY_MAX 256

/* Restarts are spent: print torchrun's summary from every node's failures
 * of the last round that failed. */
void agent_report_exhausted(agent_report *r, int restarts, failure *own, int nown) {
    log_error("the worker group failed %d time%s; --max-restarts=%d is spent", restarts,
              restarts == 1 ? "" : "s", r->o.cfg->max_restarts);
    char *all = rdzv_failures(r->rd, 0);
    failure *fs = calloc(SUMMARY_MAX, sizeof *fs); /* too large for the stack */
    if (!fs) {
        free(all);
        return;
    }
    int n = 0, last_round = -1;
    for (char *line = all ? strtok(all, "\n") : NULL; line && n < SUMMARY_MAX;
         line = strtok(NULL, "\n")) {
        if (failure_from_json(line, &fs[n]) != 0) continue;
        if (fs[n].round > last_round) last_round = fs[n].round;
        n++;
    }
    free(all);
    /* The last round's, one per rank: where two nodes recorded one rank
     * (its own, and another that found the others had waited for it), the
     * one that says it hung */
    int k = 0;
    for (int i = 0; i < n; i++) {
        int same = -1;
        for (int j = 0; j < k && same < 0; j++)
            if (fs[j].rank == fs[i].rank) same = j;
        if (fs[i].round != last_round) {
            failure_free(&fs[i]);
        } else if (same < 0) {
            fs[k++] = fs[i];
        } else if (fs[i].hung && !fs[same].hung) {
            failure_free(&fs[same]);
            fs[same] = fs[i];
        } else {
            failure_free(&fs[i]);
        }
    }
    if (k == 0) /* the store had none: fall back to what this node saw */
        for (int i = 0; i < nown && k < SUMMARY_MAX; i++)
            fs[k++] = own[i], own[i].message = NULL, own[i].traceback = NULL;
    failure_print_summary(stderr, program_name(r->o.cfg), fs, k);
    for (int i = 0; i < k; i++) failure_free(&fs[i]);
    free(fs);
}

/* --event-log-handler console: the worker's end as torchrun's event. */
void agent_report_worker_event(agent_report *r, const worker *w, const char *state,
                               const char *raw_error) {
    const agent_config *c = r->o.cfg;
    worker_event e = {.run_id = c->rdzv_id, .role = c->role, .hostname = r->o.hostname,
                      .rdzv_backend = c->rdzv_backend->name, .state = state,
                      .global_rank = w->global_rank, .group_rank = r->cur.group_rank,
                      .pid = w->pid, .agent_restarts = r->cur.restart_count,
                      .exit_code = w->term_signal ? -w->term_signal : w->exit_status,
                      .run_time_s = w->exit_time - r->group_started, .raw_error = raw_error};
    event_worker_status(r->events, &e);
}

void agent_report_note_exit(agent_report *r, const worker *w) {
    if (w->local_rank < 0 || w->local_rank >= r->o.cfg->nproc_per_node) return;
    char *s = r->last_exit[w->local_rank];
    if (w->term_signal)
        snprintf(s, sizeof r->last_exit[0], "signal SIG%s (round %d)", sigabbrev_np(w->term_signal),
                 r->cur.round);
    else
        snprintf(s, sizeof r->last_exit[0], "exit code %d (round %d)", (int)w->exit_status,
                 r->cur.round);
}

static void on_closed(uv_handle_t *h) {
    agent_report *r = h->data;
    if (--r->open_handles == 0) free(r);
}

void agent_report_stop(agent_report *r) {
    if (!r) return;
    event_log_close(r->events);
    r->events = NULL;
    free(r->last_exit);
    r->last_exit = NULL;
    uv_close((uv_handle_t *)&r->coalesce, on_closed);
    uv_close((uv_handle_t *)&r->refresh, on_closed);
}
