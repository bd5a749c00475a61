/* A collective call's deadline, cancellation and first error message: the
 * one piece every layer of the communicator shares, kept apart from the
 * communicator so that the transports (shared memory, TCP ring, bootstrap,
 * NCCL) depend on it alone. */
#include "worker/comm/comm_call.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

/* Why the call must stop now, as a code (0: it may go on): 1 cancelled,
 * 2 aborted, 3 timed out. */
static int why_stop(const comm_call *k, int64_t now) {
    if (k->stop && atomic_load(&k->stop->cancel)) return 1;
    int64_t abort_at = k->stop && k->stop->abort_at_ns ? atomic_load(k->stop->abort_at_ns) : 0;
    if (abort_at && now >= abort_at) return 2;
    return now >= k->deadline_ns ? 3 : 0;
}

int comm_call_stopped(const comm_call *k) {
    coll_record_tick(k->rec);
    int why = why_stop(k, clock_now_ns());
    return why == 0 ? 0 : why == 3 ? -ETIMEDOUT : -ECANCELED;
}

int comm_call_check(comm_call *k) {
    coll_record_tick(k->rec);
    switch (why_stop(k, clock_now_ns())) {
    case 1:
        return comm_call_fail(k, -ECANCELED, "%s cancelled: the communicator is being destroyed",
                              k->op);
    case 2:
        return comm_call_fail(k, -ECANCELED,
                              "%s aborted: this rank is stopping and the collective did not "
                              "finish in time (a peer is gone or stuck)",
                              k->op);
    case 3:
        return comm_call_fail(k, -ETIMEDOUT,
                              "%s timed out after %d ms (a peer is stuck, slow or gone)", k->op,
                              k->timeout_ms);
    }
    return 0;
}

int comm_call_fail(comm_call *k, int rc, const char *fmt, ...) {
    if (k->err && k->errlen && !k->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k->err, k->errlen, fmt, ap);
        va_end(ap);
    }
    return rc;
}
