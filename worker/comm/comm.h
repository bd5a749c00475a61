/* The host communicator: collectives on host memory among a job's ranks,
 * a ring over TCP between hosts and shared memory between the ranks of one
 * host. The CPU backend's gradients go through it (worker/comm/devcomm_host.c);
 * GPU memory goes through NCCL instead (worker/comm/devcomm.h), while this one
 * still carries every job's host data. Ranks find each other through the
 * job's store: each publishes its address under a per-attempt key prefix.
 *
 * Reductions happen in the same order on every run, so results are
 * deterministic: a given world size and data give bit-identical sums. */
#ifndef DDPRUN_WORKER_COMM_COMM_H
#define DDPRUN_WORKER_COMM_COMM_H

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include "common/coll_record.h"

typedef struct comm comm;
typedef struct comm_req comm_req;

typedef struct {
    const char *store_host; /* the job's store (MASTER_ADDR) */
    int store_port;         /* (MASTER_PORT) */
    const char *prefix;     /* key prefix unique to this attempt, e.g. "/ddp/attempt_3/" */
    int rank, world;
    int local_rank, local_world; /* ranks on this host (shared memory among them) */
    int timeout_ms;         /* any collective that takes longer fails with -ETIMEDOUT */
    int no_shm;             /* 1: TCP even between ranks on one host (tests) */
    /* NULL, or the caller's variable: once it holds a nonzero time
     * (CLOCK_MONOTONIC ns) and that time has passed, every call in flight
     * or later fails with -ECANCELED and the communicator breaks as on any
     * failure, so the peers find out at once. For a process told to stop
     * while a peer may be gone: a signal handler may set it. */
    const _Atomic int64_t *abort_at_ns;
    /* NULL, or the rank's collective record (common/coll_record.h): every
     * collective is entered in it as it is issued, and left as it ends;
     * the caller keeps it open until comm_destroy. */
    coll_record *record;
} comm_opts;

/* Connects all ranks. 0 or -errno with a message. Ranks with the same
 * host identity (host name, boot id, IPC/PID namespaces; overridable with
 * $DDPRUN_COMM_HOST_ID) share memory; local_rank/local_world are not used
 * for that grouping. timeout_ms <= 0 means 300 s; it bounds comm_init too.
 * Needs ddprun-store (or a torch >= 2 TCPStore: MULTI_GET) at store_host. */
int comm_init(const comm_opts *o, comm **out, char *err, size_t errlen);
/* Every asynchronous request must have been waited for (comm_wait) before;
 * one still queued is cancelled. */
void comm_destroy(comm *c);
int comm_rank(const comm *c);
int comm_world(const comm *c);
/* After a call failed: what went wrong, naming the peer where known
 * ("rank 2: all-reduce failed: local rank 1 (pid 4242) on this host
 * exited during the collective"); "" while the communicator is healthy.
 *
 * Errors: every call returns 0 or -errno. -ETIMEDOUT: the call took longer
 * than timeout_ms. -ECONNRESET: a peer's process or connection went away.
 * -ECONNABORTED: a peer on this host failed first. After any error the
 * communicator is unusable: every later call returns the same error. */
const char *comm_error(const comm *c);

/* In-place sum over all ranks. */
int comm_allreduce_sum(comm *c, float *buf, size_t count);
/* Copies root's bytes to every rank. */
int comm_broadcast(comm *c, void *buf, size_t bytes, int root);
/* recv (world x bytes) gets every rank's send, in rank order. */
int comm_allgather(comm *c, const void *send, void *recv, size_t bytes);
int comm_barrier(comm *c);

/* Memory for buffers that are all-reduced often (DDP's gradients): the
 * ranks on this host read each other's in place, so a large all-reduce of
 * it copies nothing through intermediate buffers (about 40% less memory
 * traffic). Collective among the ranks of a host: each calls it with the
 * same bytes, with no asynchronous request in flight. An all-reduce of
 * this memory must then be over the same offset and count on every rank of
 * the host (comm_error names the rank that differs).
 *
 * 0 and *out (zeroed, page-aligned) on success. -ENOTSUP when no other
 * rank shares this host, and -ENOMEM when the shared memory cannot be had
 * (/dev/shm too small, say): err says why, the communicator stays usable,
 * and the caller keeps to its own memory, which works the same, copying.
 * Any other error broke the communicator (see comm_error). */
int comm_alloc(comm *c, size_t bytes, void **out, char *err, size_t errlen);
/* Frees what comm_alloc gave (not collective). NULL is fine. */
void comm_free(comm *c, void *p);

/* Asynchronous all-reduce for overlapping gradient buckets with the
 * backward pass: requests run in the order issued, on the communicator's
 * own thread; the buffer must stay untouched until comm_wait returns. */
int comm_allreduce_sum_async(comm *c, float *buf, size_t count, comm_req **req);
int comm_wait(comm_req *req);

#endif
