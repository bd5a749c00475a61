/* The model runner (see model.h): the building blocks layers are made of,
 * memory, and the forward and backward passes over the operation list. */
#include "worker/model/model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"

#define GROW(arr, n, cap)                                                       \
    do {                                                                        \
        if ((n) == (cap)) {                                                     \
            int nc_ = (cap) ? 2 * (cap) : 16;                                   \
            void *p_ = realloc((arr), (size_t)nc_ * sizeof *(arr));             \
            if (!p_) return -ENOMEM;                                            \
            (arr) = p_;                                                         \
            (cap) = nc_;                                                        \
        }                                                                       \
    } while (0)

int model_add_act(model *m, int h, int w, int c) {
    GROW(m->acts, m->nacts, m->cap_acts);
    m->acts[m->nacts] = (model_act){.h = h, .w = w, .c = c};
    return m->nacts++;
}

int model_add_op(model *m, const model_op *op) {
    GROW(m->ops, m->nops, m->cap_ops);
    m->ops[m->nops] = *op;
    m->acts[op->in].consumers++;
    if (op->kind == OP_ADD || (op->kind == OP_BN && op->add)) m->acts[op->in2].consumers++;
    return m->nops++;
}

int model_fuse_add(model *m, int a, int b, int relu) {
    if (m->unfused || m->nops == 0) return -1;
    model_op *last = &m->ops[m->nops - 1];
    if (last->kind != OP_BN || last->relu || last->add) return -1;
    if ((last->out != a && last->out != b) || m->acts[last->out].consumers) return -1;
    last->in2 = last->out == a ? b : a;
    last->add = 1;
    last->relu = relu;
    m->acts[last->in2].consumers++;
    return last->out;
}

int model_add_param(model *m, const model_param *spec, size_t *offset) {
    GROW(m->params, m->nparams, m->cap_params);
    model_param *p = &m->params[m->nparams++];
    *p = *spec;
    p->count = 1;
    for (int i = 0; i < p->ndim; i++) p->count *= (size_t)p->shape[i];
    p->offset = m->nparam;
    m->nparam += p->count;
    *offset = p->offset;
    return 0;
}

int model_add_buffer(model *m, const char *name, size_t count, float init, size_t *offset) {
    GROW(m->buffers, m->nbuffers, m->cap_buffers);
    model_buffer *b = &m->buffers[m->nbuffers++];
    snprintf(b->name, sizeof b->name, "%s", name);
    b->offset = m->nbuf;
    b->count = count;
    b->init = init;
    m->nbuf += count;
    *offset = b->offset;
    return 0;
}

/* ---- memory ------------------------------------------------------------------ */

static void free_batch_memory(model *m) {
    backend *be = m->be;
    for (int i = 0; i < m->nacts; i++) {
        if (i > 0) be->ops->free(be, m->acts[i].data); /* act 0 is the caller's input */
        m->acts[i].data = m->acts[i].grad = NULL;
    }
    for (int i = 0; i < m->npool; i++) be->ops->free(be, m->pool[i].p);
    m->npool = 0;
    for (int i = 0; i < m->nops; i++) {
        be->ops->free(be, m->ops[i].stats);
        be->ops->free(be, m->ops[i].argmax);
        m->ops[i].stats = NULL;
        m->ops[i].argmax = NULL;
    }
    be->ops->free(be, m->scratch);
    m->scratch = NULL;
    be->ops->free(be, m->labels);
    m->labels = NULL;
}

static void op_shapes(model *m, model_op *op, int n) {
    const model_act *x = &m->acts[op->in];
    if (op->kind == OP_CONV) conv_shape_init(&op->cs, n, x->h, x->w, x->c, op->k, op->r, op->stride, op->pad);
    if (op->kind == OP_MAXPOOL) {
        op->ps = (pool_shape){.n = n, .h = x->h, .w = x->w, .c = x->c, .r = op->r,
                              .stride = op->stride, .pad = op->pad};
        op->ps.p = (x->h + 2 * op->pad - op->r) / op->stride + 1;
        op->ps.q = (x->w + 2 * op->pad - op->r) / op->stride + 1;
    }
    op->rows = n * x->h * x->w;
    op->c = x->c;
}

static void set_shapes(model *m, int n) {
    for (int i = 0; i < m->nops; i++) op_shapes(m, &m->ops[i], n);
    m->batch = n;
}

int model_max_batch(const model *m) {
    size_t per_image = 1;
    for (int i = 0; i < m->nacts; i++) {
        size_t e = (size_t)m->acts[i].h * m->acts[i].w * m->acts[i].c;
        if (e > per_image) per_image = e;
    }
    return (int)(INT32_MAX / per_image);
}

int model_set_batch(model *m, int n) {
    if (n > model_max_batch(m)) return -EOVERFLOW;
    if (n <= m->capacity) {
        if (n != m->batch) set_shapes(m, n);
        return 0;
    }
    free_batch_memory(m);
    m->capacity = m->batch = 0;
    backend *be = m->be;
    size_t largest = 0;
    for (int i = 0; i < m->nacts; i++) {
        model_act *a = &m->acts[i];
        size_t bytes = (size_t)n * a->h * a->w * a->c * backend_act_size(be);
        if (bytes > largest) largest = bytes;
        if (i > 0 && !(a->data = be->ops->alloc(be, bytes))) return -ENOMEM;
    }
    set_shapes(m, n);
    for (int i = 0; i < m->nops; i++) {
        model_op *op = &m->ops[i];
        if (op->kind == OP_BN && !(op->stats = be->ops->alloc(be, 4 * (size_t)op->c * sizeof(float))))
            return -ENOMEM;
        if (op->kind == OP_MAXPOOL) {
            size_t outn = (size_t)n * op->ps.p * op->ps.q * op->ps.c;
            if (!(op->argmax = be->ops->alloc(be, outn * sizeof(int32_t)))) return -ENOMEM;
        }
    }
    m->scratch = be->ops->alloc(be, largest);
    m->labels = be->ops->alloc(be, (size_t)n * sizeof(int32_t));
    if (!m->scratch || !m->labels) return -ENOMEM;
    m->capacity = n;
    return 0;
}

/* Each parameter as its init says, from its own stream of the seed: the
 * parameters are independent, so threads share them out (dynamically:
 * their sizes differ by a thousandfold) and the values are the same on
 * any number of threads. */
static void init_weights(model *m, uint64_t seed, float *host) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < m->nparams; i++) {
        const model_param *p = &m->params[i];
        float *w = host + p->offset;
        rng_t r;
        rng_seed(&r, seed, 0x1417, (uint64_t)i);
        switch (p->init) {
        case INIT_KAIMING_FAN_OUT: {
            float std = sqrtf(2.0f / (float)(p->shape[0] * p->shape[2] * p->shape[3]));
            for (size_t k = 0; k < p->count; k++) w[k] = std * rng_normal(&r);
            break;
        }
        case INIT_ONES:
        case INIT_ZEROS:
            for (size_t k = 0; k < p->count; k++) w[k] = p->init == INIT_ONES ? 1.0f : 0.0f;
            break;
        case INIT_UNIFORM_FAN_IN: {
            float bound = 1.0f / sqrtf((float)p->fan_in);
            for (size_t k = 0; k < p->count; k++) w[k] = bound * (2 * rng_float(&r) - 1);
            break;
        }
        }
    }
}

int model_draw_weights(model *m, uint64_t seed) {
    float *host = malloc((m->nparam ? m->nparam : 1) * sizeof(float));
    if (!host) return -ENOMEM;
    init_weights(m, seed, host);
    backend *be = m->be;
    be->ops->upload(be, m->param, host, m->nparam * sizeof(float));
    free(host);
    return 0;
}

int model_new(backend *be, const model_spec *spec, model **out, char *err, size_t errlen) {
    *out = NULL;
    if (spec->in_c < 1 || spec->in_h < 1 || spec->in_w < 1) {
        snprintf(err, errlen, "--model %s: bad input shape %dx%dx%d", spec->arch, spec->in_c,
                 spec->in_h, spec->in_w);
        return -EINVAL;
    }
    if (spec->classes < 2) {
        snprintf(err, errlen, "--model %s: needs at least 2 classes, got %d", spec->arch,
                 spec->classes);
        return -EINVAL;
    }
    model *m = calloc(1, sizeof *m);
    if (!m) return -ENOMEM;
    m->be = be;
    snprintf(m->arch, sizeof m->arch, "%s", spec->arch);
    m->in_c = spec->in_c, m->in_h = spec->in_h, m->in_w = spec->in_w;
    m->classes = spec->classes;
    m->unfused = spec->unfused;
    m->bn_momentum = 0.1f;
    m->bn_eps = 1e-5f;
    if (model_add_act(m, m->in_h, m->in_w, m->in_c) < 0) {
        model_destroy(m);
        return -ENOMEM;
    }
    *out = m;
    return 0;
}

int model_finish(model *m) {
    backend *be = m->be;
    m->param = be->ops->alloc(be, m->nparam * sizeof(float));
    m->grad = be->ops->alloc(be, m->nparam * sizeof(float));
    m->mom = be->ops->alloc(be, m->nparam * sizeof(float));
    m->buf = be->ops->alloc(be, (m->nbuf ? m->nbuf : 1) * sizeof(float));
    m->decay_mask = be->ops->alloc(be, m->nparam);
    m->loss = be->ops->alloc(be, sizeof *m->loss);
    float *host = calloc(m->nparam > m->nbuf ? m->nparam : m->nbuf, sizeof(float));
    if (!m->param || !m->grad || !m->mom || !m->buf || !m->decay_mask || !m->loss || !host) {
        free(host);
        return -ENOMEM;
    }
    for (int i = 0; i < m->nbuffers; i++)
        for (size_t k = 0; k < m->buffers[i].count; k++)
            host[m->buffers[i].offset + k] = m->buffers[i].init;
    be->ops->upload(be, m->buf, host, m->nbuf * sizeof(float));
    uint8_t *mask = (uint8_t *)host;
    for (int i = 0; i < m->nparams; i++)
        memset(mask + m->params[i].offset, m->params[i].decay, m->params[i].count);
    be->ops->upload(be, m->decay_mask, mask, m->nparam);
    free(host);
    return 0;
}

void model_destroy(model *m) {
    if (!m) return;
    backend *be = m->be;
    free_batch_memory(m);
    be->ops->free(be, m->param);
    be->ops->free(be, m->grad);
    be->ops->free(be, m->mom);
    be->ops->free(be, m->buf);
    be->ops->free(be, m->decay_mask);
    be->ops->free(be, m->loss);
    free(m->pool);
    free(m->ops);
    free(m->acts);
    free(m->params);
    free(m->buffers);
    free(m);
}

/* ---- forward ------------------------------------------------------------------ */

/* A batch norm op's operands for every batch-norm operation (backend.h):
 * its statistics (op->stats: mean, invstd, then the two sums, which the
 * forward and backward passes share) and this rank's row count; under
 * SyncBatchNorm the caller multiplies count by the hooks' count_scale (all
 * ranks' rows over this one's) once the sums are all-reduced. */
static bn_args bn_args_of(const model *m, const model_op *op) {
    int c = op->c;
    model_act *x = &m->acts[op->in], *y = &m->acts[op->out];
    float *mean = op->stats, *invstd = mean + c, *sums = invstd + c;
    return (bn_args){.rows = op->rows, .c = c, .x = x->data,
                     .res = op->add ? m->acts[op->in2].data : NULL, .y = y->data, .dy = y->grad,
                     .dx = x->grad, .gamma = m->param + op->w, .beta = m->param + op->b,
                     .mean = mean, .invstd = invstd, .running = m->buf + op->buf,
                     .sum = sums, .sumsq = sums + c, .sum_dy = sums, .sum_dy_xhat = sums + c,
                     .count = op->rows, .eps = m->bn_eps, .momentum = m->bn_momentum,
                     .relu = op->relu};
}

/* Batch statistics (all-reduced across ranks with SyncBatchNorm), and the
 * running statistics updated as PyTorch does (unbiased variance). */
static int bn_train_stats(model *m, bn_args *a) {
    backend *be = m->be;
    int rc = be->ops->bn_stats(be, a);
    if (rc == 0 && m->hooks.allreduce) {
        rc = m->hooks.allreduce(m->hooks.ctx, a->sum, 2 * (size_t)a->c);
        a->count *= m->hooks.count_scale;
    }
    if (rc) return rc;
    return be->ops->bn_finalize(be, a);
}

static int forward_bn(model *m, const model_op *op, int train) {
    backend *be = m->be;
    bn_args a = bn_args_of(m, op);
    int rc = train ? bn_train_stats(m, &a) : be->ops->bn_running(be, &a);
    return rc ? rc : be->ops->bn_apply(be, &a);
}

static int forward_op(model *m, model_op *op, int n, int train) {
    backend *be = m->be;
    const backend_ops *o = be->ops;
    model_act *x = &m->acts[op->in], *y = &m->acts[op->out];
    size_t ny = (size_t)n * y->h * y->w * y->c;
    switch (op->kind) {
    case OP_CONV: return o->conv_fwd(be, &op->cs, x->data, m->param + op->w, y->data);
    case OP_BN: return forward_bn(m, op, train);
    case OP_RELU: return o->relu_fwd(be, ny, x->data, y->data);
    case OP_ADD: return o->add_fwd(be, ny, x->data, m->acts[op->in2].data, op->relu, y->data);
    case OP_MAXPOOL: return o->maxpool_fwd(be, &op->ps, x->data, y->data, op->argmax);
    case OP_AVGPOOL: return o->avgpool_fwd(be, n, x->h * x->w, x->c, x->data, y->data);
    case OP_LINEAR:
        return o->linear_fwd(be, n, x->h * x->w * x->c, op->features, x->data,
                             m->param + op->w, m->param + op->b, y->data);
    }
    return -EINVAL;
}

int model_forward(model *m, const void *x, int n, int train, void **logits) {
    int rc = model_set_batch(m, n);
    if (rc) return rc;
    m->acts[0].data = (void *)x;
    for (int i = 0; i < m->nops; i++)
        if ((rc = forward_op(m, &m->ops[i], n, train))) return rc;
    *logits = m->acts[m->nacts - 1].data;
    return 0;
}

/* ---- backward ----------------------------------------------------------------- */

/* Gives activation `act` a gradient buffer from the pool (a free one of
 * its size, else a new one). */
static int grad_get(model *m, int act) {
    model_act *a = &m->acts[act];
    if (a->grad) return 0;
    size_t bytes = (size_t)m->capacity * a->h * a->w * a->c * backend_act_size(m->be);
    for (int i = 0; i < m->npool; i++) {
        if (!m->pool[i].used && m->pool[i].bytes == bytes) {
            m->pool[i].used = 1;
            a->grad = m->pool[i].p;
            return 0;
        }
    }
    GROW(m->pool, m->npool, m->cap_pool);
    void *p = m->be->ops->alloc(m->be, bytes);
    if (!p) return -ENOMEM;
    m->pool[m->npool].p = p;
    m->pool[m->npool].bytes = bytes;
    m->pool[m->npool++].used = 1;
    a->grad = p;
    return 0;
}

static void grad_put(model *m, int act) {
    model_act *a = &m->acts[act];
    for (int i = 0; i < m->npool && a->grad; i++)
        if (m->pool[i].p == a->grad) m->pool[i].used = 0;
    a->grad = NULL;
}

/* Where an op writes the gradient of its input: straight into the input's
 * gradient if nothing has yet, else into scratch to be added (a tensor
 * read by two ops, like a residual block's input, sums both gradients).
 * NULL for the model's input, which needs none. */
static void *dx_target(model *m, int act) {
    if (act == 0) return NULL;
    return m->acts[act].grad_set ? m->scratch : m->acts[act].grad;
}

static int dx_done(model *m, int act, size_t count) {
    if (act == 0) return 0;
    model_act *a = &m->acts[act];
    if (!a->grad_set) {
        a->grad_set = 1;
        return 0;
    }
    return m->be->ops->accumulate(m->be, count, m->scratch, a->grad);
}

/* Gives input `in` of an op the gradient g (in y's buffer) at the op's
 * output y of ny elements, as a sum passes its gradient on: an input
 * without a gradient yet takes over y's buffer itself while y still owns
 * it (y is done with it), else g is added to (or copied into) the input's
 * own. */
static int pass_on(model *m, int in, model_act *y, const void *g, size_t ny) {
    backend *be = m->be;
    model_act *a = &m->acts[in];
    int rc;
    if (in == 0) return 0;
    if (!a->grad && y->grad) {
        a->grad = y->grad, a->grad_set = 1;
        y->grad = NULL; /* now the input's: grad_put(out) leaves it */
        return 0;
    }
    if ((rc = grad_get(m, in))) return rc;
    if (a->grad_set) return be->ops->accumulate(be, ny, g, a->grad);
    be->ops->copy(be, a->grad, g, ny * backend_act_size(be));
    a->grad_set = 1;
    return 0;
}

static int backward_bn(model *m, model_op *op) {
    backend *be = m->be;
    int c = op->c, rc;
    model_act *x = &m->acts[op->in];
    bn_args a = bn_args_of(m, op);
    rc = be->ops->bn_bwd_reduce(be, &a);
    if (rc) return rc;
    /* The parameters' gradients are this rank's (DDP averages them); the
     * input's gradient needs the sums over every rank under SyncBatchNorm. */
    be->ops->copy(be, m->grad + op->b, a.sum_dy, (size_t)c * sizeof(float));
    be->ops->copy(be, m->grad + op->w, a.sum_dy_xhat, (size_t)c * sizeof(float));
    if (m->hooks.allreduce) {
        if ((rc = m->hooks.allreduce(m->hooks.ctx, a.sum_dy, 2 * (size_t)c))) return rc;
        a.count *= m->hooks.count_scale;
    }
    if (op->in != 0) {
        a.add_to = x->grad_set;
        if ((rc = be->ops->bn_bwd_apply(be, &a))) return rc;
        x->grad_set = 1;
    }
    /* A fused sum's other operand: the gradient at the output, after the
     * ReLU's mask (bn_bwd_reduce applied it in place). */
    model_act *y = &m->acts[op->out];
    return op->add ? pass_on(m, op->in2, y, y->grad, (size_t)op->rows * c) : 0;
}

/* A sum passes its gradient (after the ReLU mask) unchanged to both
 * inputs: the first without a gradient yet takes over the output's buffer
 * itself, so only the other needs a copy (or an add). */
static int backward_add(model *m, model_op *op, size_t ny) {
    backend *be = m->be;
    model_act *y = &m->acts[op->out];
    void *g = y->grad;
    int rc;
    if (op->relu && (rc = be->ops->relu_bwd(be, ny, y->data, g, g))) return rc;
    if ((rc = pass_on(m, op->in, y, g, ny))) return rc;
    return pass_on(m, op->in2, y, g, ny);
}

static int backward_op(model *m, model_op *op, int n) {
    backend *be = m->be;
    const backend_ops *o = be->ops;
    model_act *x = &m->acts[op->in], *y = &m->acts[op->out];
    size_t nx = (size_t)n * x->h * x->w * x->c, ny = (size_t)n * y->h * y->w * y->c;
    void *dx;
    int rc;
    /* The input's gradient buffer, before anything is written into it
     * (a sum sees to its inputs' itself). */
    if (op->kind != OP_ADD && op->in != 0 && (rc = grad_get(m, op->in))) return rc;
    switch (op->kind) {
    case OP_ADD: return backward_add(m, op, ny);
    case OP_CONV: {
        /* a second gradient for x blends into the first (no scratch pass) */
        int add = !m->unfused && op->in != 0 && x->grad_set;
        dx = add ? x->grad : dx_target(m, op->in);
        rc = o->conv_bwd(be, &op->cs, x->data, m->param + op->w, y->grad, dx, add,
                         m->grad + op->w);
        return rc || add ? rc : dx_done(m, op->in, nx);
    }
    case OP_BN: return backward_bn(m, op);
    case OP_RELU:
        dx = dx_target(m, op->in);
        rc = o->relu_bwd(be, ny, y->data, y->grad, dx);
        return rc ? rc : dx_done(m, op->in, nx);
    case OP_MAXPOOL:
        dx = dx_target(m, op->in);
        rc = dx ? o->maxpool_bwd(be, &op->ps, y->grad, op->argmax, dx) : 0;
        return rc ? rc : dx_done(m, op->in, nx);
    case OP_AVGPOOL:
        dx = dx_target(m, op->in);
        rc = dx ? o->avgpool_bwd(be, n, x->h * x->w, x->c, y->grad, dx) : 0;
        return rc ? rc : dx_done(m, op->in, nx);
    case OP_LINEAR:
        dx = dx_target(m, op->in);
        rc = o->linear_bwd(be, n, x->h * x->w * x->c, op->features, x->data, m->param + op->w,
                           y->grad, dx, m->grad + op->w, m->grad + op->b);
        return rc ? rc : dx_done(m, op->in, nx);
    }
    return -EINVAL;
}

static int has_params(const model_op *op) {
    return op->kind == OP_CONV || op->kind == OP_BN || op->kind == OP_LINEAR;
}

int model_set_labels(model *m, const int32_t *labels, int n) {
    int rc = model_set_batch(m, n);
    if (rc == 0) m->be->ops->upload_async(m->be, m->labels, labels, (size_t)n * sizeof(int32_t));
    return rc;
}

void model_point(model *m, const int32_t *labels, backend_loss *loss) {
    m->labels_at = labels, m->loss_at = loss;
}

int model_backward(model *m, int n, float smoothing) {
    backend *be = m->be;
    for (int i = 0; i < m->nacts; i++) grad_put(m, i), m->acts[i].grad_set = 0;
    model_act *out = &m->acts[m->nacts - 1];
    int rc = grad_get(m, m->nacts - 1);
    if (rc == 0)
        rc = be->ops->xent(be, n, m->classes, out->data, m->labels_at ? m->labels_at : m->labels,
                           smoothing, out->grad, m->loss_at ? m->loss_at : m->loss);
    float w = m->hooks.loss_weight;
    if (rc == 0 && w != 0.0f && w != 1.0f && be->act == DTYPE_F32) /* (ddp.c says why) */
        rc = be->ops->scale(be, (size_t)n * m->classes, w, out->grad);
    if (rc) return rc;
    out->grad_set = 1;
    for (int i = m->nops - 1; i >= 0; i--) {
        model_op *op = &m->ops[i];
        if ((rc = backward_op(m, op, n))) return rc;
        grad_put(m, op->out); /* its producer is done with it */
        if (has_params(op) && m->hooks.grads_ready &&
            (rc = m->hooks.grads_ready(m->hooks.ctx, op->w)))
            return rc;
    }
    return 0;
}

int model_loss(model *m, int n) {
    backend *be = m->be;
    model_act *out = &m->acts[m->nacts - 1];
    int rc = grad_get(m, m->nacts - 1); /* xent writes dlogits; here just scratch */
    if (rc == 0) rc = be->ops->xent(be, n, m->classes, out->data, m->labels, 0, out->grad, m->loss);
    grad_put(m, m->nacts - 1);
    return rc;
}

int model_read_loss(model *m, double *loss_sum, int *correct) {
    backend_loss l = {0};
    m->be->ops->download(m->be, &l, m->loss, sizeof l);
    /* The memory operations report their failures (a GPU's) at the next
     * sync: the step's uploads, and this download. */
    int rc = m->be->ops->sync(m->be);
    *loss_sum = rc ? 0 : l.sum;
    *correct = rc ? 0 : l.correct;
    return rc;
}
