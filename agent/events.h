/* The agent's event log: one JSON object a line, in torchrun's event shape
 * (torch.distributed.elastic.events: {"name", "source", "timestamp",
 * "metadata"}), to <log dir>/<rdzv id>/events.jsonl (every agent of the
 * job on a host appends to it; each line is one write) and, with
 * --event-log-handler console, to stderr as well (torchrun's "console"
 * handler; "null" and "dynamic_rendezvous" write no console lines).
 *
 * Worker events are torchrun's: torchelastic.worker.status.<STATE> with
 * the metadata fields its agent gives them. The agent's own events
 * (ddprun.*) carry torchrun's rendezvous event fields where it has them
 * (run_id, hostname, pid, node_state, master_endpoint, rank) and what
 * each event is about; docs/cli.md lists them. */
#ifndef DDPRUN_AGENT_EVENTS_H
#define DDPRUN_AGENT_EVENTS_H

#include <jansson.h>
#include <stdio.h>

typedef struct event_log event_log;

/* path: the file (NULL: none); console: also stderr. NULL with a message
 * in err when the file cannot be opened. */
event_log *event_log_open(const char *path, int console, char *err, size_t errlen);
void event_log_close(event_log *l);

/* Writes one event; takes metadata's reference. l may be NULL. */
void event_log_write(event_log *l, const char *name, const char *source, json_t *metadata);

/* A worker's end: state SUCCEEDED, FAILED or TERMINATED (stopped by the
 * agent). */
typedef struct {
    const char *run_id, *role, *hostname, *rdzv_backend;
    const char *state;
    int global_rank, group_rank, pid, exit_code, agent_restarts;
    double run_time_s;     /* since the group started */
    const char *raw_error; /* the failure's message, or NULL */
} worker_event;

void event_worker_status(event_log *l, const worker_event *e);

#endif
