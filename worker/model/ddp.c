/* See ddp.h. Buckets are byte ranges of the one gradient buffer: since the
 * parameters are laid out in forward order, "reverse layer order" is
 * simply from the end of the buffer backwards, and a bucket is ready once
 * backward has reached the first parameter in it. */
#include "worker/model/ddp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"

#define DEFAULT_FIRST_BUCKET (1u << 20)
#define DEFAULT_BUCKET (25u << 20)

typedef struct {
    size_t lo, hi; /* floats [lo, hi) of the gradient buffer */
    void *req;
    int launched;
} bucket;

struct ddp {
    model *m;
    devcomm *c;
    bucket *b;
    int nb;
    int next; /* the next bucket to launch (in launch order) */
    int sync_bn;
    int failed;
    float weight;      /* this rank's gradient weight: mine * world / global (ddp_set_share) */
    float *own_grad;   /* the model's gradient buffer while the shared one stands in */
    const char *grad_where; /* for logs */
    char grad_why[256];     /* why they are not in shared memory, where it exists */
    int64_t wait_ns, waits; /* ddp_finish's waits for the buckets, for ddp_stats */
};

/* Bucket boundaries fall between parameter tensors, walking from the last
 * parameter backwards. */
static int plan_buckets(ddp *d, size_t first, size_t rest) {
    model *m = d->m;
    d->b = calloc((size_t)m->nparams, sizeof *d->b);
    if (!d->b) return -ENOMEM;
    size_t cap = first / sizeof(float), hi = m->nparam;
    for (int i = m->nparams - 1; i >= 0; i--) {
        size_t lo = m->params[i].offset;
        if (hi - lo >= cap || i == 0) {
            d->b[d->nb++] = (bucket){.lo = lo, .hi = hi};
            hi = lo;
            cap = rest / sizeof(float);
        }
    }
    return 0;
}

static int launch(ddp *d, bucket *b) {
    b->launched = 1;
    if (d->weight != 1.0f) { /* queued before the all-reduce, which waits for it */
        backend *be = d->m->be;
        int rc = be->ops->scale(be, b->hi - b->lo, d->weight, d->m->grad + b->lo);
        if (rc) return rc;
    }
    return devcomm_allreduce_sum_async(d->c, d->m->grad + b->lo, b->hi - b->lo, &b->req);
}

static int on_grads_ready(void *ctx, size_t offset) {
    ddp *d = ctx;
    while (d->next < d->nb && d->b[d->next].lo >= offset) {
        int rc = launch(d, &d->b[d->next++]);
        if (rc) return rc;
    }
    return 0;
}

/* SyncBatchNorm's statistics go through the same ordered queue as the
 * buckets, so every rank issues its collectives in one order. */
static int bn_allreduce(void *ctx, float *buf, size_t n) {
    ddp *d = ctx;
    void *req = NULL;
    int rc = devcomm_allreduce_sum_async(d->c, buf, n, &req);
    return rc ? rc : devcomm_wait(d->c, req);
}

/* Moves the gradients where the communicator reads them in place (on the
 * CPU: a window that the host's ranks share), if it has such memory. Not
 * having it is no error: the all-reduces then copy. */
static int place_gradients(ddp *d, char *err, size_t errlen) {
    model *m = d->m;
    void *shared = NULL;
    char why[256];
    int rc = devcomm_alloc(d->c, m->nparam * sizeof(float), &shared, why, sizeof why);
    if (rc == 0) {
        m->be->ops->copy(m->be, shared, m->grad, m->nparam * sizeof(float));
        d->own_grad = m->grad;
        m->grad = shared;
        d->grad_where = "gradients in shared memory";
        return 0;
    }
    if (devcomm_error(d->c)[0]) {
        snprintf(err, errlen, "%s", devcomm_error(d->c));
        return rc;
    }
    if (rc != -ENOTSUP) { /* not worth a word where none exists (GPUs, a rank per host) */
        d->grad_where = "gradients in own memory";
        snprintf(d->grad_why, sizeof d->grad_why, "%s", why);
    }
    return 0;
}

int ddp_create(model *m, devcomm *c, size_t first_bucket_bytes, size_t bucket_bytes, int sync_bn,
               ddp **out, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    ddp *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->m = m;
    d->c = c;
    d->grad_where = "";
    d->sync_bn = sync_bn;
    d->weight = 1.0f;
    int rc = plan_buckets(d, first_bucket_bytes ? first_bucket_bytes : DEFAULT_FIRST_BUCKET,
                          bucket_bytes ? bucket_bytes : DEFAULT_BUCKET);
    if (rc == 0 && c->world > 1) rc = place_gradients(d, err, errlen);
    if (rc) {
        if (!err[0]) snprintf(err, errlen, "out of memory");
        free(d->b);
        free(d);
        return rc;
    }
    if (c->world > 1) {
        m->hooks.ctx = d;
        m->hooks.grads_ready = on_grads_ready;
        m->hooks.count_scale = c->world;
        if (sync_bn) m->hooks.allreduce = bn_allreduce;
    }
    *out = d;
    return 0;
}

void ddp_destroy(ddp *d) {
    if (!d) return;
    d->m->hooks = (model_hooks){0};
    if (d->own_grad) {
        devcomm_free(d->c, d->m->grad);
        d->m->grad = d->own_grad;
    }
    free(d->b);
    free(d);
}

int ddp_broadcast_model(ddp *d, int root) {
    int rc = devcomm_broadcast(d->c, d->m->param, d->m->nparam * sizeof(float), root);
    if (rc == 0 && d->m->nbuf)
        rc = devcomm_broadcast(d->c, d->m->buf, d->m->nbuf * sizeof(float), root);
    return rc;
}

/* The weight goes where the loss's gradient starts, so that every
 * gradient after it, SyncBatchNorm's sums over the ranks included, is
 * weighted alike: the exact gradient of the mean over the global batch. The
 * backend scales fp32 only; with bf16 activations the weight goes on each
 * bucket before its all-reduce instead, which is the same without
 * SyncBatchNorm, and with it leaves the batch-norm backward's sums over the
 * ranks unweighted (said). */
void ddp_set_share(ddp *d, int mine, int global) {
    model *m = d->m;
    int world = d->c->world;
    if (world == 1 || mine <= 0 || global <= 0) return;
    float w = mine * world == global ? 1.0f : (float)((double)mine * world / global);
    m->hooks.count_scale = (double)global / mine;
    if (m->be->act == DTYPE_F32) {
        m->hooks.loss_weight = w;
        return;
    }
    d->weight = w;
    if (w != 1.0f && d->sync_bn)
        log_warn("--sync-bn with bf16 activations and uneven shares of the global batch: the "
                 "batch-norm backward's sums over the ranks are not weighted by the shares "
                 "(a difference of about 1/%d in their terms)", mine);
}

void ddp_begin(ddp *d) {
    d->next = 0;
    for (int i = 0; i < d->nb; i++) d->b[i].launched = 0, d->b[i].req = NULL;
}

int ddp_finish(ddp *d) {
    int world = d->c->world, rc = 0;
    if (world == 1) return 0;
    while (rc == 0 && d->next < d->nb) rc = launch(d, &d->b[d->next++]);
    int64_t t0 = clock_now_ns();
    for (int i = 0; i < d->nb; i++)
        if (d->b[i].req) {
            int w = devcomm_wait(d->c, d->b[i].req);
            if (rc == 0) rc = w;
        }
    d->wait_ns += clock_now_ns() - t0;
    d->waits++;
    if (rc) return rc;
    backend *be = d->m->be;
    return be->ops->scale(be, d->m->nparam, 1.0f / (float)world, d->m->grad);
}

const char *ddp_grad_memory(const ddp *d) { return d->grad_where; }
const char *ddp_grad_why(const ddp *d) { return d->grad_why; }

void ddp_stats(const ddp *d, int64_t *wait_ns, int64_t *waits) {
    *wait_ns = d ? d->wait_ns : 0;
    *waits = d ? d->waits : 0;
}

int ddp_buckets(const ddp *d, size_t *largest_bytes) {
    size_t big = 0;
    for (int i = 0; i < d->nb; i++)
        if (d->b[i].hi - d->b[i].lo > big) big = d->b[i].hi - d->b[i].lo;
    if (largest_bytes) *largest_bytes = big * sizeof(float);
    return d->nb;
}
