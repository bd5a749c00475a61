/* The CUDA backend's own kernels (cuda_kernels.cu), as C-callable
 * launchers: each queues its work on the given stream and returns the
 * launch's status, which the C side checks with CUDA_CHECK. Every kernel
 * computes exactly the function its CPU counterpart in worker/backend/cpu/
 * cpu_kernels.c computes (in bf16, that of worker/backend/cpu/cpu_bf16.c: widen,
 * compute in fp32, round); see backend.h for what each operation means.
 *
 * Reductions never use floating-point atomics: per-channel sums are first
 * summed per block of rows into a partials buffer the caller provides
 * (kern_partials_bytes), then across blocks in a fixed order, so the same
 * inputs give the same bits on every run. */
#ifndef DDPRUN_WORKER_BACKEND_CUDA_CUDA_KERNELS_H
#define DDPRUN_WORKER_BACKEND_CUDA_CUDA_KERNELS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/backend/backend.h"

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
/* The operations of backend.h, on its bn_args. Activations (x, y, dy, dx)
 * hold elements of type dt: fp32, or bf16 widened to fp32 on load and
 * rounded to nearest even on store. The arithmetic, and every float *
 * field, is fp32 in both cases. dy is masked by the ReLU in place (when
 * relu). */
cudaError_t kern_bn_stats(cudaStream_t st, backend_dtype dt, const bn_args *a, void *partials);
cudaError_t kern_bn_finalize(cudaStream_t st, const bn_args *a);
cudaError_t kern_bn_running(cudaStream_t st, const bn_args *a);
cudaError_t kern_bn_apply(cudaStream_t st, backend_dtype dt, const bn_args *a);
cudaError_t kern_bn_bwd_reduce(cudaStream_t st, backend_dtype dt, const bn_args *a,
                               void *partials);
cudaError_t kern_bn_bwd_apply(cudaStream_t st, backend_dtype dt, const bn_args *a);

/* ---- elementwise (activations) ---- */
cudaError_t kern_relu_fwd(cudaStream_t st, backend_dtype dt, size_t n, const void *x, void *y);
cudaError_t kern_relu_bwd(cudaStream_t st, backend_dtype dt, size_t n, const void *y,
                          const void *dy, void *dx);
cudaError_t kern_add_fwd(cudaStream_t st, backend_dtype dt, size_t n, const void *a,
                         const void *b, int relu, void *y);
cudaError_t kern_accumulate(cudaStream_t st, backend_dtype dt, size_t n, const void *src,
                            void *dst);
/* fp32 only (parameter gradients) */
cudaError_t kern_scale(cudaStream_t st, size_t n, float alpha, float *x);
cudaError_t kern_axpy(cudaStream_t st, size_t n, float alpha, const float *x, float *y);

/* ---- pooling ---- */
cudaError_t kern_maxpool_fwd(cudaStream_t st, backend_dtype dt, const pool_shape *s,
                             const void *x, void *y, int32_t *argmax);
cudaError_t kern_maxpool_bwd(cudaStream_t st, backend_dtype dt, const pool_shape *s,
                             const void *dy, const int32_t *argmax, void *dx);
cudaError_t kern_avgpool_fwd(cudaStream_t st, backend_dtype dt, int n, int hw, int c,
                             const void *x, void *y);
cudaError_t kern_avgpool_bwd(cudaStream_t st, backend_dtype dt, int n, int hw, int c,
                             const void *dy, void *dx);

/* ---- linear layer helpers ---- */
/* y[i][o] = acc[i][o] + bias[o] over rows x out (bias NULL: + nothing),
 * from the fp32 product acc to activations y; with fp32 y may be acc. */
cudaError_t kern_bias_out(cudaStream_t st, backend_dtype dt, int rows, int out,
                          const float *acc, const float *bias, void *y);
/* dbias[o] = sum over rows of dy[i][o] */
cudaError_t kern_bias_grad(cudaStream_t st, backend_dtype dt, int rows, int out, const void *dy,
                           void *partials, float *dbias);

/* ---- convolution weights ---- */
/* Our fp32 OIHW (PyTorch's order) to cuDNN's NHWC filter format (KRSC,
 * i.e. OHWI) in type dt, rounding to bf16 if dt is; and a filter
 * gradient in that format back to fp32 OIHW. */
cudaError_t kern_weights_to_krsc(cudaStream_t st, backend_dtype dt, int k, int c, int r, int s,
                                 const float *src, void *dst);
cudaError_t kern_weights_from_krsc(cudaStream_t st, backend_dtype dt, int k, int c, int r,
                                   int s, const void *src, float *dst);

/* ---- loss and optimiser ---- */
/* scratch: kern_xent_scratch_bytes(n) of device memory; the batch's
 * result (summed in sample order by one thread, as the CPU does) goes to
 * *out, in device memory. */
typedef struct {
    backend_dtype dt;
    int n, classes;
    const void *logits;
    const int32_t *labels;
    float smoothing;
    void *dlogits;
} kern_xent_args;
cudaError_t kern_xent(cudaStream_t st, const kern_xent_args *a, void *scratch,
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

/* The JPEG decoder's crop and resize (cuda_crop_resize.cu): n images
 * decoded by nvJPEG (interleaved RGB, 3 bytes a pixel) into n samples,
 * size x size x 3 activations each at x, a thread per output pixel
 * computing crop_resize.h's cr_pixel. crops is device memory; an entry
 * whose pix is NULL is skipped (its sample is filled otherwise). */
typedef struct {
    const unsigned char *pix;
    size_t pitch;
    int width, height;
    float box[4];
    int flip;
} kern_crop;
cudaError_t kern_crop_resize(cudaStream_t st, backend_dtype dt, int n, const kern_crop *crops,
                             int size, const float scale[3], const float shift[3], void *x);

#ifdef __cplusplus
}
#endif

#endif
