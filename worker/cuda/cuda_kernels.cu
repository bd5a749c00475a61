/* The CUDA backend's own kernels: batch norm, ReLU, residual add, pooling,
 * the linear layer's bias, the weight layout change for cuDNN, the loss and
 * SGD. Each computes what its CPU counterpart in worker/cpu/cpu_kernels.c
 * computes, in the same floating-point types, and is exposed through a C
 * launcher (cuda_kernels.h) that only queues work on a stream.
 *
 * Sums are deterministic: per-channel reductions go through fixed row
 * blocks and a fixed-order pass across blocks, the loss through fixed
 * shared-memory trees and a sequential sum over samples, so a run is
 * reproducible bit for bit on one GPU model. */
#include <float.h>
#include <math.h>

#include "worker/bn_math.h"
#include "worker/cuda/cuda_kernels.h"

#define THREADS 256
/* Elementwise kernels loop with a grid stride, so a capped grid covers
 * any size (and sizes past 2^31 elements). */
#define MAX_BLOCKS 65536

static unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b > MAX_BLOCKS ? MAX_BLOCKS : (b ? b : 1));
}

#define GRID_STRIDE(i, n)                                                        \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);     \
         i += (size_t)gridDim.x * blockDim.x)

/* ---- per-channel reductions ------------------------------------------------ */

/* A reduction over rows x c in two passes. Pass one: block (bx, by) sums
 * channels [32*bx, 32*bx + 32) over row block by, each of its 8 thread rows
 * taking every 8th row, then adds the 8 in order; partials hold
 * part[blk][0..c) and part[blk][c..2c). Pass two adds the blocks in order.
 * The functor f(row, col, a, b) adds the row's two terms to a and b. */
#define COL_TILE 32
#define ROW_LANES 8

template <class F>
__global__ void colsum_partial(int rows, int c, int per_blk, F f, double *part) {
    __shared__ double sa[ROW_LANES][COL_TILE], sb[ROW_LANES][COL_TILE];
    int col = blockIdx.x * COL_TILE + threadIdx.x, blk = blockIdx.y;
    int end = min(rows, (blk + 1) * per_blk);
    double a = 0, b = 0;
    if (col < c)
        for (int row = blk * per_blk + threadIdx.y; row < end; row += ROW_LANES)
            f(row, col, a, b);
    sa[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y != 0 || col >= c) return;
    for (int l = 1; l < ROW_LANES; l++) a += sa[l][threadIdx.x], b += sb[l][threadIdx.x];
    part[(size_t)blk * 2 * c + col] = a;
    part[(size_t)blk * 2 * c + c + col] = b;
}

/* Pass two; out_b may be NULL when only the first sum is wanted. */
__global__ void colsum_finish(int nblk, int c, const double *part, float *out_a, float *out_b) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= c) return;
    double a = 0, b = 0;
    for (int blk = 0; blk < nblk; blk++) {
        a += part[(size_t)blk * 2 * c + col];
        b += part[(size_t)blk * 2 * c + c + col];
    }
    out_a[col] = (float)a;
    if (out_b) out_b[col] = (float)b;
}

template <class F>
static cudaError_t colsum(cudaStream_t st, int rows, int c, F f, void *partials, float *out_a,
                          float *out_b) {
    if (c <= 0) return cudaSuccess;
    int per = kern_rows_per_block(rows), nblk = kern_row_blocks(rows);
    double *part = (double *)partials;
    dim3 grid((c + COL_TILE - 1) / COL_TILE, nblk), block(COL_TILE, ROW_LANES);
    colsum_partial<<<grid, block, 0, st>>>(rows, c, per, f, part);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    colsum_finish<<<(c + THREADS - 1) / THREADS, THREADS, 0, st>>>(nblk, c, part, out_a, out_b);
    return cudaGetLastError();
}

/* Batch-norm statistics: in double, as on the CPU, because the variance is
 * sumsq/m - mean^2 where float sums would cancel. */
struct stats_terms {
    const float *x;
    int c;
    __device__ void operator()(int row, int col, double &a, double &b) const {
        double v = x[(size_t)row * c + col];
        a += v;
        b += v * v;
    }
};

/* The gradient's sums, masking dy by the ReLU in place first. */
struct bwd_terms {
    const float *x, *y, *mean, *invstd;
    float *dy;
    int c, relu;
    __device__ void operator()(int row, int col, double &a, double &b) const {
        size_t i = (size_t)row * c + col;
        float d = dy[i];
        if (relu) {
            d = y[i] > 0 ? d : 0;
            dy[i] = d;
        }
        a += d;
        b += d * ((x[i] - mean[col]) * invstd[col]);
    }
};

/* The bias gradient: a single column sum (the second one stays zero). */
struct bias_terms {
    const float *dy;
    int c;
    __device__ void operator()(int row, int col, double &a, double &) const {
        a += dy[(size_t)row * c + col];
    }
};

extern "C" cudaError_t kern_bn_stats(cudaStream_t st, int rows, int c, const float *x,
                                     void *partials, float *sum, float *sumsq) {
    stats_terms f = {x, c};
    return colsum(st, rows, c, f, partials, sum, sumsq);
}

extern "C" cudaError_t kern_bn_bwd_reduce(cudaStream_t st, int rows, int c, const float *x,
                                          const float *y, const float *mean,
                                          const float *invstd, int relu, float *dy,
                                          void *partials, float *sum_dy, float *sum_dy_xhat) {
    bwd_terms f = {x, y, mean, invstd, dy, c, relu};
    return colsum(st, rows, c, f, partials, sum_dy, sum_dy_xhat);
}

extern "C" cudaError_t kern_bias_grad(cudaStream_t st, int rows, int out, const float *dy,
                                      void *partials, float *dbias) {
    bias_terms f = {dy, out};
    return colsum(st, rows, out, f, partials, dbias, (float *)NULL);
}

/* ---- batch norm, per channel and elementwise --------------------------------- */

/* The same function as cpu_bn_finalize (worker/bn_math.h). */
__global__ void bn_finalize_kernel(int c, double count, float eps, float momentum,
                                   const float *sum, const float *sumsq, float *mean,
                                   float *invstd, float *running) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j < c) bn_finalize_channel(j, c, count, eps, momentum, sum, sumsq, mean, invstd, running);
}

extern "C" cudaError_t kern_bn_finalize(cudaStream_t st, int c, double count, float eps,
                                        float momentum, const float *sum, const float *sumsq,
                                        float *mean, float *invstd, float *running) {
    if (c <= 0) return cudaSuccess;
    bn_finalize_kernel<<<(c + THREADS - 1) / THREADS, THREADS, 0, st>>>(
        c, count, eps, momentum, sum, sumsq, mean, invstd, running);
    return cudaGetLastError();
}

__global__ void bn_running_kernel(int c, float eps, const float *running, float *mean,
                                  float *invstd) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= c) return;
    mean[j] = running[j];
    invstd[j] = 1.0f / sqrtf(running[c + j] + eps);
}

extern "C" cudaError_t kern_bn_running(cudaStream_t st, int c, float eps, const float *running,
                                       float *mean, float *invstd) {
    if (c <= 0) return cudaSuccess;
    bn_running_kernel<<<(c + THREADS - 1) / THREADS, THREADS, 0, st>>>(c, eps, running, mean,
                                                                        invstd);
    return cudaGetLastError();
}

/* y = x*scale + shift per channel; ReLU as a floor of 0, or -INFINITY to
 * let every value (and NaN) through, exactly as the CPU kernel does. */
__global__ void bn_apply_kernel(size_t total, int c, const float *x, const float *mean,
                                const float *invstd, const float *gamma, const float *beta,
                                float lo, float *y) {
    GRID_STRIDE(i, total) {
        int j = (int)(i % (size_t)c);
        float scale = invstd[j] * gamma[j], shift = beta[j] - mean[j] * scale;
        float v = x[i] * scale + shift;
        y[i] = v < lo ? lo : v;
    }
}

extern "C" cudaError_t kern_bn_apply(cudaStream_t st, int rows, int c, const float *x,
                                     const float *mean, const float *invstd, const float *gamma,
                                     const float *beta, int relu, float *y) {
    size_t total = (size_t)rows * c;
    if (total == 0) return cudaSuccess;
    bn_apply_kernel<<<blocks_for(total), THREADS, 0, st>>>(total, c, x, mean, invstd, gamma,
                                                           beta, relu ? 0.0f : -INFINITY, y);
    return cudaGetLastError();
}

__global__ void bn_bwd_apply_kernel(size_t total, kern_bn_bwd_apply_args a) {
    GRID_STRIDE(i, total) {
        int j = (int)(i % (size_t)a.c);
        float k = a.gamma[j] * a.invstd[j], mdy = a.sum_dy[j] / a.m,
              mxh = a.sum_dy_xhat[j] / a.m;
        float xhat = (a.x[i] - a.mean[j]) * a.invstd[j];
        float g = k * (a.dy[i] - mdy - xhat * mxh);
        a.dx[i] = a.add_to ? a.dx[i] + g : g;
    }
}

extern "C" cudaError_t kern_bn_bwd_apply(cudaStream_t st, const kern_bn_bwd_apply_args *a) {
    size_t total = (size_t)a->rows * a->c;
    if (total == 0) return cudaSuccess;
    bn_bwd_apply_kernel<<<blocks_for(total), THREADS, 0, st>>>(total, *a);
    return cudaGetLastError();
}

/* ---- elementwise ------------------------------------------------------------------ */

__global__ void relu_fwd_kernel(size_t n, const float *x, float *y) {
    GRID_STRIDE(i, n) y[i] = x[i] > 0 ? x[i] : 0;
}

__global__ void relu_bwd_kernel(size_t n, const float *y, const float *dy, float *dx) {
    GRID_STRIDE(i, n) {
        float d = dy[i];
        dx[i] = y[i] > 0 ? d : 0;
    }
}

__global__ void add_kernel(size_t n, const float *a, const float *b, float lo, float *y) {
    GRID_STRIDE(i, n) {
        float v = a[i] + b[i];
        y[i] = v < lo ? lo : v;
    }
}

__global__ void accumulate_kernel(size_t n, const float *src, float *dst) {
    GRID_STRIDE(i, n) dst[i] += src[i];
}

__global__ void scale_kernel(size_t n, float alpha, float *x) {
    GRID_STRIDE(i, n) x[i] *= alpha;
}

extern "C" cudaError_t kern_relu_fwd(cudaStream_t st, size_t n, const float *x, float *y) {
    if (n == 0) return cudaSuccess;
    relu_fwd_kernel<<<blocks_for(n), THREADS, 0, st>>>(n, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_relu_bwd(cudaStream_t st, size_t n, const float *y, const float *dy,
                                     float *dx) {
    if (n == 0) return cudaSuccess;
    relu_bwd_kernel<<<blocks_for(n), THREADS, 0, st>>>(n, y, dy, dx);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_add_fwd(cudaStream_t st, size_t n, const float *a, const float *b,
                                    int relu, float *y) {
    if (n == 0) return cudaSuccess;
    add_kernel<<<blocks_for(n), THREADS, 0, st>>>(n, a, b, relu ? 0.0f : -INFINITY, y);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_accumulate(cudaStream_t st, size_t n, const float *src, float *dst) {
    if (n == 0) return cudaSuccess;
    accumulate_kernel<<<blocks_for(n), THREADS, 0, st>>>(n, src, dst);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_scale(cudaStream_t st, size_t n, float alpha, float *x) {
    if (n == 0) return cudaSuccess;
    scale_kernel<<<blocks_for(n), THREADS, 0, st>>>(n, alpha, x);
    return cudaGetLastError();
}

/* ---- pooling ----------------------------------------------------------------------- */

/* One thread per output element; the window is scanned in the CPU's
 * order with a strict >, so ties resolve to the same (first) element and
 * argmax is the same flat index into x (-1 for a window of padding only). */
__global__ void maxpool_fwd_kernel(pool_shape s, const float *x, float *y, int32_t *argmax) {
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
                if (x[xi] > best) best = x[xi], at = (int32_t)xi;
            }
        }
        y[i] = best;
        argmax[i] = at;
    }
}

/* A gather instead of the CPU's scatter: each input element adds the
 * gradients of the outputs whose window covers it and whose argmax it is,
 * in increasing output order, which is the order the CPU's scatter adds
 * them in. No atomics, every element written (no separate zeroing), and
 * the same bits as the CPU. It relies on argmax coming from maxpool_fwd
 * (each index lies in its own window), which is the interface's contract. */
__global__ void maxpool_bwd_kernel(pool_shape s, const float *dy, const int32_t *argmax,
                                   float *dx) {
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
                if (argmax[o] == (int32_t)i) acc += dy[o];
            }
        dx[i] = acc;
    }
}

extern "C" cudaError_t kern_maxpool_fwd(cudaStream_t st, const pool_shape *s, const float *x,
                                        float *y, int32_t *argmax) {
    size_t total = (size_t)s->n * s->p * s->q * s->c;
    if (total == 0) return cudaSuccess;
    maxpool_fwd_kernel<<<blocks_for(total), THREADS, 0, st>>>(*s, x, y, argmax);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_maxpool_bwd(cudaStream_t st, const pool_shape *s, const float *dy,
                                        const int32_t *argmax, float *dx) {
    size_t total = (size_t)s->n * s->h * s->w * s->c;
    if (total == 0) return cudaSuccess;
    maxpool_bwd_kernel<<<blocks_for(total), THREADS, 0, st>>>(*s, dy, argmax, dx);
    return cudaGetLastError();
}

/* One thread per (image, channel), adding the positions in order in
 * float and dividing at the end, as the CPU does. */
__global__ void avgpool_fwd_kernel(int n, int hw, int c, const float *x, float *y) {
    size_t total = (size_t)n * c;
    GRID_STRIDE(i, total) {
        size_t img = i / c;
        int j = (int)(i % c);
        float acc = 0;
        for (int k = 0; k < hw; k++) acc += x[(img * hw + k) * c + j];
        y[i] = acc / (float)hw;
    }
}

__global__ void avgpool_bwd_kernel(int hw, int c, size_t total, const float *dy, float *dx) {
    GRID_STRIDE(i, total) {
        size_t img = i / ((size_t)hw * c);
        int j = (int)(i % c);
        dx[i] = dy[img * c + j] / (float)hw;
    }
}

extern "C" cudaError_t kern_avgpool_fwd(cudaStream_t st, int n, int hw, int c, const float *x,
                                        float *y) {
    size_t total = (size_t)n * c;
    if (total == 0) return cudaSuccess;
    avgpool_fwd_kernel<<<blocks_for(total), THREADS, 0, st>>>(n, hw, c, x, y);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_avgpool_bwd(cudaStream_t st, int n, int hw, int c, const float *dy,
                                        float *dx) {
    size_t total = (size_t)n * hw * c;
    if (total == 0) return cudaSuccess;
    avgpool_bwd_kernel<<<blocks_for(total), THREADS, 0, st>>>(hw, c, total, dy, dx);
    return cudaGetLastError();
}

/* ---- linear layer bias, convolution weight layouts ------------------------------------ */

__global__ void bias_add_kernel(size_t total, int out, const float *bias, float *y) {
    GRID_STRIDE(i, total) y[i] += bias[i % out];
}

extern "C" cudaError_t kern_bias_add(cudaStream_t st, int rows, int out, const float *bias,
                                     float *y) {
    size_t total = (size_t)rows * out;
    if (total == 0) return cudaSuccess;
    bias_add_kernel<<<blocks_for(total), THREADS, 0, st>>>(total, out, bias, y);
    return cudaGetLastError();
}

/* dst[k][r][s][c] = src[k][c][r][s] (to_ohwi), or the reverse. One thread
 * per element, indexed by its OIHW position. */
__global__ void weights_kernel(int k, int c, int rs, const float *src, float *dst, int to_ohwi) {
    size_t total = (size_t)k * c * rs;
    GRID_STRIDE(i, total) {
        int pos = (int)(i % rs);
        size_t t = i / rs;
        int ch = (int)(t % c), o = (int)(t / c);
        size_t j = ((size_t)o * rs + pos) * c + ch;
        if (to_ohwi)
            dst[j] = src[i];
        else
            dst[i] = src[j];
    }
}

extern "C" cudaError_t kern_oihw_to_ohwi(cudaStream_t st, int k, int c, int r, int s,
                                         const float *src, float *dst) {
    size_t total = (size_t)k * c * r * s;
    if (total == 0) return cudaSuccess;
    weights_kernel<<<blocks_for(total), THREADS, 0, st>>>(k, c, r * s, src, dst, 1);
    return cudaGetLastError();
}

extern "C" cudaError_t kern_ohwi_to_oihw(cudaStream_t st, int k, int c, int r, int s,
                                         const float *src, float *dst) {
    size_t total = (size_t)k * c * r * s;
    if (total == 0) return cudaSuccess;
    weights_kernel<<<blocks_for(total), THREADS, 0, st>>>(k, c, r * s, src, dst, 0);
    return cudaGetLastError();
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
__device__ void block_argmax(const float *z, int classes, float *mx, int *best) {
    __shared__ float sv[XENT_THREADS];
    __shared__ int si[XENT_THREADS];
    float v = -INFINITY;
    int at = classes; /* beyond every real index */
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS)
        if (at == classes || z[k] > v) v = z[k], at = k;
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
__global__ void xent_kernel(int n, int classes, const float *logits, const int32_t *labels,
                            float smoothing, float *dlogits, double *loss, int *hit) {
    __shared__ double sh[XENT_THREADS];
    int i = blockIdx.x;
    const float *z = logits + (size_t)i * classes;
    float *dz = dlogits + (size_t)i * classes;
    float mx;
    int best;
    block_argmax(z, classes, &mx, &best);
    double se = 0;
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) se += exp((double)z[k] - mx);
    double lse = mx + log(block_sum(se, sh));
    float off = smoothing / classes, on = 1.0f - smoothing + off;
    double li = 0;
    for (int k = threadIdx.x; k < classes; k += XENT_THREADS) {
        float t = k == labels[i] ? on : off;
        double logp = z[k] - lse;
        li -= t * logp;
        dz[k] = (float)((exp(logp) - t) / n);
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

extern "C" cudaError_t kern_xent(cudaStream_t st, int n, int classes, const float *logits,
                                 const int32_t *labels, float smoothing, float *dlogits,
                                 void *scratch, backend_loss *out) {
    double *loss = (double *)scratch;
    int *hit = (int *)(loss + n);
    if (n > 0 && classes > 0) {
        xent_kernel<<<n, XENT_THREADS, 0, st>>>(n, classes, logits, labels, smoothing, dlogits,
                                                loss, hit);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
    }
    xent_finish<<<1, 1, 0, st>>>(classes > 0 ? n : 0, loss, hit, out);
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
