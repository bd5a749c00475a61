/* The agent's metrics: a registry of what the agent's loop and its
 * rendezvous thread record at their events (restarts, worker failures by
 * cause, rendezvous rounds and their durations, heartbeat renewals, the
 * workers' states), rendered on demand in Prometheus' text exposition
 * format (version 0.0.4) together with the series each ddp-train rank
 * writes to <rank dir>/rank_<N>.prom, and the health verdict of
 * TORCHELASTIC_HEALTH_CHECK_PORT. Every function takes the registry's
 * mutex, so the agent's two threads record and the HTTP server's thread
 * renders at once; every recording function accepts NULL (metrics off)
 * and does nothing then. Knows nothing of HTTP (agent/metrics_http.c). */
#ifndef DDPRUN_AGENT_METRICS_H
#define DDPRUN_AGENT_METRICS_H

#include "agent/goodput.h"
#include "common/buf.h"

typedef struct agent_metrics agent_metrics;

/* What the agent is doing, as the series ddprun_agent_state tells it. */
typedef enum {
    METRICS_RENDEZVOUS, /* joining a round (or waiting for one to close) */
    METRICS_RUNNING,    /* the workers run */
    METRICS_STOPPING,   /* stopping the workers to re-form the group */
    METRICS_FINISHED,   /* the workers succeeded; waiting for the other nodes */
    METRICS_SHUTDOWN,   /* stopping for good (signal, failure, lost store) */
} metrics_state;

/* A worker's state, as ddprun_workers{state} counts them. */
typedef enum {
    METRICS_W_RUNNING,
    METRICS_W_SUCCEEDED,
    METRICS_W_FAILED,
    METRICS_W_TERMINATED, /* stopped by the agent */
} metrics_worker_state;

typedef struct {
    const char *run_id, *role, *node; /* labels every series carries */
    const char *rank_dir;             /* where the ranks write rank_<N>.prom; NULL: none */
    double heartbeat_interval;        /* s: older than this, the heartbeat is stale */
    int max_restarts;
} metrics_opts;

/* NULL when out of memory. */
agent_metrics *metrics_new(const metrics_opts *o);
void metrics_free(agent_metrics *m);

/* The agent's loop, after each event: its state. */
void metrics_set_state(agent_metrics *m, metrics_state s);
/* A worker group of n started for round `round` of world_size workers on
 * nodes nodes, restart_count failure restarts spent so far. Every start
 * after the first counts as a restart. */
void metrics_group_started(agent_metrics *m, int n, int round, int world_size, int nodes,
                           int restart_count);
/* A worker ended. */
void metrics_worker_exited(agent_metrics *m, int local_rank, metrics_worker_state s);
/* A worker failed: exitcode as in failure.h (negative: that signal);
 * watchdog 1 when the worker watchdog killed it. Counted by cause:
 * "watchdog", "SIGKILL" (a signal's name), "exit_code_1". */
void metrics_worker_failed(agent_metrics *m, int exitcode, int watchdog);
/* The straggler watch's last window for local rank local_rank (global
 * rank `rank`): its compute per step, s, and whether it is a straggler. */
void metrics_worker_speed(agent_metrics *m, int local_rank, int rank, double compute,
                          int straggler);
/* The node's goodput now. */
void metrics_goodput(agent_metrics *m, const goodput_view *v);
/* The rendezvous thread: a round joined after `seconds` of rendezvous. */
void metrics_round(agent_metrics *m, double seconds);
/* The rendezvous thread: the heartbeat is known renewed now (monotonic s). */
void metrics_heartbeat(agent_metrics *m, double now);

/* Appends every series to out, then the ranks' files' series (each
 * family once, with this agent's labels added); now is clock_now_s().
 * 0 or -ENOMEM. */
int metrics_render(agent_metrics *m, double now, buf_t *out);
/* The health verdict: 200 while the workers run and the heartbeat is
 * fresh, else 503; body gets one line of JSON saying why. */
int metrics_health(agent_metrics *m, double now, char *body, size_t len);

#endif
