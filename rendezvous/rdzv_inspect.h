/* Reads a job's state from its rendezvous keys (rdzv.h lists them)
 * without joining it: what `ddprun status` shows. Works on any job, one
 * stuck at the rendezvous as well as one training or finished; only reads. */
#ifndef DDPRUN_RENDEZVOUS_RDZV_INSPECT_H
#define DDPRUN_RENDEZVOUS_RDZV_INSPECT_H

#include <jansson.h>

#include "rendezvous/rdzv_backend.h"

typedef struct {
    const rdzv_backend *backend;
    rdzv_endpoint where;        /* where it keeps the job's keys */
    const char *key_prefix;     /* NULL: "/ddprun/" */
    const char *run_id;
} rdzv_inspect_opts;

/* The job as a JSON object (*out, the caller's):
 *   run_id, where ("the store at h:p"), found (any key of the job),
 *   round, finished, restart_count, min_nodes, max_nodes (from the agents'
 *   statuses; -1 unknown), phase ("gathering", "starting", "running",
 *   "restarting", "finished", "unknown"), joined, expect, closed_with
 *   (null while gathering), waiting (nodes waiting to be admitted),
 *   outcome (why the round ended, or null), waiting_for (a sentence, ""
 *   when the job waits for nothing),
 *   nodes: [{agent_id, host, member, node_rank, nproc, alive,
 *            heartbeat_age_s (null: never beat), status (the agent's own
 *            JSON, or null)}], members first in node rank order,
 *   failures: [the failure lines, oldest first, root_cause true on the
 *             first of each round].
 * 0, or a negative errno with a message in err. */
int rdzv_inspect(const rdzv_inspect_opts *o, json_t **out, char *err, size_t errlen);

#endif
