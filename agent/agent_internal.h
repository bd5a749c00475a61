/* The agent's state, shared by the two files that make it up: agent.c (the
 * state machine) and agent_services.c (what it starts and stops around the
 * workers: the node's directories, the reporter, metrics, the watchdog,
 * NUMA binding, the job's store, the rendezvous). Only these two include
 * it. The services that own their state behind an opaque type of their own
 * (the rendezvous thread, the side calls, the reporter, goodput, the
 * collective watch, the straggler watch, the node's directories, the worker
 * group, the file timer, metrics) are reached through their pointers here
 * (docs/architecture.md, "The agent"). */
#ifndef DDPRUN_AGENT_AGENT_INTERNAL_H
#define DDPRUN_AGENT_AGENT_INTERNAL_H

#include <pthread.h>
#include <uv.h>

#include "agent/agent.h"
#include "agent/agent_coll.h"
#include "agent/agent_goodput.h"
#include "agent/agent_report.h"
#include "agent/agent_speed.h"
#include "agent/agent_store.h"
#include "agent/coll_blame.h"
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
    const char *exe;         /* what starts each worker (worker_exec.h) */
    char exe_buf[4096];
    uv_loop_t *loop;         /* &own_loop: everything the agent starts runs on it */
    uv_loop_t own_loop;
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
    /* Workers already dying when the first failure was reaped (before the
     * group's stop): their exits are waited for, up to settle_limit, so a
     * worker killed first and reaped a turn after the peer that exited on
     * its lost connection is still judged the cause. 0: reaped since. */
    int dying[64];
    int ndying;
    int settle_waited;      /* a turn has ended since the first failure */
    uv_timer_t settle_limit;
    numa_plan numa; /* --numa-binding: each local rank's CPUs (numa.n 0: none) */
    file_timer *watchdog; /* TORCHELASTIC_ENABLE_FILE_TIMER=1: torch's FileTimerServer */
    char watchdog_path[400];
    int store_lost;        /* the rendezvous is gone */
    agent_report *report;  /* what it tells: status, events, the summary (agent_report.h) */
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

/* ---- store calls off the loop: a->side (side_calls.h) ---- */

/* The rendezvous connection the side calls use (their ctx is the agent). */
#define AGENT_SIDE 1

/* ---- agent_services.c: what the agent starts around its workers ---- */

/* Each returns 0, or a negative errno after logging why. */
/* Leaves the note by which `ddprun status` finds this job from this
 * machine. */
int agent_note_local_job(agent *a);
int agent_start_metrics(agent *a);
int agent_plan_numa_binding(agent *a);
int agent_start_watchdog(agent *a);
/* Every service the agent starts around its workers, in order (0, or
 * nonzero after logging why), and their stops at the end. */
int agent_start_services(agent *a);
void agent_stop_services(agent *a);
/* Once the services have stopped: the agent's own handles closed, the
 * loop run until every close callback has run and closed, a freed. */
void agent_free(agent *a);
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
