/* See comm_async.h. */
#include "worker/comm/comm_async.h"

#include <errno.h>
#include <stdlib.h>

struct comm_req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, rc;
    float *buf;
    size_t count;
    uint64_t tag;
    void *owner; /* the queue's ctx */
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
    comm_async *q = arg;
    pthread_mutex_lock(&q->mu);
    for (;;) {
        while (!q->head && !q->stop) pthread_cond_wait(&q->cv, &q->mu);
        comm_req *r = q->head;
        if (!r) break; /* stopping, and nothing left */
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        q->busy = 1;
        pthread_mutex_unlock(&q->mu);
        /* Once its owner is stopping, run cancels the call (comm.c: the
         * communicator's cancel flag, set by comm_destroy). */
        finish(r, q->run(q->ctx, r->buf, r->count, r->tag));
        pthread_mutex_lock(&q->mu);
        q->busy = 0;
        pthread_cond_broadcast(&q->cv);
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

void comm_async_init(comm_async *q, comm_async_fn run, void *ctx) {
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, NULL);
    q->run = run;
    q->ctx = ctx;
}

int comm_async_push(comm_async *q, float *buf, size_t count, uint64_t tag, comm_req **out) {
    *out = NULL;
    comm_req *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->buf = buf;
    r->count = count;
    r->tag = tag;
    r->owner = q->ctx;
    pthread_mutex_lock(&q->mu);
    if (!q->started) {
        if (pthread_create(&q->thread, NULL, async_main, q) != 0) {
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

int comm_async_wait(comm_req *r) {
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

void *comm_async_owner(const comm_req *r) { return r ? r->owner : NULL; }

void comm_async_drain(comm_async *q) {
    pthread_mutex_lock(&q->mu);
    while (q->head || q->busy) pthread_cond_wait(&q->cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

void comm_async_stop(comm_async *q) {
    pthread_mutex_lock(&q->mu);
    q->stop = 1;
    pthread_cond_broadcast(&q->cv);
    int started = q->started;
    pthread_mutex_unlock(&q->mu);
    if (started) pthread_join(q->thread, NULL);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
}
