/* The agent's state, shared by the files that make it up: agent.c (the
 * state machine), agent_report.c (what it tells: `ddprun status`, the event
 * log, the failure summary) and agent_services.c (what it starts and stops
 * around the workers: the event log, metrics, the watchdog, NUMA binding,
 * the rendezvous). Only these three include it. The services that own
 * their state behind an opaque type of their own (the rendezvous thread,
 * the side calls, goodput, the collective watch, the straggler watch, the
 * node's directories, the worker group, the file timer, metrics, the event
 * log) are reached through their pointers here; the rest moves the same
 * way (docs/architecture.md, "The agent"). */
#ifndef DDPRUN_AGENT_AGENT_INTERNAL_H
#define DDPRUN_AGENT_AGENT_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/agent_coll.h"
#include "agent/agent_goodput.h"
#include "agent/agent_speed.h"
#include "agent/agent_store.h"
#include "agent/coll_blame.h"
#include "agent/events.h"
#include "agent/failure.h"
#include "agent/file_timer.h"
#include "agent/goodput.h"
#include "agent/metrics.h"
#include "agent/metrics_http.h"
#include "agent/numa_binding.h"
#include "agent/side_calls.h"
#include "agent/node_dirs.h"
#include "agent/rdzv_driver.h"
#include "agent/snapshot_dir.h"
#include "agent/straggler.h"
#include "agent/worker_group.h"
#include "rendezvous/rdzv.h"

typedef enum { ST_RDZV, ST_RUNNING, ST_STOPPING, ST_BARRIER, ST_SHUTDOWN } agent_state;
#define MAX_FAILURES 256


typedef struct {
    const agent_config *cfg;
    const char *exe;
    uv_loop_t *loop;
    uv_signal_t sigs[AGENT_MAX_SIGNALS]; /* --signals-to-handle */
    uv_async_t wake;
    rdzv_driver *driver;     /* the rendezvous thread and its mailbox (rdzv_driver.h) */
    rdzv *rd;
    agent_store store; /* where the job's store is; its host when this agent serves it */
    char hostname[256];
    node_dirs *dirs;         /* the log root, the snapshot directory, the janitor (node_dirs.h) */
    worker_group *wg;
    agent_state state;
    rdzv_result cur;
    int have_pending;
    rdzv_result pending;
    char *tf_cluster, *pending_tf_cluster; /* --tf-config: cur's and pending's worker lists */
    char tf_ports[1024];   /* --tf-config: this node's workers' ports, published */
    int exit_code;
    int shutdown_signal;
    int spent_restarts; /* restarts are spent after this many: the summary is due at the end */
    failure fails[MAX_FAILURES];
    int nfails;
    uv_check_t settle; /* at the end of the turn a worker failed in: which failure was the cause */
    int settle_from;   /* fails[settle_from..nfails): the failed exits reaped in that turn */
    numa_plan numa; /* --numa-binding: each local rank's CPUs (numa.n 0: none) */
    double group_started; /* wall clock, s: when the current workers started */
    file_timer *watchdog; /* TORCHELASTIC_ENABLE_FILE_TIMER=1: torch's FileTimerServer */
    char watchdog_path[400];
    event_log *events;     /* <log root>/events.jsonl (and stderr with --event-log-handler console) */
    double joining_since;  /* wall clock, s: when it began to join the present round */
    double state_since;    /* wall clock, s: when the published state last changed */
    const char *told;      /* the state last published */
    char (*last_exit)[128]; /* per local rank: how its last worker ended */
    int store_lost;        /* the rendezvous is gone: publish nothing more */
    uv_timer_t status_timer; /* publishes a burst of changes once (tell) */
    uv_timer_t status_refresh; /* and again every 10 s while the workers run */
    _Atomic int status_gen;  /* bumped by each publication from the loop */
    int prev_group_size;   /* the last round's node count (0: none yet) */
    agent_metrics *metrics;  /* --metrics-port or a health check port: NULL when neither */
    metrics_http *http[2];   /* /metrics; /health on a port of its own */
    char metrics_dir[480];   /* DDPRUN_METRICS_DIR: where the ranks write theirs ("": none) */
    char leave_why[256];     /* set (with a wake) to have the agent leave the job: why */
    side_calls *side;        /* store calls off the loop (side_calls.h) */
    agent_coll *coll;        /* where the workers stand in their collectives (agent_coll.h) */
    agent_speed *speed;      /* the straggler watch (agent_speed.h) */
    agent_goodput *gp;       /* where the node's time went (agent_goodput.h) */
} agent;

/* ---- agent_report.c: what the agent tells ---- */

/* Publishes this agent's status now (its state: the last one told). */
void agent_publish_status(agent *a);
/* Starts publishing it again every 10 s while the workers run (its
 * goodput changes), off the loop. */
void agent_status_refresh_start(agent *a);
/* Notes this agent's state for `ddprun status`; a burst goes out once. */
void agent_tell(agent *a, const char *state);
/* An agent event: torchrun's rendezvous event fields, plus `extra`'s (taken). */
void agent_record_event(agent *a, const char *name, const char *node_state, json_t *extra);
/* The agent joins a round: told and recorded. */
void agent_joining(agent *a);
/* Restarts are spent: torchrun's summary from every node's failures of
 * the last round that failed. */
void agent_report_exhausted(agent *a, int restarts);
/* --event-log-handler console: a worker's end as torchrun's event. */
void agent_record_worker_event(const agent *a, const worker *w, const char *state,
                               const char *raw_error);
/* How local rank w's last worker ended, for `ddprun status`. */
void agent_note_exit(agent *a, const worker *w);

/* ---- store calls off the loop: a->side (side_calls.h) ---- */

/* The rendezvous connection the side calls use (their ctx is the agent). */
#define AGENT_SIDE 1

/* ---- agent_services.c: what the agent starts around its workers ---- */

/* Each returns 0, or a negative errno after logging why. */
/* Leaves the note by which `ddprun status` finds this job from this
 * machine. */
int agent_note_local_job(agent *a);
int agent_open_event_log(agent *a);
int agent_start_metrics(agent *a);
int agent_plan_numa_binding(agent *a);
int agent_start_watchdog(agent *a);
/* Every service the agent starts around its workers, in order (0, or
 * nonzero after logging why), and their stops at the end. */
int agent_start_services(agent *a);
void agent_stop_services(agent *a);
/* The straggler watch (agent_speed.h), telling the agent through its hooks. */
int agent_start_speed(agent *a);
/* The ranks' metrics of an earlier group (under their old ranks), gone
 * before the new group writes its own. */
void agent_clear_rank_metrics(agent *a);
/* The worker group's before_kill: workers still running after the
 * shutdown timeout are asked for their stacks, and get 2 s to write them. */
double agent_stacks_before_kill(worker_group *g);
int agent_open_rendezvous(agent *a);

#endif
