/* bf16 mixed precision on the CPU, emulated: a backend whose activations
 * are bf16 and whose every operation widens its bf16 inputs to fp32, runs
 * the fp32 CPU backend's operation, and rounds the results to bf16 (to
 * nearest even, as a GPU does). Weights are rounded to bf16 where a
 * convolution or the linear layer reads them, and a convolution's weight
 * gradient is rounded as cuDNN writes it; sums, statistics and the linear
 * layer's weight gradient stay fp32. That is the arithmetic of the CUDA backend's bf16
 * (bf16 storage, fp32 accumulation), so this is its reference in
 * tests/gpu, and it lets the model's bf16 path run in make check. It is
 * for checking numerics: it is slower than fp32, not faster. */
#include <errno.h>
#include <stdlib.h>

#include "worker/backend/bf16.h"
#include "worker/backend/cpu/cpu_kernels.h"

#define SLOTS 4

typedef struct {
    backend *inner; /* the fp32 CPU backend */
    float *slot[SLOTS];
    size_t cap[SLOTS];
} bf16_state;

static bf16_state *state(backend *b) { return b->impl; }
static backend *inner(backend *b) { return state(b)->inner; }

/* fp32 scratch slot i, at least n floats (NULL when out of memory). */
static float *scratch(backend *b, int i, size_t n) {
    bf16_state *st = state(b);
    if (n > st->cap[i]) {
        float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
        if (!p) return NULL;
        free(st->slot[i]);
        st->slot[i] = p, st->cap[i] = n;
    }
    return st->slot[i];
}

/* bf16 activations in slot i, widened. */
static float *widen(backend *b, int i, const void *src, size_t n) {
    float *p = scratch(b, i, n);
    const uint16_t *s = src;
    if (p)
#pragma omp parallel for simd schedule(static) if (n >= 65536)
        for (size_t k = 0; k < n; k++) p[k] = bf16_to_float(s[k]);
    return p;
}

/* fp32 weights in slot i, rounded to bf16's precision. */
static float *rounded(backend *b, int i, const float *w, size_t n) {
    float *p = scratch(b, i, n);
    if (p)
#pragma omp parallel for simd schedule(static) if (n >= 65536)
        for (size_t k = 0; k < n; k++) p[k] = bf16_round(w[k]);
    return p;
}

/* The fp32 result of the inner operation (rc) out to bf16 activations. */
static int narrow(int rc, void *dst, const float *src, size_t n) {
    if (rc) return rc;
    uint16_t *d = dst;
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (size_t k = 0; k < n; k++) d[k] = bf16_from_float(src[k]);
    return 0;
}

static size_t conv_in(const conv_shape *s) { return (size_t)s->n * s->h * s->w * s->c; }
static size_t conv_out(const conv_shape *s) { return (size_t)s->n * s->p * s->q * s->k; }
static size_t conv_weights(const conv_shape *s) { return (size_t)s->k * s->r * s->s * s->c; }

/* ---- operations on activations ------------------------------------------------ */

/* Written by hand: which inputs are widened, how many elements each holds,
 * which weights are rounded, and which results are rounded back or stay
 * fp32 (batch-norm sums, the linear layer's weight gradient) follow from
 * each operation's shapes and meaning, not from its signature. Each is
 * named bf16_NAME, which is where the table below finds it. */

static int bf16_conv_fwd(backend *b, const conv_shape *s, const void *x, const float *w, void *y) {
    float *X = widen(b, 0, x, conv_in(s)), *W = rounded(b, 1, w, conv_weights(s));
    float *Y = scratch(b, 2, conv_out(s));
    if (!X || !W || !Y) return -ENOMEM;
    return narrow(inner(b)->ops->conv_fwd(inner(b), s, X, W, Y), y, Y, conv_out(s));
}

static int bf16_conv_bwd(backend *b, const conv_shape *s, const void *x, const float *w,
                         const void *dy, void *dx, int dx_add, float *dw) {
    float *X = widen(b, 0, x, conv_in(s)), *W = rounded(b, 1, w, conv_weights(s));
    float *DY = widen(b, 2, dy, conv_out(s)), *DX = NULL;
    /* with dx_add, the sum in fp32 and rounded once, as cuDNN blends */
    if (dx) DX = dx_add ? widen(b, 3, dx, conv_in(s)) : scratch(b, 3, conv_in(s));
    if (!X || !W || !DY || (dx && !DX)) return -ENOMEM;
    int rc = inner(b)->ops->conv_bwd(inner(b), s, X, W, DY, DX, dx_add, dw);
    /* cuDNN writes the filter gradient in the data type, bf16: so here. */
    if (rc == 0)
        for (size_t k = 0, n = conv_weights(s); k < n; k++) dw[k] = bf16_round(dw[k]);
    return dx ? narrow(rc, dx, DX, conv_in(s)) : rc;
}

/* The batch-norm operations run the inner backend's on a copy of the
 * arguments whose activations are the widened scratch copies. */
static int bf16_bn_stats(backend *b, const bn_args *a) {
    bn_args f = *a;
    f.x = widen(b, 0, a->x, (size_t)a->rows * a->c);
    if (!f.x) return -ENOMEM;
    return inner(b)->ops->bn_stats(inner(b), &f);
}

static int bf16_bn_apply(backend *b, const bn_args *a) {
    size_t n = (size_t)a->rows * a->c;
    float *X = widen(b, 0, a->x, n), *R = a->res ? widen(b, 1, a->res, n) : NULL;
    if (!X || (a->res && !R)) return -ENOMEM;
    bn_args f = *a;
    f.x = X, f.y = X, f.res = R;
    return narrow(inner(b)->ops->bn_apply(inner(b), &f), a->y, X, n);
}

static int bf16_bn_bwd_reduce(backend *b, const bn_args *a) {
    size_t n = (size_t)a->rows * a->c;
    float *X = widen(b, 0, a->x, n), *Y = widen(b, 1, a->y, n), *DY = widen(b, 2, a->dy, n);
    if (!X || !Y || !DY) return -ENOMEM;
    bn_args f = *a;
    f.x = X, f.y = Y, f.dy = DY;
    return narrow(inner(b)->ops->bn_bwd_reduce(inner(b), &f), a->dy, DY, n);
}

static int bf16_bn_bwd_apply(backend *b, const bn_args *a) {
    size_t n = (size_t)a->rows * a->c;
    float *X = widen(b, 0, a->x, n), *DY = widen(b, 1, a->dy, n);
    float *DX = a->add_to ? widen(b, 2, a->dx, n) : scratch(b, 2, n);
    if (!X || !DY || !DX) return -ENOMEM;
    bn_args f = *a;
    f.x = X, f.dy = DY, f.dx = DX;
    return narrow(inner(b)->ops->bn_bwd_apply(inner(b), &f), a->dx, DX, n);
}

static int bf16_relu_fwd(backend *b, size_t n, const void *x, void *y) {
    float *X = widen(b, 0, x, n);
    if (!X) return -ENOMEM;
    return narrow(inner(b)->ops->relu_fwd(inner(b), n, X, X), y, X, n);
}

static int bf16_relu_bwd(backend *b, size_t n, const void *y, const void *dy, void *dx) {
    float *Y = widen(b, 0, y, n), *DY = widen(b, 1, dy, n);
    if (!Y || !DY) return -ENOMEM;
    return narrow(inner(b)->ops->relu_bwd(inner(b), n, Y, DY, DY), dx, DY, n);
}

static int bf16_add_fwd(backend *b, size_t n, const void *a, const void *x2, int relu, void *y) {
    float *A = widen(b, 0, a, n), *B = widen(b, 1, x2, n);
    if (!A || !B) return -ENOMEM;
    return narrow(inner(b)->ops->add_fwd(inner(b), n, A, B, relu, A), y, A, n);
}

static int bf16_accumulate(backend *b, size_t n, const void *src, void *dst) {
    float *S = widen(b, 0, src, n), *D = widen(b, 1, dst, n);
    if (!S || !D) return -ENOMEM;
    return narrow(inner(b)->ops->accumulate(inner(b), n, S, D), dst, D, n);
}

static int bf16_maxpool_fwd(backend *b, const pool_shape *s, const void *x, void *y,
                            int32_t *argmax) {
    size_t nx = (size_t)s->n * s->h * s->w * s->c, ny = (size_t)s->n * s->p * s->q * s->c;
    float *X = widen(b, 0, x, nx), *Y = scratch(b, 1, ny);
    if (!X || !Y) return -ENOMEM;
    return narrow(inner(b)->ops->maxpool_fwd(inner(b), s, X, Y, argmax), y, Y, ny);
}

static int bf16_maxpool_bwd(backend *b, const pool_shape *s, const void *dy, const int32_t *argmax,
                            void *dx) {
    size_t nx = (size_t)s->n * s->h * s->w * s->c, ny = (size_t)s->n * s->p * s->q * s->c;
    float *DY = widen(b, 0, dy, ny), *DX = scratch(b, 1, nx);
    if (!DY || !DX) return -ENOMEM;
    return narrow(inner(b)->ops->maxpool_bwd(inner(b), s, DY, argmax, DX), dx, DX, nx);
}

static int bf16_avgpool_fwd(backend *b, int n, int hw, int c, const void *x, void *y) {
    float *X = widen(b, 0, x, (size_t)n * hw * c), *Y = scratch(b, 1, (size_t)n * c);
    if (!X || !Y) return -ENOMEM;
    return narrow(inner(b)->ops->avgpool_fwd(inner(b), n, hw, c, X, Y), y, Y, (size_t)n * c);
}

static int bf16_avgpool_bwd(backend *b, int n, int hw, int c, const void *dy, void *dx) {
    size_t nx = (size_t)n * hw * c;
    float *DY = widen(b, 0, dy, (size_t)n * c), *DX = scratch(b, 1, nx);
    if (!DY || !DX) return -ENOMEM;
    return narrow(inner(b)->ops->avgpool_bwd(inner(b), n, hw, c, DY, DX), dx, DX, nx);
}

static int bf16_linear_fwd(backend *b, int n, int in, int out, const void *x, const float *w,
                           const float *bias, void *y) {
    size_t ny = (size_t)n * out;
    float *X = widen(b, 0, x, (size_t)n * in), *W = rounded(b, 1, w, (size_t)out * in);
    float *Y = scratch(b, 2, ny);
    if (!X || !W || !Y) return -ENOMEM;
    return narrow(inner(b)->ops->linear_fwd(inner(b), n, in, out, X, W, bias, Y), y, Y, ny);
}

static int bf16_linear_bwd(backend *b, int n, int in, int out, const void *x, const float *w,
                           const void *dy, void *dx, float *dw, float *dbias) {
    size_t nx = (size_t)n * in;
    float *X = widen(b, 0, x, nx), *W = rounded(b, 1, w, (size_t)out * in);
    float *DY = widen(b, 2, dy, (size_t)n * out), *DX = dx ? scratch(b, 3, nx) : NULL;
    if (!X || !W || !DY || (dx && !DX)) return -ENOMEM;
    int rc = inner(b)->ops->linear_bwd(inner(b), n, in, out, X, W, DY, DX, dw, dbias);
    return dx ? narrow(rc, dx, DX, nx) : rc;
}

static int bf16_xent(backend *b, int n, int classes, const void *logits, const int32_t *labels,
                     float smoothing, void *dlogits, backend_loss *out) {
    size_t nl = (size_t)n * classes;
    float *L = widen(b, 0, logits, nl), *D = scratch(b, 1, nl);
    if (!L || !D) return -ENOMEM;
    int rc = inner(b)->ops->xent(inner(b), n, classes, L, labels, smoothing, D, out);
    return narrow(rc, dlogits, D, nl);
}

/* ---- everything else is the fp32 backend's ------------------------------------ */

/* What touches no activations is the fp32 backend's operation as it is:
 * these wrappers are made from backend.h's list (BACKEND_OPS), one for
 * each PLAIN and PLAIN_VOID operation. Inside the inner block b is the
 * fp32 backend, so the list's arguments pass on unchanged. */
#define FORWARD(RETURN, RET, NAME, PARAMS, ARGS)                                                   \
    static RET bf16_##NAME PARAMS {                                                                \
        backend *outer = b;                                                                        \
        {                                                                                          \
            backend *b = inner(outer);                                                             \
            RETURN b->ops->NAME ARGS;                                                              \
        }                                                                                          \
    }
#define WRAP_PLAIN(RET, NAME, PARAMS, ARGS) FORWARD(return, RET, NAME, PARAMS, ARGS)
#define WRAP_PLAIN_VOID(RET, NAME, PARAMS, ARGS) FORWARD(, RET, NAME, PARAMS, ARGS)
/* Written above, by hand. */
#define WRAP_ACT(RET, NAME, PARAMS, ARGS)
/* None: the fp32 CPU backend records nothing, so neither does this. */
#define WRAP_RECORD(RET, NAME, PARAMS, ARGS)
/* Written below: it frees this backend's own state. */
#define WRAP_DESTROY(RET, NAME, PARAMS, ARGS)
#define WRAP(KIND, RET, NAME, PARAMS, ARGS) WRAP_##KIND(RET, NAME, PARAMS, ARGS)
BACKEND_OPS(WRAP)

static void bf16_destroy(backend *b) {
    bf16_state *st = state(b);
    for (int i = 0; i < SLOTS; i++) free(st->slot[i]);
    st->inner->ops->destroy(st->inner);
    free(st);
    free(b);
}

/* The table, from the same list: every operation NAME is bf16_NAME
 * (above), except the recording ones, left NULL. A new operation that
 * touches activations therefore fails to compile here until its wrapper
 * is written. */
#define ENTRY_PLAIN(NAME) .NAME = bf16_##NAME,
#define ENTRY_PLAIN_VOID(NAME) .NAME = bf16_##NAME,
#define ENTRY_ACT(NAME) .NAME = bf16_##NAME,
#define ENTRY_RECORD(NAME)
#define ENTRY_DESTROY(NAME) .NAME = bf16_##NAME,
#define ENTRY(KIND, RET, NAME, PARAMS, ARGS) ENTRY_##KIND(NAME)
static const backend_ops bf16_ops = {
    .name = "cpu (bf16, emulated)",
    BACKEND_OPS(ENTRY)
};

int cpu_bf16_backend_create(backend *fp32, backend **out) {
    backend *b = calloc(1, sizeof *b);
    bf16_state *st = calloc(1, sizeof *st);
    if (!b || !st) {
        free(b), free(st);
        return -ENOMEM;
    }
    st->inner = fp32;
    b->ops = &bf16_ops;
    b->kind = fp32->kind;
    b->act = DTYPE_BF16;
    b->threads = fp32->threads;
    b->impl = st;
    *out = b;
    return 0;
}
