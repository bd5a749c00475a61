/* One collective call in flight: its deadline, the flag that cancels it
 * (comm_destroy) and where its error message goes. Every layer of the
 * communicator (shared memory, TCP ring, bootstrap) takes one of these, so
 * that a call is bounded by one deadline however many layers it crosses,
 * and the first layer that fails names what went wrong. */
#ifndef DDPRUN_WORKER_COMM_COMM_CALL_H
#define DDPRUN_WORKER_COMM_COMM_CALL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/coll_record.h"

/* What stops every call of a communicator early, from outside the call:
 * its destruction (cancel), or its owner stopping (*abort_at_ns, the
 * owner's own variable, which a signal handler may set). */
typedef struct {
    atomic_int cancel;                   /* nonzero: give up with -ECANCELED */
    const _Atomic int64_t *abort_at_ns;  /* NULL, or nonzero: give up after this time */
} comm_stop;

typedef struct {
    int64_t deadline_ns;      /* CLOCK_MONOTONIC; the call fails with -ETIMEDOUT after it */
    const comm_stop *stop;    /* may be NULL */
    const char *op;           /* "all-reduce", "init", ... for messages */
    int timeout_ms;           /* the budget the deadline came from, for messages */
    char *err;                /* receives the first failure's message */
    size_t errlen;
    coll_record *rec;         /* NULL, or the rank's collective record: every check */
                              /* of the call's wait loops notes the rank alive in it */
} comm_call;

/* Starts a call of timeout_ms from now. */
static inline comm_call comm_call_start(const char *op, int timeout_ms, const comm_stop *stop,
                                        char *err, size_t errlen) {
    return (comm_call){clock_now_ns() + (int64_t)timeout_ms * 1000000, stop, op, timeout_ms,
                       err, errlen, NULL};
}

/* Nanoseconds left before the deadline (0 once passed). */
static inline int64_t comm_call_left_ns(const comm_call *k) {
    int64_t left = k->deadline_ns - clock_now_ns();
    return left > 0 ? left : 0;
}

/* 0 while the call may go on; -ETIMEDOUT or -ECANCELED (with a message)
 * once it may not (past its deadline, its communicator being destroyed, or
 * past the owner's abort time). Cheap enough to call in every wait loop. */
int comm_call_check(comm_call *k);
/* The same question without recording a message: 0, -ECANCELED or
 * -ETIMEDOUT. */
int comm_call_stopped(const comm_call *k);

/* Records the message (the first one wins: later failures are usually
 * consequences of the first) and returns rc. */
int comm_call_fail(comm_call *k, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
