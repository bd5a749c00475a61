/* What the files of the CUDA backend share and nobody else sees: the
 * backend's state (device, stream, library handles, scratch buffers) and
 * the operations each file contributes to the ops table in cuda_backend.c.
 * Failed calls into CUDA, cuDNN and cuBLAS are reported by cuda_check.h's
 * checks. */
#ifndef DDPRUN_WORKER_BACKEND_CUDA_CUDA_INTERNAL_H
#define DDPRUN_WORKER_BACKEND_CUDA_CUDA_INTERNAL_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <errno.h>

#include "common/log.h"
#include "worker/backend/algo_cache.h"
#include "worker/backend/backend.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/backend/cuda/cuda_buf.h"
#include "worker/backend/cuda/cuda_check.h"
#include "worker/backend/cuda/cuda_kernels.h"

/* A macro's value as a string: library names from major versions
 * ("libcublas.so." STR(CUBLAS_VER_MAJOR)). */
#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct cuda_conv_cache cuda_conv_cache; /* cuda_conv.c */
typedef struct cuda_weight_cache cuda_weight_cache; /* cuda_weights.c */

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
    cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                              int m, int n, int k, const void *alpha, const void *a,
                              cudaDataType at, int lda, const void *b, cudaDataType bt, int ldb,
                              const void *beta, void *c, cudaDataType ct, int ldc,
                              cublasComputeType_t compute, cublasGemmAlgo_t algo);
} cuda_blas;

/* cuda_blas.c: 0, or -ENOENT with a message saying what is missing. */
int cuda_blas_load(cuda_blas *bl, char *err, size_t errlen);
void cuda_blas_unload(cuda_blas *bl);

struct cuda_state {
    int device;
    backend_precision precision;
    int benchmark;           /* convolution algorithms by timing (cuda_conv.c) */
    algo_cache *algos;       /* with benchmark: choices timed before, kept for the next, or NULL */
    int algos_hit, algos_timed; /* convolution directions chosen from it, and timed here */
    int algos_warned;        /* it could not be written: said once */
    backend_dtype act;       /* activations' type: bf16 under PRECISION_BF16, else fp32 */
    cudaStream_t stream;     /* every operation is queued here */
    cudnnHandle_t cudnn;     /* bound to stream */
    cuda_blas blas;          /* cuBLAS's functions */
    cublasHandle_t cublas;   /* bound to stream */
    cuda_buf workspace;      /* cuDNN's workspace */
    cuda_buf wgrad;          /* a convolution's filter gradient in cuDNN's layout and type */
    cuda_buf product;        /* the linear layer's fp32 product before it is rounded to bf16 */
    cuda_buf partials;       /* per-block partial sums of reductions, the loss's scratch */
    cuda_conv_cache *convs;  /* descriptors and algorithms per convolution shape */
    cuda_weight_cache *wcache; /* parameters in the layout and type cuDNN and cuBLAS read */
    cuda_buf blas_workspace; /* cuBLAS's, given so that it never allocates during a recording */
    cudaGraphExec_t graph;   /* the recorded step, or NULL */
    int graph_stale;         /* memory was freed since the recording */
    int deferred;            /* the first error of an operation that cannot return one */
};

static inline cuda_state *cuda_state_of(const backend *b) { return (cuda_state *)b->impl; }

/* cuda_weights.c: fp32 OIHW parameters as cuDNN's filters (KRSC) and
 * cuBLAS's bf16 operands want them, converted once and cached per
 * parameter pointer and shape until something writes the parameters.
 *
 * Invalidation is by address range: every backend operation that writes
 * fp32 memory (upload, copy, zero, sgd, scale, the fp32 outputs of the
 * other operations) calls cuda_weights_written with what it writes, and
 * so must anything else that writes device memory behind the backend's
 * back (NCCL, through cuda_backend_written). Activations (the void *
 * outputs) are never read as weights and are not tracked. Freeing any
 * memory drops the whole cache (the backend cannot tell which cached
 * parameters lay in the freed allocation). */
int cuda_weights_init(cuda_state *st);
void cuda_weights_destroy(cuda_state *st);
/* w (k x c x r x s, OIHW, fp32) as KRSC in st->act in *out: w itself when
 * that is the same bytes (fp32 with a 1x1 kernel or one channel), else
 * the cached copy, converted again if w was written since. */
int cuda_weights_get(cuda_state *st, const float *w, int k, int c, int r, int s,
                     const void **out);
/* Whether OIHW weights already are KRSC in st->act: fp32, and each output
 * channel's block a single row (1x1 kernel) or column (one channel). */
static inline int cuda_weights_native(const cuda_state *st, int c, int r, int s) {
    return st->act == DTYPE_F32 && (r * s == 1 || c == 1);
}
void cuda_weights_written(cuda_state *st, const void *p, size_t bytes);
/* Marks every copy out of date, keeping its memory: a recording then
 * converts every weight it reads (its replays run the optimizer the host
 * never sees), and after a replay the next conversion is redone. */
void cuda_weights_invalidate(cuda_state *st);
/* Drops every cached copy (a recording that converts into them goes
 * stale); the stream must be idle (nothing queued may still read them). */
int cuda_weights_clear(cuda_state *st);

/* cuda_conv.c: convolution through cuDNN. */
int cuda_conv_init(cuda_state *st);
void cuda_conv_destroy(cuda_state *st);
int cuda_conv_fwd(backend *b, const conv_shape *s, const void *x, const float *w, void *y);
int cuda_conv_bwd(backend *b, const conv_shape *s, const void *x, const float *w,
                  const void *dy, void *dx, int dx_add, float *dw);

/* cuda_linear.c: the linear layer through cuBLAS. */
int cuda_linear_fwd(backend *b, int n, int in, int out, const void *x, const float *w,
                    const float *bias, void *y);
int cuda_linear_bwd(backend *b, int n, int in, int out, const void *x, const float *w,
                    const void *dy, void *dx, float *dw, float *dbias);

/* cuda_ops.c: the operations our own kernels (cuda_kernels.cu) compute. */
int cuda_bn_stats(backend *b, const bn_args *a);
int cuda_bn_finalize(backend *b, const bn_args *a);
int cuda_bn_running(backend *b, const bn_args *a);
int cuda_bn_apply(backend *b, const bn_args *a);
int cuda_bn_bwd_reduce(backend *b, const bn_args *a);
int cuda_bn_bwd_apply(backend *b, const bn_args *a);
int cuda_relu_fwd(backend *b, size_t n, const void *x, void *y);
int cuda_relu_bwd(backend *b, size_t n, const void *y, const void *dy, void *dx);
int cuda_add_fwd(backend *b, size_t n, const void *a, const void *x2, int relu, void *y);
int cuda_accumulate(backend *b, size_t n, const void *src, void *dst);
int cuda_scale(backend *b, size_t n, float alpha, float *x);
int cuda_axpy(backend *b, size_t n, float alpha, const float *x, float *y);
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
