/* See store_thread.h. */
#include "store/store_thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "store/store_server.h"

struct store_thread {
    pthread_t thread;
    uv_loop_t loop;
    uv_async_t stop;
    store_server srv;
    store_server_opts opts;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 starting, 1 serving, < 0 failed with that error */
};

static void on_stop(uv_async_t *a) {
    store_thread *h = a->data;
    store_server_close(&h->srv, NULL);
    uv_close((uv_handle_t *)&h->stop, NULL);
}

static void *serve(void *arg) {
    store_thread *h = arg;
    int rc = store_server_init(&h->loop, &h->srv, &h->opts);
    if (rc == 0) {
        uv_async_init(&h->loop, &h->stop, on_stop);
        h->stop.data = h;
    }
    pthread_mutex_lock(&h->mu);
    h->state = rc ? rc : 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (rc == 0) uv_run(&h->loop, UV_RUN_DEFAULT);
    return NULL;
}

int store_thread_start(const store_server_opts *opts, store_thread **out, int *bound_port) {
    *out = NULL;
    store_thread *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->opts = *opts;
    uv_loop_init(&h->loop);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    pthread_create(&h->thread, NULL, serve, h);
    pthread_mutex_lock(&h->mu);
    while (h->state == 0) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (h->state < 0) {
        int rc = h->state;
        pthread_join(h->thread, NULL);
        uv_loop_close(&h->loop);
        free(h);
        return rc;
    }
    *bound_port = store_server_port(&h->srv);
    *out = h;
    return 0;
}

void store_thread_stop(store_thread *h) {
    if (!h) return;
    uv_async_send(&h->stop);
    pthread_join(h->thread, NULL);
    uv_loop_close(&h->loop);
    free(h);
}
