/* The agent's rendezvous thread: it joins rounds (rdzv_next), watches the
 * running one (rdzv_watch) until a failure or a membership change ends it,
 * joins the next, and on the agent's word runs the exit barrier instead or
 * joins no more; what it learns comes back to the loop as events, through
 * a mailbox and a uv_async. A blocking store call never holds the loop. A
 * service of the agent's: it owns the thread and the mailbox. */
#ifndef DDPRUN_AGENT_RDZV_DRIVER_H
#define DDPRUN_AGENT_RDZV_DRIVER_H

#include <uv.h>

#include "agent/metrics.h"
#include "rendezvous/rdzv.h"

typedef struct rdzv_driver rdzv_driver;

typedef enum {
    RDZV_DRIVER_ROUND,   /* a round formed (rc 0) or could not be (rc, err) */
    RDZV_DRIVER_RESTART, /* the running round ended: why */
    RDZV_DRIVER_BARRIER, /* the exit barrier is over (rc) */
    RDZV_DRIVER_LOST,    /* the rendezvous is gone (rc, err); the thread has ended */
} rdzv_driver_kind;

typedef struct {
    rdzv_driver_kind kind;
    int rc;
    rdzv_event why;
    rdzv_result res;  /* scalars only: res.nodes belongs to the thread */
    char *tf_cluster; /* tf_config: the round's workers (tf_config.h), malloc'd; the handler
                       * may take it (set it NULL); or NULL */
    char err[512];
} rdzv_driver_event;

typedef struct {
    agent_metrics *metrics; /* each round's time (NULL: none) */
    int tf_config;          /* --tf-config: each round's worker list for TF_CONFIG */
    double barrier_timeout_s; /* the exit barrier's */
    void *ctx;
    /* On the loop, in the order they came. */
    void (*event)(void *ctx, rdzv_driver_event *e);
} rdzv_driver_opts;

/* Starts the thread on rd (joining the first round at once). 0, or
 * -errno. */
int rdzv_driver_start(uv_loop_t *loop, rdzv *rd, const rdzv_driver_opts *o, rdzv_driver **out);
/* The workers finished: the exit barrier instead of the next watch, and
 * this node's word that the job's result is kept (kept 1). */
void rdzv_driver_barrier(rdzv_driver *d, int kept);
/* This node leaves the job: no next round. */
void rdzv_driver_leave(rdzv_driver *d);
/* Whether the thread will still block (join or watch a round): 0 once it
 * has said its last word or left. */
int rdzv_driver_running(rdzv_driver *d);
/* The end, on the loop's thread: joins the thread, which has said its last
 * word or been let go (rdzv_cancel on its rendezvous: its store calls fail
 * at once, and it ends), and closes the loop handle; d is freed when the
 * loop next runs its close callbacks. NULL: nothing. */
void rdzv_driver_stop(rdzv_driver *d);

#endif
