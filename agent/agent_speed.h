/* The straggler watch (the arithmetic: straggler.h). Once a window
 * (--straggler-window) each agent reads its workers' collective records,
 * takes each one's compute per step over the window (the steps' time less
 * the time blocked in collectives), and publishes it under
 * r<round>/speed/<node rank>. Node rank 0's agent compares every rank's
 * with the median and publishes the job's stragglers under
 * r<round>/stragglers/0; every agent reads that, and tells of its own
 * ranks that became stragglers or stopped being ones: a warning, and
 * through the agent's hook an event, `ddprun status`; the
 * ddprun_worker_straggler metric. Per window a node writes one key and
 * reads one (node rank 0 reads one per node besides). A service of the
 * agent's: it owns its state and its timer. */
#ifndef DDPRUN_AGENT_AGENT_SPEED_H
#define DDPRUN_AGENT_AGENT_SPEED_H

#include <uv.h>

#include "agent/agent_coll.h"
#include "agent/agent_goodput.h"
#include "agent/metrics.h"
#include "agent/side_calls.h"
#include "agent/straggler.h"
#include "rendezvous/rdzv.h"

typedef struct agent_speed agent_speed;

typedef struct {
    side_calls *side;       /* the store calls go through it */
    int side_conn;          /* on this rendezvous side connection */
    agent_coll *coll;       /* the records */
    agent_goodput *goodput; /* told what stragglers added (node rank 0's) */
    agent_metrics *metrics; /* each rank's compute (NULL: none) */
    const char *hostname;
    int nproc;              /* local ranks */
    double threshold_pct;   /* --straggler-threshold */
    double window_s;        /* --straggler-window */
    int replace;            /* --replace-stragglers */
    /* This node serves the job's rendezvous store (its leaving would end
     * the job): a straggler here stays; backend names it in the warning. */
    int serves_job_store;
    const char *backend;
} agent_speed_opts;

/* What the watch tells the agent, on the loop. */
typedef struct {
    void *ctx;
    /* Local rank s->local_rank became a straggler (slow 1) or stopped
     * being one. */
    void (*changed)(void *ctx, const rank_speed *s, int slow, double compute, double median);
    /* --replace-stragglers: this node should make way for a spare; why. */
    void (*leave)(void *ctx, const char *why);
} agent_speed_hooks;

/* On loop; o's pointers must outlive the watch. 0, or -ENOMEM. */
int agent_speed_start(uv_loop_t *loop, const agent_speed_opts *o, const agent_speed_hooks *h,
                      agent_speed **out);
/* A group of round `round` starts (a new watch over its world), its
 * figures published through rd; it begins to stop (no window from then
 * on); it has stopped. */
void agent_speed_group_started(agent_speed *w, rdzv *rd, const rdzv_result *round);
void agent_speed_group_stopping(agent_speed *w);
void agent_speed_group_stopped(agent_speed *w);
/* The rendezvous is gone: no more windows. */
void agent_speed_store_lost(agent_speed *w);
/* Per local rank: what node rank 0 said last (NULL before a group). */
const straggler_mark *agent_speed_marks(const agent_speed *w);
/* Stops its timer; w is freed when the loop next runs its close callbacks
 * and no window is out (else when it comes back). NULL: nothing. */
void agent_speed_stop(agent_speed *w);

#endif
