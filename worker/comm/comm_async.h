/* Asynchronous requests: a FIFO and one thread (started on the first
 * request) that runs them in the order they were issued, so that every
 * rank runs the same sequence. The queue knows nothing of the
 * communicator: it runs each request through the function it was made
 * with (comm.c gives it its all-reduce), so the queue depends on no other
 * file of worker/comm and comm.c alone depends on it. A request carries
 * its own lock and condition, so waiting for it needs nothing from the
 * queue, and a request that outlives the queue (cancelled) can still be
 * waited for. */
#ifndef DDPRUN_WORKER_COMM_COMM_ASYNC_H
#define DDPRUN_WORKER_COMM_COMM_ASYNC_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct comm_req comm_req; /* as comm.h names it */

/* Runs one request on the queue's thread: 0 or -errno, which is what its
 * waiter gets. */
typedef int (*comm_async_fn)(void *ctx, float *buf, size_t count, uint64_t tag);

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work queued, a request finished, or stop */
    comm_req *head, *tail;
    int busy;          /* the thread is running a request */
    int stop;
    int started;
    pthread_t thread;
    comm_async_fn run; /* with ctx: what a request does */
    void *ctx;
} comm_async;

void comm_async_init(comm_async *q, comm_async_fn run, void *ctx);
/* Queues run(ctx, buf, count, tag) and sets *out to the request to wait for.
 * 0, -ENOMEM, or -EAGAIN when the thread cannot be started. */
int comm_async_push(comm_async *q, float *buf, size_t count, uint64_t tag, comm_req **out);
/* Waits until r has run, frees it, and returns what run returned. */
int comm_async_wait(comm_req *r);
/* The ctx of the queue r was pushed on (before waiting: r is freed then). */
void *comm_async_owner(const comm_req *r);
/* Returns once every queued request has finished. */
void comm_async_drain(comm_async *q);
/* Runs what is still queued (run is expected to fail fast by then, which
 * cancels it), joins the thread and frees the queue's lock. */
void comm_async_stop(comm_async *q);

#endif
