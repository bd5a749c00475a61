/* Convolution on the GPU through cuDNN's descriptor API (cudnn_cnn.h,
 * still in cuDNN 9): forward, backward data and backward filter.
 *
 * Layouts: activations are NHWC. Our weights are OIHW (PyTorch's order),
 * but cuDNN's NHWC kernels want the filter in NHWC too (KRSC, i.e. OHWI):
 * mixing NHWC activations with an NCHW filter is not what its NHWC
 * kernels (or PyTorch's channels-last path) run, so instead of betting on
 * a combination no framework uses, the weights are transposed (and in
 * bf16 rounded) into a copy that cuda_weights.c keeps until the weights
 * change, and the filter gradient is transposed back from a scratch
 * buffer. For 1x1 kernels and single-channel inputs in fp32 the two
 * layouts are the same bytes and nothing is copied.
 *
 * Types: in fp32 and tf32 everything is fp32. In bf16 (mixed precision)
 * the activations, the filter copy and the filter gradient cuDNN writes
 * are bf16, and the convolution computes in fp32 (cuDNN's BFLOAT16_CONFIG:
 * bf16 tensors, a float compute type, tensor cores); the bf16 filter
 * gradient is widened into our fp32 one.
 *
 * Algorithms: per shape and direction, cuDNN's heuristics
 * (cudnnGet*Algorithm_v7) rank the candidates once; we keep those that
 * report success, fit the workspace limit and, in that order of
 * preference, are deterministic and (in fp32 mode) compute directly rather
 * than through Winograd or FFT transforms, which lose a few more bits. A
 * heuristic ranking is a function of the shape and the GPU, not of timing,
 * so runs choose the same algorithms and stay reproducible. With
 * --cudnn-benchmark (torch.backends.cudnn.benchmark) cuDNN times every
 * algorithm instead, on the first call's own buffers, and the same
 * preferences apply to the fastest first: faster, but another run may
 * time them otherwise and choose differently, and nondeterministic algorithms
 * are not put last. If cuDNN refuses a
 * candidate when it runs, the next one is tried. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/cuda/cuda_internal.h"

#define MAX_CONVS 128
#define MAX_ALGOS 8 /* as many as the longest list, the forward one */
_Static_assert(MAX_ALGOS >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT &&
                   MAX_ALGOS >= CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT &&
                   MAX_ALGOS >= CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
               "room for every algorithm cuDNN may rank");
/* The most workspace one algorithm may ask for. */
#define WORKSPACE_LIMIT ((size_t)1 << 30)

typedef enum { DIR_FWD, DIR_BWD_DATA, DIR_BWD_FILTER, NDIRS } conv_dir;

static const char *const dir_names[NDIRS] = {"forward", "backward data", "backward filter"};

/* The candidates for one direction, best first; cur is the one in use. */
typedef struct {
    int algo[MAX_ALGOS];
    cudnnMathType_t math[MAX_ALGOS];
    size_t ws[MAX_ALGOS];
    int n, cur, ready;
} algo_list;

typedef struct {
    conv_shape s;
    backend_dtype dt; /* the tensors' type */
    int used;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    algo_list dirs[NDIRS];
} conv_entry;

struct cuda_conv_cache {
    conv_entry e[MAX_CONVS];
    int next_evict; /* when full, entries are replaced round robin */
};

/* One heuristic or timing result, whatever the direction's perf struct. */
typedef struct {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t math;
} candidate;

/* The operands of one cuDNN call; which of them a direction reads or
 * writes is in run_algo. */
typedef struct {
    const void *x, *w, *dy;
    void *out;  /* y, dx or dw */
    float beta; /* out = result + beta * out (0 or 1) */
} conv_io;

#define AS_CANDIDATES(p, got, c)                                                               \
    for (int i_ = 0; i_ < (got); i_++)                                                         \
        (c)[i_] = (candidate){(p)[i_].algo, (p)[i_].status, (p)[i_].memory,                    \
                              (p)[i_].determinism, (p)[i_].mathType}

int cuda_conv_init(cuda_state *st) {
    st->convs = calloc(1, sizeof *st->convs);
    return st->convs ? 0 : -ENOMEM;
}

static void entry_free(conv_entry *e) {
    if (!e->used) return;
    if (e->x) cudnnDestroyTensorDescriptor(e->x);
    if (e->y) cudnnDestroyTensorDescriptor(e->y);
    if (e->w) cudnnDestroyFilterDescriptor(e->w);
    if (e->conv) cudnnDestroyConvolutionDescriptor(e->conv);
    memset(e, 0, sizeof *e);
}

void cuda_conv_destroy(cuda_state *st) {
    if (!st->convs) return;
    for (int i = 0; i < MAX_CONVS; i++) entry_free(&st->convs->e[i]);
    free(st->convs);
    st->convs = NULL;
}

static void shape_str(const conv_shape *s, char *buf, size_t len) {
    snprintf(buf, len, "n%d c%d %dx%d -> k%d %dx%d, kernel %dx%d stride %d pad %d", s->n, s->c,
             s->h, s->w, s->k, s->p, s->q, s->r, s->s, s->stride, s->pad);
}

/* ---- descriptors ----------------------------------------------------------------- */

/* Tensors and filter in the activations' type; the compute type is
 * float in both modes. */
static int entry_build(const conv_shape *s, backend_dtype dt, conv_entry *e) {
    memset(e, 0, sizeof *e);
    e->used = 1;
    e->s = *s;
    e->dt = dt;
    cudnnDataType_t t = dt == DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&e->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NHWC, t, s->n, s->c, s->h, s->w));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NHWC, t, s->n, s->k, s->p, s->q));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(e->w, t, CUDNN_TENSOR_NHWC, s->k, s->c, s->r, s->s));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(e->conv, s->pad, s->pad, s->stride, s->stride, 1,
                                                1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    /* cuDNN's idea of the output must be ours, or every index is off. */
    int n, k, p, q;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(e->conv, e->x, e->w, &n, &k, &p, &q));
    if (n != s->n || k != s->k || p != s->p || q != s->q) {
        char d[160];
        shape_str(s, d, sizeof d);
        log_error("convolution %s: cuDNN computes an output of n%d k%d %dx%d", d, n, k, p, q);
        return -EINVAL;
    }
    return 0;
}

static int same_shape(const conv_shape *a, const conv_shape *b) {
    return a->n == b->n && a->h == b->h && a->w == b->w && a->c == b->c && a->k == b->k &&
           a->r == b->r && a->s == b->s && a->stride == b->stride && a->pad == b->pad;
}

/* The cache entry for s in the activations' type, built on first use. */
static int entry_get(cuda_state *st, const conv_shape *s, conv_entry **out) {
    cuda_conv_cache *cc = st->convs;
    conv_entry *slot = NULL;
    for (int i = 0; i < MAX_CONVS; i++) {
        conv_entry *e = &cc->e[i];
        if (e->used && e->dt == st->act && same_shape(&e->s, s)) {
            *out = e;
            return 0;
        }
        if (!e->used && !slot) slot = e;
    }
    if (!slot) {
        slot = &cc->e[cc->next_evict];
        cc->next_evict = (cc->next_evict + 1) % MAX_CONVS;
        entry_free(slot);
    }
    int rc = entry_build(s, st->act, slot);
    if (rc) {
        entry_free(slot);
        return rc;
    }
    *out = slot;
    return 0;
}

/* ---- choosing algorithms -------------------------------------------------------------- */

/* The math type the descriptor asks for: fp32 mode keeps to FMA kernels
 * (cuDNN's default math would allow TF32 tensor cores on this GPU); tf32
 * and bf16 want tensor cores. */
static cudnnMathType_t requested_math(const cuda_state *st) {
    return st->precision == PRECISION_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
}

/* The math type a candidate runs with. */
static cudnnMathType_t run_math(const cuda_state *st, cudnnMathType_t reported) {
    return st->precision == PRECISION_FP32 ? CUDNN_FMA_MATH : reported;
}

static const char *mode_name(const cuda_state *st) {
    return st->precision == PRECISION_BF16 ? "bf16"
           : st->precision == PRECISION_TF32 ? "tf32" : "fp32";
}

static int is_transform(conv_dir d, int algo) {
    switch (d) {
    case DIR_FWD:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
    case DIR_BWD_DATA:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
               algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
    default:
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
    }
}

/* cuDNN's ranking for one direction, as candidates. */
static int heuristics(cuda_state *st, conv_entry *e, conv_dir d, candidate *c, int *n) {
    int got = 0;
    if (d == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
            st->cudnn, e->x, e->w, e->conv, e->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p));
        AS_CANDIDATES(p, got, c);
    } else if (d == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            st->cudnn, e->w, e->y, e->conv, e->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p));
        AS_CANDIDATES(p, got, c);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            st->cudnn, e->x, e->y, e->conv, e->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got,
            p));
        AS_CANDIDATES(p, got, c);
    }
    *n = got;
    return 0;
}

/* cuDNN's timing of the algorithms for one direction, fastest first, run
 * on the call's own buffers (its output is overwritten; the chosen
 * algorithm then computes it for real), with as much workspace as the
 * hungriest heuristic candidate within the limit. */
static int timings(cuda_state *st, conv_entry *e, conv_dir d, const conv_io *io, candidate *c,
                   int *n) {
    candidate h[MAX_ALGOS];
    int nh = 0, got = 0;
    int rc = heuristics(st, e, d, h, &nh);
    if (rc) return rc;
    size_t most = 0;
    for (int i = 0; i < nh; i++)
        if (h[i].status == CUDNN_STATUS_SUCCESS && h[i].memory <= WORKSPACE_LIMIT &&
            h[i].memory > most)
            most = h[i].memory;
    if ((rc = cuda_buf_reserve(st, &st->workspace, most))) return rc;
    void *ws = st->workspace.p;
    size_t wsb = st->workspace.bytes;
    if (d == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(
            st->cudnn, e->x, io->x, e->w, io->w, e->conv, e->y, io->out,
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, p, ws, wsb));
        AS_CANDIDATES(p, got, c);
    } else if (d == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            st->cudnn, e->w, io->w, e->y, io->dy, e->conv, e->x, io->out,
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, p, ws, wsb));
        AS_CANDIDATES(p, got, c);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            st->cudnn, e->x, io->x, e->y, io->dy, e->conv, e->w, io->out,
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, p, ws, wsb));
        AS_CANDIDATES(p, got, c);
    }
    *n = got;
    return 0;
}

/* The workspace an algorithm needs; 0 if cuDNN refuses it for this shape. */
static size_t workspace_size(cuda_state *st, conv_entry *e, conv_dir d, int algo) {
    size_t bytes = 0;
    cudnnStatus_t s;
    if (d == DIR_FWD)
        s = cudnnGetConvolutionForwardWorkspaceSize(st->cudnn, e->x, e->w, e->conv, e->y,
                                                    (cudnnConvolutionFwdAlgo_t)algo, &bytes);
    else if (d == DIR_BWD_DATA)
        s = cudnnGetConvolutionBackwardDataWorkspaceSize(
            st->cudnn, e->w, e->y, e->conv, e->x, (cudnnConvolutionBwdDataAlgo_t)algo, &bytes);
    else
        s = cudnnGetConvolutionBackwardFilterWorkspaceSize(
            st->cudnn, e->x, e->y, e->conv, e->w, (cudnnConvolutionBwdFilterAlgo_t)algo, &bytes);
    return s == CUDNN_STATUS_SUCCESS ? bytes : (size_t)-1;
}

/* Lower is preferred: nondeterministic algorithms last, and in fp32 mode
 * the transform-based ones after the direct ones (tf32 and bf16 lose more
 * bits in their inputs than a transform does). Chosen by timing
 * (--cudnn-benchmark), the fastest goes first whether deterministic or not,
 * as with torch.backends.cudnn.benchmark: such a run is not reproducible
 * bit for bit anyway (another run may time the algorithms otherwise). */
static int preference(const cuda_state *st, conv_dir d, const candidate *c) {
    int nondet = !st->benchmark && c->determinism != CUDNN_DETERMINISTIC;
    int lossy = st->precision == PRECISION_FP32 && is_transform(d, c->algo);
    return 2 * nondet + lossy;
}

static void add_candidate(cuda_state *st, conv_entry *e, conv_dir d, const candidate *c,
                          algo_list *l) {
    if (l->n == MAX_ALGOS) return;
    cudnnMathType_t math = run_math(st, c->math);
    if (cudnnSetConvolutionMathType(e->conv, math) != CUDNN_STATUS_SUCCESS) return;
    size_t ws = workspace_size(st, e, d, c->algo);
    if (ws > WORKSPACE_LIMIT) return; /* also (size_t)-1: refused */
    l->algo[l->n] = c->algo, l->math[l->n] = math, l->ws[l->n] = ws;
    l->n++;
}

/* What --cudnn-benchmark keeps of a direction's timing: the key names
 * everything the ranking depends on besides the machine (the file's name
 * has that). */
static void timed_key(const cuda_state *st, const conv_entry *e, conv_dir d, char *key,
                      size_t len) {
    static const char *const short_dir[NDIRS] = {"fwd", "bwd-data", "bwd-filter"};
    const conv_shape *s = &e->s;
    snprintf(key, len, "%s %s n%d c%d %dx%d k%d %dx%d stride%d pad%d", short_dir[d],
             mode_name(st), s->n, s->c, s->h, s->w, s->k, s->r, s->s, s->stride, s->pad);
}

/* The timing of a direction: from the algorithm cache when this machine
 * timed it before, else timed now and kept there. */
static int timed(cuda_state *st, conv_entry *e, conv_dir d, const conv_io *io, candidate *c,
                 int *n) {
    char key[ALGO_CACHE_KEY];
    algo_choice a[ALGO_CACHE_MAX];
    timed_key(st, e, d, key, sizeof key);
    int got = algo_cache_get(st->algos, key, a, ALGO_CACHE_MAX);
    if (got >= 0) {
        for (int i = 0; i < got; i++)
            c[i] = (candidate){a[i].algo, (cudnnStatus_t)a[i].status, (size_t)a[i].memory,
                               (cudnnDeterminism_t)a[i].determinism, (cudnnMathType_t)a[i].math};
        *n = got;
        st->algos_hit++;
        return 0;
    }
    int rc = timings(st, e, d, io, c, n);
    if (rc || !st->algos) return rc;
    st->algos_timed++;
    int keep = *n < ALGO_CACHE_MAX ? *n : ALGO_CACHE_MAX;
    for (int i = 0; i < keep; i++)
        a[i] = (algo_choice){.algo = c[i].algo, .status = (int)c[i].status,
                             .determinism = (int)c[i].determinism, .math = (int)c[i].math,
                             .memory = c[i].memory};
    char why[1024];
    if (algo_cache_put(st->algos, key, a, keep, why, sizeof why) && !st->algos_warned++)
        log_warn("cuDNN's timed algorithm choices are not kept for the next process: %s", why);
    return 0;
}

static int choose(cuda_state *st, conv_entry *e, conv_dir d, const conv_io *io) {
    algo_list *l = &e->dirs[d];
    candidate c[MAX_ALGOS];
    int n = 0;
    CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, requested_math(st)));
    int rc = st->benchmark ? timed(st, e, d, io, c, &n) : heuristics(st, e, d, c, &n);
    if (rc) return rc;
    memset(l, 0, sizeof *l);
    for (int pref = 0; pref < 4; pref++)
        for (int i = 0; i < n; i++)
            if (c[i].status == CUDNN_STATUS_SUCCESS && c[i].memory <= WORKSPACE_LIMIT &&
                preference(st, d, &c[i]) == pref)
                add_candidate(st, e, d, &c[i], l);
    l->ready = 1;
    return 0;
}

/* ---- running ------------------------------------------------------------------------------ */

static cudnnStatus_t run_algo(cuda_state *st, conv_entry *e, conv_dir d, int i,
                              const conv_io *io) {
    const algo_list *l = &e->dirs[d];
    const float one = 1.0f, *beta = &io->beta;
    void *ws = st->workspace.p;
    if (d == DIR_FWD)
        return cudnnConvolutionForward(st->cudnn, &one, e->x, io->x, e->w, io->w, e->conv,
                                       (cudnnConvolutionFwdAlgo_t)l->algo[i], ws, l->ws[i], beta,
                                       e->y, io->out);
    if (d == DIR_BWD_DATA)
        return cudnnConvolutionBackwardData(st->cudnn, &one, e->w, io->w, e->y, io->dy, e->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)l->algo[i], ws,
                                            l->ws[i], beta, e->x, io->out);
    return cudnnConvolutionBackwardFilter(st->cudnn, &one, e->x, io->x, e->y, io->dy, e->conv,
                                          (cudnnConvolutionBwdFilterAlgo_t)l->algo[i], ws,
                                          l->ws[i], beta, e->w, io->out);
}

/* Runs the current candidate. A status in cuDNN's "not supported"
 * category is no failure here: it sets *refused (and says so) for the
 * caller to try the next candidate. */
static cudnnStatus_t run_current(cuda_state *st, conv_entry *e, conv_dir d, const conv_io *io,
                                 int *refused) {
    const algo_list *l = &e->dirs[d];
    cudnnStatus_t s = run_algo(st, e, d, l->cur, io);
    *refused = CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED;
    if (!*refused) return s;
    char desc[160];
    shape_str(&e->s, desc, sizeof desc);
    log_warn("cuDNN: convolution %s %s: algorithm %d is not supported after all (%s); "
             "trying the next", dir_names[d], desc, l->algo[l->cur], cudnnGetErrorString(s));
    return CUDNN_STATUS_SUCCESS;
}

/* Runs direction d with the current candidate, moving on to the next one
 * when cuDNN says it does not support this case after all. */
static int conv_run(cuda_state *st, conv_entry *e, conv_dir d, const conv_io *io) {
    algo_list *l = &e->dirs[d];
    char desc[160];
    int rc = 0;
    if (!l->ready && (rc = choose(st, e, d, io))) return rc;
    for (; l->cur < l->n; l->cur++) {
        if ((rc = cuda_buf_reserve(st, &st->workspace, l->ws[l->cur]))) return rc;
        CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, l->math[l->cur]));
        int refused = 0;
        CUDNN_CHECK_GOTO(run_current(st, e, d, io, &refused), rc, failed);
        if (!refused) return 0;
    }
    shape_str(&e->s, desc, sizeof desc);
    log_error("cuDNN has no algorithm for convolution %s %s in %s mode", dir_names[d], desc,
              mode_name(st));
    return -ENOTSUP;
failed:
    shape_str(&e->s, desc, sizeof desc);
    log_error("cuDNN: that was convolution %s %s, algorithm %d", dir_names[d], desc,
              l->algo[l->cur]);
    return rc;
}

/* ---- the operations ------------------------------------------------------------------------- */

static size_t act_size(const cuda_state *st) { return st->act == DTYPE_BF16 ? 2 : 4; }

int cuda_conv_fwd(backend *b, const conv_shape *s, const void *x, const float *w, void *y) {
    cuda_state *st = cuda_state_of(b);
    conv_entry *e;
    const void *wt;
    int rc = entry_get(st, s, &e);
    if (!rc) rc = cuda_weights_get(st, w, s->k, s->c, s->r, s->s, &wt);
    if (rc) return rc;
    conv_io io = {.x = x, .w = wt, .out = y};
    return conv_run(st, e, DIR_FWD, &io);
}

/* dw in fp32 OIHW: cuDNN writes it straight into dw when that is its
 * layout and type (fp32 with a 1x1 kernel or one channel), else KRSC in
 * the activations' type into the wgrad scratch, which is then converted. */
static int filter_grad(cuda_state *st, conv_entry *e, const void *x, const void *dy,
                       float *dw) {
    const conv_shape *s = &e->s;
    size_t count = (size_t)s->k * s->c * s->r * s->s;
    cuda_weights_written(st, dw, count * sizeof(float));
    if (cuda_weights_native(st, s->c, s->r, s->s)) {
        conv_io io = {.x = x, .dy = dy, .out = dw};
        return conv_run(st, e, DIR_BWD_FILTER, &io);
    }
    int rc = cuda_buf_reserve(st, &st->wgrad, count * act_size(st));
    if (rc) return rc;
    conv_io io = {.x = x, .dy = dy, .out = st->wgrad.p};
    rc = conv_run(st, e, DIR_BWD_FILTER, &io);
    if (rc) return rc;
    CUDA_CHECK(kern_weights_from_krsc(st->stream, st->act, s->k, s->c, s->r, s->s, st->wgrad.p,
                                      dw));
    return 0;
}

/* dx += the data gradient: cuDNN blends it in (beta = 1), saving a pass
 * over dx. Timing the algorithms (--cudnn-benchmark) overwrites its
 * output, so the first call of a shape has it write to scratch, then adds
 * that in with the first algorithm's own run. */
static int data_grad_add(cuda_state *st, conv_entry *e, const void *wt, const void *dy,
                         void *dx) {
    conv_io io = {.w = wt, .dy = dy, .out = dx, .beta = 1.0f};
    if (!st->benchmark || e->dirs[DIR_BWD_DATA].ready) return conv_run(st, e, DIR_BWD_DATA, &io);
    const conv_shape *s = &e->s;
    cuda_buf tmp = {0};
    int rc = cuda_buf_reserve(st, &tmp, (size_t)s->n * s->h * s->w * s->c * act_size(st));
    conv_io find = {.w = wt, .dy = dy, .out = tmp.p};
    if (rc == 0) rc = conv_run(st, e, DIR_BWD_DATA, &find); /* chooses */
    if (rc == 0) rc = conv_run(st, e, DIR_BWD_DATA, &io);
    if (cudaStreamSynchronize(st->stream) != cudaSuccess && rc == 0) rc = -EIO;
    cuda_buf_release(&tmp);
    return rc;
}

int cuda_conv_bwd(backend *b, const conv_shape *s, const void *x, const float *w,
                  const void *dy, void *dx, int dx_add, float *dw) {
    cuda_state *st = cuda_state_of(b);
    conv_entry *e;
    int rc = entry_get(st, s, &e);
    if (rc) return rc;
    if (dx) {
        const void *wt;
        rc = cuda_weights_get(st, w, s->k, s->c, s->r, s->s, &wt);
        if (rc) return rc;
        conv_io io = {.w = wt, .dy = dy, .out = dx};
        rc = dx_add ? data_grad_add(st, e, wt, dy, dx) : conv_run(st, e, DIR_BWD_DATA, &io);
        if (rc) return rc;
    }
    return filter_grad(st, e, x, dy, dw);
}

/* ---- the report (cuda_backend.h) --------------------------------------------------------- */

static const char *math_name(cudnnMathType_t m) {
    switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor+conv";
    case CUDNN_FMA_MATH: return "fma";
    }
    return "?";
}

int cuda_backend_conv_report(const backend *b, FILE *out) {
    cuda_state *st = cuda_state_of(b);
    int empty = 0;
    for (int i = 0; i < MAX_CONVS; i++) {
        const conv_entry *e = &st->convs->e[i];
        if (!e->used) continue;
        char desc[160];
        shape_str(&e->s, desc, sizeof desc);
        fprintf(out, "  %s %s\n", e->dt == DTYPE_BF16 ? "bf16" : "fp32", desc);
        int none = 0;
        for (int d = 0; d < NDIRS; d++) {
            const algo_list *l = &e->dirs[d];
            if (!l->ready) {
                fprintf(out, "    %-15s not run\n", dir_names[d]);
                continue;
            }
            fprintf(out, "    %-15s", dir_names[d]);
            for (int k = 0; k < l->n; k++)
                fprintf(out, " %s%d/%s/%zuK", k == l->cur ? "*" : "", l->algo[k],
                        math_name(l->math[k]), l->ws[k] >> 10);
            fprintf(out, l->n ? "\n" : " NO CANDIDATE\n");
            none |= l->n == 0 || l->cur >= l->n;
        }
        empty += none;
    }
    return empty;
}
