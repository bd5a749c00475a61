/* A collective call's deadline, cancellation and first error message: the
 * one piece every layer of the communicator shares, kept apart from the
 * communicator so that the transports (shared memory, TCP ring, bootstrap,
 * NCCL) depend on it alone. */
#include "worker/comm/comm_call.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

int comm_call_check(comm_call *k) {
    if (k->cancel && atomic_load(k->cancel))
        return comm_call_fail(k, -ECANCELED, "%s cancelled: the communicator is being destroyed",
                              k->op);
    if (clock_now_ns() >= k->deadline_ns)
        return comm_call_fail(k, -ETIMEDOUT,
                              "%s timed out after %d ms (a peer is stuck, slow or gone)", k->op,
                              k->timeout_ms);
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
