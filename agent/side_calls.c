/* See side_calls.h. */
#include "agent/side_calls.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct side_job side_job;
struct side_job {
    side_fn work, after;
    void *arg;
    side_job *next;
};

struct side_calls {
    uv_loop_t *loop;
    void *ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    side_job *todo, *done; /* done: newest first */
    uv_async_t back;
    pthread_t thread;
    int started, closing, ended;
};

static void *side_main(void *arg) {
    side_calls *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->todo && !s->closing) pthread_cond_wait(&s->cv, &s->mu);
        if (s->closing) break;
        side_job *j = s->todo;
        s->todo = j->next;
        pthread_mutex_unlock(&s->mu);
        j->work(s->ctx, j->arg);
        pthread_mutex_lock(&s->mu);
        j->next = s->done;
        s->done = j;
        uv_async_send(&s->back);
    }
    s->ended = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* The afters of the finished calls, oldest first, then of those given. */
static void run_afters(side_calls *s, side_job *more) {
    pthread_mutex_lock(&s->mu);
    side_job *done = s->done, *in_order = NULL;
    s->done = NULL;
    pthread_mutex_unlock(&s->mu);
    while (done) {
        side_job *next = done->next;
        done->next = in_order, in_order = done, done = next;
    }
    side_job **tail = &in_order;
    while (*tail) tail = &(*tail)->next;
    *tail = more;
    while (in_order) {
        side_job *next = in_order->next;
        if (in_order->after) in_order->after(s->ctx, in_order->arg);
        free(in_order);
        in_order = next;
    }
}

static void on_back(uv_async_t *h) { run_afters(h->data, NULL); }

int side_calls_start(uv_loop_t *loop, void *ctx, side_calls **out) {
    side_calls *s = calloc(1, sizeof *s);
    if (!s) return -ENOMEM;
    s->loop = loop, s->ctx = ctx;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    int rc = uv_async_init(loop, &s->back, on_back);
    if (rc) {
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return rc;
    }
    s->back.data = s;
    *out = s;
    return 0;
}

int side_calls_run(side_calls *s, side_fn work, side_fn after, void *arg) {
    side_job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    *j = (side_job){work, after, arg, NULL};
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        free(j);
        return -ESHUTDOWN;
    }
    if (!s->started) {
        int rc = pthread_create(&s->thread, NULL, side_main, s);
        if (rc) {
            pthread_mutex_unlock(&s->mu);
            free(j);
            return -rc;
        }
        s->started = 1;
    }
    side_job **tail = &s->todo;
    while (*tail) tail = &(*tail)->next;
    *tail = j;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static void on_closed(uv_handle_t *h) {
    side_calls *s = h->data;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

int side_calls_stop(side_calls *s, int wait_ms) {
    if (!s) return 0;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_ms / 1000;
    until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_cond_broadcast(&s->cv);
    int rc = 0;
    while (s->started && !s->ended && rc == 0) rc = pthread_cond_timedwait(&s->cv, &s->mu, &until);
    int ended = !s->started || s->ended;
    side_job *never = s->todo; /* not begun: their afters only */
    if (ended) s->todo = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!ended) return -ETIMEDOUT;
    if (s->started) pthread_join(s->thread, NULL);
    run_afters(s, never);
    uv_close((uv_handle_t *)&s->back, on_closed);
    return 0;
}
