/* See agent_speed.h. */
#include "agent/agent_speed.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/coll_record.h"
#include "common/log.h"

/* A local rank's record as the last window saw it. */
typedef struct {
    int seen;
    int64_t steps, step_ns, blocked_ns;
} speed_base;

struct agent_speed {
    agent_speed_opts o;
    agent_speed_hooks h;
    uv_timer_t timer;      /* every --straggler-window while the group runs */
    rdzv *rd;              /* the running group's rendezvous */
    rdzv_result round;     /* its round (scalars only) */
    int running;           /* between a group's start and its stopping */
    int store_lost;
    speed_base *base;      /* per local rank */
    straggler_mark *slow;  /* per local rank: what node rank 0 says */
    straggler_watch watch; /* node rank 0: every rank's standing (the side calls') */
    int busy;              /* a window's side call is under way */
    int restart;           /* a group started meanwhile: begin anew after it */
    int closed;            /* the timer is closed: free once no window is out */
};

static void on_window(uv_timer_t *t);

int agent_speed_start(uv_loop_t *loop, const agent_speed_opts *o, const agent_speed_hooks *h,
                      agent_speed **out) {
    agent_speed *w = calloc(1, sizeof *w);
    if (!w) return -ENOMEM;
    w->o = *o, w->h = *h;
    uv_timer_init(loop, &w->timer);
    w->timer.data = w;
    *out = w;
    return 0;
}

static void begin(agent_speed *w) {
    free(w->base);
    free(w->watch.st);
    free(w->slow);
    int n = w->o.nproc, world = w->round.world_size > 0 ? w->round.world_size : n;
    w->base = calloc((size_t)n, sizeof *w->base);
    w->slow = calloc((size_t)n, sizeof *w->slow);
    w->watch = (straggler_watch){.threshold = w->o.threshold_pct / 100.0, .n = world,
                                 .st = calloc((size_t)world, sizeof(straggler_state))};
    if (!w->base || !w->slow || !w->watch.st || !agent_coll_dir(w->o.coll)[0]) return;
    uint64_t ms = (uint64_t)(w->o.window_s * 1000);
    uv_timer_start(&w->timer, on_window, ms, ms);
}

void agent_speed_group_started(agent_speed *w, rdzv *rd, const rdzv_result *round) {
    w->rd = rd;
    w->round = *round;
    w->round.nodes = NULL;
    w->running = 1;
    if (w->busy) { /* its side call uses the watch: after it */
        w->restart = 1;
        return;
    }
    begin(w);
}

void agent_speed_group_stopping(agent_speed *w) { w->running = 0; }

void agent_speed_group_stopped(agent_speed *w) {
    w->running = 0;
    uv_timer_stop(&w->timer);
}

void agent_speed_store_lost(agent_speed *w) { w->store_lost = 1; }

const straggler_mark *agent_speed_marks(const agent_speed *w) { return w ? w->slow : NULL; }

/* This node's ranks' compute per step since the last window, into sp. */
static int local_speeds(agent_speed *w, rank_speed *sp) {
    int n = 0;
    for (int i = 0; i < w->o.nproc; i++) {
        char path[700];
        agent_coll_path(w->o.coll, i, path, sizeof path);
        coll_view v;
        if (coll_record_read(path, &v) != 0) continue;
        speed_base *b = &w->base[i];
        int64_t steps = v.steps - b->steps, ns = (v.step_ns - b->step_ns) -
                                                 (v.blocked_ns - b->blocked_ns);
        rank_speed *s = &sp[n++];
        *s = (rank_speed){.rank = v.rank, .local_rank = i, .steps = steps,
                          .compute = steps > 0 && b->seen ? (double)ns * 1e-9 / (double)steps
                                                          : -1};
        snprintf(s->host, sizeof s->host, "%.127s", w->o.hostname);
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
    agent_speed *w;
    rdzv *rd;
    rank_speed *mine;
    int n, round, group_rank, nodes;
    char *list;  /* node rank 0's stragglers (JSON), NULL: none read */
    int spares;  /* --replace-stragglers: spares standing by, -1 not asked */
    double straggler_s; /* node rank 0: what the stragglers added to the window's steps */
} window_job;

/* Node rank 0: every node's speeds compared; the stragglers published. */
static void judge(window_job *j) {
    agent_speed *w = j->w;
    int max = w->watch.n, n = 0, side = w->o.side_conn;
    rank_speed *sp = calloc((size_t)max, sizeof *sp);
    char **remote = j->nodes > 1 ? calloc((size_t)j->nodes, sizeof *remote) : NULL;
    if (!sp || (j->nodes > 1 && !remote)) goto out;
    for (int i = 0; i < j->n && n < max; i++) sp[n++] = j->mine[i];
    if (j->nodes > 1 && rdzv_node_infos(j->rd, side, j->round, "speed", j->nodes, remote) == 0)
        for (int i = 1; i < j->nodes; i++)
            if (remote[i]) speeds_parse(remote[i], sp, &n, max);
    int changed[64];
    int nc = straggler_update(&w->watch, sp, n, changed, 64);
    /* the job's steps wait for its slowest rank: what it took over the median */
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const straggler_state *st =
            sp[i].rank >= 0 && sp[i].rank < max ? &w->watch.st[sp[i].rank] : NULL;
        double extra =
            st && st->straggler ? (sp[i].compute - st->median) * (double)sp[i].steps : 0;
        if (extra > worst) worst = extra;
    }
    j->straggler_s = worst;
    for (int k = 0; k < nc; k++) { /* the job's view, in node rank 0's log */
        const straggler_state *st = &w->watch.st[changed[k]];
        if (st->straggler)
            log_warn("straggler: rank %d computes %.1f ms a step, %.0f%% more than the median "
                     "(%.1f ms), %d windows of %g s running",
                     st->rank, st->compute * 1e3, (st->compute / st->median - 1) * 100,
                     st->median * 1e3, STRAGGLER_WINDOWS, w->o.window_s);
        else
            log_info("rank %d is no longer a straggler (%.1f ms a step, median %.1f ms)",
                     st->rank, st->compute * 1e3, st->median * 1e3);
    }
    json_t *list = json_array();
    for (int r = 0; list && r < w->watch.n; r++) {
        const straggler_state *st = &w->watch.st[r];
        if (st->straggler)
            json_array_append_new(list, json_pack("{s:i, s:f, s:f}", "rank", r, "compute",
                                                  st->compute, "median", st->median));
    }
    char *json = list ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    if (json) rdzv_publish_node_info(j->rd, side, j->round, "stragglers", 0, json);
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
    (void)ctx;
    window_job *j = arg;
    int side = j->w->o.side_conn;
    if (j->n > 0) {
        char *json = speeds_json(j->mine, j->n);
        int rc = json ? rdzv_publish_node_info(j->rd, side, j->round, "speed", j->group_rank,
                                               json)
                      : -ENOMEM;
        free(json);
        if (rc) log_debug("cannot publish the workers' compute: %s", strerror(-rc));
    }
    if (j->group_rank == 0) judge(j);
    if (j->n == 0) return; /* no rank of this node to look for in the list */
    if (rdzv_node_infos(j->rd, side, j->round, "stragglers", 1, &j->list) != 0) return;
    json_t *arr = j->list ? json_loads(j->list, 0, NULL) : NULL;
    double c, m;
    int mine = 0;
    for (int i = 0; i < j->n; i++) mine |= listed(arr, j->mine[i].rank, &c, &m);
    json_decref(arr);
    if (mine && j->w->o.replace && rdzv_live_spares(j->rd, side, j->round, &j->spares) != 0)
        j->spares = -1;
}

/* --replace-stragglers: a straggler's node makes way for a spare, if one
 * stands by. */
static void replace(agent_speed *w, const rank_speed *s, double compute, double median,
                    int spares) {
    if (w->o.serves_job_store) {
        log_warn("--replace-stragglers: local rank %d is a straggler, but this node serves the "
                 "job's rendezvous store (%s): the job would end with it; it stays (etcd-v3 "
                 "keeps the rendezvous off the nodes)",
                 s->local_rank, w->o.backend);
        return;
    }
    if (spares <= 0) {
        log_info("--replace-stragglers: no spare node stands by (%s); local rank %d stays",
                 spares < 0 ? "the store did not say" : "start one with the same --rdzv-id: the "
                                                        "round is full",
                 s->local_rank);
        return;
    }
    char why[256];
    snprintf(why, sizeof why,
             "--replace-stragglers: local rank %d (rank %d) is a straggler (%.1f ms of compute "
             "a step, the median %.1f ms) and %d spare node%s stand%s by",
             s->local_rank, s->rank, compute * 1e3, median * 1e3, spares, spares == 1 ? "" : "s",
             spares == 1 ? "s" : "");
    w->h.leave(w->h.ctx, why);
}

static void free_watch(agent_speed *w) {
    free(w->base);
    free(w->slow);
    free(w->watch.st);
    free(w);
}

/* Back on the loop: this node's ranks' standing told (the agent's hook,
 * metrics), and a straggler replaced. */
static void window_done(void *ctx, void *arg) {
    (void)ctx;
    window_job *j = arg;
    agent_speed *w = j->w;
    w->busy = 0;
    agent_goodput_stragglers(w->o.goodput, j->straggler_s);
    json_t *arr = j->list ? json_loads(j->list, 0, NULL) : NULL;
    for (int i = 0; arr && !w->restart && !w->closed && i < j->n; i++) {
        const rank_speed *s = &j->mine[i];
        double compute = 0, median = 0;
        int slow = listed(arr, s->rank, &compute, &median);
        straggler_mark *m = &w->slow[s->local_rank];
        if (s->compute >= 0)
            metrics_worker_speed(w->o.metrics, s->local_rank, s->rank, s->compute, slow);
        if (slow == m->straggler) continue;
        *m = (straggler_mark){slow, compute, median};
        if (slow && j->group_rank != 0) /* (node rank 0 said so for the job) */
            log_warn("local rank %d (rank %d) is a straggler: %.1f ms of compute a step against "
                     "the job's median of %.1f ms",
                     s->local_rank, s->rank, compute * 1e3, median * 1e3);
        w->h.changed(w->h.ctx, s, slow, compute, median);
        if (slow && w->o.replace && w->running) replace(w, s, compute, median, j->spares);
    }
    json_decref(arr);
    free(j->list);
    free(j->mine);
    free(j);
    if (w->closed) {
        free_watch(w);
        return;
    }
    if (w->restart) { /* a group started while this window was out */
        w->restart = 0;
        begin(w);
    }
}

static void on_window(uv_timer_t *t) {
    agent_speed *w = t->data;
    if (!w->rd || w->store_lost || !w->running || w->busy) return;
    window_job *j = calloc(1, sizeof *j);
    rank_speed *mine = calloc((size_t)w->o.nproc, sizeof *mine);
    if (!j || !mine) {
        free(j);
        free(mine);
        return;
    }
    *j = (window_job){.w = w, .rd = w->rd, .mine = mine, .n = local_speeds(w, mine),
                      .round = w->round.round, .group_rank = w->round.group_rank,
                      .nodes = w->round.group_world_size > 1 ? w->round.group_world_size : 1,
                      .spares = -1};
    if (j->n == 0 && j->group_rank != 0) {
        /* workers that keep no step record (a script, not ddp-train): this
         * node has nothing to publish or look for (at 1,000 idle nodes on
         * etcd, 200 requests a second for nothing) */
        free(mine);
        free(j);
        return;
    }
    if (side_calls_run(w->o.side, window_work, window_done, j) == 0) {
        w->busy = 1;
    } else {
        free(mine);
        free(j);
    }
}

static void on_closed(uv_handle_t *h) {
    agent_speed *w = h->data;
    w->closed = 1;
    if (!w->busy) free_watch(w);
}

void agent_speed_stop(agent_speed *w) {
    if (!w) return;
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, on_closed);
}
