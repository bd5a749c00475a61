/* What the agent tells (see agent_internal.h): its status for `ddprun
 * status`, its events for the event log, and torchrun's failure summary. */
#include "agent/agent_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/node_status.h"
#include "common/clock.h"
#include "common/log.h"

/* This agent's status (its state: the last one told), as JSON (malloc'd). */
static char *status_json(agent *a) {
    const agent_config *c = a->cfg;
    int member = a->cur.group_world_size > 0 && a->state != ST_RDZV;
    goodput_view gp;
    agent_goodput_view(a->gp, &gp);
    node_status st = {.agent_id = rdzv_agent_id(a->rd), .host = a->hostname, .role = c->role,
                      .state = a->told, .pid = (int)getpid(),
                      .node_rank = member ? a->cur.group_rank : -1, .round = a->cur.round,
                      .group_world_size = member ? a->cur.group_world_size : 0,
                      .world_size = member ? a->cur.world_size : 0,
                      .restart_count = a->cur.restart_count, .max_restarts = c->max_restarts,
                      .nproc = c->nproc_per_node, .min_nodes = c->min_nodes,
                      .max_nodes = c->max_nodes, .since = a->state_since, .wg = a->wg,
                      .last_exit = a->last_exit, .slow = agent_speed_marks(a->speed), .goodput = &gp};
    return node_status_json(&st);
}

void agent_publish_status(agent *a) {
    uv_timer_stop(&a->status_timer);
    if (!a->rd || a->store_lost || !a->told) return;
    atomic_fetch_add(&a->status_gen, 1); /* a refresh still out is older: dropped */
    char *json = status_json(a);
    int rc = json ? rdzv_publish_status(a->rd, 0, json) : -ENOMEM;
    if (rc) log_debug("cannot publish this node's status: %s", strerror(-rc));
    free(json);
}

static void on_status_timer(uv_timer_t *t) { agent_publish_status(t->data); }

typedef struct {
    int gen; /* status_gen when it was made */
    char *json;
} refresh;

static void publish_aside(void *ctx, void *arg) {
    agent *a = ctx;
    refresh *r = arg;
    if (atomic_load(&a->status_gen) != r->gen) return; /* the loop published since */
    int rc = rdzv_publish_status(a->rd, AGENT_SIDE, r->json);
    if (rc) log_debug("cannot publish this node's status: %s", strerror(-rc));
}

static void published_aside(void *ctx, void *arg) {
    (void)ctx;
    refresh *r = arg;
    free(r->json);
    free(r);
}

/* While the workers run, the status (its goodput, the workers' standing)
 * is published again every STATUS_REFRESH_MS, off the loop. */
#define STATUS_REFRESH_MS 10000
static void on_refresh(uv_timer_t *t) {
    agent *a = t->data;
    if (!a->rd || a->store_lost || !a->told || a->state != ST_RUNNING) return;
    refresh *r = malloc(sizeof *r);
    if (!r) return;
    r->gen = atomic_load(&a->status_gen);
    r->json = status_json(a);
    if (!r->json || side_calls_run(a->side, publish_aside, published_aside, r) != 0)
        published_aside(a, r);
}

void agent_status_refresh_start(agent *a) {
    uv_timer_init(a->loop, &a->status_refresh);
    a->status_refresh.data = a;
    uv_timer_start(&a->status_refresh, on_refresh, STATUS_REFRESH_MS, STATUS_REFRESH_MS);
}

/* Notes this agent's state for `ddprun status` (see node_status.h). What
 * changes in a burst (the group starting, its workers exiting one after
 * another) goes out once, STATUS_COALESCE_MS after the first change: on
 * etcd each write is a raft commit. */
#define STATUS_COALESCE_MS 500
void agent_tell(agent *a, const char *state) {
    if (!a->told || strcmp(a->told, state) != 0) a->state_since = clock_wall_s();
    a->told = state;
    if (!uv_is_active((uv_handle_t *)&a->status_timer))
        uv_timer_start(&a->status_timer, on_status_timer, STATUS_COALESCE_MS, 0);
}

/* An agent event: torchrun's rendezvous event fields, plus `extra`'s
 * (taken). */
void agent_record_event(agent *a, const char *name, const char *node_state, json_t *extra) {
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

void agent_joining(agent *a) {
    a->joining_since = clock_wall_s();
    agent_tell(a, "rendezvous");
    agent_record_event(a, "ddprun.rendezvous.joining", "INIT", NULL);
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
void agent_report_exhausted(agent *a, int restarts) {
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
        for (int i = 0; i < a->nfails; i++) fs[k++] = a->fails[i], a->fails[i].message = NULL,
                                             a->fails[i].traceback = NULL;
    failure_print_summary(stderr, program_name(a->cfg), fs, k);
    for (int i = 0; i < k; i++) failure_free(&fs[i]);
    free(fs);
}

/* --event-log-handler console: the worker's end as torchrun's event. */
void agent_record_worker_event(const agent *a, const worker *w, const char *state,
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

void agent_note_exit(agent *a, const worker *w) {
    if (!a->last_exit || w->local_rank >= a->cfg->nproc_per_node) return;
    char *s = a->last_exit[w->local_rank];
    if (w->term_signal)
        snprintf(s, sizeof a->last_exit[0], "signal SIG%s (round %d)", sigabbrev_np(w->term_signal),
                 a->cur.round);
    else
        snprintf(s, sizeof a->last_exit[0], "exit code %d (round %d)", (int)w->exit_status,
                 a->cur.round);
}
