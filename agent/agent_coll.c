/* See agent_coll.h. */
#include "agent/agent_coll.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/coll_record.h"
#include "common/fs.h"
#include "common/log.h"

#define COLL_LOOK_MS 250
#define COLL_STILL_S 0.5 /* also the interval of publishing while still */

/* A local rank's collective position as the agent last saw it. */
typedef struct {
    uint64_t entered, done;
    double since; /* monotonic s: when it last moved (0: not seen yet) */
    char state;   /* its process's state letter when last seen ('T': stopped) */
} rank_watch;

struct agent_coll {
    side_calls *side;
    int side_conn;
    char dir[600];        /* "": no records */
    char host[256];
    int nproc;
    rank_watch *ranks;    /* per local rank */
    rdzv *rd;             /* the running group's rendezvous (NULL: none) */
    rdzv_result round;    /* its round (scalars only) */
    int store_lost;
    uv_timer_t timer;     /* looks at the records 4 times a second while the group runs */
    int busy;             /* a publication of the positions is under way */
    double published;     /* monotonic s: when this node's positions last went out */
    int closed;           /* the timer is closed: free once no publication is out */
};

void agent_coll_path(const agent_coll *c, int local_rank, char *out, size_t len) {
    snprintf(out, len, "%s/local_rank_%d", c->dir, local_rank);
}

const char *agent_coll_dir(const agent_coll *c) { return c->dir; }

int agent_coll_start(uv_loop_t *loop, side_calls *side, int side_conn, const char *shm_dir,
                     const char *hostname, int nproc, agent_coll **out) {
    agent_coll *c = calloc(1, sizeof *c);
    if (!c || !(c->ranks = calloc((size_t)nproc, sizeof *c->ranks))) {
        free(c);
        return -ENOMEM;
    }
    c->side = side, c->side_conn = side_conn, c->nproc = nproc;
    snprintf(c->host, sizeof c->host, "%s", hostname);
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    *out = c;
    char dir[sizeof c->dir];
    if (!shm_dir[0] || snprintf(dir, sizeof dir, "%s/.collectives", shm_dir) >= (int)sizeof dir)
        return 0;
    int rc = fs_mkdir_p(dir);
    if (rc) { /* only the diagnosis of a hang is lost */
        log_warn("cannot make %s for the workers' collective records (%s): a hang will not be "
                 "traced to a rank", dir, strerror(-rc));
        return 0;
    }
    snprintf(c->dir, sizeof c->dir, "%s", dir);
    return 0;
}

/* This node's positions, read now: how many. */
static int read_local(const agent_coll *c, coll_pos *ps) {
    int n = 0;
    for (int i = 0; i < c->nproc; i++) {
        char path[sizeof c->dir + 32];
        agent_coll_path(c, i, path, sizeof path);
        if (coll_pos_read(path, c->host, i, &ps[n]) == 0) n++;
    }
    return n;
}

typedef struct {
    agent_coll *c;
    rdzv *rd;
    int round, group_rank;
    char *json;
} coll_pub;

static void publish(void *ctx, void *arg) {
    (void)ctx;
    coll_pub *p = arg;
    int rc = rdzv_publish_node_info(p->rd, p->c->side_conn, p->round, "coll", p->group_rank,
                                    p->json);
    if (rc) log_debug("cannot publish where the workers stand: %s", strerror(-rc));
}

static void published(void *ctx, void *arg) {
    (void)ctx;
    coll_pub *p = arg;
    agent_coll *c = p->c;
    free(p->json);
    free(p);
    c->busy = 0;
    if (c->closed) free(c->ranks), free(c);
}

static void on_look(uv_timer_t *t) {
    agent_coll *c = t->data;
    coll_pos *ps = calloc((size_t)c->nproc, sizeof *ps);
    if (!ps || c->store_lost || !c->rd) {
        free(ps);
        return;
    }
    double now = clock_now_s();
    int still = 0, m = read_local(c, ps);
    for (int k = 0; k < m; k++) {
        coll_pos *p = &ps[k];
        rank_watch *w = &c->ranks[p->local_rank];
        /* (what the other nodes' verdicts read too: a rank frozen, then
         * killed by its watchdog, was stopped, not exiting) */
        p->state = w->state = coll_state_seen(w->state, p->state);
        if (!w->since || p->entered != w->entered || p->done != w->done) {
            w->entered = p->entered, w->done = p->done, w->since = now;
            continue;
        }
        still |= now - w->since >= COLL_STILL_S;
    }
    if (still && !c->busy && now - c->published >= COLL_STILL_S) {
        char *json = coll_pos_json(ps, m, clock_wall_s());
        coll_pub *p = json ? malloc(sizeof *p) : NULL;
        if (p) {
            *p = (coll_pub){.c = c, .rd = c->rd, .round = c->round.round,
                            .group_rank = c->round.group_rank, .json = json};
            c->busy = 1;
            if (side_calls_run(c->side, publish, published, p) != 0) published(NULL, p);
        } else {
            free(json);
        }
        c->published = now;
    }
    free(ps);
}

void agent_coll_group_started(agent_coll *c, rdzv *rd, const rdzv_result *round) {
    c->rd = rd;
    c->round = *round;
    c->round.nodes = NULL;
    if (!c->dir[0]) return;
    for (int i = 0; i < c->nproc; i++) {
        char path[sizeof c->dir + 32];
        agent_coll_path(c, i, path, sizeof path);
        unlink(path); /* an earlier attempt's would be read as this one's */
        c->ranks[i] = (rank_watch){0};
    }
    uv_timer_start(&c->timer, on_look, COLL_LOOK_MS, COLL_LOOK_MS);
}

void agent_coll_group_stopped(agent_coll *c) { uv_timer_stop(&c->timer); }

void agent_coll_store_lost(agent_coll *c) { c->store_lost = 1; }

int agent_coll_verdict(agent_coll *c, coll_verdict *v) {
    memset(v, 0, sizeof *v);
    if (!c->dir[0]) return 0;
    const rdzv_result *r = &c->round;
    int nodes = r->group_world_size > 0 ? r->group_world_size : 1;
    int max = r->world_size > c->nproc ? r->world_size : c->nproc;
    coll_pos *ps = calloc((size_t)max, sizeof *ps);
    char **remote = nodes > 1 ? calloc((size_t)nodes, sizeof *remote) : NULL;
    if (!ps || (nodes > 1 && !remote)) {
        free(ps);
        free(remote);
        return 0;
    }
    int n = read_local(c, ps);
    for (int i = 0; i < n; i++) {
        /* a rank the watchdog has killed since reads as exiting or gone:
         * the state it was last seen in (stopped, or in an uninterruptible
         * wait, a second ago at most) is what explains the hang */
        int local = ps[i].rank - r->rank_offset;
        char seen = local >= 0 && local < c->nproc ? c->ranks[local].state : 0;
        if (seen && strchr("TtD", seen)) ps[i].state = seen;
    }
    /* another node's positions count if read after this node's ranks last
     * entered a collective: older ones may show its ranks behind where
     * they have since gone (they publish again once they stand still) */
    double last_entered = 0;
    for (int i = 0; i < n; i++)
        if (ps[i].issued > last_entered) last_entered = ps[i].issued;
    if (nodes > 1 && !c->store_lost && c->rd &&
        rdzv_node_infos(c->rd, 0, r->round, "coll", nodes, remote) == 0)
        for (int i = 0; i < nodes; i++) {
            if (i == r->group_rank || !remote[i]) continue;
            if (coll_pos_from_json(remote[i], last_entered, ps, &n, max) == -ESTALE)
                log_warn("node %d's collective positions predate this node's last collective: "
                         "left out of the hang's verdict", i);
        }
    for (int i = 0; remote && i < nodes; i++) free(remote[i]);
    free(remote);
    int found = coll_blame(ps, n, v);
    free(ps);
    return found;
}

static void on_closed(uv_handle_t *h) {
    agent_coll *c = h->data;
    c->closed = 1;
    if (!c->busy) free(c->ranks), free(c);
}

void agent_coll_stop(agent_coll *c) {
    if (!c) return;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_closed);
}
