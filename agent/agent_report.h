/* What the agent tells: its status for `ddprun status` (published at each
 * change, a burst once, and every 10 s while the workers run), its events
 * for the event log (<log root>/events.jsonl; torchrun's worker events with
 * --event-log-handler console), and torchrun's failure summary when the
 * restarts are spent. A service of the agent's: it owns the event log, the
 * state last told, its timers and what it knows of the round and the
 * workers, which the agent hands it as they change. */
#ifndef DDPRUN_AGENT_AGENT_REPORT_H
#define DDPRUN_AGENT_AGENT_REPORT_H

#include <jansson.h>
#include <uv.h>

#include "agent/agent_config.h"
#include "agent/agent_goodput.h"
#include "agent/agent_speed.h"
#include "agent/agent_store.h"
#include "agent/failure.h"
#include "agent/side_calls.h"
#include "agent/worker_group.h"
#include "rendezvous/rdzv.h"

typedef struct agent_report agent_report;

typedef struct {
    const agent_config *cfg;
    const char *hostname;     /* this node, as the others know it */
    const char *log_root;     /* where events.jsonl goes */
    const agent_store *store; /* the job's store (the events' master endpoint) */
    agent_goodput *gp;        /* the status' goodput */
    side_calls *side;         /* the refreshes go out there, on side_conn */
    int side_conn;
} agent_report_opts;

/* Opens the event log and starts the refresh timer on loop. 0, or a
 * negative errno after logging why. */
int agent_report_start(uv_loop_t *loop, const agent_report_opts *o, agent_report **out);

/* ---- what the agent hands it, as it changes ---- */

/* Where the status goes (once the rendezvous is open). */
void agent_report_rendezvous(agent_report *r, rdzv *rd);
/* Whose straggler marks the status shows. */
void agent_report_speed(agent_report *r, agent_speed *speed);
/* The round this node is in (copied; its nodes are not kept). */
void agent_report_round(agent_report *r, const rdzv_result *cur);
/* Whether the node is in its round (not joining one), and whether its
 * workers run (the status is refreshed only then). */
void agent_report_standing(agent_report *r, int in_round, int running);
/* The workers (NULL once they are gone), and when they started (wall clock, s). */
void agent_report_group(agent_report *r, const worker_group *wg, double started);
/* The rendezvous is gone: nothing more is published. */
void agent_report_store_lost(agent_report *r);

/* ---- what it tells ---- */

/* Notes the agent's state for `ddprun status`; a burst goes out once. */
void agent_report_tell(agent_report *r, const char *state);
/* Something the status shows changed; its state stays (NULL before any:
 * "running"). */
void agent_report_again(agent_report *r);
/* The state last told ("rendezvous", "running", ...), or NULL. */
const char *agent_report_told(const agent_report *r);
/* Publishes the status now. */
void agent_report_publish(agent_report *r);
/* An agent event: torchrun's rendezvous event fields, plus `extra`'s (taken). */
void agent_report_event(agent_report *r, const char *name, const char *node_state,
                        json_t *extra);
/* The node joins a round: told and recorded. */
void agent_report_joining(agent_report *r);
/* When it began to join the present round (wall clock, s). */
double agent_report_joining_since(const agent_report *r);
/* --event-log-handler console: a worker's end as torchrun's event. */
void agent_report_worker_event(agent_report *r, const worker *w, const char *state,
                               const char *raw_error);
/* How local rank w's last worker ended, for `ddprun status`. */
void agent_report_note_exit(agent_report *r, const worker *w);
/* Restarts are spent: torchrun's summary from every node's failures of the
 * last round that failed, or, when the store has none, from this node's
 * own (n of them, which it takes). */
void agent_report_exhausted(agent_report *r, int restarts, failure *own, int n);

/* Stops its timers and closes the event log; r is freed when the loop next
 * runs its close callbacks. NULL: nothing. */
void agent_report_stop(agent_report *r);

#endif
