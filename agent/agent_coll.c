/* Where the workers stand in their collectives (see agent_internal.h and
 * agent/coll_blame.h): each worker's record is a file in the agent's
 * directory in memory, named in its DDPRUN_COLL_RECORD. Four times a
 * second while the group runs, the agent looks at them; while one has
 * stood still for half a second or more (a hang in the making, or a long
 * step) it publishes the node's positions to the other agents, every half
 * second (so that what the others read of a rank waiting in a hang is at
 * most that old), and a job whose collectives come faster writes nothing
 * to the store. When a
 * worker fails, the verdict comes from this node's records, read then,
 * and the other nodes' last published positions. */
#include "agent/agent_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fs.h"
#include "common/log.h"

#define COLL_LOOK_MS 250
#define COLL_STILL_S 0.5 /* also the interval of publishing while still */

void agent_coll_path(const agent *a, int local_rank, char *out, size_t len) {
    snprintf(out, len, "%s/local_rank_%d", a->coll_dir, local_rank);
}

int agent_coll_prepare(agent *a) {
    a->coll_dir[0] = 0;
    if (!a->snapshots.path[0]) return 0;
    char dir[sizeof a->coll_dir];
    if (snprintf(dir, sizeof dir, "%s/.collectives", a->snapshots.path) >= (int)sizeof dir)
        return 0;
    int rc = fs_mkdir_p(dir);
    if (rc) { /* only the diagnosis of a hang is lost */
        log_warn("cannot make %s for the workers' collective records (%s): a hang will not be "
                 "traced to a rank", dir, strerror(-rc));
        return 0;
    }
    snprintf(a->coll_dir, sizeof a->coll_dir, "%s", dir);
    a->coll = calloc((size_t)a->cfg->nproc_per_node, sizeof *a->coll);
    return a->coll ? 0 : -ENOMEM;
}

/* This node's positions, read now: how many. */
static int read_local(agent *a, coll_pos *ps) {
    int n = 0;
    for (int i = 0; i < a->cfg->nproc_per_node; i++) {
        char path[sizeof a->coll_dir + 32];
        agent_coll_path(a, i, path, sizeof path);
        if (coll_pos_read(path, a->hostname, i, &ps[n]) == 0) n++;
    }
    return n;
}

typedef struct {
    int round, group_rank;
    char *json;
} coll_pub;

static void publish(void *ctx, void *arg) {
    agent *a = ctx;
    coll_pub *p = arg;
    int rc = rdzv_publish_node_info(a->rd, AGENT_SIDE, p->round, "coll", p->group_rank, p->json);
    if (rc) log_debug("cannot publish where the workers stand: %s", strerror(-rc));
}

static void published(void *ctx, void *arg) {
    agent *a = ctx;
    coll_pub *p = arg;
    free(p->json);
    free(p);
    a->coll_busy = 0;
}

static void on_look(uv_timer_t *t) {
    agent *a = t->data;
    int n = a->cfg->nproc_per_node;
    coll_pos *ps = calloc((size_t)n, sizeof *ps);
    if (!ps || a->store_lost || !a->rd) {
        free(ps);
        return;
    }
    double now = clock_now_s();
    int still = 0, m = read_local(a, ps);
    for (int k = 0; k < m; k++) {
        const coll_pos *p = &ps[k];
        coll_watch *w = &a->coll[p->local_rank];
        w->state = p->state;
        if (!w->since || p->entered != w->entered || p->done != w->done) {
            w->entered = p->entered, w->done = p->done, w->since = now;
            continue;
        }
        still |= now - w->since >= COLL_STILL_S;
    }
    if (still && !a->coll_busy && now - a->coll_published >= COLL_STILL_S) {
        coll_pub *p = calloc(1, sizeof *p);
        if (p && (p->json = coll_pos_json(ps, m, clock_wall_s()))) {
            p->round = a->cur.round, p->group_rank = a->cur.group_rank;
            if (side_calls_run(a->side, publish, published, p) == 0) a->coll_busy = 1;
            else published(a, p);
        } else {
            free(p);
        }
        a->coll_published = now;
    }
    free(ps);
}

void agent_coll_group_started(agent *a) {
    if (!a->coll_dir[0]) return;
    for (int i = 0; i < a->cfg->nproc_per_node; i++) {
        char path[sizeof a->coll_dir + 32];
        agent_coll_path(a, i, path, sizeof path);
        unlink(path); /* an earlier attempt's would be read as this one's */
        a->coll[i] = (coll_watch){0};
    }
    uv_timer_start(&a->coll_timer, on_look, COLL_LOOK_MS, COLL_LOOK_MS);
}

void agent_coll_group_stopped(agent *a) { uv_timer_stop(&a->coll_timer); }

int agent_coll_verdict(agent *a, coll_verdict *v) {
    memset(v, 0, sizeof *v);
    if (!a->coll_dir[0]) return 0;
    int nodes = a->cur.group_world_size > 0 ? a->cur.group_world_size : 1;
    int max = a->cur.world_size > a->cfg->nproc_per_node ? a->cur.world_size
                                                         : a->cfg->nproc_per_node;
    coll_pos *ps = calloc((size_t)max, sizeof *ps);
    char **remote = nodes > 1 ? calloc((size_t)nodes, sizeof *remote) : NULL;
    if (!ps || (nodes > 1 && !remote)) {
        free(ps);
        free(remote);
        return 0;
    }
    int n = read_local(a, ps);
    for (int i = 0; i < n; i++) {
        /* a rank the watchdog has killed since reads as exiting or gone:
         * the state it was last seen in (stopped, or in an uninterruptible
         * wait, a second ago at most) is what explains the hang */
        int local = ps[i].rank - a->cur.rank_offset;
        char seen = local >= 0 && local < a->cfg->nproc_per_node ? a->coll[local].state : 0;
        if (seen && strchr("TtD", seen)) ps[i].state = seen;
    }
    /* another node's positions count if read after this node's ranks last
     * entered a collective: older ones may show its ranks behind where
     * they have since gone (they publish again once they stand still) */
    double last_entered = 0;
    for (int i = 0; i < n; i++)
        if (ps[i].issued > last_entered) last_entered = ps[i].issued;
    if (nodes > 1 && !a->store_lost && a->rd &&
        rdzv_node_infos(a->rd, 0, a->cur.round, "coll", nodes, remote) == 0)
        for (int i = 0; i < nodes; i++) {
            if (i == a->cur.group_rank || !remote[i]) continue;
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
