/* Collectives on the compute backend's memory: what DDP needs for
 * gradients, parameters and SyncBatchNorm statistics. One interface, two
 * implementations chosen with the backend: on the CPU the host
 * communicator itself (worker/comm/comm.h: TCP ring and shared memory; backend
 * memory is host memory), on GPUs NCCL (worker/comm/nccl/nccl_comm.c), its
 * ncclUniqueId passed through the job's store.
 *
 * The trainer keeps the host communicator for host data too (checkpoint
 * headers, the step's loss), so a GPU job has both; they never interleave
 * on one buffer. */
#ifndef DDPRUN_WORKER_COMM_DEVCOMM_H
#define DDPRUN_WORKER_COMM_DEVCOMM_H

#include <errno.h>
#include <stddef.h>

#include "common/coll_record.h"
#include "worker/backend/backend.h"
#include "worker/comm/comm.h"

typedef struct devcomm devcomm;

typedef struct {
    const char *name;
    /* In-place sum over all ranks of count floats of backend memory, in
     * the order issued; *req is waited for with wait. On a GPU the call
     * queues after the work already queued on the backend's stream. */
    int (*allreduce_sum_async)(devcomm *d, float *buf, size_t count, void **req);
    /* Until the request's result is usable by the next backend operation.
     * On the CPU this waits, and a failure or timeout is reported here; on
     * a GPU the compute stream is made to wait, and failures surface in
     * sync. */
    int (*wait)(devcomm *d, void *req);
    /* Waits until every collective issued so far has completed, within the
     * timeout: where a GPU communicator reports errors and timeouts (after
     * aborting itself). A no-op on the CPU. */
    int (*sync)(devcomm *d);
    /* root's bytes of backend memory to every rank; returns when done. */
    int (*broadcast)(devcomm *d, void *buf, size_t bytes, int root);
    /* After a failed call, what went wrong ("" while healthy). */
    const char *(*error)(const devcomm *d);
    /* Optional (NULL where there is none): backend memory placed where the
     * collectives read it in place, for buffers all-reduced every step
     * (on the CPU, comm_alloc's shared windows). Collective, as comm_alloc:
     * 0, or -errno and why; the caller then keeps to its own memory unless
     * error() says the communicator broke. */
    int (*alloc)(devcomm *d, size_t bytes, void **out, char *why, size_t whylen);
    void (*free)(devcomm *d, void *p);
    /* Optional (NULL where steps are never recorded): the recorded step
     * was launched again, so the collectives captured when it was recorded
     * are in flight now, though the host issued none of them; they enter
     * the collective record as if issued, and sync finishes them. */
    void (*replayed)(devcomm *d);
    void (*destroy)(devcomm *d);
} devcomm_ops;

struct devcomm {
    const devcomm_ops *ops;
    int rank, world;
    void *impl;
};

/* For the CPU backend: collectives through the host communicator c (not
 * owned: destroy leaves it open). */
int devcomm_host_create(comm *c, devcomm **out);

/* For the CUDA backend (worker/comm/nccl/nccl_comm.c; in a build without CUDA,
 * worker/backend/nocuda/cuda_none.c fails with -ENOTSUP). */
typedef struct {
    backend *be;            /* a CUDA backend: its device and stream */
    const char *store_host; /* the job's store, for the ncclUniqueId */
    int store_port;
    const char *prefix;     /* per-attempt key prefix, as comm_opts */
    int rank, world;
    int timeout_ms;         /* a collective longer than this aborts the communicator */
    const _Atomic int64_t *abort_at_ns; /* NULL, or nonzero: the rank is stopping; a
                                         * collective still unfinished then aborts */
    coll_record *record;    /* NULL, or the rank's collective record (not owned): NCCL's
                             * collectives are numbered there with the host's */
    int overlap_step;       /* 0, or k: the all-reduces of the k-th step (the k-th sync)
                             * are timed on the device against the compute stream, and
                             * rank 0 logs how much of them overlapped its work */
} devcomm_nccl_opts;
int devcomm_nccl_create(const devcomm_nccl_opts *o, devcomm **out, char *err, size_t errlen);
/* devcomm_nccl_create without its wait, so that the caller builds its
 * model and reads its state while NCCL sets itself up (in a thread of
 * NCCL's own): passes the id through the store and starts NCCL's
 * initialisation; the communicator's first collective waits for it (to
 * o->timeout_ms from the start). A communicator whose set-up is under way
 * may be destroyed (the set-up is aborted). */
int devcomm_nccl_start(const devcomm_nccl_opts *o, devcomm **pending, char *err,
                       size_t errlen);
/* 1 when a rank that was stopping left an NCCL communicator's abort
 * running rather than wait for it past its stop: the process must then end
 * without tearing the device down (_exit), as the abort still uses it. */
int devcomm_nccl_abort_unfinished(void);

static inline int devcomm_allreduce_sum_async(devcomm *d, float *buf, size_t count, void **req) {
    return d->ops->allreduce_sum_async(d, buf, count, req);
}
static inline int devcomm_wait(devcomm *d, void *req) { return d->ops->wait(d, req); }
static inline int devcomm_sync(devcomm *d) { return d->ops->sync(d); }
/* (With one rank there is nothing to send: not a collective at all.) */
static inline int devcomm_broadcast(devcomm *d, void *buf, size_t bytes, int root) {
    return d->world == 1 ? 0 : d->ops->broadcast(d, buf, bytes, root);
}
static inline const char *devcomm_error(const devcomm *d) { return d->ops->error(d); }
static inline int devcomm_alloc(devcomm *d, size_t bytes, void **out, char *why, size_t whylen) {
    if (!d->ops->alloc) {
        *out = NULL;
        if (whylen) why[0] = 0;
        return -ENOTSUP;
    }
    return d->ops->alloc(d, bytes, out, why, whylen);
}
static inline void devcomm_free(devcomm *d, void *p) {
    if (d->ops->free && p) d->ops->free(d, p);
}
static inline void devcomm_replayed(devcomm *d) {
    if (d->ops->replayed) d->ops->replayed(d);
}
static inline void devcomm_destroy(devcomm *d) {
    if (d) d->ops->destroy(d);
}

#endif
