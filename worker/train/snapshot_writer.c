/* See snapshot_writer.h. Two buffers: the trainer fills `spare` while the
 * thread writes `busy`; put() swaps them. */
#include "worker/train/snapshot_writer.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TENSORS 8

struct snapshot_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char dir[1024];
    int keep;
    float *spare, *busy;
    int pending;  /* busy holds a snapshot to write (or being written) */
    int stopping;
    uint64_t step;
    char *header;
    snapshot_tensor ts[MAX_TENSORS];
    int nts;
    int failed;   /* the first failure's -errno */
    char err[1024];
    int64_t written;    /* the step of the last file written, -1 before */
    char path[1200];    /* its path */
};

static void write_one(snapshot_writer *w) {
    ckpt_tensor ts[MAX_TENSORS];
    for (int i = 0; i < w->nts; i++)
        ts[i] = (ckpt_tensor){w->ts[i].name, CKPT_F32, w->busy + w->ts[i].offset,
                              w->ts[i].nbytes};
    ckpt_save save = {.dir = w->dir, .step = w->step, .header_json = w->header, .tensors = ts,
                      .ntensors = w->nts, .keep = w->keep};
    char err[1024], path[sizeof w->path];
    int rc = ckpt_write(&save, path, sizeof path, err, sizeof err);
    pthread_mutex_lock(&w->mu);
    if (rc && !w->failed) {
        w->failed = rc;
        snprintf(w->err, sizeof w->err, "%s", err);
    }
    if (rc == 0) {
        w->written = (int64_t)w->step;
        memcpy(w->path, path, sizeof path);
    }
    free(w->header);
    w->header = NULL;
    w->pending = 0;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void *run(void *arg) {
    snapshot_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending && !w->stopping) pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending) break; /* stopping, nothing left */
        pthread_mutex_unlock(&w->mu);
        write_one(w);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int snapshot_writer_start(const char *dir, int keep, size_t bytes, snapshot_writer **out) {
    *out = NULL;
    snapshot_writer *w = calloc(1, sizeof *w);
    if (!w) return -ENOMEM;
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->keep = keep;
    w->written = -1;
    w->spare = malloc(bytes + 1);
    w->busy = malloc(bytes + 1);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (!w->spare || !w->busy || pthread_create(&w->thread, NULL, run, w) != 0) {
        free(w->spare), free(w->busy), free(w);
        return -ENOMEM;
    }
    *out = w;
    return 0;
}

float *snapshot_writer_buffer(snapshot_writer *w) {
    pthread_mutex_lock(&w->mu);
    int free_now = !w->pending && !w->failed;
    pthread_mutex_unlock(&w->mu);
    return free_now ? w->spare : NULL;
}

void snapshot_writer_put(snapshot_writer *w, uint64_t step, char *header,
                         const snapshot_tensor *ts, int n) {
    pthread_mutex_lock(&w->mu);
    float *filled = w->spare;
    w->spare = w->busy, w->busy = filled;
    w->step = step;
    w->header = header;
    w->nts = n < MAX_TENSORS ? n : MAX_TENSORS;
    memcpy(w->ts, ts, (size_t)w->nts * sizeof *ts);
    w->pending = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int snapshot_writer_error(snapshot_writer *w, char *err, size_t errlen) {
    pthread_mutex_lock(&w->mu);
    int rc = w->failed;
    if (rc && err && errlen) snprintf(err, errlen, "%s", w->err);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

int64_t snapshot_writer_written(snapshot_writer *w, char *path, size_t pathlen) {
    pthread_mutex_lock(&w->mu);
    int64_t step = w->written;
    if (pathlen) snprintf(path, pathlen, "%s", w->path);
    pthread_mutex_unlock(&w->mu);
    return step;
}

int snapshot_writer_flush(snapshot_writer *w, char *err, size_t errlen) {
    pthread_mutex_lock(&w->mu);
    while (w->pending) pthread_cond_wait(&w->cv, &w->mu);
    int rc = w->failed;
    if (rc && err && errlen) snprintf(err, errlen, "%s", w->err);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void snapshot_writer_stop(snapshot_writer *w) {
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    free(w->header);
    free(w->spare), free(w->busy);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
}
