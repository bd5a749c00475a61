/* See rdzv_driver.h. */
#include "agent/rdzv_driver.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/tf_config.h"
#include "common/clock.h"

#define MAX_EVENTS 16

struct rdzv_driver {
    rdzv_driver_opts o;
    rdzv *rd;
    uv_async_t wake;
    pthread_t thread;
    pthread_mutex_t mu; /* guards the mailbox and the commands */
    rdzv_driver_event evq[MAX_EVENTS];
    int nev;
    int cmd_barrier, cmd_barrier_kept;
    int cmd_leave; /* leaving the job: the thread joins no next round */
    int ended;     /* the thread returns without blocking again (a join is short) */
};

/* last: the thread's final word (it returns without blocking after). */
static void post(rdzv_driver *d, rdzv_driver_kind kind, int rc, rdzv_event why,
                 const rdzv_result *res, const char *err, int last) {
    pthread_mutex_lock(&d->mu);
    d->ended |= last;
    if (d->nev < MAX_EVENTS) {
        rdzv_driver_event *e = &d->evq[d->nev++];
        memset(e, 0, sizeof *e);
        e->kind = kind;
        e->rc = rc;
        e->why = why;
        if (res) e->res = *res;
        if (err) snprintf(e->err, sizeof e->err, "%s", err);
        if (kind == RDZV_DRIVER_ROUND && rc == 0 && d->o.tf_config &&
            !(e->tf_cluster = tf_config_cluster(res, e->err, sizeof e->err)))
            e->rc = -EPROTO;
        e->res.nodes = NULL;
    }
    pthread_mutex_unlock(&d->mu);
    uv_async_send(&d->wake);
}

static int command(rdzv_driver *d, int *barrier, int *kept) {
    pthread_mutex_lock(&d->mu);
    *barrier = d->cmd_barrier, *kept = d->cmd_barrier_kept;
    int leaving = d->cmd_leave;
    pthread_mutex_unlock(&d->mu);
    return leaving;
}

static void *run(void *arg) {
    rdzv_driver *d = arg;
    for (;;) {
        rdzv_result res;
        char err[512] = "";
        memset(&res, 0, sizeof res);
        double t0 = clock_now_s();
        int rc = rdzv_next(d->rd, &res, err, sizeof err);
        if (rc == 0) metrics_round(d->o.metrics, clock_now_s() - t0);
        post(d, RDZV_DRIVER_ROUND, rc, RDZV_EV_NONE, &res, err, rc != 0);
        if (rc) break;
        for (;;) {
            int barrier, kept;
            command(d, &barrier, &kept);
            if (barrier) {
                rc = rdzv_exit_barrier(d->rd, d->o.barrier_timeout_s, kept);
                post(d, RDZV_DRIVER_BARRIER, rc, RDZV_EV_NONE, NULL, NULL, 1);
                goto out;
            }
            rdzv_event ev;
            rc = rdzv_watch(d->rd, 1000, &ev);
            if (rc) {
                rdzv_lost_message(d->rd, rc, err, sizeof err);
                post(d, RDZV_DRIVER_LOST, rc, RDZV_EV_NONE, NULL, err, 1);
                goto out;
            }
            if (ev == RDZV_EV_FAILURE || ev == RDZV_EV_MEMBERSHIP) {
                if (command(d, &barrier, &kept)) goto out; /* leaving: no next round */
                post(d, RDZV_DRIVER_RESTART, 0, ev, NULL, NULL, 0);
                break;
            }
        }
    }
out:
    pthread_mutex_lock(&d->mu);
    d->ended = 1;
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* On the loop: the mailbox's events, in the order they came. */
static void on_wake(uv_async_t *h) {
    rdzv_driver *d = h->data;
    rdzv_driver_event evs[MAX_EVENTS];
    pthread_mutex_lock(&d->mu);
    int n = d->nev;
    memcpy(evs, d->evq, (size_t)n * sizeof evs[0]);
    d->nev = 0;
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < n; i++) {
        d->o.event(d->o.ctx, &evs[i]);
        free(evs[i].tf_cluster); /* (NULL when the handler took it) */
    }
}

static void on_closed(uv_handle_t *h) {
    rdzv_driver *d = h->data;
    pthread_mutex_destroy(&d->mu);
    for (int i = 0; i < d->nev; i++) free(d->evq[i].tf_cluster);
    free(d);
}

int rdzv_driver_start(uv_loop_t *loop, rdzv *rd, const rdzv_driver_opts *o, rdzv_driver **out) {
    rdzv_driver *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    d->o = *o, d->rd = rd;
    pthread_mutex_init(&d->mu, NULL);
    int rc = uv_async_init(loop, &d->wake, on_wake);
    if (rc) {
        pthread_mutex_destroy(&d->mu);
        free(d);
        return rc;
    }
    d->wake.data = d;
    if ((rc = pthread_create(&d->thread, NULL, run, d))) {
        uv_close((uv_handle_t *)&d->wake, on_closed);
        return -rc;
    }
    *out = d;
    return 0;
}

void rdzv_driver_barrier(rdzv_driver *d, int kept) {
    pthread_mutex_lock(&d->mu);
    d->cmd_barrier = 1;
    d->cmd_barrier_kept = kept;
    pthread_mutex_unlock(&d->mu);
    rdzv_poke(d->rd, 0);
}

void rdzv_driver_leave(rdzv_driver *d) {
    pthread_mutex_lock(&d->mu);
    d->cmd_leave = 1;
    pthread_mutex_unlock(&d->mu);
}

int rdzv_driver_running(rdzv_driver *d) {
    pthread_mutex_lock(&d->mu);
    int ended = d->ended;
    pthread_mutex_unlock(&d->mu);
    return !ended;
}

void rdzv_driver_stop(rdzv_driver *d) {
    if (!d) return;
    pthread_join(d->thread, NULL); /* (it has ended, or its store calls fail at once) */
    uv_close((uv_handle_t *)&d->wake, on_closed);
}
