/* What the files of the CUDA backend share and nobody else sees: the
 * backend's state (device, stream, library handles, scratch buffers), the
 * check macros for each library's status type, and the operations each
 * file contributes to the ops table in cuda_backend.c. */
#ifndef DDPRUN_WORKER_CUDA_INTERNAL_H
#define DDPRUN_WORKER_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <errno.h>

#include "common/log.h"
#include "worker/backend.h"
#include "worker/cuda/cuda_backend.h"
#include "worker/cuda/cuda_kernels.h"

/* One check macro per status type: on failure each logs where, the call
 * and the library's own words (for cuBLAS, its status's name: its string
 * function is not loaded), and returns -EIO from the calling function
 * (which therefore returns int). */
#define CUDA_CHECK(expr)                                                                   \
    do {                                                                                   \
        cudaError_t e_ = (expr);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            log_error("%s:%d: CUDA: %s: %s", __FILE__, __LINE__, #expr,                    \
                      cudaGetErrorString(e_));                                             \
            return -EIO;                                                                   \
        }                                                                                  \
    } while (0)

#define CUDNN_CHECK(expr)                                                                  \
    do {                                                                                   \
        cudnnStatus_t s_ = (expr);                                                         \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                                  \
            log_error("%s:%d: cuDNN: %s: %s", __FILE__, __LINE__, #expr,                   \
                      cudnnGetErrorString(s_));                                            \
            return -EIO;                                                                   \
        }                                                                                  \
    } while (0)

#define CUBLAS_CHECK(expr)                                                                 \
    do {                                                                                   \
        cublasStatus_t s_ = (expr);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            log_error("%s:%d: cuBLAS: %s: %s", __FILE__, __LINE__, #expr,                  \
                      cuda_blas_status_name(s_));                                          \
            return -EIO;                                                                   \
        }                                                                                  \
    } while (0)

/* A device buffer that only grows: scratch whose size depends on the
 * shapes that come along. */
typedef struct {
    void *p;
    size_t bytes;
} cuda_buf;

typedef struct cuda_conv_cache cuda_conv_cache; /* cuda_conv.c */

/* cuBLAS's entry points, from dlopen (cuda_blas.c says why). */
typedef struct {
    void *lib;
    cublasStatus_t (*create)(cublasHandle_t *handle);
    cublasStatus_t (*destroy)(cublasHandle_t handle);
    cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream);
    cublasStatus_t (*set_math_mode)(cublasHandle_t handle, cublasMath_t mode);
    cublasStatus_t (*set_workspace)(cublasHandle_t handle, void *workspace, size_t bytes);
    cublasStatus_t (*sgemm)(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                            int m, int n, int k, const float *alpha, const float *a, int lda,
                            const float *b, int ldb, const float *beta, float *c, int ldc);
} cuda_blas;

/* cuda_blas.c: 0, or -ENOENT with a message saying what is missing. */
int cuda_blas_load(cuda_blas *bl, char *err, size_t errlen);
void cuda_blas_unload(cuda_blas *bl);
const char *cuda_blas_status_name(cublasStatus_t s);

typedef struct {
    int device;
    backend_precision precision;
    cudaStream_t stream;     /* every operation is queued here */
    cudnnHandle_t cudnn;     /* bound to stream */
    cuda_blas blas;          /* cuBLAS's functions */
    cublasHandle_t cublas;   /* bound to stream */
    cuda_buf workspace;      /* cuDNN's workspace */
    cuda_buf weights;        /* convolution weights and their gradient in cuDNN's layout */
    cuda_buf partials;       /* per-block partial sums of reductions, the loss's scratch */
    cuda_conv_cache *convs;  /* descriptors and algorithms per convolution shape */
    cuda_buf blas_workspace; /* cuBLAS's, given so that it never allocates during a recording */
    cudaGraphExec_t graph;   /* the recorded step, or NULL */
    int graph_stale;         /* memory was freed since the recording */
    int deferred;            /* the first error of an operation that cannot return one */
} cuda_state;

static inline cuda_state *cuda_state_of(const backend *b) { return (cuda_state *)b->impl; }

/* Makes buf at least `bytes` long. Growing waits for the stream first:
 * queued work may still read the old buffer (and a recording may hold
 * it: growing makes the recording stale). */
int cuda_buf_reserve(cuda_state *st, cuda_buf *buf, size_t bytes);
void cuda_buf_release(cuda_buf *buf);

/* cuda_conv.c: convolution through cuDNN. */
int cuda_conv_init(cuda_state *st);
void cuda_conv_destroy(cuda_state *st);
int cuda_conv_fwd(backend *b, const conv_shape *s, const void *x, const float *w, void *y);
int cuda_conv_bwd(backend *b, const conv_shape *s, const void *x, const float *w,
                  const void *dy, void *dx, float *dw);

/* cuda_linear.c: the linear layer through cuBLAS. */
int cuda_linear_fwd(backend *b, int n, int in, int out, const void *x, const float *w,
                    const float *bias, void *y);
int cuda_linear_bwd(backend *b, int n, int in, int out, const void *x, const float *w,
                    const void *dy, void *dx, float *dw, float *dbias);

/* cuda_ops.c: the operations our own kernels (cuda_kernels.cu) compute. */
int cuda_bn_stats(backend *b, int rows, int c, const void *x, float *sum, float *sumsq);
int cuda_bn_finalize(backend *b, int c, double count, float eps, float momentum,
                     const float *sum, const float *sumsq, float *mean, float *invstd,
                     float *running);
int cuda_bn_running(backend *b, int c, float eps, const float *running, float *mean,
                    float *invstd);
int cuda_bn_apply(backend *b, int rows, int c, const void *x, const float *mean,
                  const float *invstd, const float *gamma, const float *beta, int relu,
                  void *y);
int cuda_bn_bwd_reduce(backend *b, int rows, int c, const void *x, const void *y,
                       const float *mean, const float *invstd, int relu, void *dy,
                       float *sum_dy, float *sum_dy_xhat);
int cuda_bn_bwd_apply(backend *b, int rows, int c, const void *x, const void *dy,
                      const float *mean, const float *invstd, const float *gamma,
                      const float *sum_dy, const float *sum_dy_xhat, float m, int add_to,
                      void *dx);
int cuda_relu_fwd(backend *b, size_t n, const void *x, void *y);
int cuda_relu_bwd(backend *b, size_t n, const void *y, const void *dy, void *dx);
int cuda_add_fwd(backend *b, size_t n, const void *a, const void *x2, int relu, void *y);
int cuda_accumulate(backend *b, size_t n, const void *src, void *dst);
int cuda_scale(backend *b, size_t n, float alpha, float *x);
int cuda_maxpool_fwd(backend *b, const pool_shape *s, const void *x, void *y,
                     int32_t *argmax);
int cuda_maxpool_bwd(backend *b, const pool_shape *s, const void *dy, const int32_t *argmax,
                     void *dx);
int cuda_avgpool_fwd(backend *b, int n, int hw, int c, const void *x, void *y);
int cuda_avgpool_bwd(backend *b, int n, int hw, int c, const void *dy, void *dx);
int cuda_xent(backend *b, int n, int classes, const void *logits, const int32_t *labels,
              float smoothing, void *dlogits, backend_loss *out);
int cuda_sgd(backend *b, size_t n, float *param, const float *grad, float *mom,
             const uint8_t *decay_mask, const float *lr, float momentum, float weight_decay,
             int nesterov, int first_step);

#endif
