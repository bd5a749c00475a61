/* Store calls the agent's loop must not wait for (see agent_internal.h):
 * a thread of their own, started on the first call and detached, runs
 * them one after another on the rendezvous' side AGENT_SIDE connection;
 * each one's `after` comes back to the loop through a uv_async. A store
 * whose host is lost can hold a call for the whole read timeout: the loop
 * goes on meanwhile (the rendezvous thread finds the loss and the agent
 * ends), and the thread, still waiting, goes with the process. (Not
 * libuv's thread pool: at exit libuv joins its threads, and would wait for
 * the store.) */
#include "agent/agent_internal.h"

#include <errno.h>
#include <stdlib.h>

struct side_job {
    void (*work)(agent *, void *);
    void (*after)(agent *, void *);
    void *arg;
    side_job *next;
};

static void *side_main(void *arg) {
    agent *a = arg;
    pthread_mutex_lock(&a->side.mu);
    for (;;) {
        while (!a->side.todo) pthread_cond_wait(&a->side.cv, &a->side.mu);
        side_job *j = a->side.todo;
        a->side.todo = j->next;
        pthread_mutex_unlock(&a->side.mu);
        j->work(a, j->arg);
        pthread_mutex_lock(&a->side.mu);
        j->next = a->side.done;
        a->side.done = j;
        uv_async_send(&a->side.back);
    }
    return NULL;
}

/* On the loop: the finished calls' afters, in the order they ran. */
static void on_back(uv_async_t *h) {
    agent *a = h->data;
    pthread_mutex_lock(&a->side.mu);
    side_job *done = a->side.done, *in_order = NULL;
    a->side.done = NULL;
    pthread_mutex_unlock(&a->side.mu);
    while (done) { /* (pushed newest first) */
        side_job *next = done->next;
        done->next = in_order, in_order = done, done = next;
    }
    while (in_order) {
        side_job *next = in_order->next;
        if (in_order->after) in_order->after(a, in_order->arg);
        free(in_order);
        in_order = next;
    }
}

int agent_side_init(agent *a) {
    pthread_mutex_init(&a->side.mu, NULL);
    pthread_cond_init(&a->side.cv, NULL);
    a->side.back.data = a;
    return uv_async_init(a->loop, &a->side.back, on_back);
}

int agent_side_run(agent *a, void (*work)(agent *, void *), void (*after)(agent *, void *),
                   void *arg) {
    side_job *j = calloc(1, sizeof *j);
    if (!j) return -ENOMEM;
    *j = (side_job){work, after, arg, NULL};
    pthread_mutex_lock(&a->side.mu);
    if (!a->side.started) {
        pthread_t t;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &at, side_main, a);
        pthread_attr_destroy(&at);
        if (rc) {
            pthread_mutex_unlock(&a->side.mu);
            free(j);
            return -rc;
        }
        a->side.started = 1;
    }
    side_job **tail = &a->side.todo;
    while (*tail) tail = &(*tail)->next;
    *tail = j;
    pthread_cond_signal(&a->side.cv);
    pthread_mutex_unlock(&a->side.mu);
    return 0;
}
