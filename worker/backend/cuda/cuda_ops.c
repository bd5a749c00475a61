/* The backend operations that our own kernels (cuda_kernels.cu) compute:
 * batch norm, ReLU, residual add, pooling, the loss and SGD. Each queues
 * its kernels on the backend's stream and checks the launch; only xent
 * waits, because it returns the loss on the host. Activations are passed
 * on untyped with the backend's activation type (st->act); every fp32
 * output is reported to the weight cache (cuda_weights.c), which then
 * stops trusting any copy of that memory. */
#include "worker/backend/cuda/cuda_internal.h"

static void wrote(cuda_state *st, const float *p, size_t count) {
    if (p) cuda_weights_written(st, p, count * sizeof(float));
}

/* ---- batch norm ------------------------------------------------------------- */

int cuda_bn_stats(backend *b, const bn_args *a) {
    cuda_state *st = cuda_state_of(b);
    wrote(st, a->sum, a->c), wrote(st, a->sumsq, a->c);
    int rc = cuda_buf_reserve(st, &st->partials, kern_partials_bytes(a->rows, a->c));
    if (rc) return rc;
    CUDA_CHECK(kern_bn_stats(st->stream, st->act, a, st->partials.p));
    return 0;
}

int cuda_bn_finalize(backend *b, const bn_args *a) {
    cuda_state *st = cuda_state_of(b);
    wrote(st, a->mean, a->c), wrote(st, a->invstd, a->c);
    wrote(st, a->running, 2 * (size_t)a->c);
    CUDA_CHECK(kern_bn_finalize(st->stream, a));
    return 0;
}

int cuda_bn_running(backend *b, const bn_args *a) {
    cuda_state *st = cuda_state_of(b);
    wrote(st, a->mean, a->c), wrote(st, a->invstd, a->c);
    CUDA_CHECK(kern_bn_running(st->stream, a));
    return 0;
}

int cuda_bn_apply(backend *b, const bn_args *a) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_bn_apply(st->stream, st->act, a));
    return 0;
}

int cuda_bn_bwd_reduce(backend *b, const bn_args *a) {
    cuda_state *st = cuda_state_of(b);
    wrote(st, a->sum_dy, a->c), wrote(st, a->sum_dy_xhat, a->c);
    int rc = cuda_buf_reserve(st, &st->partials, kern_partials_bytes(a->rows, a->c));
    if (rc) return rc;
    CUDA_CHECK(kern_bn_bwd_reduce(st->stream, st->act, a, st->partials.p));
    return 0;
}

int cuda_bn_bwd_apply(backend *b, const bn_args *a) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_bn_bwd_apply(st->stream, st->act, a));
    return 0;
}

/* ---- elementwise ---------------------------------------------------------------- */

int cuda_relu_fwd(backend *b, size_t n, const void *x, void *y) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_relu_fwd(st->stream, st->act, n, x, y));
    return 0;
}

int cuda_relu_bwd(backend *b, size_t n, const void *y, const void *dy, void *dx) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_relu_bwd(st->stream, st->act, n, y, dy, dx));
    return 0;
}

int cuda_add_fwd(backend *b, size_t n, const void *a, const void *x2, int relu, void *y) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_add_fwd(st->stream, st->act, n, a, x2, relu, y));
    return 0;
}

int cuda_accumulate(backend *b, size_t n, const void *src, void *dst) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_accumulate(st->stream, st->act, n, src, dst));
    return 0;
}

int cuda_scale(backend *b, size_t n, float alpha, float *x) {
    cuda_state *st = cuda_state_of(b);
    wrote(st, x, n);
    CUDA_CHECK(kern_scale(st->stream, n, alpha, x));
    return 0;
}

int cuda_axpy(backend *b, size_t n, float alpha, const float *x, float *y) {
    cuda_state *st = cuda_state_of(b);
    wrote(st, y, n);
    CUDA_CHECK(kern_axpy(st->stream, n, alpha, x, y));
    return 0;
}

/* ---- pooling -------------------------------------------------------------------------- */

int cuda_maxpool_fwd(backend *b, const pool_shape *s, const void *x, void *y,
                     int32_t *argmax) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_maxpool_fwd(st->stream, st->act, s, x, y, argmax));
    return 0;
}

int cuda_maxpool_bwd(backend *b, const pool_shape *s, const void *dy, const int32_t *argmax,
                     void *dx) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_maxpool_bwd(st->stream, st->act, s, dy, argmax, dx));
    return 0;
}

int cuda_avgpool_fwd(backend *b, int n, int hw, int c, const void *x, void *y) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_avgpool_fwd(st->stream, st->act, n, hw, c, x, y));
    return 0;
}

int cuda_avgpool_bwd(backend *b, int n, int hw, int c, const void *dy, void *dx) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_avgpool_bwd(st->stream, st->act, n, hw, c, dy, dx));
    return 0;
}

/* ---- loss and optimiser ----------------------------------------------------------------- */

/* The per-sample losses live in the partials scratch, the batch's result
 * goes to *out; nothing waits. */
int cuda_xent(backend *b, int n, int classes, const void *logits, const int32_t *labels,
              float smoothing, void *dlogits, backend_loss *out) {
    cuda_state *st = cuda_state_of(b);
    int rc = cuda_buf_reserve(st, &st->partials, kern_xent_scratch_bytes(n));
    if (rc) return rc;
    kern_xent_args a = {.dt = st->act, .n = n, .classes = classes, .logits = logits,
                        .labels = labels, .smoothing = smoothing, .dlogits = dlogits};
    CUDA_CHECK(kern_xent(st->stream, &a, st->partials.p, out));
    return 0;
}

int cuda_sgd(backend *b, size_t n, float *param, const float *grad, float *mom,
             const uint8_t *decay_mask, const float *lr, float momentum, float weight_decay,
             int nesterov, int first_step) {
    cuda_state *st = cuda_state_of(b);
    wrote(st, param, n);
    if (momentum != 0) wrote(st, mom, n);
    kern_sgd_args a = {.n = n, .param = param, .grad = grad, .mom = mom,
                       .decay_mask = decay_mask, .lr = lr, .momentum = momentum,
                       .weight_decay = weight_decay, .nesterov = nesterov,
                       .first_step = first_step};
    CUDA_CHECK(kern_sgd(st->stream, &a));
    return 0;
}
