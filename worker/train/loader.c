/* See loader.h. One mutex guards the slots; the samples themselves are
 * drawn outside it, a few at a time (CHUNK), by whichever thread takes
 * them, into the slot's own place for them. The caller of loader_get
 * helps fill the batch it waits for, so with no pool (threads = 0) it
 * simply builds each batch itself. */
#include "worker/train/loader.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/bf16.h"
#include "worker/data/sampler.h"

/* Samples taken at a time: few enough that the threads share one batch
 * evenly, enough that the lock is seldom taken. */
#define CHUNK 4

typedef enum { SLOT_FREE, SLOT_FILLING, SLOT_READY, SLOT_SERVED } slot_state;

typedef struct {
    slot_state state;
    int dropped;          /* given up while threads still fill it: freed when the last leaves */
    int epoch;
    int64_t pos;
    uint64_t seq;         /* the order of requests: the oldest is filled first */
    int next, done, busy; /* samples handed out, samples finished, threads inside */
    int failed_at;        /* the first sample that could not be drawn (batch: none) */
    int rc;               /* its error, and what dataset_sample said */
    char err[512];
    int64_t *idx;
    void *x;
    int32_t *y;
    jpeg_image *jpeg; /* with jpegs: the samples handed out as JPEGs (data malloc'd) */
} slot;

struct loader {
    loader_opts o;
    int64_t n; /* samples per epoch */
    int c, hw;
    size_t sample_bytes; /* one NHWC sample in the activation type */
    int nslots;
    slot *slots;
    slot *served;
    uint64_t seq;
    int tail_epoch; /* the last step queued: prediction goes on from it */
    int64_t tail_pos;
    /* Two epochs' sample orders (the caller's thread alone uses them). */
    int64_t *order[2];
    int order_epoch[2], order_next;
    float **scratch; /* one C x H x W sample per pool thread, and the caller's last */
    pthread_mutex_t mu;
    pthread_cond_t work;  /* pool threads wait for samples to draw */
    pthread_cond_t ready; /* the caller waits for its batch, or for a slot to come free */
    int stop;
    pthread_t *threads;
    int started_threads; /* created */
    int started;         /* running: each takes the next scratch */
    int64_t gets, hits;
};

void loader_to_nhwc(const float *chw, int c, int hw, backend_dtype dt, void *out) {
    if (dt == DTYPE_BF16) {
        uint16_t *o = out;
        for (int p = 0; p < hw; p++)
            for (int ch = 0; ch < c; ch++) o[(size_t)p * c + ch] = bf16_from_float(chw[(size_t)ch * hw + p]);
        return;
    }
    float *o = out;
    if (c == 1) {
        memcpy(o, chw, (size_t)hw * sizeof *o);
        return;
    }
    for (int p = 0; p < hw; p++)
        for (int ch = 0; ch < c; ch++) o[(size_t)p * c + ch] = chw[(size_t)ch * hw + p];
}

/* ---- drawing samples (any thread) --------------------------------------------------- */

/* Sample i of s drawn on the host into x (the activation type), through
 * tmp (one C x H x W sample of floats). */
static int draw(loader *l, slot *s, int i, void *x, float *tmp, char *err, size_t errlen) {
    const loader_opts *o = &l->o;
    int f32 = o->be->act == DTYPE_F32, rc;
    if (dataset_native_nhwc(o->ds)) { /* H x W x C already: into x, or to bf16 from tmp */
        rc = dataset_sample_nhwc(o->ds, s->idx[i], o->augment, o->seed, s->epoch,
                                 f32 ? x : tmp, &s->y[i], err, errlen);
        if (rc == 0 && !f32)
            for (size_t k = 0, n = (size_t)l->c * l->hw; k < n; k++)
                ((uint16_t *)x)[k] = bf16_from_float(tmp[k]);
        return rc;
    }
    rc = dataset_sample(o->ds, s->idx[i], o->augment, o->seed, s->epoch, tmp, &s->y[i], err,
                        errlen);
    if (rc == 0) loader_to_nhwc(tmp, l->c, l->hw, o->be->act, x);
    return rc;
}

/* Sample i of s as its JPEG, for the device to decode: 1 if so, 0 if the
 * host must draw it (whatever dataset_jpeg_of said: the host's drawing
 * names the problem, or skips the sample, as it would without jpegs). */
static int as_jpeg(loader *l, slot *s, int i, char *err, size_t errlen) {
    const loader_opts *o = &l->o;
    dataset_jpeg j;
    if (dataset_jpeg_of(o->ds, s->idx[i], o->augment, o->seed, s->epoch, &j, &s->y[i], err,
                        errlen))
        return 0;
    s->jpeg[i] = (jpeg_image){.data = j.data, .len = j.len, .width = j.width,
                              .height = j.height, .flip = j.flip};
    memcpy(s->jpeg[i].box, j.box, sizeof j.box);
    return 1;
}

/* With jpegs: whether sample i of a batch may go to the device, spread
 * evenly through the batch: of every 1000, jpegs_permille (0: all). The
 * choice depends on the place alone, so a resumed run decodes each sample
 * where the run before it did. */
static int to_device(const loader_opts *o, int i) {
    int64_t p = o->jpegs_permille;
    return p <= 0 || p >= 1000 || ((int64_t)(i + 1) * p) / 1000 > ((int64_t)i * p) / 1000;
}

/* The files a slot held for the device, freed before it is filled again. */
static void free_jpegs(loader *l, slot *s) {
    for (int i = 0; s->jpeg && i < l->o.batch; i++) {
        free((void *)s->jpeg[i].data);
        s->jpeg[i].data = NULL;
    }
}

/* Draws samples [from, to) of s; a failure ends the chunk, and the
 * position of the sample that failed is returned (to: none did). */
static int build(loader *l, slot *s, int from, int to, float *tmp, int *rc, char *err,
                 size_t errlen) {
    const loader_opts *o = &l->o;
    for (int i = from; i < to; i++) {
        if (o->jpegs && to_device(o, i) && as_jpeg(l, s, i, err, errlen)) continue;
        void *x = (char *)s->x + (size_t)i * l->sample_bytes;
        if ((*rc = draw(l, s, i, x, tmp, err, errlen))) return i;
    }
    return to;
}

/* Under the lock: a failure at sample i of s, kept if it is the batch's
 * first so far (in the batch's order, so that the same failure is reported
 * whichever thread meets it first). */
static void failed(slot *s, int i, int rc, const char *err) {
    if (i >= s->failed_at) return;
    s->failed_at = i, s->rc = rc;
    snprintf(s->err, sizeof s->err, "%s", err);
}

/* Under the lock: the next samples to draw, from `only` or else from the
 * oldest batch being filled; NULL if there are none. */
static slot *take_work(loader *l, slot *only, int *from, int *to) {
    slot *best = NULL;
    for (int i = 0; i < l->nslots; i++) {
        slot *s = &l->slots[i];
        if (s->state != SLOT_FILLING || s->next >= l->o.batch || (only && s != only)) continue;
        if (!best || s->seq < best->seq) best = s;
    }
    if (!best) return NULL;
    *from = best->next;
    *to = best->next + CHUNK < l->o.batch ? best->next + CHUNK : l->o.batch;
    best->next = *to;
    best->busy++;
    return best;
}

/* Under the lock: k samples of s are drawn, or failed. */
static void finish(loader *l, slot *s, int k) {
    s->busy--;
    s->done += k;
    if (s->dropped && s->busy == 0) {
        s->dropped = 0;
        s->state = SLOT_FREE;
        pthread_cond_broadcast(&l->ready);
    } else if (!s->dropped && s->done == l->o.batch) {
        s->state = SLOT_READY;
        pthread_cond_broadcast(&l->ready);
    }
}

static void *pool_thread(void *arg) {
    loader *l = arg;
    char err[512];
    pthread_mutex_lock(&l->mu);
    int me = l->started++;
    for (;;) {
        slot *s = NULL;
        int from = 0, to = 0;
        while (!l->stop && !(s = take_work(l, NULL, &from, &to))) pthread_cond_wait(&l->work, &l->mu);
        if (l->stop) break;
        pthread_mutex_unlock(&l->mu);
        int rc = 0, at = build(l, s, from, to, l->scratch[me], &rc, err, sizeof err);
        pthread_mutex_lock(&l->mu);
        if (at < to) failed(s, at, rc, err);
        finish(l, s, to - from);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---- requests (the caller's thread, under the lock) ------------------------------------ */

static const int64_t *order_of(loader *l, int epoch) {
    for (int i = 0; i < 2; i++)
        if (l->order_epoch[i] == epoch) return l->order[i];
    int i = l->order_next;
    l->order_next ^= 1;
    sampler_epoch_order(l->n, l->o.seed, epoch, 1, l->order[i]);
    l->order_epoch[i] = epoch;
    return l->order[i];
}

static int queued(const slot *s) {
    return (s->state == SLOT_FILLING || s->state == SLOT_READY) && !s->dropped;
}

static void drop(loader *l, slot *s) {
    if (s->state == SLOT_READY || s->busy == 0) {
        s->state = SLOT_FREE;
        return;
    }
    s->dropped = 1;
    s->next = l->o.batch; /* nothing more is handed out */
}

/* The step at (epoch, pos) into a free slot; NULL if none is free. */
static slot *enqueue(loader *l, int epoch, int64_t pos) {
    slot *s = NULL;
    for (int i = 0; i < l->nslots && !s; i++)
        if (l->slots[i].state == SLOT_FREE) s = &l->slots[i];
    if (!s) return NULL;
    free_jpegs(l, s);
    sampler_rank_batch(order_of(l, epoch), l->n, pos, l->o.world, l->o.rank, l->o.batch, s->idx);
    s->epoch = epoch, s->pos = pos, s->seq = l->seq++;
    s->next = s->done = s->busy = s->dropped = 0;
    s->failed_at = l->o.batch, s->rc = 0;
    s->state = SLOT_FILLING;
    l->tail_epoch = epoch, l->tail_pos = pos;
    pthread_cond_broadcast(&l->work);
    return s;
}

/* Queues the predicted next steps until depth batches are ahead. */
static void prefetch(loader *l) {
    if (l->o.threads == 0) return;
    for (;;) {
        int ahead = 0;
        for (int i = 0; i < l->nslots; i++) ahead += queued(&l->slots[i]);
        int epoch = l->tail_epoch;
        int64_t pos = l->tail_pos + l->o.global_batch;
        if (pos >= l->n) epoch++, pos = 0;
        if (ahead > l->o.depth || epoch >= l->o.epochs || !enqueue(l, epoch, pos)) return;
    }
}

/* The queued slot for (epoch, pos), dropping everything queued before it;
 * or, if there is none, everything queued and a new request for it. */
static slot *find_or_request(loader *l, int epoch, int64_t pos) {
    slot *s = NULL;
    for (int i = 0; i < l->nslots; i++) {
        slot *q = &l->slots[i];
        if (queued(q) && q->epoch == epoch && q->pos == pos) s = q;
    }
    for (int i = 0; i < l->nslots; i++) {
        slot *q = &l->slots[i];
        if (queued(q) && (!s || q->seq < s->seq)) drop(l, q);
    }
    while (!s && !(s = enqueue(l, epoch, pos))) pthread_cond_wait(&l->ready, &l->mu);
    return s;
}

int loader_get(loader *l, int epoch, int64_t pos, const void **x, const int32_t **y, char *err,
               size_t errlen) {
    char why[512];
    pthread_mutex_lock(&l->mu);
    if (l->served) l->served->state = SLOT_FREE;
    l->served = NULL;
    slot *s = find_or_request(l, epoch, pos);
    prefetch(l);
    l->gets++;
    l->hits += s->state == SLOT_READY;
    while (s->state != SLOT_READY) {
        int from = 0, to = 0;
        slot *w = take_work(l, s, &from, &to);
        if (!w) {
            pthread_cond_wait(&l->ready, &l->mu);
            continue;
        }
        pthread_mutex_unlock(&l->mu);
        int rc = 0, at = build(l, w, from, to, l->scratch[l->o.threads], &rc, why, sizeof why);
        pthread_mutex_lock(&l->mu);
        if (at < to) failed(w, at, rc, why);
        finish(l, w, to - from);
    }
    s->state = SLOT_SERVED;
    l->served = s;
    int rc = s->rc;
    if (rc) snprintf(err, errlen, "%s", s->err);
    pthread_mutex_unlock(&l->mu);
    *x = s->x;
    *y = s->y;
    return rc;
}

const int64_t *loader_indices(const loader *l) { return l->served ? l->served->idx : NULL; }

const jpeg_image *loader_jpegs(const loader *l) {
    return l->o.jpegs && l->served ? l->served->jpeg : NULL;
}

int loader_draw_again(loader *l, int i, void *x, char *err, size_t errlen) {
    /* the caller's scratch: loader_get's, which is not running now */
    return draw(l, l->served, i, x, l->scratch[l->o.threads], err, errlen);
}

void loader_stats(const loader *l, int64_t *gets, int64_t *ready) {
    pthread_mutex_lock((pthread_mutex_t *)&l->mu);
    *gets = l->gets, *ready = l->hits;
    pthread_mutex_unlock((pthread_mutex_t *)&l->mu);
}

/* ---- life cycle --------------------------------------------------------------------------- */

static int allocate(loader *l) {
    const loader_opts *o = &l->o;
    backend *be = o->be;
    l->slots = calloc((size_t)l->nslots, sizeof *l->slots);
    l->scratch = calloc((size_t)o->threads + 1, sizeof *l->scratch);
    l->threads = calloc((size_t)o->threads + 1, sizeof *l->threads);
    if (!l->slots || !l->scratch || !l->threads) return -ENOMEM;
    for (int i = 0; i < 2; i++) {
        l->order_epoch[i] = -1;
        if (!(l->order[i] = malloc((size_t)l->n * sizeof *l->order[i]))) return -ENOMEM;
    }
    for (int i = 0; i <= o->threads; i++)
        if (!(l->scratch[i] = malloc((size_t)l->c * l->hw * sizeof(float)))) return -ENOMEM;
    for (int i = 0; i < l->nslots; i++) {
        slot *s = &l->slots[i];
        s->idx = malloc((size_t)o->batch * sizeof *s->idx);
        s->x = be->ops->alloc_host(be, (size_t)o->batch * l->sample_bytes);
        s->y = be->ops->alloc_host(be, (size_t)o->batch * sizeof *s->y);
        if (!s->idx || !s->x || !s->y) return -ENOMEM;
        if (o->jpegs && !(s->jpeg = calloc((size_t)o->batch, sizeof *s->jpeg))) return -ENOMEM;
    }
    return 0;
}

int loader_create(const loader_opts *o, loader **out, char *err, size_t errlen) {
    *out = NULL;
    loader *l = calloc(1, sizeof *l);
    if (!l) return -ENOMEM;
    l->o = *o;
    if (l->o.threads > 0 && l->o.depth < 1) l->o.depth = 1;
    if (l->o.global_batch <= 0) l->o.global_batch = l->o.batch * l->o.world;
    int c, h, w;
    dataset_shape(o->ds, &c, &h, &w);
    l->n = dataset_size(o->ds);
    l->c = c, l->hw = h * w;
    l->sample_bytes = (size_t)c * h * w * backend_act_size(o->be);
    l->nslots = 1 + (l->o.threads > 0 ? l->o.depth + 1 : 0);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->ready, NULL);
    int rc = allocate(l);
    for (int i = 0; rc == 0 && i < l->o.threads; i++) {
        int e = pthread_create(&l->threads[i], NULL, pool_thread, l);
        if (e) rc = -e;
        else l->started_threads++;
    }
    if (rc) {
        snprintf(err, errlen, "cannot set up the input pipeline (%d batches of %d ahead, %d "
                 "threads): %s", l->nslots, o->batch, o->threads, strerror(-rc));
        loader_destroy(l);
        return rc;
    }
    *out = l;
    return 0;
}

void loader_destroy(loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->started_threads; i++) pthread_join(l->threads[i], NULL);
    backend *be = l->o.be;
    for (int i = 0; l->slots && i < l->nslots; i++) {
        free_jpegs(l, &l->slots[i]);
        free(l->slots[i].jpeg);
        free(l->slots[i].idx);
        if (l->slots[i].x) be->ops->free_host(be, l->slots[i].x);
        if (l->slots[i].y) be->ops->free_host(be, l->slots[i].y);
    }
    for (int i = 0; l->scratch && i <= l->o.threads; i++) free(l->scratch[i]);
    free(l->order[0]), free(l->order[1]);
    free(l->scratch), free(l->slots), free(l->threads);
    pthread_cond_destroy(&l->work);
    pthread_cond_destroy(&l->ready);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
