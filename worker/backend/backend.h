/* The compute backend interface: everything the model runs, as operations
 * on the backend's memory. The CPU backend (worker/backend/cpu/) implements it with
 * oneDNN for convolution and plain C (OpenMP) for the rest, and offers the
 * plain-C reference convolution as a second backend for tests; the CUDA
 * backend (worker/backend/cuda/) implements it with cuDNN, cuBLAS and CUDA kernels.
 *
 * Memory: every pointer an operation takes is backend ("device") memory from
 * alloc, unless its comment says host; upload and download cross over. On
 * the CPU the two are the same memory, so a missing upload goes unnoticed
 * there: tests/gpu runs the model on both backends to catch it. Operations
 * may run asynchronously (queued on a GPU stream); download and sync wait.
 *
 * Precision: activations and their gradients (the `void *` arguments) hold
 * elements of the backend's activation type, b->act: fp32, or bf16 under
 * mixed precision. Parameters, their gradients, the optimizer's momentum
 * and batch-norm statistics are always fp32 (the master weights): an
 * operation that needs them in bf16 rounds its own copy, and sums and
 * weight gradients accumulate in fp32.
 *
 * Layout: activations are NHWC (channels last: the fast layout for oneDNN on
 * CPUs and for tensor cores on GPUs); convolution weights are OIHW and the
 * linear layer's weight is [out][in], as in PyTorch, so parameters map one to
 * one onto a PyTorch state_dict. Batch norm is split into statistics,
 * finalisation and application so SyncBatchNorm can all-reduce the sums in
 * between; its operations share one argument struct, bn_args. */
#ifndef DDPRUN_WORKER_BACKEND_BACKEND_H
#define DDPRUN_WORKER_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

typedef struct backend backend;

typedef enum { BACKEND_AUTO, BACKEND_CPU, BACKEND_CPU_REFERENCE, BACKEND_CUDA } backend_kind;
typedef enum { PRECISION_FP32, PRECISION_TF32, PRECISION_BF16 } backend_precision;
typedef enum { DTYPE_F32, DTYPE_BF16 } backend_dtype;

/* One convolution's shape. */
typedef struct {
    int n, h, w, c; /* input NHWC */
    int k, r, s;    /* output channels, kernel height and width */
    int stride, pad;
    int p, q;       /* output height and width */
} conv_shape;

static inline void conv_shape_init(conv_shape *cs, int n, int h, int w, int c, int k, int r,
                                   int stride, int pad) {
    cs->n = n, cs->h = h, cs->w = w, cs->c = c, cs->k = k, cs->r = r, cs->s = r;
    cs->stride = stride, cs->pad = pad;
    cs->p = (h + 2 * pad - r) / stride + 1;
    cs->q = (w + 2 * pad - r) / stride + 1;
}

/* The loss's result, in backend memory. */
typedef struct {
    double sum;      /* of the per-sample losses */
    int32_t correct; /* samples whose argmax is the label */
    int32_t pad;
} backend_loss;

/* One batch norm's operands: batch norm runs over rows = n*h*w rows of c
 * channels (NHWC). Every batch-norm operation takes this struct and reads
 * or writes the fields its comment in backend_ops names, ignoring the
 * rest, so a caller can describe a layer once and pass the same struct to
 * each of them. x, y, dy and dx are activations (rows x c of b->act);
 * everything else is fp32, one value per channel. */
typedef struct {
    int rows, c;
    const void *x;               /* the input */
    const void *res;             /* bn_apply: added before the ReLU (a residual
                                    block's shortcut), or NULL */
    void *y;                     /* the output */
    void *dy;                    /* the gradient at the output */
    void *dx;                    /* the gradient at the input */
    const float *gamma, *beta;   /* the parameters: scale and shift */
    float *mean, *invstd;        /* the statistics the output is computed with */
    float *running;              /* running mean [0, c), running variance [c, 2c) */
    float *sum, *sumsq;          /* forward: x's per-channel sums */
    float *sum_dy, *sum_dy_xhat; /* backward: dy's and dy*xhat's per-channel sums */
    double count;                /* the rows the sums cover: all ranks' under SyncBatchNorm */
    float eps, momentum;
    int relu;                    /* a ReLU follows the batch norm */
    int add_to;                  /* bn_bwd_apply adds into dx instead of overwriting it */
} bn_args;

/* Max pooling window (ImageNet stem: 3x3, stride 2, pad 1). */
typedef struct {
    int n, h, w, c;
    int r, stride, pad;
    int p, q;
} pool_shape;

/* The operations of backend_ops, in the table's order, each as
 * X(KIND, RET, NAME, PARAMS, ARGS): the table's field is RET (*NAME)
 * PARAMS, and ARGS names PARAMS' parameters, for code that passes a call
 * on. This one list makes the fields below, the CUDA backend's table
 * (every operation NAME is its function cuda_NAME), the bf16 emulation's
 * table and forwarding wrappers (cpu_bf16.c), and backend_missing_op.
 * KIND says what an operation touches, which is what a backend that wraps
 * another needs to know:
 *   PLAIN       no activations (memory as bytes, fp32 parameters and
 *               statistics, waiting), and it returns a value;
 *   PLAIN_VOID  the same, returning nothing (C passes the two on
 *               differently);
 *   ACT         activations, elements of b->act, which a wrapper converts;
 *   RECORD      recording a step: NULL where the backend cannot record
 *               (all three or none), so a capability;
 *   DESTROY     the backend's end.
 * docs/architecture.md lists what else a new operation touches. */
#define BACKEND_OPS(X)                                                                             \
    /* ---- memory ---- */                                                                         \
    /* zeroed, 64-byte aligned */                                                                  \
    X(PLAIN, void *, alloc, (backend *b, size_t bytes), (b, bytes))                                \
    X(PLAIN_VOID, void, free, (backend *b, void *p), (b, p))                                       \
    X(PLAIN_VOID, void, upload, (backend *b, void *dst, const void *src, size_t bytes),            \
      (b, dst, src, bytes))                                                                        \
    /* Like upload, but queued: it may return before the copy is made, so                          \
     * src must stay as it is until the next sync (or download). From                              \
     * alloc_host memory a GPU copies without the host's help. */                                  \
    X(PLAIN_VOID, void, upload_async, (backend *b, void *dst, const void *src, size_t bytes),      \
      (b, dst, src, bytes))                                                                        \
    /* Host memory the backend copies from fastest (page-locked on a GPU;                          \
     * plain on the CPU), 64-byte aligned; NULL when out of memory. */                             \
    X(PLAIN, void *, alloc_host, (backend *b, size_t bytes), (b, bytes))                           \
    X(PLAIN_VOID, void, free_host, (backend *b, void *p), (b, p))                                  \
    X(PLAIN_VOID, void, download, (backend *b, void *dst, const void *src, size_t bytes),          \
      (b, dst, src, bytes))                                                                        \
    X(PLAIN_VOID, void, zero, (backend *b, void *p, size_t bytes), (b, p, bytes))                  \
    /* device to device */                                                                         \
    X(PLAIN_VOID, void, copy, (backend *b, void *dst, const void *src, size_t bytes),              \
      (b, dst, src, bytes))                                                                        \
    /* waits for queued work (a no-op on the CPU) */                                               \
    X(PLAIN, int, sync, (backend *b), (b))                                                         \
                                                                                                   \
    /* ---- convolution ---- */                                                                    \
    /* y = conv(x, w) */                                                                           \
    X(ACT, int, conv_fwd,                                                                          \
      (backend *b, const conv_shape *s, const void *x, const float *w, void *y),                   \
      (b, s, x, w, y))                                                                             \
    /* dx = conv_transpose(dy, w), or dx += that with dx_add (skipped if dx                        \
     * is NULL); dw = corr(x, dy), overwritten */                                                  \
    X(ACT, int, conv_bwd,                                                                          \
      (backend *b, const conv_shape *s, const void *x, const float *w, const void *dy, void *dx,   \
       int dx_add, float *dw),                                                                     \
      (b, s, x, w, dy, dx, dx_add, dw))                                                            \
                                                                                                   \
    /* ---- batch norm (bn_args above), split so that SyncBatchNorm can                            \
     * all-reduce the sums between the operations ---- */                                          \
    /* stats: sum and sumsq of x. */                                                               \
    X(ACT, int, bn_stats, (backend *b, const bn_args *a), (b, a))                                  \
    /* From sum and sumsq over count rows: mean and invstd = 1/sqrt(var +                          \
     * eps) with the biased variance, and the running statistics updated                           \
     * as PyTorch does: r = (1 - momentum)*r + momentum*batch, the variance                        \
     * unbiased (count/(count-1)). Computed in double. Reads c, count, eps,                        \
     * momentum, sum, sumsq; writes mean, invstd, running. */                                      \
    X(PLAIN, int, bn_finalize, (backend *b, const bn_args *a), (b, a))                             \
    /* Evaluation: mean and invstd from running (and eps). */                                      \
    X(PLAIN, int, bn_running, (backend *b, const bn_args *a), (b, a))                              \
    /* y = (x - mean) * invstd * gamma + beta, plus res when set (in fp32,                         \
     * rounded once), followed by ReLU when relu is set. */                                        \
    X(ACT, int, bn_apply, (backend *b, const bn_args *a), (b, a))                                  \
    /* With y the forward output (for the ReLU mask when relu is set), dy                          \
     * becomes the gradient at the batch norm's output in place, and the                           \
     * per-channel sums sum_dy and sum_dy_xhat are computed (from x, mean,                         \
     * invstd). */                                                                                 \
    X(ACT, int, bn_bwd_reduce, (backend *b, const bn_args *a), (b, a))                             \
    /* dx = gamma*invstd/m * (m*dy - sum_dy - xhat*sum_dy_xhat), m the                             \
     * global row count (count as a float: all ranks' rows under                                   \
     * SyncBatchNorm); add_to: dx += instead. Reads x, dy, mean, invstd,                           \
     * gamma, sum_dy, sum_dy_xhat. */                                                              \
    X(ACT, int, bn_bwd_apply, (backend *b, const bn_args *a), (b, a))                              \
                                                                                                   \
    /* ---- elementwise ---- */                                                                    \
    /* y = relu(x) (may be in place); dx = dy * (y > 0), in place allowed */                       \
    X(ACT, int, relu_fwd, (backend *b, size_t n, const void *x, void *y), (b, n, x, y))            \
    X(ACT, int, relu_bwd, (backend *b, size_t n, const void *y, const void *dy, void *dx),         \
      (b, n, y, dy, dx))                                                                           \
    /* y = a + b, then ReLU if relu */                                                             \
    X(ACT, int, add_fwd,                                                                           \
      (backend *b, size_t n, const void *a, const void *x2, int relu, void *y),                    \
      (b, n, a, x2, relu, y))                                                                      \
    /* dst += src (activation gradients) */                                                        \
    X(ACT, int, accumulate, (backend *b, size_t n, const void *src, void *dst), (b, n, src, dst))  \
    /* x *= alpha (fp32: parameter gradients) */                                                   \
    X(PLAIN, int, scale, (backend *b, size_t n, float alpha, float *x), (b, n, alpha, x))          \
    /* y += alpha x (fp32: parameter gradients, accumulated over micro-batches) */                 \
    X(PLAIN, int, axpy, (backend *b, size_t n, float alpha, const float *x, float *y),             \
      (b, n, alpha, x, y))                                                                         \
                                                                                                   \
    /* ---- pooling ---- */                                                                        \
    X(ACT, int, maxpool_fwd,                                                                       \
      (backend *b, const pool_shape *s, const void *x, void *y, int32_t *argmax),                  \
      (b, s, x, y, argmax))                                                                        \
    X(ACT, int, maxpool_bwd,                                                                       \
      (backend *b, const pool_shape *s, const void *dy, const int32_t *argmax, void *dx),          \
      (b, s, dy, argmax, dx))                                                                      \
    /* global average pooling NHWC -> NC, and back */                                              \
    X(ACT, int, avgpool_fwd, (backend *b, int n, int hw, int c, const void *x, void *y),           \
      (b, n, hw, c, x, y))                                                                         \
    X(ACT, int, avgpool_bwd, (backend *b, int n, int hw, int c, const void *dy, void *dx),         \
      (b, n, hw, c, dy, dx))                                                                       \
                                                                                                   \
    /* ---- the linear layer, the loss, the optimizer ---- */                                      \
    /* y[n][out] = x[n][in] . W[out][in] + bias[out] */                                            \
    X(ACT, int, linear_fwd,                                                                        \
      (backend *b, int n, int in, int out, const void *x, const float *w, const float *bias,       \
       void *y),                                                                                   \
      (b, n, in, out, x, w, bias, y))                                                              \
    /* dx (skipped if NULL), dw and dbias (overwritten) */                                         \
    X(ACT, int, linear_bwd,                                                                        \
      (backend *b, int n, int in, int out, const void *x, const float *w, const void *dy,          \
       void *dx, float *dw, float *dbias),                                                         \
      (b, n, in, out, x, w, dy, dx, dw, dbias))                                                    \
    /* Softmax cross-entropy with label smoothing, averaged over n: writes                         \
     * dlogits (already divided by n) and, into *out (backend memory, read                         \
     * with download), the summed loss and the count of correct argmax                             \
     * predictions. Nothing waits: a step has no host round trip. */                               \
    X(ACT, int, xent,                                                                              \
      (backend *b, int n, int classes, const void *logits, const int32_t *labels,                  \
       float smoothing, void *dlogits, backend_loss *out),                                         \
      (b, n, classes, logits, labels, smoothing, dlogits, out))                                    \
    /* One SGD step over a whole parameter buffer: decay (a per-element                            \
     * 0/1 mask selects which elements get weight decay), momentum, Nesterov.                      \
     * The learning rate is read from backend memory when the step runs, so                        \
     * a recorded step (below) follows the schedule. */                                            \
    X(PLAIN, int, sgd,                                                                             \
      (backend *b, size_t n, float *param, const float *grad, float *mom,                          \
       const uint8_t *decay_mask, const float *lr, float momentum, float weight_decay,             \
       int nesterov, int first_step),                                                              \
      (b, n, param, grad, mom, decay_mask, lr, momentum, weight_decay, nesterov, first_step))      \
                                                                                                   \
    /* ---- recording a step (CUDA graphs; NULL where the backend cannot) ----                     \
     * Between record_begin and record_end the operations are recorded, not                        \
     * run; replay then runs them all as one launch, with the same memory, so                      \
     * inputs change by uploading into the same buffers. replay fails with                         \
     * -ESTALE once memory has been freed since the recording (it may have                         \
     * been the recording's): record again. */                                                     \
    X(RECORD, int, record_begin, (backend *b), (b))                                                \
    X(RECORD, int, record_end, (backend *b), (b))                                                  \
    X(RECORD, int, replay, (backend *b), (b))                                                      \
    X(DESTROY, void, destroy, (backend *b), (b))

#define BACKEND_OP_FIELD(KIND, RET, NAME, PARAMS, ARGS) RET(*NAME) PARAMS;

typedef struct {
    const char *name;
    BACKEND_OPS(BACKEND_OP_FIELD)
} backend_ops;
#undef BACKEND_OP_FIELD

/* The name of an operation that ops lacks (NULL where it must be set, or
 * some but not all of the RECORD ones set), or NULL when it is complete. */
const char *backend_missing_op(const backend_ops *ops);

struct backend {
    const backend_ops *ops;
    backend_kind kind; /* BACKEND_CPU, BACKEND_CPU_REFERENCE or BACKEND_CUDA */
    backend_dtype act; /* activations' element type */
    int threads;
    void *impl;
};

/* Bytes per activation element. */
static inline size_t backend_act_size(const backend *b) { return b->act == DTYPE_BF16 ? 2 : 4; }

/* Which backend and how (ddp-train's --device, --threads, --precision). */

typedef struct {
    backend_kind kind;
    int threads;   /* CPU: compute threads (0: OpenMP's default) */
    int device;    /* CUDA: device ordinal (ddp-train passes LOCAL_RANK mod the count) */
    backend_precision precision;
    int benchmark; /* CUDA: choose convolution algorithms by timing them (--cudnn-benchmark) */
    const char *algo_cache; /* CUDA with benchmark: the directory where timed choices are kept
                             * across processes (worker/backend/algo_cache.h), or NULL */
    int verbose;   /* say once what the backend found (the node's first rank) */
} backend_opts;

/* Creates the backend o asks for; BACKEND_AUTO is CUDA when this build has
 * it and a GPU is visible, else the CPU. 0, or -errno with a message (a
 * CUDA request on a build or machine without it names which). */
int backend_create(const backend_opts *o, backend **out, char *err, size_t errlen);

/* The CPU backend: convolution through oneDNN (reference = 0) or the
 * plain-C reference kernels (reference = 1, for tests). */
int cpu_backend_create(int reference, int threads, backend **out, char *err, size_t errlen);
/* bf16 mixed precision on the CPU, emulated over an fp32 CPU backend
 * (which it then owns): for checking numerics, slower than fp32. */
int cpu_bf16_backend_create(backend *fp32, backend **out);

/* The CUDA backend (worker/backend/cuda/; worker/backend/nocuda/ in builds
 * without CUDA, where it fails with -ENOTSUP). */
int cuda_backend_create(const backend_opts *o, backend **out, char *err, size_t errlen);
/* GPUs that CUDA can use: 0 without CUDA, a driver or a device; -EIO, with
 * why saying what is wrong, where the machine has an NVIDIA driver but
 * CUDA cannot use its GPUs (an old driver, a mismatched libcuda): such a
 * machine is broken, not GPU-less (worker/backend/cuda/cuda_probe.c). */
int cuda_device_count(char *why, size_t len);

#endif
