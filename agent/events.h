/* The agent's events as torchrun records them (torch.distributed.elastic
 * .events): one JSON object a line, {"name", "source", "timestamp",
 * "metadata"}, with the metadata fields torchrun's worker events carry.
 * --event-log-handler console writes them to stderr (torchrun's "console"
 * handler); "null" and "dynamic_rendezvous", torchrun's other built-in
 * handlers, drop them. */
#ifndef DDPRUN_AGENT_EVENTS_H
#define DDPRUN_AGENT_EVENTS_H

#include <stdio.h>

/* A worker's end: state SUCCEEDED, FAILED or TERMINATED (stopped by the
 * agent). */
typedef struct {
    const char *run_id, *role, *hostname, *rdzv_backend;
    const char *state;
    int global_rank, group_rank, pid, exit_code, agent_restarts;
    double run_time_s;     /* since the group started */
    const char *raw_error; /* the failure's message, or NULL */
} worker_event;

/* Writes the event as one line to out (one write, flushed). */
void event_worker_status(FILE *out, const worker_event *e);

#endif
