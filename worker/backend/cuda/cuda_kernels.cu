/* The CUDA backend's own kernels: batch norm, ReLU, residual add, pooling,
 * the linear layer's bias, the weight layout change for cuDNN, the loss and
 * SGD. Each computes what its CPU counterpart in worker/backend/cpu/cpu_kernels.c
 * computes, in the same floating-point types, and is exposed through a C
 * launcher (cuda_kernels.h) that only queues work on a stream.
 *
 * Activations come in two types, fp32 and bf16 (mixed precision): the
 * kernels that touch them are templates over the element type T, and the
 * launchers pick the instance from the backend's dtype. A bf16 element is
 * widened to fp32 when loaded and the fp32 result rounded to nearest even
 * when stored, so every kernel does its arithmetic in fp32 (sums in
 * double, as before) whatever the storage: the function worker/backend/cpu/
 * cpu_bf16.c computes on the CPU. Elementwise kernels move 16 bytes per
 * load and store (4 floats or 8 bf16) when their pointers are aligned.
 *
 * Sums are deterministic: per-channel reductions go through fixed row
 * blocks and a fixed-order pass across blocks, the loss through fixed
 * shared-memory trees and a sequential sum over samples, so a run is
 * reproducible bit for bit on one GPU model. */
#include <cuda_bf16.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "worker/backend/bn_math.h"
#include "worker/backend/cuda/cuda_kernels.h"

#define THREADS 256
/* Elementwise kernels loop with a grid stride, so a capped grid covers
 * any size (and sizes past 2^31 elements). */
#define MAX_BLOCKS 65536

typedef __nv_bfloat16 bf16;

static unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > MAX_BLOCKS ? MAX_BLOCKS : (b ? b : 1));
}

#define GRID_STRIDE(i, n)                                                        \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);     \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- element types --------------------------------------------------------- */

/* Element i of an activation, as fp32; and v stored into one. */
__device__ __forceinline__ float get(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float get(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void put(float *p, size_t i, float v) { p[i] = v; }
__device__ __forceinline__ void put(bf16 *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/* Elements per 16-byte access. */
template <class T> struct vec {
    static constexpr int n = 16 / (int)sizeof(T);
};

/* V consecutive elements from p (16-byte aligned when V fills 16 bytes),
 * as fp32; and back. */
template <int V, class T> __device__ __forceinline__ void ldv(const T *p, float (&v)[V]) {
    if constexpr (V * sizeof(T) == 16) {
        int4 bits = *reinterpret_cast<const int4 *>(p);
        T e[V];
        memcpy(e, &bits, sizeof bits);
#pragma unroll
        for (int k = 0; k < V; k++) v[k] = get(e, k);
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) v[k] = get(p, k);
    }
}

template <int V, class T> __device__ __forceinline__ void stv(T *p, const float (&v)[V]) {
    if constexpr (V * sizeof(T) == 16) {
        T e[V];
#pragma unroll
        for (int k = 0; k < V; k++) put(e, k, v[k]);
        int4 bits;
        memcpy(&bits, e, sizeof bits);
        *reinterpret_cast<int4 *>(p) = bits;
    } else {
#pragma unroll
        for (int k = 0; k < V; k++) put(p, k, v[k]);
    }
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The cudaError_t of launching fn's instance for dt; the (...) are the
 * launch function's arguments after the stream. */
#define DISPATCH(dt, fn, st, ...)                                                      \
    ((dt) == DTYPE_BF16 ? fn<bf16>(st, __VA_ARGS__) : fn<float>(st, __VA_ARGS__))

/* ---- per-channel reductions ------------------------------------------------ */

/* A reduction over rows x c in two passes. Pass one: a block of 256
 * threads sums a tile of columns over one block of rows; each thread takes
 * V adjacent columns (16 bytes of one row: 8 bf16 or 4 floats, when c
 * allows) and every R-th row of the block, where R = 256 / (threads
 * across the tile); the R partial sums are then added in order. Wide
 * loads matter: a warp reading 64 bytes at a time kept the batch norm's
 * reductions at a fraction of the memory's speed. Partials hold
 * part[blk][0..c) and part[blk][c..2c); pass two adds the blocks in
 * order, so the sums are the same at every run. The functor's add<V>(row,
 * col, a, b) adds the terms of columns col .. col + V - 1 of a row. */
#define COL_LANES 32 /* threads across a tile at most */

template <int V, class F>
__global__ void colsum_partial(int rows, int c, int per_blk, int lanes, F f, double *part) {
    extern __shared__ double sh[]; /* [rsub][lane][V][2] */
    int lane = threadIdx.x % lanes, rsub = threadIdx.x / lanes, nsub = blockDim.x / lanes;
    int col = (blockIdx.x * lanes + lane) * V, blk = blockIdx.y;
    int end = min(rows, (blk + 1) * per_blk);
    double a[V], b[V];
#pragma unroll
    for (int k = 0; k < V; k++) a[k] = 0, b[k] = 0;
    if (col < c)
        for (int row = blk * per_blk + rsub; row < end; row += nsub) f.template add<V>(row, col, a, b);
    double *mine = sh + (size_t)threadIdx.x * V * 2;
#pragma unroll
    for (int k = 0; k < V; k++) mine[2 * k] = a[k], mine[2 * k + 1] = b[k];
    __syncthreads();
    if (rsub != 0 || col >= c) return;
    for (int r = 1; r < nsub; r++) {
        const double *other = sh + (size_t)(r * lanes + lane) * V * 2;
#pragma unroll
        for (int k = 0; k < V; k++) a[k] += other[2 * k], b[k] += other[2 * k + 1];
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
        part[(size_t)blk * 2 * c + col + k] = a[k];
        part[(size_t)blk * 2 * c + c + col + k] = b[k];
    }
}

/* Pass two; out_b may be NULL when only the first sum is wanted. A block
 * takes 32 channels: its 8 thread rows add every 8th row block (32
 * adjacent channels a read), then the 8 are added in order. One thread per
 * channel walking all the row blocks alone took a tenth of a step. */
#define FINISH_LANES 8

__global__ void colsum_finish(int nblk, int c, const double *part, float *out_a, float *out_b) {
    __shared__ double sa[FINISH_LANES][32], sb[FINISH_LANES][32];
    int col = blockIdx.x * 32 + threadIdx.x;
    double a = 0, b = 0;
    if (col < c)
        for (int blk = threadIdx.y; blk < nblk; blk += FINISH_LANES) {
            a += part[(size_t)blk * 2 * c + col];
            b += part[(size_t)blk * 2 * c + c + col];
        }
    sa[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || col >= c) return;
    for (int l = 1; l < FINISH_LANES; l++) a += sa[l][threadIdx.x], b += sb[l][threadIdx.x];
    out_a[col] = (float)a;
    if (out_b) out_b[col] = (float)b;
}

template <int V, class F>
static cudaError_t colsum_v(cudaStream_t st, int rows, int c, F f, double *part, int nblk) {
    int per = kern_rows_per_block(rows), groups = c / V;
    int lanes = groups < COL_LANES ? groups : COL_LANES;
    int threads = THREADS / lanes * lanes;
    dim3 grid((groups + lanes - 1) / lanes, nblk);
    size_t shared = (size_t)threads * V * 2 * sizeof(double);
    colsum_partial<V><<<grid, threads, shared, st>>>(rows, c, per, lanes, f, part);
    return cudaGetLastError();
}

/* V: the functor's vector width where c and its pointers allow it, else 1. */
template <class T, class F>
static cudaError_t colsum(cudaStream_t st, int rows, int c, F f, bool aligned, void *partials,
                          float *out_a, float *out_b) {
    if (c <= 0) return cudaSuccess;
    int nblk = kern_row_blocks(rows);
    double *part = (double *)partials;
    const int V = vec<T>::n;
    cudaError_t e = aligned && c % V == 0 ? colsum_v<V>(st, rows, c, f, part, nblk)
                                          : colsum_v<1>(st, rows, c, f, part, nblk);
    if (e != cudaSuccess) return e;
    colsum_finish<<<(c + 31) / 32, dim3(32, FINISH_LANES), 0, st>>>(nblk, c, part, out_a, out_b);
    return cudaGetLastError();
}

/* Batch-norm statistics: in double, as on the CPU, because the variance is
 * sumsq/m - mean^2 where float sums would cancel. */
template <class T> struct stats_terms {
    const T *x;
    int c;
    template <int V>
    __device__ __forceinline__ void add(int row, int col, double (&a)[V], double (&b)[V]) const {
        float v[V];
        ldv<V>(x + (size_t)row * c + col, v);
#pragma unroll
        for (int k = 0; k < V; k++) {
            double d = v[k];
            a[k] += d;
            b[k] += d * d;
        }
    }
};

/* The gradient's sums, masking dy by the ReLU in place first (the masked
 * value is dy's own or zero, so storing it back rounds nothing). */
template <class T> struct bwd_terms {
    const T *x, *y;
    const float *mean, *invstd;
    T *dy;
    int c, relu;
    template <int V>
    __device__ __forceinline__ void add(int row, int col, double (&a)[V], double (&b)[V]) const {
        size_t i = (size_t)row * c + col;
        float d[V], xv[V];
        ldv<V>(dy + i, d);
        ldv<V>(x + i, xv);
        if (relu) {
            float yv[V];
            ldv<V>(y + i, yv);
#pragma unroll
            for (int k = 0; k < V; k++) d[k] = yv[k] > 0 ? d[k] : 0;
            stv<V>(dy + i, d);
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
            a[k] += d[k];
            b[k] += d[k] * ((xv[k] - mean[col + k]) * invstd[col + k]);
        }
    }
};

/* The bias gradient: a single column sum (the second one stays zero). */
template <class T> struct bias_terms {
    const T *dy;
    int c;
    template <int V>
    __device__ __forceinline__ void add(int row, int col, double (&a)[V], double (&)[V]) const {
        float v[V];
        ldv<V>(dy + (size_t)row * c + col, v);
#pragma unroll
        for (int k = 0; k < V; k++) a[k] += v[k];
    }
};

template <class T>
static cudaError_t bn_stats_launch(cudaStream_t st, const bn_args *a, void *partials) {
    stats_terms<T> f = {(const T *)a->x, a->c};
    return colsum<T>(st, a->rows, a->c, f, aligned16(a->x), partials, a->sum, a->sumsq);
}

extern "C" cudaError_t kern_bn_stats(cudaStream_t st, backend_dtype dt, const bn_args *a,
                                     void *partials) {
    return DISPATCH(dt, bn_stats_launch, st, a, partials);
}

template <class T>
static cudaError_t bn_bwd_reduce_launch(cudaStream_t st, const bn_args *a, void *partials) {
    bwd_terms<T> f = {(const T *)a->x, (const T *)a->y, a->mean, a->invstd, (T *)a->dy,
                      a->c, a->relu};
    bool al = aligned16(a->x) && aligned16(a->dy) && (!a->relu || aligned16(a->y));
    return colsum<T>(st, a->rows, a->c, f, al, partials, a->sum_dy, a->sum_dy_xhat);
}

extern "C" cudaError_t kern_bn_bwd_reduce(cudaStream_t st, backend_dtype dt, const bn_args *a,
                                          void *partials) {
    return DISPATCH(dt, bn_bwd_reduce_launch, st, a, partials);
}

template <class T>
static cudaError_t bias_grad_launch(cudaStream_t st, int rows, int out, const void *dy,
                                    void *partials, float *dbias) {
    bias_terms<T> f = {(const T *)dy, out};
    return colsum<T>(st, rows, out, f, aligned16(dy), partials, dbias, (float *)NULL);
}

extern "C" cudaError_t kern_bias_grad(cudaStream_t st, backend_dtype dt, int rows, int out,
                                      const void *dy, void *partials, float *dbias) {
    return DISPATCH(dt, bias_grad_launch, st, rows, out, dy, partials, dbias);
}

/* ---- batch norm, per channel and elementwise --------------------------------- */

/* The same function as cpu_bn_finalize (worker/backend/bn_math.h). */
__global__ void bn_finalize_kernel(bn_args a) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < a.c) bn_finalize_channel(j, &a);
}

extern "C" cudaError_t kern_bn_finalize(cudaStream_t st, const bn_args *a) {
    if (a->c <= 0) return cudaSuccess;
    bn_finalize_kernel<<<(a->c + THREADS - 1) / THREADS, THREADS, 0, st>>>(*a);
    return cudaGetLastError();
}

__global__ void bn_running_kernel(int c, float eps, const float *running, float *mean,
                                  float *invstd) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    mean[j] = running[j];
    invstd[j] = 1.0f / sqrtf(running[c + j] + eps);
}

extern "C" cudaError_t kern_bn_running(cudaStream_t st, const bn_args *a) {
    if (a->c <= 0) return cudaSuccess;
    bn_running_kernel<<<(a->c + THREADS - 1) / THREADS, THREADS, 0, st>>>(
        a->c, a->eps, a->running, a->mean, a->invstd);
    return cudaGetLastError();
}

/* Per-channel elementwise work over rows x c: a thread keeps V adjacent
 * channels' coefficients in registers and walks rows with a stride, as
 * colsum_partial does. A kernel that took each element's channel from
 * a 64-bit i % c and loaded its coefficients again per element spent a
 * third of a ResNet-50 step in batch norm's two elementwise passes (Nsight
 * Compute, H100). The op's load<V>(col, k) fills k[NK][V]; row<V>(row,
 * col, k) does one row's V channels. */
template <int V, class Op>
__global__ void channel_map(int rows, int c, int lanes, Op op) {
    int lane = threadIdx.x % lanes, rsub = threadIdx.x / lanes, nsub = blockDim.x / lanes;
    int col = (blockIdx.x * lanes + lane) * V;
    if (col >= c) return;
    float k[Op::NK][V];
    op.template load<V>(col, k);
    for (int row = blockIdx.y * nsub + rsub; row < rows; row += gridDim.y * nsub)
        op.template row<V>(row, col, k);
}

/* Enough blocks to fill the GPU several times over, each thread then
 * taking a few dozen rows. */
#define CHANNEL_BLOCKS 4096

template <int V, class Op>
static cudaError_t channel_launch_v(cudaStream_t st, int rows, int c, Op op) {
    int groups = c / V, lanes = groups < COL_LANES ? groups : COL_LANES;
    int threads = THREADS / lanes * lanes, nsub = threads / lanes;
    unsigned gx = (unsigned)((groups + lanes - 1) / lanes);
    size_t want = ((size_t)rows + nsub - 1) / nsub, most = CHANNEL_BLOCKS / gx;
    unsigned gy = (unsigned)(want < most ? want : most > 0 ? most : 1);
    if (gy > 65535) gy = 65535;
    channel_map<V><<<dim3(gx, gy ? gy : 1), threads, 0, st>>>(rows, c, lanes, op);
    return cudaGetLastError();
}

/* V = 16 bytes of elements where c and the pointers allow, else 1. */
template <class T, class Op>
static cudaError_t channel_launch(cudaStream_t st, int rows, int c, bool aligned, Op op) {
    if (rows <= 0 || c <= 0) return cudaSuccess;
    const int V = vec<T>::n;
    return aligned && c % V == 0 ? channel_launch_v<V>(st, rows, c, op)
                                 : channel_launch_v<1>(st, rows, c, op);
}

/* y = (x - mean)*scale + beta per channel, plus res where given (a residual
 * block's sum, in fp32 before the one rounding); ReLU as a floor of 0, or
 * -INFINITY to let every value (and NaN) through, exactly as the CPU kernel
 * does. */
template <class T> struct bn_apply_op {
    static constexpr int NK = 3;
    const T *x, *res;
    T *y;
    const float *mean, *invstd, *gamma, *beta;
    int c;
    float lo;
    template <int V> __device__ __forceinline__ void load(int col, float (&k)[NK][V]) const {
#pragma unroll
        for (int v = 0; v < V; v++) {
            k[0][v] = mean[col + v];
            k[1][v] = invstd[col + v] * gamma[col + v];
            k[2][v] = beta[col + v];
        }
    }
    template <int V>
    __device__ __forceinline__ void row(int r, int col, const float (&k)[NK][V]) const {
        size_t i = (size_t)r * c + col;
        float v[V], rv[V];
        ldv<V>(x + i, v);
        if (res) ldv<V>(res + i, rv);
#pragma unroll
        for (int e = 0; e < V; e++) {
            /* (x - mean) * scale + beta, as the CPU's kernel: no cancellation */
            float o = (v[e] - k[0][e]) * k[1][e] + k[2][e];
            if (res) o += rv[e];
            v[e] = o < lo ? lo : o;
        }
        stv<V>(y + i, v);
    }
};

template <class T> static cudaError_t bn_apply_launch(cudaStream_t st, const bn_args *a) {
    bn_apply_op<T> op = {(const T *)a->x, (const T *)a->res, (T *)a->y, a->mean, a->invstd,
                         a->gamma, a->beta, a->c, a->relu ? 0.0f : -INFINITY};
    bool al = aligned16(a->x) && aligned16(a->y) && (!a->res || aligned16(a->res));
    return channel_launch<T>(st, a->rows, a->c, al, op);
}

extern "C" cudaError_t kern_bn_apply(cudaStream_t st, backend_dtype dt, const bn_args *a) {
    return DISPATCH(dt, bn_apply_launch, st, a);
}

/* dx = gamma*invstd * (dy - sum_dy/m - xhat * sum_dy_xhat/m), m the global
 * row count a.count in float (as the CPU's kernel); add_to: dx += that. */
template <class T> struct bn_bwd_apply_op {
    static constexpr int NK = 5;
    const T *x, *dy;
    T *dx;
    const float *mean, *invstd, *gamma, *sum_dy, *sum_dy_xhat;
    int c, add_to;
    float m;
    template <int V> __device__ __forceinline__ void load(int col, float (&k)[NK][V]) const {
#pragma unroll
        for (int v = 0; v < V; v++) {
            int j = col + v;
            k[0][v] = mean[j];
            k[1][v] = invstd[j];
            k[2][v] = gamma[j] * invstd[j];
            k[3][v] = sum_dy[j] / m;
            k[4][v] = sum_dy_xhat[j] / m;
        }
    }
    template <int V>
    __device__ __forceinline__ void row(int r, int col, const float (&k)[NK][V]) const {
        size_t i = (size_t)r * c + col;
        float xv[V], dyv[V], out[V];
        ldv<V>(x + i, xv);
        ldv<V>(dy + i, dyv);
        if (add_to) ldv<V>(dx + i, out);
#pragma unroll
        for (int e = 0; e < V; e++) {
            float xhat = (xv[e] - k[0][e]) * k[1][e];
            float gr = k[2][e] * (dyv[e] - k[3][e] - xhat * k[4][e]);
            out[e] = add_to ? out[e] + gr : gr;
        }
        stv<V>(dx + i, out);
    }
};

template <class T>
static cudaError_t bn_bwd_apply_launch(cudaStream_t st, const bn_args *a) {
    bn_bwd_apply_op<T> op = {(const T *)a->x, (const T *)a->dy, (T *)a->dx, a->mean, a->invstd,
                             a->gamma, a->sum_dy, a->sum_dy_xhat, a->c, a->add_to,
                             (float)a->count};
    bool al = aligned16(a->x) && aligned16(a->dy) && aligned16(a->dx);
    return channel_launch<T>(st, a->rows, a->c, al, op);
}

extern "C" cudaError_t kern_bn_bwd_apply(cudaStream_t st, backend_dtype dt, const bn_args *a) {
    return DISPATCH(dt, bn_bwd_apply_launch, st, a);
}

/* ---- elementwise ------------------------------------------------------------------ */

/* y[i] = f(a[i], b[i]) (b NULL: f(a[i], 0)), V elements per access and
 * the last n % V one by one. Each element is read and written by the same
 * thread, so y may be a or b (in place). */
template <class T, int V, class F>
__global__ void map_kernel(size_t n, F f, const T *a, const T *b, T *y) {
    size_t groups = n / V;
    GRID_STRIDE(g, groups) {
        float va[V], vb[V];
        ldv<V>(a + g * V, va);
        if (b)
            ldv<V>(b + g * V, vb);
        else
#pragma unroll
            for (int k = 0; k < V; k++) vb[k] = 0;
#pragma unroll
        for (int k = 0; k < V; k++) va[k] = f(va[k], vb[k]);
        stv<V>(y + g * V, va);
    }
    if (V > 1) {
        size_t i = groups * V + (size_t)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) put(y, i, f(get(a, i), b ? get(b, i) : 0.0f));
    }
}

template <class T, class F>
static cudaError_t map(cudaStream_t st, size_t n, F f, const void *a_, const void *b_, void *y_) {
    const T *a = (const T *)a_, *b = (const T *)b_;
    T *y = (T *)y_;
    const int V = vec<T>::n;
    if (n == 0) return cudaSuccess;
    if (n >= (size_t)V && aligned16(a) && (!b || aligned16(b)) && aligned16(y))
        map_kernel<T, V><<<blocks_for(n / V), THREADS, 0, st>>>(n, f, a, b, y);
    else
        map_kernel<T, 1><<<blocks_for(n), THREADS, 0, st>>>(n, f, a, b, y);
    return cudaGetLastError();
}

struct relu_op {
    __device__ float operator()(float x, float) const { return x > 0 ? x : 0; }
};

/* f(y, dy) */
struct relu_bwd_op {
    __device__ float operator()(float y, float d) const { return y > 0 ? d : 0; }
};

struct add_op {
    float lo;
    __device__ float operator()(float a, float b) const {
        float v = a + b;
        return v < lo ? lo : v;
    }
};

/* f(dst, src) */
struct sum_op {
    __device__ float operator()(float d, float s) const { return d + s; }
};

template <class T>
static cudaError_t relu_fwd_launch(cudaStream_t st, size_t n, const void *x, void *y) {
    return map<T>(st, n, relu_op(), x, NULL, y);
}

template <class T>
static cudaError_t relu_bwd_launch(cudaStream_t st, size_t n, const void *y, const void *dy,
                                   void *dx) {
    return map<T>(st, n, relu_bwd_op(), y, dy, dx);
}

template <class T>
static cudaError_t add_launch(cudaStream_t st, size_t n, const void *a, const void *b, int relu,
                              void *y) {
    add_op f = {relu ? 0.0f : -INFINITY};
    return map<T>(st, n, f, a, b, y);
}

template <class T>
static cudaError_t accumulate_launch(cudaStream_t st, size_t n, const void *src, void *dst) {
    return map<T>(st, n, sum_op(), dst, src, dst);
}

extern "C" cudaError_t kern_relu_fwd(cudaStream_t st, backend_dtype dt, size_t n, const void *x,
                                     void *y) {
    return DISPATCH(dt, relu_fwd_launch, st, n, x, y);
}

extern "C" cudaError_t kern_relu_bwd(cudaStream_t st, backend_dtype dt, size_t n, const void *y,
                                     const void *dy, void *dx) {
    return DISPATCH(dt, relu_bwd_launch, st, n, y, dy, dx);
}

extern "C" cudaError_t kern_add_fwd(cudaStream_t st, backend_dtype dt, size_t n, const void *a,
                                    const void *b, int relu, void *y) {
    return DISPATCH(dt, add_launch, st, n, a, b, relu, y);
}

extern "C" cudaError_t kern_accumulate(cudaStream_t st, backend_dtype dt, size_t n,
                                       const void *src, void *dst) {
    return DISPATCH(dt, accumulate_launch, st, n, src, dst);
}

__global__ void scale_kernel(size_t n, float alpha, float *x) {
    GRID_STRIDE(i, n) x[i] *= alpha;
}

extern "C" cudaError_t kern_scale(cudaStream_t st, size_t n, float alpha, float *x) {
    if (n == 0) return cudaSuccess;
    scale_kernel<<<blocks_for(n), THREADS, 0, st>>>(n, alpha, x);
    return cudaGetLastError();
}

__global__ void axpy_kernel(size_t n, float alpha, const float *x, float *y) {
    GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

extern "C" cudaError_t kern_axpy(cudaStream_t st, size_t n, float alpha, const float *x, float *y) {
    if (n == 0) return cudaSuccess;
    axpy_kernel<<<blocks_for(n), THREADS, 0, st>>>(n, alpha, x, y);
    return cudaGetLastError();
}

/* ---- pooling ----------------------------------------------------------------------- */

/* One thread per output element; the window is scanned in the CPU's
 * order with a strict >, so ties resolve to the same (first) element and
 * argmax is the same flat index into x (-1 for a window of padding only). */
template <class T>
__global__ void maxpool_fwd_kernel(pool_shape s, const T *x, T *y, int32_t *argmax) {
    size_t total = (size_t)s.n * s.p * s.q * s.c;
    GRID_STRIDE(i, total) {
        int c = (int)(i % s.c);
        size_t t = i / s.c;
        int q = (int)(t % s.q);
        t /= s.q;
        int p = (int)(t % s.p), n = (int)(t / s.p);
        float best = -FLT_MAX;
        int32_t at = -1;
        for (int r = 0; r < s.r; r++) {
            int ih = p * s.stride - s.pad + r;
            if (ih < 0 || ih >= s.h) continue;
            for (int u = 0; u < s.r; u++) {
                int iw = q * s.stride - s.pad + u;
                if (iw < 0 || iw >= s.w) continue;
                size_t xi = (((size_t)n * s.h + ih) * s.w + iw) * s.c + c;
                float v = get(x, xi);
                if (v > best) best = v, at = (int32_t)xi;
            }
        }
        put(y, i, best);
        argmax[i] = at;
    }
}

/* A gather instead of the CPU's scatter: each input element adds the
 * gradients of the outputs whose window covers it and whose argmax it is,
 * in increasing output order, which is the order the CPU's scatter adds
 * them in. No atomics, every element written (no separate zeroing), and
 * the same bits as the CPU. It relies on argmax coming from maxpool_fwd
 * (each index lies in its own window), which is the interface's contract. */
template <class T>
__global__ void maxpool_bwd_kernel(pool_shape s, const T *dy, const int32_t *argmax, T *dx) {
    size_t total = (size_t)s.n * s.h * s.w * s.c;
    GRID_STRIDE(i, total) {
        int c = (int)(i % s.c);
        size_t t = i / s.c;
        int iw = (int)(t % s.w);
        t /= s.w;
        int ih = (int)(t % s.h), n = (int)(t / s.h);
        /* outputs p with p*stride - pad <= ih <= p*stride - pad + r - 1 */
        int lo_h = ih + s.pad - s.r + 1, lo_w = iw + s.pad - s.r + 1;
        int p0 = lo_h <= 0 ? 0 : (lo_h + s.stride - 1) / s.stride;
        int q0 = lo_w <= 0 ? 0 : (lo_w + s.stride - 1) / s.stride;
        int p1 = min((ih + s.pad) / s.stride, s.p - 1), q1 = min((iw + s.pad) / s.stride, s.q - 1);
        float acc = 0;
        for (int p = p0; p <= p1; p++)
            for (int q = q0; q <= q1; q++) {
                size_t o = (((size_t)n * s.p + p) * s.q + q) * s.c + c;
                if (argmax[o] == (int32_t)i) acc += get(dy, o);
            }
        put(dx, i, acc);
    }
}

template <class T>
static cudaError_t maxpool_fwd_launch(cudaStream_t st, const pool_shape *s, const void *x,
                                      void *y, int32_t *argmax) {
    size_t total = (size_t)s->n * s->p * s->q * s->c;
    if (total == 0) return cudaSuccess;
    maxpool_fwd_kernel<T><<<blocks_for(total), THREADS, 0, st>>>(*s, (const T *)x, (T *)y,
                                                                  argmax);
    return cudaGetLastError();
}

template <class T>
static cudaError_t maxpool_bwd_launch(cudaStream_t st, const pool_shape *s, const void *dy,
                                      const int32_t *argmax, void *dx) {
    size_t total = (size_t)s->n * s->h * s->w * s->c;
    if (total == 0) return cudaSuccess;
    maxpool_bwd_kernel<T><<<blocks_for(total), THREADS, 0, st>>>(*s, (const T *)dy, argmax,
                                                                  (T *)dx);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_maxpool_fwd(cudaStream_t st, backend_dtype dt, const pool_shape *s,
                                        const void *x, void *y, int32_t *argmax) {
    return DISPATCH(dt, maxpool_fwd_launch, st, s, x, y, argmax);
}

extern "C" cudaError_t kern_maxpool_bwd(cudaStream_t st, backend_dtype dt, const pool_shape *s,
                                        const void *dy, const int32_t *argmax, void *dx) {
    return DISPATCH(dt, maxpool_bwd_launch, st, s, dy, argmax, dx);
}

/* One thread per (image, channel), adding the positions in order in
 * float and dividing at the end, as the CPU does. */
template <class T> __global__ void avgpool_fwd_kernel(int n, int hw, int c, const T *x, T *y) {
    size_t total = (size_t)n * c;
    GRID_STRIDE(i, total) {
        size_t img = i / c;
        int j = (int)(i % c);
        float acc = 0;
        for (int k = 0; k < hw; k++) acc += get(x, (img * hw + k) * c + j);
        put(y, i, acc / (float)hw);
    }
}

template <class T>
__global__ void avgpool_bwd_kernel(int hw, int c, size_t total, const T *dy, T *dx) {
    GRID_STRIDE(i, total) {
        size_t img = i / ((size_t)hw * c);
        int j = (int)(i % c);
        put(dx, i, get(dy, img * c + j) / (float)hw);
    }
}

template <class T>
static cudaError_t avgpool_fwd_launch(cudaStream_t st, int n, int hw, int c, const void *x,
                                      void *y) {
    size_t total = (size_t)n * c;
    if (total == 0) return cudaSuccess;
    avgpool_fwd_kernel<T><<<blocks_for(total), THREADS, 0, st>>>(n, hw, c, (const T *)x, (T *)y);
    return cudaGetLastError();
}

template <class T>
static cudaError_t avgpool_bwd_launch(cudaStream_t st, int n, int hw, int c, const void *dy,
                                      void *dx) {
    size_t total = (size_t)n * hw * c;
    if (total == 0) return cudaSuccess;
    avgpool_bwd_kernel<T><<<blocks_for(total), THREADS, 0, st>>>(hw, c, total, (const T *)dy,
                                                                  (T *)dx);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_avgpool_fwd(cudaStream_t st, backend_dtype dt, int n, int hw, int c,
                                        const void *x, void *y) {
    return DISPATCH(dt, avgpool_fwd_launch, st, n, hw, c, x, y);
}

extern "C" cudaError_t kern_avgpool_bwd(cudaStream_t st, backend_dtype dt, int n, int hw, int c,
                                        const void *dy, void *dx) {
    return DISPATCH(dt, avgpool_bwd_launch, st, n, hw, c, dy, dx);
}

/* ---- linear layer bias, convolution weight layouts ------------------------------------ */

/* The bias added in fp32 to the fp32 product, then one rounding (to bf16
 * activations), as the CPU's fp32 layer followed by its rounding. */
template <class T>
__global__ void bias_out_kernel(size_t total, int out, const float *acc, const float *bias,
                                T *y) {
    GRID_STRIDE(i, total) {
        float v = acc[i];
        if (bias) v += bias[i % out];
        put(y, i, v);
    }
}

template <class T>
static cudaError_t bias_out_launch(cudaStream_t st, int rows, int out, const float *acc,
                                   const float *bias, void *y) {
    size_t total = (size_t)rows * out;
    if (total == 0) return cudaSuccess;
    bias_out_kernel<T><<<blocks_for(total), THREADS, 0, st>>>(total, out, acc, bias, (T *)y);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_bias_out(cudaStream_t st, backend_dtype dt, int rows, int out,
                                     const float *acc, const float *bias, void *y) {
    return DISPATCH(dt, bias_out_launch, st, rows, out, acc, bias, y);
}

/* krsc[k][r][s][c] = oihw[k][c][r][s], and the reverse. One thread per
 * element, indexed by its OIHW position i; j is its KRSC position. */
__device__ __forceinline__ size_t krsc_index(size_t i, int c, int rs) {
    int pos = (int)(i % rs);
    size_t t = i / rs;
    int ch = (int)(t % c);
    size_t o = t / c;
    return (o * rs + pos) * c + ch;
}

template <class T> __global__ void to_krsc_kernel(size_t total, int c, int rs, const float *oihw, T *krsc) {
    GRID_STRIDE(i, total) put(krsc, krsc_index(i, c, rs), oihw[i]);
}

template <class T> __global__ void from_krsc_kernel(size_t total, int c, int rs, const T *krsc, float *oihw) {
    GRID_STRIDE(i, total) oihw[i] = get(krsc, krsc_index(i, c, rs));
}

template <class T>
static cudaError_t to_krsc_launch(cudaStream_t st, int k, int c, int rs, const float *src, void *dst) {
    size_t total = (size_t)k * c * rs;
    if (total == 0) return cudaSuccess;
    to_krsc_kernel<T><<<blocks_for(total), THREADS, 0, st>>>(total, c, rs, src, (T *)dst);
    return cudaGetLastError();
}

template <class T>
static cudaError_t from_krsc_launch(cudaStream_t st, int k, int c, int rs, const void *src, float *dst) {
    size_t total = (size_t)k * c * rs;
    if (total == 0) return cudaSuccess;
    from_krsc_kernel<T><<<blocks_for(total), THREADS, 0, st>>>(total, c, rs, (const T *)src, dst);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_weights_to_krsc(cudaStream_t st, backend_dtype dt, int k, int c,
                                            int r, int s, const float *src, void *dst) {
    return DISPATCH(dt, to_krsc_launch, st, k, c, r * s, src, dst);
}

extern "C" cudaError_t kern_weights_from_krsc(cudaStream_t st, backend_dtype dt, int k, int c,
                                              int r, int s, const void *src, float *dst) {
    return DISPATCH(dt, from_krsc_launch, st, k, c, r * s, src, dst);
}

/* ---- loss ------------------------------------------------------------------------------ */

#define XENT_THREADS 128

/* The block's tree sum of v (a fixed order for a fixed block size). */
__device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int half = XENT_THREADS / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half) sh[threadIdx.x] += sh[threadIdx.x + half];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* The block's largest logit and its first index, as the CPU's strict >
 * scan finds them: ties go to the lower index. */
template <class T> __device__ void block_argmax(const T *z, int classes, float *mx, int *best) {
    __shared__ float sv[XENT_THREADS];
    __shared__ int si[XENT_THREADS];
    float v = -INFINITY;
    int at = classes; /* beyond every real index */
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) {
        float zk = get(z, k);
        if (at == classes || zk > v) v = zk, at = k;
    }
    sv[threadIdx.x] = v, si[threadIdx.x] = at;
    __syncthreads();
    for (int half = XENT_THREADS / 2; half > 0; half /= 2) {
        int t = threadIdx.x;
        if (t < half) {
            float v2 = sv[t + half];
            int i2 = si[t + half];
            if (i2 < classes && (si[t] == classes || v2 > sv[t] || (v2 == sv[t] && i2 < si[t])))
                sv[t] = v2, si[t] = i2;
        }
        __syncthreads();
    }
    *mx = sv[0], *best = si[0];
    __syncthreads();
}

/* One block per sample: the same arithmetic as cpu_xent (double sums of
 * exp and of the smoothed targets' log-probabilities; dlogits divided by
 * n), leaving the sample's loss and hit for xent_finish. */
template <class T>
__global__ void xent_kernel(int n, int classes, const T *logits, const int32_t *labels,
                            float smoothing, T *dlogits, double *loss, int *hit) {
    __shared__ double sh[XENT_THREADS];
    int i = blockIdx.x;
    const T *z = logits + (size_t)i * classes;
    T *dz = dlogits + (size_t)i * classes;
    float mx;
    int best;
    block_argmax(z, classes, &mx, &best);
    double se = 0;
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) se += exp((double)get(z, k) - mx);
    double lse = mx + log(block_sum(se, sh));
    float off = smoothing / classes, on = 1.0f - smoothing + off;
    double li = 0;
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) {
        float t = k == labels[i] ? on : off;
        double logp = get(z, k) - lse;
        li -= t * logp;
        put(dz, k, (float)((exp(logp) - t) / n));
    }
    li = block_sum(li, sh);
    if (threadIdx.x == 0) loss[i] = li, hit[i] = best == labels[i];
}

/* The batch's sums, in sample order, by one thread (n is a batch). */
__global__ void xent_finish(int n, const double *loss, const int *hit, backend_loss *out) {
    double total = 0;
    int right = 0;
    for (int i = 0; i < n; i++) total += loss[i], right += hit[i];
    out->sum = total;
    out->correct = right;
}

template <class T>
static cudaError_t xent_launch(cudaStream_t st, const kern_xent_args *a, double *loss, int *hit) {
    xent_kernel<T><<<a->n, XENT_THREADS, 0, st>>>(a->n, a->classes, (const T *)a->logits,
                                                  a->labels, a->smoothing, (T *)a->dlogits,
                                                  loss, hit);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_xent(cudaStream_t st, const kern_xent_args *a, void *scratch,
                                 backend_loss *out) {
    double *loss = (double *)scratch;
    int *hit = (int *)(loss + a->n);
    if (a->n > 0 && a->classes > 0) {
        cudaError_t e = DISPATCH(a->dt, xent_launch, st, a, loss, hit);
        if (e != cudaSuccess) return e;
    }
    xent_finish<<<1, 1, 0, st>>>(a->classes > 0 ? a->n : 0, loss, hit, out);
    return cudaGetLastError();
}

/* ---- SGD -------------------------------------------------------------------------------- */

/* PyTorch's SGD, as cpu_sgd: g = grad + wd*p (where the mask allows);
 * buf = g on the first step, else momentum*buf + g; the step is buf, or
 * g + momentum*buf with Nesterov. */
__global__ void sgd_kernel(kern_sgd_args a) {
    float lr = *a.lr;
    GRID_STRIDE(i, a.n) {
        float g = a.grad[i];
        if (a.weight_decay != 0 && (!a.decay_mask || a.decay_mask[i]))
            g += a.weight_decay * a.param[i];
        if (a.momentum != 0) {
            float buf = a.first_step ? g : a.momentum * a.mom[i] + g;
            a.mom[i] = buf;
            g = a.nesterov ? g + a.momentum * buf : buf;
        }
        a.param[i] -= lr * g;
    }
}

extern "C" cudaError_t kern_sgd(cudaStream_t st, const kern_sgd_args *a) {
    if (a->n == 0) return cudaSuccess;
    sgd_kernel<<<blocks_for(a->n), THREADS, 0, st>>>(*a);
    return cudaGetLastError();
}
