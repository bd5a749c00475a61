/* The CUDA backend's devcomm (see devcomm.h): collectives on device memory
 * through NCCL.
 *
 * Set-up: rank 0 makes the ncclUniqueId and publishes it in the job's store
 * under <prefix>nccl_id; the other ranks wait for it there. The
 * communicator is non-blocking (config.blocking = 0) so that set-up, like
 * every collective, can be bounded by the timeout and aborted instead of
 * hanging in NCCL.
 *
 * Ordering: NCCL runs on a stream of its own, high priority so that the
 * gradient buckets overtake backward's kernels. Each call records an event
 * on the backend's compute stream and makes the NCCL stream wait for it, so
 * a collective sees everything queued before it; wait makes the compute
 * stream wait for the collective's completion event, so everything queued
 * after sees its result. Neither waits on the host: issuing a collective
 * waits only for NCCL to put it on its stream, never for it to run, which
 * keeps the buckets overlapping with backward, and a step containing
 * collectives can be recorded as a CUDA graph (the NCCL stream joins the
 * recording through those events). The backend is told which memory each
 * collective writes, so it converts any weights there again (a broadcast
 * of the parameters) instead of using stale copies.
 *
 * Failure: sync supervises everything issued so far from the host (an
 * event after it on the compute stream, NCCL's asynchronous error, the
 * deadline); broadcast, used outside steps, supervises itself. An NCCL
 * error or a collective past its timeout aborts the communicator and
 * leaves it broken: every later call returns the same error at once,
 * ddp-train exits non-zero and the launcher restarts the group instead of
 * it hanging.
 *
 * The collective record (common/coll_record.h): each collective enters it
 * as it is issued, numbered in one sequence with the host communicator's,
 * and leaves it when sync (or broadcast's own supervision) sees it done;
 * the polling loops tick it. A step recorded as a CUDA graph issues its
 * collectives once, at the recording, where nothing runs: they are kept,
 * and each replay enters them again (devcomm_replayed). So a rank stuck in
 * an NCCL collective, or never reaching one, is named by the agent's hang
 * verdict as a host collective's would be. */
#include <assert.h>
#include <pthread.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "common/log.h"
#include "store/store_client.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/comm/comm_call.h"
#include "worker/comm/devcomm.h"
#include "worker/comm/nccl/nccl_overlap.h"

#define NCCL_DEFAULT_TIMEOUT_MS 300000

typedef enum { NC_ALLREDUCE, NC_BROADCAST } nc_kind;
/* Their names in the collective record (at most COLL_OP_LEN - 1 chars). */
static const char *const kind_names[] = {"nccl all-reduce", "nccl broadcast"};

/* Collectives as the record counts them: those issued and not yet seen
 * done (their numbers), or those captured in the recorded step (their
 * kind and bytes, entered again at each replay). */
typedef struct {
    uint64_t seq, bytes;
    nc_kind kind;
} nc_noted;

typedef struct {
    nc_noted *v;
    int n, cap;
} nc_notes;

/* One collective in flight: what wait needs to supervise it. Requests are
 * recycled through a free list (their events are the costly part); every
 * request ever made is also on the `all` list, which destroy frees. */
typedef struct nc_req {
    cudaEvent_t done; /* recorded on the NCCL stream after the collective */
    int64_t issued_ns;
    nc_kind kind;
    size_t count; /* floats for an all-reduce, bytes for a broadcast */
    int root;
    struct nc_req *next_free, *next_all;
} nc_req;

typedef struct {
    devcomm d;            /* what the trainer holds; d.impl points back here */
    ncclComm_t comm;      /* NULL once destroyed or aborted */
    int device;
    const backend *be;    /* the backend (not owned): told what NCCL writes */
    cudaStream_t compute; /* the backend's stream (not owned) */
    cudaStream_t stream;  /* NCCL's stream */
    cudaEvent_t ready;    /* "the stream got this far", waited for by another */
    cudaEvent_t synced;   /* on the compute stream: everything issued is done */
    int64_t oldest_ns;    /* when the oldest collective not yet synced was issued */
    nc_req *free, *all;
    int timeout_ms;
    const _Atomic int64_t *abort_at_ns; /* the trainer's "stopping" deadline (or NULL) */
    coll_record *record;  /* the rank's collective record (not owned), or NULL */
    nc_notes open;        /* entered in the record, not yet seen done */
    nc_notes captured;    /* issued while the step was being recorded */
    int capturing;        /* captured holds the recording under way */
    nccl_overlap *overlap; /* --overlap-report's timing of one step, or NULL */
    int64_t setup_deadline; /* when the set-up must have finished */
    int up;               /* set-up finished: failures are logged from now on */
    int broken;           /* the first failure's code; every later call returns it */
    char op[96];          /* the operation under way, for messages */
    char err[1024];       /* "rank R: what went wrong" ("" while healthy) */
    size_t err_rank;      /* length of the "rank R: " part of err */
} nc;

static int64_t ms_to_ns(int ms) { return (int64_t)ms * 1000000; }

static int ms_left(int64_t deadline_ns) {
    int64_t ms = (deadline_ns - clock_now_ns()) / 1000000;
    return ms > 0 ? (int)ms : 1;
}

/* --- failure ------------------------------------------------------------- */

static int stop_passed(const nc *n, int64_t now);

/* How long a stopping rank waits for ncclCommAbort (seen: 0.56 s on an
 * H200 with a frozen peer), and whether one was left running. */
#define ABORT_WAIT_STOPPING_NS 300000000LL
static _Atomic int abort_left_running;

/* Whether thread t ended by the deadline (joined if so). */
static int join_within(pthread_t t, int64_t deadline_ns) {
    int64_t left = deadline_ns - clock_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* (pthread_timedjoin_np's clock) */
    if (left > 0) {
        ts.tv_sec += left / 1000000000LL;
        ts.tv_nsec += left % 1000000000LL;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    }
    return pthread_timedjoin_np(t, NULL, &ts) == 0;
}

static void *abort_main(void *comm) {
    (void)NCCL_CHECK_RC(ncclCommAbort(comm)); /* logged; nothing more to do */
    return NULL;
}

/* Frees the communicator and stops whatever it still runs on the device.
 *
 * Two waits that only end together. ncclCommAbort (blocking even on a
 * non-blocking communicator) first raises the flag its kernels poll, then
 * waits, with no bound, until no CUDA graph holds any of its collectives
 * (NCCL's persistent references, released when the graph is destroyed).
 * And destroying the recorded step while a replay of it is stuck in a
 * collective waits until the replay ends (seen on an H200, driver 580:
 * cudaGraphExecDestroy blocked while the replay's all-reduce waited for a
 * stopped peer), which only the abort flag brings about. One thread doing
 * one then the other hangs either way; so the abort runs on a thread of
 * its own, it raises the flag, the stuck replay ends, the recording is
 * destroyed here, and that releases the abort. */
static void nc_abort(nc *n) {
    if (!n->comm) return;
    pthread_t t;
    int64_t t0 = clock_now_ns();
    int threaded = pthread_create(&t, NULL, abort_main, n->comm) == 0;
    if (!threaded) log_warn("NCCL abort: no thread for it (%s); a replay stuck in a collective "
                            "may hold it up", strerror(errno));
    cuda_backend_drop_recording(n->be);
    /* A rank told to stop leaves within a second: once the abort has
     * raised its flag (its first act), the rest of it (NCCL's threads
     * joined, its memory freed) is the process's end's to do. */
    if (threaded && stop_passed(n, t0) && !join_within(t, t0 + ABORT_WAIT_STOPPING_NS)) {
        pthread_detach(t);
        atomic_store(&abort_left_running, 1);
        log_info("rank %d: NCCL communicator aborting; not waited for past %.2f s, as the rank "
                 "is stopping (the process's end finishes it)",
                 n->d.rank, (double)ABORT_WAIT_STOPPING_NS * 1e-9);
        n->comm = NULL;
        return;
    }
    if (threaded) pthread_join(t, NULL);
    else abort_main(n->comm);
    n->comm = NULL;
    log_info("rank %d: NCCL communicator aborted in %.2f s", n->d.rank,
             (double)(clock_now_ns() - t0) * 1e-9);
}

int devcomm_nccl_abort_unfinished(void) { return atomic_load(&abort_left_running); }

/* Whether the compute stream is being recorded (a capture under way, valid
 * or already invalidated: either way it has not ended). */
static int recording(const nc *n) {
    enum cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
    return n->compute && CUDA_CHECK_RC(cudaStreamIsCapturing(n->compute, &s)) == 0 &&
           s != cudaStreamCaptureStatusNone;
}

/* Marks the communicator broken with its first failure and aborts it: the
 * first failure is the cause, later ones are its consequences, and once
 * one rank has failed a collective the ranks' orders of collectives no
 * longer match, so nothing that follows could be trusted anyway.
 *
 * Except while the step is being recorded: collectives already captured
 * belong to a graph that exists until the capture ends, and ncclCommAbort
 * waits, unbounded, until no graph holds any (see cuda_backend_drop_
 * recording), so aborting here would never return. Nothing captured has
 * run, so nothing is stuck on the device; the communicator stays broken
 * (every call returns the error), the trainer ends the recording and
 * fails the step, and destroy aborts it then. */
static int nc_fail(nc *n, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int nc_fail(nc *n, int rc, const char *fmt, ...) {
    if (n->broken) return n->broken;
    n->broken = rc;
    int k = snprintf(n->err, sizeof n->err, "rank %d: ", n->d.rank);
    n->err_rank = k > 0 ? (size_t)k : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->err + n->err_rank, sizeof n->err - n->err_rank, fmt, ap);
    va_end(ap);
    size_t len = strlen(n->err);
    if (n->comm) snprintf(n->err + len, sizeof n->err - len, "; communicator aborted");
    /* The trainer reports only the errno of a failed step; the detail is
     * here. During set-up the caller prints the message itself. */
    if (n->up) log_error("%s", n->err);
    if (!recording(n)) nc_abort(n);
    return rc;
}

/* The failure handlers of the checks around every CUDA and NCCL call
 * (cuda_check.h's _CHECK_OR forms): the check has logged the call with
 * file:line and given the errno; the communicator breaks (nc_fail), keeping
 * the library's words for the trainer and every later call. */
static int nc_nccl_failed(nc *n, ncclResult_t r, int rc) {
    char last[512];
    cuda_check_nccl_last_error(last, sizeof last);
    return nc_fail(n, rc, "NCCL %s failed: %s%s%s%s", n->op, ncclGetErrorString(r),
                   last[0] ? " (" : "", last, last[0] ? ")" : "");
}

static int nc_cuda_failed(nc *n, cudaError_t e, int rc) {
    return nc_fail(n, rc, "CUDA error during NCCL %s: %s (%s)", n->op, cudaGetErrorString(e),
                   cudaGetErrorName(e));
}

/* --- supervision --------------------------------------------------------- */

/* Short sleeps first: a collective usually completes within microseconds
 * of backward's end, and sleeping past that delays the next step's work.
 * Later naps stay at 200 us: a large all-reduce over a slow network takes
 * hundreds of milliseconds as a matter of course, and a 5 ms nap would add
 * up to 5 ms to every such step. Only a wait of 10 s (a stuck peer, well
 * on the way to the timeout) is checked every 5 ms. */
static void nap(int64_t waited_ns, unsigned *us) {
    unsigned sleep_us = waited_ns > 10000000000LL ? 5000 : *us;
    struct timespec ts = {0, (long)sleep_us * 1000};
    nanosleep(&ts, NULL);
    if (*us < 200) *us *= 2;
}

static int nc_stopped(nc *n) {
    return nc_fail(n, -ECANCELED,
                   "NCCL %s aborted: this rank is stopping and the collective did not finish in "
                   "time (a peer is gone or stuck)",
                   n->op);
}

/* Whether the trainer, told to stop, has given up on what is in flight. */
static int stop_passed(const nc *n, int64_t now) {
    int64_t at = n->abort_at_ns ? atomic_load(n->abort_at_ns) : 0;
    return at && now >= at;
}

static int nc_timed_out(nc *n) {
    return nc_fail(n, -ETIMEDOUT,
                   "NCCL %s timed out after %g s (a peer is stuck, slow or gone: see the other "
                   "ranks' logs)",
                   n->op, n->timeout_ms / 1000.0);
}

/* The communicator's asynchronous state in *st (ncclSuccess, ncclInProgress
 * while it finishes a call, or the error that broke it), returned too
 * unless reading it failed. */
static ncclResult_t async_error(const nc *n, ncclResult_t *st) {
    *st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(n->comm, st);
    return cuda_check_ok_nccl(r) ? *st : r;
}

/* Whether ev has completed, in *done. "Not ready" is no failure, but
 * CUDA also keeps it as the thread's last error, which the next kernel
 * launch's cudaGetLastError would report as its own failure: clear it. */
static cudaError_t event_query(cudaEvent_t ev, int *done) {
    cudaError_t e = cudaEventQuery(ev);
    *done = e == cudaSuccess;
    if (e != cudaErrorNotReady) return e;
    (void)cudaGetLastError();
    return cudaSuccess;
}

/* Until ev has completed (or, with ev NULL, until the communicator has
 * finished the call it returned ncclInProgress for), NCCL reports an
 * error, or deadline_ns passes. */
static int nc_poll(nc *n, cudaEvent_t ev, int64_t deadline_ns) {
    int64_t start = clock_now_ns();
    for (unsigned us = 4;;) {
        ncclResult_t st;
        NCCL_CHECK_OR(async_error(n, &st), nc_nccl_failed, n);
        if (ev) {
            int done = 0;
            CUDA_CHECK_OR(event_query(ev, &done), nc_cuda_failed, n);
            if (done) return 0;
        } else if (st == ncclSuccess) {
            return 0;
        }
        int64_t now = clock_now_ns();
        if (now >= deadline_ns) return nc_timed_out(n);
        if (stop_passed(n, now)) return nc_stopped(n);
        coll_record_tick(n->record);
        nap(now - start, &us);
    }
}

/* NCCL's set-up, started by devcomm_nccl_start and going on in NCCL's
 * thread, finished: 0, or its failure (n->err says it). */
static int setup_wait(nc *n) {
    if (n->up) return 0;
    if (n->broken) return n->broken;
    int rc = nc_poll(n, NULL, n->setup_deadline);
    if (rc == 0) n->up = 1;
    return rc;
}

/* The first collective waits for the set-up (the trainer builds its model
 * and reads its state meanwhile). Its failure is said here, once: the
 * trainer reports only the errno of a failed collective. */
static int nc_ready(nc *n) {
    int was_broken = n->broken;
    int rc = setup_wait(n);
    if (rc && !was_broken) log_error("%s", n->err);
    return rc;
}

/* --- the collective record ---------------------------------------------- */

static int notes_push(nc_notes *l, nc_noted e) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        nc_noted *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return -ENOMEM;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = e;
    return 0;
}

/* A collective entered in the record and left open until sync. */
static void note_open(nc *n, nc_kind kind, uint64_t bytes) {
    uint64_t seq = coll_record_enter(n->record, kind_names[kind], bytes);
    if (seq && notes_push(&n->open, (nc_noted){.seq = seq, .bytes = bytes, .kind = kind}))
        coll_record_leave(n->record, seq, -ENOMEM); /* unfollowed: closed at once */
}

/* An all-reduce of `bytes`, about to be issued: into the record, or, while
 * the step is being recorded (nothing runs), among the recording's
 * collectives. A capture that began after the last replay or sync is a
 * new recording. */
static void note_allreduce(nc *n, uint64_t bytes) {
    if (!n->record) return;
    if (recording(n)) {
        if (!n->capturing) n->captured.n = 0;
        n->capturing = 1;
        (void)notes_push(&n->captured, (nc_noted){.bytes = bytes, .kind = NC_ALLREDUCE});
        return;
    }
    note_open(n, NC_ALLREDUCE, bytes);
}

/* Every collective still open has ended with rc (0: done). */
static void close_open(nc *n, int rc) {
    for (int i = 0; i < n->open.n; i++) coll_record_leave(n->record, n->open.v[i].seq, rc);
    n->open.n = 0;
}

static void nc_replayed(devcomm *d) {
    nc *n = d->impl;
    n->capturing = 0;
    for (int i = 0; i < n->captured.n; i++)
        note_open(n, n->captured.v[i].kind, n->captured.v[i].bytes);
}

/* --- requests ------------------------------------------------------------ */

static void describe(nc *n, const nc_req *r) {
    if (r->kind == NC_ALLREDUCE)
        snprintf(n->op, sizeof n->op, "all-reduce of %zu floats", r->count);
    else
        snprintf(n->op, sizeof n->op, "broadcast of %zu bytes from rank %d", r->count, r->root);
}

static int req_get(nc *n, nc_kind kind, size_t count, int root, nc_req **out) {
    *out = NULL;
    if (n->broken) return n->broken;
    nc_req *r = n->free;
    if (r) {
        n->free = r->next_free;
    } else {
        r = calloc(1, sizeof *r);
        if (!r) return nc_fail(n, -ENOMEM, "out of memory for an NCCL request");
        r->next_all = n->all;
        n->all = r;
    }
    r->kind = kind, r->count = count, r->root = root;
    r->issued_ns = clock_now_ns();
    describe(n, r);
    if (!r->done)
        CUDA_CHECK_OR(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming), nc_cuda_failed,
                      n);
    *out = r;
    return 0;
}

static void req_put(nc *n, nc_req *r) {
    if (!r) return;
    r->next_free = n->free;
    n->free = r;
}

/* Queues r's collective on the NCCL stream after the compute stream's work
 * so far, then its completion event. A non-blocking communicator hands
 * each call to a thread of its own and returns ncclInProgress before the
 * collective is on the stream; the event must come after it, so that
 * hand-off (microseconds, not the collective itself) is waited for here. */
static int nc_enqueue(nc *n, nc_req *r, void *buf) {
    CUDA_CHECK_OR(cudaEventRecord(n->ready, n->compute), nc_cuda_failed, n);
    CUDA_CHECK_OR(cudaStreamWaitEvent(n->stream, n->ready, 0), nc_cuda_failed, n);
    int timed = r->kind == NC_ALLREDUCE && nccl_overlap_timing(n->overlap) && !recording(n);
    if (timed) nccl_overlap_before(n->overlap, n->compute, n->stream, r->count * sizeof(float));
    if (r->kind == NC_ALLREDUCE)
        NCCL_CHECK_OR(ncclAllReduce(buf, buf, r->count, ncclFloat, ncclSum, n->comm, n->stream),
                      nc_nccl_failed, n);
    else
        NCCL_CHECK_OR(ncclBroadcast(buf, buf, r->count, ncclUint8, r->root, n->comm, n->stream),
                      nc_nccl_failed, n);
    int rc = nc_poll(n, NULL, r->issued_ns + ms_to_ns(n->timeout_ms));
    if (rc) return rc;
    if (timed) nccl_overlap_after(n->overlap, n->stream);
    CUDA_CHECK_OR(cudaEventRecord(r->done, n->stream), nc_cuda_failed, n);
    return 0;
}

/* The compute stream waits for r; the host does not (sync supervises).
 * r's event may be recorded again by a later request: the wait is on the
 * recording made for r. */
static int nc_order_after(nc *n, nc_req *r) {
    describe(n, r);
    CUDA_CHECK_OR(cudaStreamWaitEvent(n->compute, r->done, 0), nc_cuda_failed, n);
    return 0;
}

/* Supervises r to completion from the host, then orders the compute
 * stream after it (a formality once the event has completed, but it keeps
 * the ordering stated where it is needed rather than implied by the host
 * wait). */
static int nc_finish(nc *n, nc_req *r) {
    describe(n, r);
    int rc = nc_poll(n, r->done, r->issued_ns + ms_to_ns(n->timeout_ms));
    return rc ? rc : nc_order_after(n, r);
}

/* --- the operations ------------------------------------------------------ */

static int nc_allreduce_async(devcomm *d, float *buf, size_t count, void **req) {
    nc *n = d->impl;
    nc_req *r = NULL;
    *req = NULL;
    int rc = nc_ready(n);
    if (rc) return rc;
    rc = req_get(n, NC_ALLREDUCE, count, 0, &r);
    if (rc == 0 && !n->oldest_ns) n->oldest_ns = r->issued_ns;
    if (rc == 0) note_allreduce(n, count * sizeof(float));
    if (rc == 0) rc = nc_enqueue(n, r, buf);
    cuda_backend_written(n->be, buf, count * sizeof(float)); /* even half done */
    if (rc) {
        req_put(n, r);
        return rc;
    }
    *req = r;
    return 0;
}

static int nc_wait(devcomm *d, void *req) {
    nc *n = d->impl;
    nc_req *r = req;
    assert(r);
    int rc = n->broken ? n->broken : nc_order_after(n, r);
    req_put(n, r);
    return rc;
}

/* Everything issued so far, and the compute stream's work up to here,
 * done within the timeout of the oldest collective among them (or of now,
 * for a replayed step, whose collectives the host never issued). */
static int nc_sync(devcomm *d) {
    nc *n = d->impl;
    n->capturing = 0;
    if (!n->broken) (void)nc_ready(n);
    if (n->broken) {
        close_open(n, n->broken);
        return n->broken;
    }
    snprintf(n->op, sizeof n->op, "step (its all-reduces and the work waiting on them)");
    int64_t deadline = (n->oldest_ns ? n->oldest_ns : clock_now_ns()) + ms_to_ns(n->timeout_ms);
    CUDA_CHECK_OR(cudaEventRecord(n->ready, n->stream), nc_cuda_failed, n);
    CUDA_CHECK_OR(cudaStreamWaitEvent(n->compute, n->ready, 0), nc_cuda_failed, n);
    CUDA_CHECK_OR(cudaEventRecord(n->synced, n->compute), nc_cuda_failed, n);
    int rc = nc_poll(n, n->synced, deadline);
    if (rc == 0) {
        n->oldest_ns = 0;
        nccl_overlap_synced(n->overlap, d->rank);
    }
    close_open(n, rc);
    return rc;
}

static int nc_broadcast(devcomm *d, void *buf, size_t bytes, int root) {
    nc *n = d->impl;
    assert(root >= 0 && root < d->world);
    nc_req *r = NULL;
    int rc = nc_ready(n);
    if (rc) return rc;
    rc = req_get(n, NC_BROADCAST, bytes, root, &r);
    uint64_t seq = r ? coll_record_enter(n->record, kind_names[NC_BROADCAST], bytes) : 0;
    if (rc == 0) rc = nc_enqueue(n, r, buf);
    cuda_backend_written(n->be, buf, bytes); /* even half done */
    if (rc == 0) rc = nc_finish(n, r);
    coll_record_leave(n->record, seq, rc);
    req_put(n, r);
    return rc;
}

static const char *nc_error(const devcomm *d) {
    const nc *n = d->impl;
    return n->err;
}

/* A clean shutdown: the NCCL stream's work finishes (supervised, so a
 * stuck peer cannot hang the exit), ncclCommFinalize flushes NCCL's own
 * work (polled the same way), and ncclCommDestroy frees it. A failure on
 * the way aborts instead. */
static int nc_shutdown(nc *n) {
    snprintf(n->op, sizeof n->op, "shutdown");
    int64_t deadline = clock_now_ns() + ms_to_ns(n->timeout_ms);
    CUDA_CHECK_OR(cudaEventRecord(n->ready, n->stream), nc_cuda_failed, n);
    int rc = nc_poll(n, n->ready, deadline);
    if (rc) return rc;
    /* Finalising waits until no CUDA graph holds the communicator's
     * collectives (NCCL's commDestroySync): drop the recorded step first,
     * or every run that recorded one would wait here for the timeout. */
    cuda_backend_drop_recording(n->be);
    NCCL_CHECK_OR(ncclCommFinalize(n->comm), nc_nccl_failed, n);
    if ((rc = nc_poll(n, NULL, deadline))) return rc;
    ncclComm_t c = n->comm;
    n->comm = NULL; /* whatever ncclCommDestroy returns, the handle is gone */
    NCCL_CHECK_OR(ncclCommDestroy(c), nc_nccl_failed, n);
    return 0;
}

static void nc_destroy(devcomm *d) {
    nc *n = d->impl;
    /* A set-up never waited for (no collective came): shut down if it
     * finished; still under way, it is aborted rather than waited for. */
    ncclResult_t st = ncclInProgress;
    if (n->comm && !n->broken && !n->up && async_error(n, &st) == ncclSuccess && st == ncclSuccess)
        n->up = 1;
    if (n->comm && !n->broken && n->up) nc_shutdown(n);
    nc_abort(n);
    /* Nothing is left to return a failure to: the checks log them. */
    for (nc_req *r = n->all, *next; r; r = next) {
        next = r->next_all;
        if (r->done) (void)CUDA_CHECK_RC(cudaEventDestroy(r->done));
        free(r);
    }
    if (n->ready) (void)CUDA_CHECK_RC(cudaEventDestroy(n->ready));
    if (n->synced) (void)CUDA_CHECK_RC(cudaEventDestroy(n->synced));
    if (n->stream) (void)CUDA_CHECK_RC(cudaStreamDestroy(n->stream));
    close_open(n, n->broken ? n->broken : -ECANCELED);
    free(n->open.v);
    free(n->captured.v);
    nccl_overlap_destroy(n->overlap);
    free(n);
}

static const devcomm_ops nccl_ops = {
    .name = "nccl",
    .allreduce_sum_async = nc_allreduce_async,
    .wait = nc_wait,
    .sync = nc_sync,
    .broadcast = nc_broadcast,
    .error = nc_error,
    .replayed = nc_replayed,
    .destroy = nc_destroy,
};

/* --- set-up -------------------------------------------------------------- */

static int check_opts(const devcomm_nccl_opts *o, char *err, size_t errlen) {
    const char *why = NULL;
    if (!o->be || o->be->kind != BACKEND_CUDA) why = "the backend is not the CUDA backend";
    else if (!o->prefix) why = "no key prefix";
    else if (o->world < 1) why = "world size below 1";
    else if (o->rank < 0 || o->rank >= o->world) why = "rank outside 0..world-1";
    else if (o->world > 1 && (!o->store_host || o->store_port <= 0 || o->store_port > 65535))
        why = "no store address (MASTER_ADDR/MASTER_PORT) to pass the NCCL id through";
    if (!why) return 0;
    snprintf(err, errlen, "NCCL communicator options: %s (rank %d, world %d)", why, o->rank,
             o->world);
    return -EINVAL;
}

static int fetch_id(nc *n, const devcomm_nccl_opts *o, store_client *st, const char *key,
                    ncclUniqueId *id, int64_t deadline) {
    store_client_set_timeout(st, ms_left(deadline));
    int rc = store_wait(st, 1, &key, ms_left(deadline));
    if (rc == -ETIMEDOUT)
        return nc_fail(n, rc,
                       "timed out after %g s waiting for rank 0 to publish the NCCL id under "
                       "'%s' in the store at %s:%d (is rank 0 running, and on this job's store?)",
                       n->timeout_ms / 1000.0, key, o->store_host, o->store_port);
    uint8_t *val = NULL;
    size_t len = 0;
    if (rc == 0) rc = store_get(st, key, &val, &len);
    if (rc)
        return nc_fail(n, rc, "cannot read the NCCL id '%s' from the store at %s:%d: %s", key,
                       o->store_host, o->store_port, strerror(-rc));
    if (len != sizeof *id) {
        free(val);
        return nc_fail(n, -EPROTO,
                       "the NCCL id under '%s' in the store at %s:%d has %zu bytes, not %zu "
                       "(was the key written by another program?)",
                       key, o->store_host, o->store_port, len, sizeof *id);
    }
    memcpy(id, val, len);
    free(val);
    return 0;
}

/* Rank 0 makes the id and publishes it; the others wait for it. The key's
 * prefix is unique to the attempt, so a restarted group never picks up its
 * predecessor's id. A single rank needs no store at all. */
static int share_id(nc *n, const devcomm_nccl_opts *o, ncclUniqueId *id, int64_t deadline) {
    if (o->rank == 0) NCCL_CHECK_OR(ncclGetUniqueId(id), nc_nccl_failed, n);
    if (o->world == 1) return 0;
    char key[512];
    snprintf(key, sizeof key, "%snccl_id", o->prefix);
    store_client *st = NULL;
    store_client_opts so = {.host = o->store_host, .port = o->store_port,
                            .connect_timeout_ms = ms_left(deadline),
                            .timeout_ms = ms_left(deadline)};
    int rc = store_client_connect(&so, &st);
    if (rc)
        return nc_fail(n, rc, "cannot reach the store at %s:%d to pass the NCCL id: %s",
                       o->store_host, o->store_port, strerror(-rc));
    if (o->rank == 0) {
        rc = store_set(st, key, id, sizeof *id);
        if (rc)
            rc = nc_fail(n, rc, "cannot publish the NCCL id as '%s' in the store at %s:%d: %s",
                         key, o->store_host, o->store_port, strerror(-rc));
    } else {
        rc = fetch_id(n, o, st, key, id, deadline);
    }
    store_client_close(st);
    return rc;
}

/* The backend's device, and on it the NCCL stream at the highest
 * priority, so that gradient buckets go ahead of backward's kernels when
 * both are ready. */
static int setup_device(nc *n) {
    int least = 0, greatest = 0;
    CUDA_CHECK_OR(cudaSetDevice(n->device), nc_cuda_failed, n);
    CUDA_CHECK_OR(cudaDeviceGetStreamPriorityRange(&least, &greatest), nc_cuda_failed, n);
    CUDA_CHECK_OR(cudaStreamCreateWithPriority(&n->stream, cudaStreamNonBlocking, greatest),
                  nc_cuda_failed, n);
    CUDA_CHECK_OR(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming), nc_cuda_failed,
                  n);
    CUDA_CHECK_OR(cudaEventCreateWithFlags(&n->synced, cudaEventDisableTiming), nc_cuda_failed,
                  n);
    return 0;
}

/* Non-blocking initialisation: NCCL goes on with it in a thread of its
 * own, which setup_wait polls to the deadline (a rank that never
 * joins makes this rank fail with a timeout instead of waiting forever). */
static int init_comm(nc *n, const ncclUniqueId *id) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t c = NULL;
    /* On an immediate failure NCCL has already freed the handle, so it is
     * kept only once the call has been accepted. */
    NCCL_CHECK_OR(ncclCommInitRankConfig(&c, n->d.world, *id, n->d.rank, &cfg), nc_nccl_failed,
                  n);
    n->comm = c;
    return 0;
}

int devcomm_nccl_start(const devcomm_nccl_opts *o, devcomm **pending, char *err,
                       size_t errlen) {
    *pending = NULL;
    if (errlen) err[0] = 0;
    int rc = check_opts(o, err, errlen);
    if (rc) return rc;
    nc *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    n->d = (devcomm){.ops = &nccl_ops, .rank = o->rank, .world = o->world, .impl = n};
    n->be = o->be;
    n->device = cuda_backend_device(o->be);
    n->compute = cuda_backend_stream(o->be);
    n->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : NCCL_DEFAULT_TIMEOUT_MS;
    n->abort_at_ns = o->abort_at_ns;
    n->record = o->record;
    snprintf(n->op, sizeof n->op, "communicator set-up (world %d)", o->world);
    n->setup_deadline = clock_now_ns() + ms_to_ns(n->timeout_ms);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    rc = setup_device(n);
    if (rc == 0 && nccl_overlap_create(o->overlap_step, &n->overlap))
        rc = nc_fail(n, -ENOMEM, "out of memory for --overlap-report");
    if (rc == 0) rc = share_id(n, o, &id, n->setup_deadline);
    if (rc == 0) rc = init_comm(n, &id);
    if (rc) {
        snprintf(err, errlen, "%s", n->err[0] ? n->err + n->err_rank : strerror(-rc));
        nc_destroy(&n->d);
        return rc;
    }
    *pending = &n->d;
    return 0;
}

int devcomm_nccl_create(const devcomm_nccl_opts *o, devcomm **out, char *err, size_t errlen) {
    int rc = devcomm_nccl_start(o, out, err, errlen);
    if (rc) return rc;
    nc *n = (*out)->impl;
    if ((rc = setup_wait(n))) {
        snprintf(err, errlen, "%s", n->err[0] ? n->err + n->err_rank : strerror(-rc));
        nc_destroy(*out);
        *out = NULL;
    }
    return rc;
}
