/* The straggler watch (see agent/straggler.h and agent_internal.h). Once
 * a window (--straggler-window) each agent reads its workers' collective
 * records, takes each one's compute per step over the window (the steps'
 * time less the time blocked in collectives), and publishes it under
 * r<round>/speed/<node rank>. Node rank 0's agent compares every rank's
 * with the median and publishes the job's stragglers under
 * r<round>/stragglers/0; every agent reads that, and tells of its own
 * ranks that became stragglers or stopped being ones: a warning, an event
 * (ddprun.agent.straggler), the ddprun_worker_straggler metric and `ddprun
 * status`. Per window a node writes one key and reads one (node rank 0
 * reads one per node besides). */
#include "agent/agent_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

void agent_speed_group_started(agent *a) {
    if (a->speed.busy) { /* its side call uses the watch: after it */
        a->speed.restart = 1;
        return;
    }
    free(a->speed.base);
    free(a->speed.watch.st);
    free(a->speed.slow);
    int n = a->cfg->nproc_per_node, world = a->cur.world_size > 0 ? a->cur.world_size : n;
    a->speed.base = calloc((size_t)n, sizeof *a->speed.base);
    a->speed.slow = calloc((size_t)n, sizeof *a->speed.slow);
    a->speed.watch = (straggler_watch){.threshold = a->cfg->straggler_pct / 100.0, .n = world,
                                       .st = calloc((size_t)world, sizeof(straggler_state))};
    if (!a->speed.base || !a->speed.slow || !a->speed.watch.st || !agent_coll_dir(a->coll)[0])
        return;
    uint64_t ms = (uint64_t)(a->cfg->straggler_window * 1000);
    uv_timer_start(&a->speed.timer, agent_speed_window, ms, ms);
}

void agent_speed_group_stopped(agent *a) { uv_timer_stop(&a->speed.timer); }

/* This node's ranks' compute per step since the last window, into sp. */
static int local_speeds(agent *a, rank_speed *sp) {
    int n = 0;
    for (int i = 0; i < a->cfg->nproc_per_node; i++) {
        char path[700];
        agent_coll_path(a->coll, i, path, sizeof path);
        coll_view v;
        if (coll_record_read(path, &v) != 0) continue;
        speed_base *b = &a->speed.base[i];
        int64_t steps = v.steps - b->steps, ns = (v.step_ns - b->step_ns) -
                                                 (v.blocked_ns - b->blocked_ns);
        rank_speed *s = &sp[n++];
        *s = (rank_speed){.rank = v.rank, .local_rank = i, .steps = steps,
                          .compute = steps > 0 && b->seen ? (double)ns * 1e-9 / (double)steps
                                                          : -1};
        snprintf(s->host, sizeof s->host, "%.127s", a->hostname);
        *b = (speed_base){1, v.steps, v.step_ns, v.blocked_ns};
    }
    return n;
}

static char *speeds_json(const rank_speed *sp, int n) {
    json_t *arr = json_array();
    for (int i = 0; arr && i < n; i++) {
        json_t *o = json_pack("{s:i, s:i, s:s, s:f, s:I}", "rank", sp[i].rank, "local_rank",
                              sp[i].local_rank, "host", sp[i].host, "compute", sp[i].compute,
                              "steps", (json_int_t)sp[i].steps);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    char *s = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return s;
}

static void speeds_parse(const char *json, rank_speed *sp, int *n, int max) {
    json_t *arr = json_loads(json, 0, NULL), *o;
    size_t i;
    json_array_foreach(arr, i, o) {
        if (*n >= max) break;
        rank_speed s = {0};
        const char *host = "";
        json_int_t steps = 0;
        if (json_unpack(o, "{s:i, s:i, s:s, s:F, s:I}", "rank", &s.rank, "local_rank",
                        &s.local_rank, "host", &host, "compute", &s.compute, "steps", &steps))
            continue;
        snprintf(s.host, sizeof s.host, "%s", host);
        s.steps = steps;
        sp[(*n)++] = s;
    }
    json_decref(arr);
}

/* A window's store calls, off the loop (side_calls_run): this node's
 * speeds published; at node rank 0 every node's compared and the job's
 * stragglers published; the list read back, and the spares counted where
 * one of this node's ranks is on it. */
typedef struct {
    rank_speed *mine;
    int n, round, group_rank, nodes;
    char *list;  /* node rank 0's stragglers (JSON), NULL: none read */
    int spares;  /* --replace-stragglers: spares standing by, -1 not asked */
    double straggler_s; /* node rank 0: what the stragglers added to the window's steps */
} window_job;

/* Node rank 0: every node's speeds compared; the stragglers published. */
static void judge(agent *a, window_job *j) {
    int max = a->speed.watch.n, n = 0;
    rank_speed *sp = calloc((size_t)max, sizeof *sp);
    char **remote = j->nodes > 1 ? calloc((size_t)j->nodes, sizeof *remote) : NULL;
    if (!sp || (j->nodes > 1 && !remote)) goto out;
    for (int i = 0; i < j->n && n < max; i++) sp[n++] = j->mine[i];
    if (j->nodes > 1 && rdzv_node_infos(a->rd, AGENT_SIDE, j->round, "speed", j->nodes, remote) == 0)
        for (int i = 1; i < j->nodes; i++)
            if (remote[i]) speeds_parse(remote[i], sp, &n, max);
    int changed[64];
    int nc = straggler_update(&a->speed.watch, sp, n, changed, 64);
    /* the job's steps wait for its slowest rank: what it took over the median */
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const straggler_state *st = sp[i].rank >= 0 && sp[i].rank < max ? &a->speed.watch.st[sp[i].rank] : NULL;
        double extra = st && st->straggler ? (sp[i].compute - st->median) * (double)sp[i].steps : 0;
        if (extra > worst) worst = extra;
    }
    j->straggler_s = worst;
    for (int k = 0; k < nc; k++) { /* the job's view, in node rank 0's log */
        const straggler_state *st = &a->speed.watch.st[changed[k]];
        if (st->straggler)
            log_warn("straggler: rank %d computes %.1f ms a step, %.0f%% more than the median "
                     "(%.1f ms), %d windows of %g s running",
                     st->rank, st->compute * 1e3, (st->compute / st->median - 1) * 100,
                     st->median * 1e3, STRAGGLER_WINDOWS, a->cfg->straggler_window);
        else
            log_info("rank %d is no longer a straggler (%.1f ms a step, median %.1f ms)",
                     st->rank, st->compute * 1e3, st->median * 1e3);
    }
    json_t *list = json_array();
    for (int r = 0; list && r < a->speed.watch.n; r++) {
        const straggler_state *st = &a->speed.watch.st[r];
        if (st->straggler)
            json_array_append_new(list, json_pack("{s:i, s:f, s:f}", "rank", r, "compute",
                                                  st->compute, "median", st->median));
    }
    char *json = list ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    if (json) rdzv_publish_node_info(a->rd, AGENT_SIDE, j->round, "stragglers", 0, json);
    free(json);
out:
    for (int i = 0; remote && i < j->nodes; i++) free(remote[i]);
    free(remote);
    free(sp);
}

/* Whether the JSON list of stragglers names rank; their figures then. */
static int listed(json_t *arr, int rank, double *compute, double *median) {
    size_t k;
    json_t *o;
    json_array_foreach(arr, k, o) {
        int r = -1;
        if (json_unpack(o, "{s:i, s:F, s:F}", "rank", &r, "compute", compute, "median",
                        median) == 0 && r == rank)
            return 1;
    }
    return 0;
}

static void window_work(void *ctx, void *arg) {
    agent *a = ctx;
    window_job *j = arg;
    char *json = speeds_json(j->mine, j->n);
    int rc = json ? rdzv_publish_node_info(a->rd, AGENT_SIDE, j->round, "speed", j->group_rank,
                                           json)
                  : -ENOMEM;
    free(json);
    if (rc) log_debug("cannot publish the workers' compute: %s", strerror(-rc));
    if (j->group_rank == 0) judge(a, j);
    if (rdzv_node_infos(a->rd, AGENT_SIDE, j->round, "stragglers", 1, &j->list) != 0) return;
    json_t *arr = j->list ? json_loads(j->list, 0, NULL) : NULL;
    double c, m;
    int mine = 0;
    for (int i = 0; i < j->n; i++) mine |= listed(arr, j->mine[i].rank, &c, &m);
    json_decref(arr);
    if (mine && a->cfg->replace_stragglers &&
        rdzv_live_spares(a->rd, AGENT_SIDE, j->round, &j->spares) != 0)
        j->spares = -1;
}

/* --replace-stragglers: a straggler's node makes way for a spare, if one
 * stands by. */
static void replace(agent *a, const rank_speed *s, double compute, double median, int spares) {
    if (a->store.host && (a->cfg->rdzv_backend->flags & RDZV_IN_JOB_STORE)) {
        log_warn("--replace-stragglers: local rank %d is a straggler, but this node serves the "
                 "job's rendezvous store (%s): the job would end with it; it stays (etcd-v3 "
                 "keeps the rendezvous off the nodes)",
                 s->local_rank, a->cfg->rdzv_backend->name);
        return;
    }
    if (spares <= 0) {
        log_info("--replace-stragglers: no spare node stands by (%s); local rank %d stays",
                 spares < 0 ? "the store did not say" : "start one with the same --rdzv-id: the "
                                                        "round is full",
                 s->local_rank);
        return;
    }
    char why[sizeof a->leave_why];
    snprintf(why, sizeof why,
             "--replace-stragglers: local rank %d (rank %d) is a straggler (%.1f ms of compute "
             "a step, the median %.1f ms) and %d spare node%s stand%s by",
             s->local_rank, s->rank, compute * 1e3, median * 1e3, spares, spares == 1 ? "" : "s",
             spares == 1 ? "s" : "");
    snprintf(a->leave_why, sizeof a->leave_why, "%s", why); /* agent.c leaves at its wake */
    uv_async_send(&a->wake);
}

/* Back on the loop: this node's ranks' standing told (event, metrics,
 * status), and a straggler replaced. */
static void window_done(void *ctx, void *arg) {
    agent *a = ctx;
    window_job *j = arg;
    a->speed.busy = 0;
    agent_goodput_stragglers(a->gp, j->straggler_s);
    json_t *arr = j->list ? json_loads(j->list, 0, NULL) : NULL;
    for (int i = 0; arr && !a->speed.restart && i < j->n; i++) {
        const rank_speed *s = &j->mine[i];
        double compute = 0, median = 0;
        int slow = listed(arr, s->rank, &compute, &median);
        straggler_mark *m = &a->speed.slow[s->local_rank];
        if (s->compute >= 0)
            metrics_worker_speed(a->metrics, s->local_rank, s->rank, s->compute, slow);
        if (slow == m->straggler) continue;
        *m = (straggler_mark){slow, compute, median};
        agent_record_event(a, "ddprun.agent.straggler", slow ? "SLOW" : "RECOVERED",
                           json_pack("{s:i, s:i, s:f, s:f, s:f}", "straggler_rank", s->rank,
                                     "local_rank", s->local_rank, "compute_s", compute,
                                     "median_s", median, "threshold_pct",
                                     a->cfg->straggler_pct));
        if (slow && a->cur.group_rank != 0) /* (node rank 0 said so for the job) */
            log_warn("local rank %d (rank %d) is a straggler: %.1f ms of compute a step against "
                     "the job's median of %.1f ms",
                     s->local_rank, s->rank, compute * 1e3, median * 1e3);
        agent_tell(a, a->told ? a->told : "running"); /* `ddprun status` shows it */
        if (slow && a->cfg->replace_stragglers && a->state == ST_RUNNING)
            replace(a, s, compute, median, j->spares);
    }
    json_decref(arr);
    free(j->list);
    free(j->mine);
    free(j);
    if (a->speed.restart) { /* a group started while this window was out */
        a->speed.restart = 0;
        agent_speed_group_started(a);
    }
}

void agent_speed_window(uv_timer_t *t) {
    agent *a = t->data;
    if (!a->rd || a->store_lost || a->state != ST_RUNNING || a->speed.busy) return;
    window_job *j = calloc(1, sizeof *j);
    rank_speed *mine = calloc((size_t)a->cfg->nproc_per_node, sizeof *mine);
    if (!j || !mine) {
        free(j);
        free(mine);
        return;
    }
    *j = (window_job){.mine = mine, .n = local_speeds(a, mine), .round = a->cur.round,
                      .group_rank = a->cur.group_rank,
                      .nodes = a->cur.group_world_size > 1 ? a->cur.group_world_size : 1,
                      .spares = -1};
    if (side_calls_run(a->side, window_work, window_done, j) == 0) {
        a->speed.busy = 1;
    } else {
        free(mine);
        free(j);
    }
}
