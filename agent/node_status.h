/* What an agent tells `ddprun status` about itself: one JSON object,
 * published under the job's status/<agent> key at every change (joining,
 * running, a worker's exit, stopping, the end). */
#ifndef DDPRUN_AGENT_NODE_STATUS_H
#define DDPRUN_AGENT_NODE_STATUS_H

#include "agent/goodput.h"
#include "agent/straggler.h"
#include "agent/worker_group.h"

typedef struct {
    const char *agent_id, *host, *role;
    const char *state;   /* "rendezvous", "running", "stopping", "finishing", */
                         /* "succeeded", "failed", "stopped" */
    int pid;             /* the agent's */
    int node_rank;       /* -1 while it has none */
    int round, group_world_size, world_size;
    int restart_count, max_restarts;
    int nproc, min_nodes, max_nodes;
    double since;        /* wall clock, s: when it entered this state */
    const worker_group *wg;  /* its workers, or NULL */
    char (*last_exit)[128];  /* per local rank: how its last worker ended ("" none) */
    const straggler_mark *slow; /* per local rank: a straggler? (NULL: not watched) */
    const goodput_view *goodput; /* where the node's time went (NULL: not known) */
} node_status;

/* The JSON text (malloc'd), or NULL when out of memory. */
char *node_status_json(const node_status *s);

#endif
