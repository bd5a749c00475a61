/* Rendezvous: how agents agree, over the store, on who is in the next
 * round of the job and with which ranks. Blocking; the agent runs it on
 * its own thread. One algorithm serves both backends: "static" is the
 * dynamic one with min = max = nnodes and node ranks taken from
 * --node-rank.
 *
 * A job's keys live under /ddprun/<run_id>/. Rounds are numbered from 0;
 * round r's keys are under r<r>/:
 *   njoined        ADD counter, the joiners' indexes (1-based)
 *   node/<i>       joiner i's description (agent id, host, nproc, node rank),
 *                  written with COMPARE_SET; "-" where its joiner never wrote
 *                  it (died after taking place i) and the members gave it up
 *   state          the closed round's node count, written once (COMPARE_SET)
 *   ready          set by node rank 0 once the workers' keys are cleared
 *   restarts       failure restarts spent before this round
 *   expect         how many nodes the round is expected to gather
 *   open           set when round r is opened (r > 0)
 *   outcome        why round r ended: "failure" or "membership" (first writer wins)
 *   waiting/<i>    nodes that arrived after the round closed (a scale-up)
 *   spare/<i>      nodes that arrived after it closed full (spares)
 *   poke/<agent>   wakes that agent's watch (used for the exit barrier)
 *   ndone, alldone exit barrier
 *   done/<agent>   that agent's workers finished (said at the exit barrier)
 * plus, for the whole job, "round" (the current round), "closed" (the job
 * finished: 1 when every node said so, 2 once one node's workers said
 * that its result is kept (RDZV_CLOSED_KEPT), "kept_by" naming that node),
 * "settings" (the --nnodes and --max-restarts every node must give, and
 * the host of the first node, which set them: COMPARE_SET),
 * "failures" (one JSON line per worker failure) and for each
 * agent "alive/<agent>" (store backends: owned by its connection, gone the
 * moment the agent dies), "hb/<agent>" (owned by a lease the agent renews:
 * gone within one heartbeat interval if the agent is stopped or cut off),
 * "beat/<agent>" (the wall-clock time of its last renewal) and
 * "status/<agent>" (what the agent says it does, JSON, for
 * `ddprun status`; both stay after the agent is gone). */
#ifndef DDPRUN_RENDEZVOUS_RDZV_H
#define DDPRUN_RENDEZVOUS_RDZV_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "rendezvous/rdzv_backend.h"
#include "rendezvous/rdzv_kv.h"

#define RDZV_MAX_NODES 4096

typedef struct {
    const rdzv_backend *backend;
    rdzv_endpoint where;      /* where the backend keeps the job's keys */
    const char *key_prefix;   /* the job's keys live under <key_prefix><run_id>/ */
                              /* (NULL: "/ddprun/") */
    const char *store_addr;   /* a backend not RDZV_IN_JOB_STORE: this agent's own store */
                              /* for its workers, "host:port"; node rank 0's becomes */
                              /* MASTER_ADDR:PORT */
    const char *run_id;
    int min_nodes, max_nodes;
    int node_rank;            /* >= 0: this node's rank if it can have it; -1: by host name */
    int strict_ranks;         /* static backend: node ranks must be exactly 0..n-1 */
    int nproc;                /* this node's workers */
    const char *hostname;     /* this node's name, for ranks and messages */
    const char *worker_ports; /* "p1,p2,...": ports this node's workers listen on, */
                              /* published to the others (--tf-config); NULL: none */
    double join_timeout;      /* s */
    double last_call_timeout; /* s */
    double heartbeat;         /* s */
    int max_restarts;
    /* Called with ctx, each may be NULL; on the rendezvous' thread but for
     * on_beat. */
    /* After each renewal of the heartbeat (now: the monotonic clock, ms),
     * for the agent's metrics: on the heartbeat's own thread. */
    void (*on_beat)(void *ctx, int64_t now_ms);
    /* Not RDZV_IN_JOB_STORE, on node rank 0 of a round before the others'
     * workers may start: empties this agent's own store of what workers of an
     * earlier round left there (rdzv_clear_worker_keys), saying how many keys
     * went in *cleared (0 or a negative errno). */
    int (*clear_own_store)(void *ctx, size_t *cleared);
    /* TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (torchrun's way out of a shared
     * store), on node rank 0 of a round before the others' workers may
     * start: "host:port" (a free port of this host) where the round's rank 0
     * worker will host the workers' store, as torchrun then has it; every
     * node's workers are told so (rdzv_result.worker_hosted). NULL: the
     * workers use the agents' store. 0 or a negative errno. */
    int (*worker_hosted_store)(void *ctx, char *hostport, size_t len);
    void *ctx;
} rdzv_opts;

/* A member of a round. Its strings point into the description it was
 * parsed from (rdzv_parse_node), which must outlive it: 48 bytes a node,
 * so that a round of 1,000 nodes costs each agent 48 KB, not 1.5 MB of
 * fresh pages. */
typedef struct {
    const char *agent_id;
    const char *host;
    const char *store;        /* the agent's own store "host:port" (etcd-v3), or "-" */
    const char *worker_ports; /* its rdzv_opts.worker_ports, or "-" */
    int nproc;
    int node_rank_hint;
    int prev_round, prev_rank; /* the last round it was a member of, and its rank there */
                               /* (-1: none) */
} rdzv_node;

typedef struct {
    int round;
    int group_rank;       /* this node's rank */
    int group_world_size; /* nodes in the round */
    int rank_offset;      /* global rank of this node's local rank 0 */
    int world_size;       /* workers in the round */
    int restart_count;    /* failure restarts spent so far */
    char master_store[160]; /* etcd-v3: node rank 0's store "host:port"; with worker_hosted,
                             * where the round's rank 0 worker hosts one; "" otherwise */
    int worker_hosted;    /* node rank 0 asked for the workers' own store (its agent had
                           * worker_hosted_store): their rank 0 hosts it at master_store */
    rdzv_node *nodes;     /* in rank order; owned by the rdzv handle */
} rdzv_result;

typedef enum {
    RDZV_EV_NONE = 0,       /* watch timed out; nothing happened */
    RDZV_EV_FAILURE,        /* a worker failed somewhere: restart */
    RDZV_EV_MEMBERSHIP,     /* a node left or is waiting to join: restart */
    RDZV_EV_POKED,          /* the local agent asked the watch to return */
} rdzv_event;

typedef struct rdzv rdzv;

/* Connects to the store (retrying until join_timeout). 0 or -errno with
 * a message in err. */
int rdzv_open(const rdzv_opts *o, rdzv **out, char *err, size_t errlen);
/* From another thread: every store call of r's, those under way and those
 * after, on every connection, fails with -ECANCELED (so a thread blocked
 * in one can be joined before rdzv_close). */
void rdzv_cancel(rdzv *r);
void rdzv_close(rdzv *r);
/* This agent's id in the store. */
const char *rdzv_agent_id(const rdzv *r);

/* What rdzv_next and rdzv_exit_barrier return besides 0 and a negative
 * errno: named results, positive, so that none passes for an error. */
typedef enum {
    RDZV_RESTARTS_SPENT = 100, /* the job failed more than --max-restarts times */
    RDZV_NOT_NEEDED,           /* a spare whose job finished without it */
    RDZV_ANOTHER_FAILED,       /* the exit barrier: another node's workers failed */
    RDZV_JOB_KEPT,             /* rdzv_next: a member of the last round learns that another */
                               /* node's workers finished the job and kept its result */
} rdzv_outcome;

/* "closed" once a node's workers finished the job and said that its
 * result is kept (DDPRUN_FINISHED_FILE): no round can follow. */
#define RDZV_CLOSED_KEPT 2

/* Joins the next round and returns once it is closed and ready. -ETIMEDOUT
 * (message names who came) if too few nodes joined within join_timeout;
 * RDZV_RESTARTS_SPENT (res->restart_count tells how many were spent);
 * RDZV_NOT_NEEDED if this node stood by (a spare, or waiting to be
 * admitted) and the job finished without it (torch's graceful exit of a
 * redundant node: not a failure); RDZV_JOB_KEPT if this node was a member
 * of the round whose workers finished the job and kept its result
 * elsewhere (its own failure came after the end: the message in err names
 * the node; this node's word at that round's barrier is given); -EPIPE if
 * the job had finished before. */
int rdzv_next(rdzv *r, rdzv_result *res, char *err, size_t errlen);

/* Blocks up to timeout_ms watching the running round. Returns the event
 * (RDZV_EV_NONE on timeout) or -errno (the heartbeat's too: its store gone). */
int rdzv_watch(rdzv *r, int timeout_ms, rdzv_event *ev);

/* Ends the current round for `why` (RDZV_EV_FAILURE or RDZV_EV_MEMBERSHIP)
 * and opens the next one. Safe to call from several agents: the first
 * reason wins. Uses the caller's own store connection (`side`), so it may
 * run on another thread than rdzv_watch. */
int rdzv_end_round(rdzv *r, int side, rdzv_event why);

/* Records a failure description (one JSON line) for the job's summary. */
int rdzv_record_failure(rdzv *r, int side, const char *json_line);
/* All failure lines recorded so far (malloc'd, NUL-terminated) or NULL. */
char *rdzv_failures(rdzv *r, int side);

/* Publishes this agent's status (a JSON object) under status/<agent>. */
int rdzv_publish_status(rdzv *r, int side, const char *json);

/* What node group_rank says of its workers in round `round` (JSON), under
 * r<round>/<what>/<group_rank>: "coll", where they stand in their
 * collectives (agent/coll_blame.h); "speed", their compute per step
 * (agent/straggler.h). And every node's of the round: out[i] (malloc'd)
 * for node i, NULL where it published none. */
int rdzv_publish_node_info(rdzv *r, int side, int round, const char *what, int group_rank,
                           const char *json);
int rdzv_node_infos(rdzv *r, int side, int round, const char *what, int nnodes, char **out);

/* Spares standing by for round `round` to end (it was full when they came:
 * r<round>/spare/<i>), still alive: *n. */
int rdzv_live_spares(rdzv *r, int side, int round, int *n);

/* Wakes this agent's rdzv_watch (RDZV_EV_POKED). */
int rdzv_poke(rdzv *r, int side);

/* Exit barrier: waits until every node of the round has finished, or the
 * round ends otherwise, or timeout. 0 when all finished;
 * RDZV_ANOTHER_FAILED when the round ended with a failure elsewhere.
 * `kept`: this node's workers said that the job's result is kept (a
 * data-parallel job's ranks hold one state, so one node's word covers the
 * job): the job is closed (RDZV_CLOSED_KEPT), a failure elsewhere from now
 * on comes after the end and ends nothing, and the barrier waits for every
 * other member to say it finished too (rdzv_next tells a failed one) or to
 * be gone. */
int rdzv_exit_barrier(rdzv *r, double timeout_s, int kept);

/* After rdzv_watch failed with rc: that the rendezvous is lost, where and
 * why, in words for the log ("lost the rendezvous: the store at h:p does
 * not answer (it stopped answering): ..."). From the thread that makes the
 * calls. */
void rdzv_lost_message(const rdzv *r, int rc, char *err, size_t errlen);
/* "the store at h:p" or "etcd at h1:2379,...", for messages. */
const char *rdzv_where(const rdzv *r);

/* A node's description as joiners write it under r<r>/node/<i>, parsed in
 * place: its tabs become NULs and node's strings point into s. */
int rdzv_parse_node(char *s, rdzv_node *node);

/* Empties the workers' keyspace of a store before a round's workers
 * start: deletes every key but the agents' own (those under "/ddprun/" and
 * under keep, the job's key prefix, when not NULL). Workers of an earlier
 * round may have left keys there, and torch 2.x's workers (unlike 1.13's)
 * put no per-attempt prefix on theirs: the new round's gloo or NCCL would
 * read the dead round's addresses. So every round's workers meet in an
 * empty store, as under torch's per-attempt stores. 0 and in *cleared how
 * many keys went, or -errno. */
int rdzv_clear_worker_keys(rdzv_kv *kv, const char *keep, size_t *cleared);

#endif
