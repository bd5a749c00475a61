/* The CUDA backend's own kernels (cuda_kernels.cu), as C-callable
 * launchers: each queues its work on the given stream and returns the
 * launch's status, which the C side checks with CUDA_CHECK. Every kernel
 * computes exactly the function its CPU counterpart in worker/cpu/
 * cpu_kernels.c computes; see backend.h for what each operation means.
 *
 * Reductions never use floating-point atomics: per-channel sums are first
 * summed per block of rows into a partials buffer the caller provides
 * (kern_partials_bytes), then across blocks in a fixed order, so the same
 * inputs give the same bits on every run. */
#ifndef DDPRUN_WORKER_CUDA_KERNELS_H
#define DDPRUN_WORKER_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a per-channel reduction over `rows` splits its rows into blocks: at
 * least KERN_MIN_ROWS_PER_BLOCK rows each and at most KERN_MAX_ROW_BLOCKS
 * blocks. A function of the shape only, so the summation order (and with
 * it the result) does not depend on the GPU. */
#define KERN_MIN_ROWS_PER_BLOCK 256
#define KERN_MAX_ROW_BLOCKS 1024

static inline int kern_rows_per_block(int rows) {
    int per = (rows + KERN_MAX_ROW_BLOCKS - 1) / KERN_MAX_ROW_BLOCKS;
    return per < KERN_MIN_ROWS_PER_BLOCK ? KERN_MIN_ROWS_PER_BLOCK : per;
}

static inline int kern_row_blocks(int rows) {
    int per = kern_rows_per_block(rows);
    return rows > 0 ? (rows + per - 1) / per : 1;
}

/* Bytes of device scratch a per-channel reduction over rows x c needs. */
static inline size_t kern_partials_bytes(int rows, int c) {
    return (size_t)kern_row_blocks(rows) * 2 * (size_t)c * sizeof(double);
}

/* xent's device scratch for n samples: the per-sample losses (n doubles)
 * and hits (n ints). */
static inline size_t kern_xent_scratch_bytes(int n) {
    return (size_t)n * (sizeof(double) + sizeof(int));
}

/* ---- batch norm ---- */
cudaError_t kern_bn_stats(cudaStream_t st, int rows, int c, const float *x, void *partials,
                          float *sum, float *sumsq);
cudaError_t kern_bn_finalize(cudaStream_t st, int c, double count, float eps, float momentum,
                             const float *sum, const float *sumsq, float *mean, float *invstd,
                             float *running);
cudaError_t kern_bn_running(cudaStream_t st, int c, float eps, const float *running,
                            float *mean, float *invstd);
cudaError_t kern_bn_apply(cudaStream_t st, int rows, int c, const float *x, const float *mean,
                          const float *invstd, const float *gamma, const float *beta, int relu,
                          float *y);
cudaError_t kern_bn_bwd_reduce(cudaStream_t st, int rows, int c, const float *x,
                               const float *y, const float *mean, const float *invstd, int relu,
                               float *dy, void *partials, float *sum_dy, float *sum_dy_xhat);
/* The bwd_apply arguments, too many for one line of parameters. */
typedef struct {
    int rows, c;
    const float *x, *dy, *mean, *invstd, *gamma, *sum_dy, *sum_dy_xhat;
    float m;
    int add_to;
    float *dx;
} kern_bn_bwd_apply_args;
cudaError_t kern_bn_bwd_apply(cudaStream_t st, const kern_bn_bwd_apply_args *a);

/* ---- elementwise ---- */
cudaError_t kern_relu_fwd(cudaStream_t st, size_t n, const float *x, float *y);
cudaError_t kern_relu_bwd(cudaStream_t st, size_t n, const float *y, const float *dy,
                          float *dx);
cudaError_t kern_add_fwd(cudaStream_t st, size_t n, const float *a, const float *b, int relu,
                         float *y);
cudaError_t kern_accumulate(cudaStream_t st, size_t n, const float *src, float *dst);
cudaError_t kern_scale(cudaStream_t st, size_t n, float alpha, float *x);

/* ---- pooling ---- */
cudaError_t kern_maxpool_fwd(cudaStream_t st, const pool_shape *s, const float *x, float *y,
                             int32_t *argmax);
cudaError_t kern_maxpool_bwd(cudaStream_t st, const pool_shape *s, const float *dy,
                             const int32_t *argmax, float *dx);
cudaError_t kern_avgpool_fwd(cudaStream_t st, int n, int hw, int c, const float *x, float *y);
cudaError_t kern_avgpool_bwd(cudaStream_t st, int n, int hw, int c, const float *dy,
                             float *dx);

/* ---- linear layer helpers ---- */
/* y[i][o] += bias[o] for rows x out */
cudaError_t kern_bias_add(cudaStream_t st, int rows, int out, const float *bias, float *y);
/* dbias[o] = sum over rows of dy[i][o] */
cudaError_t kern_bias_grad(cudaStream_t st, int rows, int out, const float *dy, void *partials,
                           float *dbias);

/* ---- convolution weights ---- */
/* OIHW (PyTorch's order) <-> OHWI (cuDNN's NHWC filter format, KRSC). */
cudaError_t kern_oihw_to_ohwi(cudaStream_t st, int k, int c, int r, int s, const float *src,
                              float *dst);
cudaError_t kern_ohwi_to_oihw(cudaStream_t st, int k, int c, int r, int s, const float *src,
                              float *dst);

/* ---- loss and optimiser ---- */
/* scratch: kern_xent_scratch_bytes(n) of device memory; the batch's
 * result (summed in sample order by one thread, as the CPU does) goes to
 * *out, in device memory. */
cudaError_t kern_xent(cudaStream_t st, int n, int classes, const float *logits,
                      const int32_t *labels, float smoothing, float *dlogits, void *scratch,
                      backend_loss *out);
/* The sgd arguments, too many for one line of parameters. */
typedef struct {
    size_t n;
    float *param;
    const float *grad;
    float *mom;
    const uint8_t *decay_mask; /* NULL: every element decays */
    const float *lr; /* device memory, read when the kernel runs */
    float momentum, weight_decay;
    int nesterov, first_step;
} kern_sgd_args;
cudaError_t kern_sgd(cudaStream_t st, const kern_sgd_args *a);

#ifdef __cplusplus
}
#endif

#endif
