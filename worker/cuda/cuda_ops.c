/* The backend operations that our own kernels (cuda_kernels.cu) compute:
 * batch norm, ReLU, residual add, pooling, the loss and SGD. Each queues
 * its kernels on the backend's stream and checks the launch; only xent
 * waits, because it returns the loss on the host. */
#include "worker/cuda/cuda_internal.h"

/* ---- batch norm ------------------------------------------------------------- */

int cuda_bn_stats(backend *b, int rows, int c, const void *x_, float *sum, float *sumsq) {
    const float *x = x_;
    cuda_state *st = cuda_state_of(b);
    int rc = cuda_buf_reserve(st, &st->partials, kern_partials_bytes(rows, c));
    if (rc) return rc;
    CUDA_CHECK(kern_bn_stats(st->stream, rows, c, x, st->partials.p, sum, sumsq));
    return 0;
}

int cuda_bn_finalize(backend *b, int c, double count, float eps, float momentum,
                     const float *sum, const float *sumsq, float *mean, float *invstd,
                     float *running) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_bn_finalize(st->stream, c, count, eps, momentum, sum, sumsq, mean, invstd,
                                running));
    return 0;
}

int cuda_bn_running(backend *b, int c, float eps, const float *running, float *mean,
                    float *invstd) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_bn_running(st->stream, c, eps, running, mean, invstd));
    return 0;
}

int cuda_bn_apply(backend *b, int rows, int c, const void *x_, const float *mean,
                  const float *invstd, const float *gamma, const float *beta, int relu,
                  void *y_) {
    const float *x = x_;
    float *y = y_;
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(kern_bn_apply(st->stream, rows, c, x, mean, invstd, gamma, beta, relu, y));
    return 0;
}

int cuda_bn_bwd_reduce(backend *b, int rows, int c, const void *x_, const void *y_,
                       const float *mean, const float *invstd, int relu, void *dy_,
                       float *sum_dy, float *sum_dy_xhat) {
    const float *x = x_;
    const float *y = y_;
    float *dy = dy_;
    cuda_state *st = cuda_state_of(b);
    int rc = cuda_buf_reserve(st, &st->partials, kern_partials_bytes(rows, c));
    if (rc) return rc;
    CUDA_CHECK(kern_bn_bwd_reduce(st->stream, rows, c, x, y, mean, invstd, relu, dy,
                                  st->partials.p, sum_dy, sum_dy_xhat));
    return 0;
}

int cuda_bn_bwd_apply(backend *b, int rows, int c, const void *x_, const void *dy_,
                      const float *mean, const float *invstd, const float *gamma,
                      const float *sum_dy, const float *sum_dy_xhat, float m, int add_to,
                      void *dx_) {
    const float *x = x_;
    const float *dy = dy_;
    float *dx = dx_;
    cuda_state *st = cuda_state_of(b);
    kern_bn_bwd_apply_args a = {.rows = rows, .c = c, .x = x, .dy = dy, .mean = mean,
                                .invstd = invstd, .gamma = gamma, .sum_dy = sum_dy,
                                .sum_dy_xhat = sum_dy_xhat, .m = m, .add_to = add_to, .dx = dx};
    CUDA_CHECK(kern_bn_bwd_apply(st->stream, &a));
    return 0;
}

/* ---- elementwise ---------------------------------------------------------------- */

int cuda_relu_fwd(backend *b, size_t n, const void *x_, void *y_) {
    const float *x = x_;
    float *y = y_;
    CUDA_CHECK(kern_relu_fwd(cuda_state_of(b)->stream, n, x, y));
    return 0;
}

int cuda_relu_bwd(backend *b, size_t n, const void *y_, const void *dy_, void *dx_) {
    const float *y = y_;
    const float *dy = dy_;
    float *dx = dx_;
    CUDA_CHECK(kern_relu_bwd(cuda_state_of(b)->stream, n, y, dy, dx));
    return 0;
}

int cuda_add_fwd(backend *b, size_t n, const void *a_, const void *x2_, int relu, void *y_) {
    const float *a = a_;
    const float *x2 = x2_;
    float *y = y_;
    CUDA_CHECK(kern_add_fwd(cuda_state_of(b)->stream, n, a, x2, relu, y));
    return 0;
}

int cuda_accumulate(backend *b, size_t n, const void *src_, void *dst_) {
    const float *src = src_;
    float *dst = dst_;
    CUDA_CHECK(kern_accumulate(cuda_state_of(b)->stream, n, src, dst));
    return 0;
}

int cuda_scale(backend *b, size_t n, float alpha, float *x) {
    CUDA_CHECK(kern_scale(cuda_state_of(b)->stream, n, alpha, x));
    return 0;
}

/* ---- pooling -------------------------------------------------------------------------- */

int cuda_maxpool_fwd(backend *b, const pool_shape *s, const void *x_, void *y_,
                     int32_t *argmax) {
    const float *x = x_;
    float *y = y_;
    CUDA_CHECK(kern_maxpool_fwd(cuda_state_of(b)->stream, s, x, y, argmax));
    return 0;
}

int cuda_maxpool_bwd(backend *b, const pool_shape *s, const void *dy_, const int32_t *argmax,
                     void *dx_) {
    const float *dy = dy_;
    float *dx = dx_;
    CUDA_CHECK(kern_maxpool_bwd(cuda_state_of(b)->stream, s, dy, argmax, dx));
    return 0;
}

int cuda_avgpool_fwd(backend *b, int n, int hw, int c, const void *x_, void *y_) {
    const float *x = x_;
    float *y = y_;
    CUDA_CHECK(kern_avgpool_fwd(cuda_state_of(b)->stream, n, hw, c, x, y));
    return 0;
}

int cuda_avgpool_bwd(backend *b, int n, int hw, int c, const void *dy_, void *dx_) {
    const float *dy = dy_;
    float *dx = dx_;
    CUDA_CHECK(kern_avgpool_bwd(cuda_state_of(b)->stream, n, hw, c, dy, dx));
    return 0;
}

/* ---- loss and optimiser ----------------------------------------------------------------- */

/* The per-sample losses live in the partials scratch, the batch's result
 * goes to *out; nothing waits. */
int cuda_xent(backend *b, int n, int classes, const void *logits_, const int32_t *labels,
              float smoothing, void *dlogits_, backend_loss *out) {
    const float *logits = logits_;
    float *dlogits = dlogits_;
    cuda_state *st = cuda_state_of(b);
    int rc = cuda_buf_reserve(st, &st->partials, kern_xent_scratch_bytes(n));
    if (rc) return rc;
    CUDA_CHECK(kern_xent(st->stream, n, classes, logits, labels, smoothing, dlogits,
                         st->partials.p, out));
    return 0;
}

int cuda_sgd(backend *b, size_t n, float *param, const float *grad, float *mom,
             const uint8_t *decay_mask, const float *lr, float momentum, float weight_decay,
             int nesterov, int first_step) {
    kern_sgd_args a = {.n = n, .param = param, .grad = grad, .mom = mom,
                       .decay_mask = decay_mask, .lr = lr, .momentum = momentum,
                       .weight_decay = weight_decay, .nesterov = nesterov,
                       .first_step = first_step};
    CUDA_CHECK(kern_sgd(cuda_state_of(b)->stream, &a));
    return 0;
}
