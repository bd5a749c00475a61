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
    free(a->speed.base);
    free(a->speed.watch.st);
    free(a->speed.slow);
    int n = a->cfg->nproc_per_node, world = a->cur.world_size > 0 ? a->cur.world_size : n;
    a->speed.base = calloc((size_t)n, sizeof *a->speed.base);
    a->speed.slow = calloc((size_t)n, sizeof *a->speed.slow);
    a->speed.watch = (straggler_watch){.threshold = a->cfg->straggler_pct / 100.0, .n = world,
                                       .st = calloc((size_t)world, sizeof(straggler_state))};
    if (!a->speed.base || !a->speed.slow || !a->speed.watch.st || !a->coll_dir[0]) return;
    uint64_t ms = (uint64_t)(a->cfg->straggler_window * 1000);
    uv_timer_start(&a->speed.timer, agent_speed_window, ms, ms);
}

void agent_speed_group_stopped(agent *a) { uv_timer_stop(&a->speed.timer); }

/* This node's ranks' compute per step since the last window, into sp. */
static int local_speeds(agent *a, rank_speed *sp) {
    int n = 0;
    for (int i = 0; i < a->cfg->nproc_per_node; i++) {
        char path[sizeof a->coll_dir + 32];
        agent_coll_path(a, i, path, sizeof path);
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

/* Node rank 0: every node's speeds compared; the stragglers published. */
static void judge(agent *a, rank_speed *mine, int nmine) {
    int nodes = a->cur.group_world_size > 1 ? a->cur.group_world_size : 1;
    int max = a->speed.watch.n, n = 0;
    rank_speed *sp = calloc((size_t)max, sizeof *sp);
    char **remote = nodes > 1 ? calloc((size_t)nodes, sizeof *remote) : NULL;
    if (!sp || (nodes > 1 && !remote)) goto out;
    for (int i = 0; i < nmine && n < max; i++) sp[n++] = mine[i];
    if (nodes > 1 && rdzv_node_infos(a->rd, 0, a->cur.round, "speed", nodes, remote) == 0)
        for (int i = 1; i < nodes; i++)
            if (remote[i]) speeds_parse(remote[i], sp, &n, max);
    int changed[64];
    int nc = straggler_update(&a->speed.watch, sp, n, changed, 64);
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
    if (json) rdzv_publish_node_info(a->rd, 0, a->cur.round, "stragglers", 0, json);
    free(json);
out:
    for (int i = 0; remote && i < nodes; i++) free(remote[i]);
    free(remote);
    free(sp);
}

/* Every agent: its own ranks' standing, from node rank 0's list. */
static void tell(agent *a, const rank_speed *mine, int nmine) {
    char *list = NULL;
    if (rdzv_node_infos(a->rd, 0, a->cur.round, "stragglers", 1, &list) != 0) return;
    json_t *arr = list ? json_loads(list, 0, NULL) : NULL;
    free(list);
    for (int i = 0; i < nmine; i++) {
        const rank_speed *s = &mine[i];
        double compute = 0, median = 0;
        int slow = 0;
        size_t k;
        json_t *o;
        json_array_foreach(arr, k, o) {
            int r = -1;
            if (json_unpack(o, "{s:i, s:F, s:F}", "rank", &r, "compute", &compute, "median",
                            &median) == 0 && r == s->rank) {
                slow = 1;
                break;
            }
        }
        straggler_mark *m = &a->speed.slow[s->local_rank];
        if (s->compute >= 0) metrics_worker_speed(a->metrics, s->local_rank, s->rank, s->compute, slow);
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
    }
    json_decref(arr);
}

void agent_speed_window(uv_timer_t *t) {
    agent *a = t->data;
    if (!a->rd || a->store_lost || a->state != ST_RUNNING) return;
    rank_speed *mine = calloc((size_t)a->cfg->nproc_per_node, sizeof *mine);
    if (!mine) return;
    int n = local_speeds(a, mine);
    char *json = speeds_json(mine, n);
    int rc = json ? rdzv_publish_node_info(a->rd, 0, a->cur.round, "speed", a->cur.group_rank,
                                           json)
                  : -ENOMEM;
    free(json);
    if (rc) log_debug("cannot publish the workers' compute: %s", strerror(-rc));
    if (a->cur.group_rank == 0) judge(a, mine, n);
    tell(a, mine, n);
    free(mine);
}
