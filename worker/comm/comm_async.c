/* Asynchronous all-reduce: a FIFO of requests and one thread per
 * communicator (started on the first request) that runs them in the order
 * they were issued, so that every rank runs the same sequence. A request
 * carries its own lock and condition so that comm_wait needs nothing from
 * the communicator, and a request outliving comm_destroy (cancelled) can
 * still be waited for. */
#include <errno.h>
#include <stdlib.h>

#include "worker/comm/comm_internal.h"

struct comm_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, rc;
    float *buf;
    size_t count;
    comm_req *next;
};

static void finish(comm_req *r, int rc) {
    pthread_mutex_lock(&r->mu);
    r->rc = rc;
    r->done = 1;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void *async_main(void *arg) {
    comm *c = arg;
    comm_async *q = &c->async;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        comm_req *r = q->head;
        if (!r) break; /* stopping, and nothing left */
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        q->busy = 1;
        pthread_mutex_unlock(&q->mu);
        /* Once comm_destroy has begun, the communicator cancels the call. */
        finish(r, comm_exec_allreduce(c, r->buf, r->count));
        pthread_mutex_lock(&q->mu);
        q->busy = 0;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

void comm_async_init(comm *c) {
    pthread_mutex_init(&c->async.mu, NULL);
    pthread_cond_init(&c->async.cv, NULL);
}

int comm_allreduce_sum_async(comm *c, float *buf, size_t count, comm_req **out) {
    *out = NULL;
    comm_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->buf = buf;
    r->count = count;
    comm_async *q = &c->async;
    pthread_mutex_lock(&q->mu);
    if (!q->started) {
        if (pthread_create(&q->thread, NULL, async_main, c) != 0) {
            pthread_mutex_unlock(&q->mu);
            pthread_mutex_destroy(&r->mu);
            pthread_cond_destroy(&r->cv);
            free(r);
            return -EAGAIN;
        }
        q->started = 1;
    }
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    *out = r;
    return 0;
}

int comm_wait(comm_req *r) {
    if (!r) return -EINVAL;
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    int rc = r->rc;
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
    return rc;
}

void comm_async_drain(comm *c) {
    comm_async *q = &c->async;
    pthread_mutex_lock(&q->mu);
    while (q->head || q->busy) pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void comm_async_stop(comm *c) {
    comm_async *q = &c->async;
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    int started = q->started;
    pthread_mutex_unlock(&q->mu);
    if (started) pthread_join(q->thread, NULL);
}
