/* The CPU backend's kernels in plain C (OpenMP across cores): batch norm,
 * ReLU, residual add, pooling, the linear layer, the loss and SGD, plus the
 * reference convolution that tests hold oneDNN's against.
 *
 * Reductions (batch-norm sums, weight gradients) are summed in fixed-size
 * blocks and then across blocks in order, so results do not depend on the
 * number of threads: a run is bit-for-bit reproducible. */
#include "worker/backend/cpu/cpu_kernels.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/bn_math.h"

#define ROW_BLOCK 256
/* Below this many elements a kernel runs on one thread: waking the team
 * costs more than the work (and far more when the cores are shared). */
#define PAR_MIN 32768

/* ---- batch norm ----------------------------------------------------------- */

/* The last step of a blocked reduction: per-block pairs of partial sums
 * (part[blk][0..c) and part[blk][c..2c)) added block by block, in order,
 * into a and b; frees part. */
static void sum_blocks(double *part, int nblk, int c, float *a, float *b) {
    for (int j = 0; j < c; j++) {
        double s = 0, s2 = 0;
        for (int blk = 0; blk < nblk; blk++) {
            s += part[(size_t)blk * 2 * c + j];
            s2 += part[(size_t)blk * 2 * c + c + j];
        }
        a[j] = (float)s;
        b[j] = (float)s2;
    }
    free(part);
}

int cpu_bn_stats(backend *b, const bn_args *a) {
    const float *restrict x = a->x;
    int rows = a->rows, c = a->c;
    (void)b;
    int nblk = (rows + ROW_BLOCK - 1) / ROW_BLOCK;
    double *part = calloc((size_t)nblk * 2 * (size_t)c, sizeof *part);
    if (!part) return -ENOMEM;
    /* Double within a block too: the variance is sumsq/m - mean^2, where
     * float sums would cancel. */
#pragma omp parallel for schedule(static) if ((size_t)rows * c >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        double *restrict s = part + (size_t)blk * 2 * c, *restrict s2 = s + c;
        int end = (blk + 1) * ROW_BLOCK < rows ? (blk + 1) * ROW_BLOCK : rows;
        for (int i = blk * ROW_BLOCK; i < end; i++) {
            const float *restrict row = x + (size_t)i * c;
#pragma omp simd
            for (int j = 0; j < c; j++) {
                double v = row[j];
                s[j] += v;
                s2[j] += v * v;
            }
        }
    }
    sum_blocks(part, nblk, c, a->sum, a->sumsq);
    return 0;
}

int cpu_bn_finalize(backend *b, const bn_args *a) {
    (void)b;
    for (int j = 0; j < a->c; j++) bn_finalize_channel(j, a);
    return 0;
}

int cpu_bn_running(backend *b, const bn_args *a) {
    int c = a->c;
    const float *running = a->running;
    (void)b;
    for (int j = 0; j < c; j++) {
        a->mean[j] = running[j];
        a->invstd[j] = 1.0f / sqrtf(running[c + j] + a->eps);
    }
    return 0;
}

int cpu_bn_apply(backend *b, const bn_args *a) {
    const float *x = a->x, *res = a->res;
    float *y = a->y;
    int rows = a->rows, c = a->c, relu = a->relu;
    const float *mean = a->mean, *invstd = a->invstd, *gamma = a->gamma, *beta = a->beta;
    (void)b;
    /* (x - mean) * scale + beta, PyTorch's order, rather than x * scale +
     * (beta - mean * scale): the latter loses log2(|mean| / std) bits to
     * cancellation, and where a GPU contracts it into an FMA and the CPU
     * does not, the two disagreed by 1e-4 of the output's scale. */
    float *scale = malloc((size_t)c * sizeof *scale);
    if (!scale) return -ENOMEM;
    for (int j = 0; j < c; j++) scale[j] = invstd[j] * gamma[j];
    /* ReLU as a floor; -INFINITY lets every value (and NaN) through */
    float lo = relu ? 0.0f : -INFINITY;
#pragma omp parallel for schedule(static) if ((size_t)rows * c >= PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * c, *rr = res ? res + (size_t)i * c : NULL;
        float *yr = y + (size_t)i * c;
        if (rr) {
#pragma omp simd
            for (int j = 0; j < c; j++) {
                float v = (xr[j] - mean[j]) * scale[j] + beta[j] + rr[j];
                yr[j] = v < lo ? lo : v;
            }
            continue;
        }
#pragma omp simd
        for (int j = 0; j < c; j++) {
            float v = (xr[j] - mean[j]) * scale[j] + beta[j];
            yr[j] = v < lo ? lo : v;
        }
    }
    free(scale);
    return 0;
}

/* Per block, float sums over at most ROW_BLOCK rows (well within float's
 * precision: the terms do not cancel), then double across blocks. */
int cpu_bn_bwd_reduce(backend *b, const bn_args *a) {
    const float *restrict x = a->x;
    const float *restrict y = a->y;
    float *restrict dy = a->dy;
    const float *restrict mean = a->mean;
    const float *restrict invstd = a->invstd;
    int rows = a->rows, c = a->c, relu = a->relu;
    (void)b;
    int nblk = (rows + ROW_BLOCK - 1) / ROW_BLOCK;
    double *part = malloc((size_t)nblk * 2 * (size_t)c * sizeof *part); /* all written */
    if (!part) return -ENOMEM;
#pragma omp parallel for schedule(static) if ((size_t)rows * c >= PAR_MIN)
    for (int blk = 0; blk < nblk; blk++) {
        float acc[2 * c]; /* this block's sums: at most a few KiB on the stack */
        float *restrict s = acc, *restrict s2 = acc + c;
        for (int j = 0; j < c; j++) s[j] = s2[j] = 0;
        int end = (blk + 1) * ROW_BLOCK < rows ? (blk + 1) * ROW_BLOCK : rows;
        for (int i = blk * ROW_BLOCK; i < end; i++) {
            const float *restrict xr = x + (size_t)i * c, *restrict yr = y + (size_t)i * c;
            float *restrict dr = dy + (size_t)i * c;
            if (relu) {
#pragma omp simd
                for (int j = 0; j < c; j++) {
                    float d = dr[j];
                    d = yr[j] > 0 ? d : 0;
                    dr[j] = d;
                    s[j] += d;
                    s2[j] += d * ((xr[j] - mean[j]) * invstd[j]);
                }
            } else {
#pragma omp simd
                for (int j = 0; j < c; j++) {
                    float d = dr[j];
                    s[j] += d;
                    s2[j] += d * ((xr[j] - mean[j]) * invstd[j]);
                }
            }
        }
        double *p = part + (size_t)blk * 2 * c;
        for (int j = 0; j < 2 * c; j++) p[j] = acc[j];
    }
    sum_blocks(part, nblk, c, a->sum_dy, a->sum_dy_xhat);
    return 0;
}

int cpu_bn_bwd_apply(backend *b, const bn_args *a) {
    const float *x = a->x;
    const float *dy = a->dy;
    float *dx = a->dx;
    int rows = a->rows, c = a->c, add_to = a->add_to;
    const float *mean = a->mean, *invstd = a->invstd, *gamma = a->gamma;
    const float *sum_dy = a->sum_dy, *sum_dy_xhat = a->sum_dy_xhat;
    float m = (float)a->count; /* the divisions below are in float */
    (void)b;
    float *k = malloc(3 * (size_t)c * sizeof *k);
    if (!k) return -ENOMEM;
    float *mdy = k + c, *mxh = k + 2 * c;
    for (int j = 0; j < c; j++) {
        k[j] = gamma[j] * invstd[j];
        mdy[j] = sum_dy[j] / m;
        mxh[j] = sum_dy_xhat[j] / m;
    }
#pragma omp parallel for schedule(static) if ((size_t)rows * c >= PAR_MIN)
    for (int i = 0; i < rows; i++) {
        const float *xr = x + (size_t)i * c, *dr = dy + (size_t)i * c;
        float *out = dx + (size_t)i * c;
        if (add_to) {
#pragma omp simd
            for (int j = 0; j < c; j++) {
                float xhat = (xr[j] - mean[j]) * invstd[j];
                out[j] += k[j] * (dr[j] - mdy[j] - xhat * mxh[j]);
            }
        } else {
#pragma omp simd
            for (int j = 0; j < c; j++) {
                float xhat = (xr[j] - mean[j]) * invstd[j];
                out[j] = k[j] * (dr[j] - mdy[j] - xhat * mxh[j]);
            }
        }
    }
    free(k);
    return 0;
}

/* ---- elementwise ------------------------------------------------------------ */

/* A loop over the enclosing function's n elements: vectorised, and on every
 * thread from PAR_MIN elements on. `omp simd` because these may run in
 * place (output == an input, exactly), which the compiler's overlap check
 * would send down the scalar path. */
#define FOR_EACH_OF_N(i)                                                \
    _Pragma("omp parallel for simd schedule(static) if (n >= PAR_MIN)") \
    for (size_t i = 0; i < n; i++)

int cpu_relu_fwd(backend *b, size_t n, const void *x_, void *y_) {
    const float *x = x_;
    float *y = y_;
    (void)b;
    FOR_EACH_OF_N(i) y[i] = x[i] > 0 ? x[i] : 0;
    return 0;
}

int cpu_relu_bwd(backend *b, size_t n, const void *y_, const void *dy_, void *dx_) {
    const float *y = y_;
    const float *dy = dy_;
    float *dx = dx_;
    (void)b;
    FOR_EACH_OF_N(i) {
        float d = dy[i]; /* loaded unconditionally, so the select vectorises */
        dx[i] = y[i] > 0 ? d : 0;
    }
    return 0;
}

int cpu_add_fwd(backend *b, size_t n, const void *a_, const void *x2_, int relu, void *y_) {
    const float *a = a_;
    const float *x2 = x2_;
    float *y = y_;
    (void)b;
    float lo = relu ? 0.0f : -INFINITY;
    FOR_EACH_OF_N(i) {
        float v = a[i] + x2[i];
        y[i] = v < lo ? lo : v;
    }
    return 0;
}

int cpu_accumulate(backend *b, size_t n, const void *src_, void *dst_) {
    const float *src = src_;
    float *dst = dst_;
    (void)b;
    FOR_EACH_OF_N(i) dst[i] += src[i];
    return 0;
}

int cpu_scale(backend *b, size_t n, float alpha, float *x) {
    (void)b;
    FOR_EACH_OF_N(i) x[i] *= alpha;
    return 0;
}

int cpu_axpy(backend *b, size_t n, float alpha, const float *x, float *y) {
    (void)b;
    FOR_EACH_OF_N(i) y[i] += alpha * x[i];
    return 0;
}

/* ---- pooling ------------------------------------------------------------------ */

int cpu_maxpool_fwd(backend *b, const pool_shape *s, const void *x_, void *y_, int32_t *argmax) {
    const float *x = x_;
    float *y = y_;
    (void)b;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++) {
        for (int p = 0; p < s->p; p++) {
            for (int q = 0; q < s->q; q++) {
                float *yo = y + (((size_t)n * s->p + p) * s->q + q) * s->c;
                int32_t *ao = argmax + (((size_t)n * s->p + p) * s->q + q) * s->c;
                for (int c = 0; c < s->c; c++) yo[c] = -FLT_MAX, ao[c] = -1;
                for (int r = 0; r < s->r; r++) {
                    int ih = p * s->stride - s->pad + r;
                    if (ih < 0 || ih >= s->h) continue;
                    for (int t = 0; t < s->r; t++) {
                        int iw = q * s->stride - s->pad + t;
                        if (iw < 0 || iw >= s->w) continue;
                        size_t base = (((size_t)n * s->h + ih) * s->w + iw) * s->c;
                        for (int c = 0; c < s->c; c++) {
                            if (x[base + c] > yo[c]) {
                                yo[c] = x[base + c];
                                ao[c] = (int32_t)(base + c);
                            }
                        }
                    }
                }
            }
        }
    }
    return 0;
}

int cpu_maxpool_bwd(backend *b, const pool_shape *s, const void *dy_, const int32_t *argmax,
                    void *dx_) {
    const float *dy = dy_;
    float *dx = dx_;
    (void)b;
    memset(dx, 0, (size_t)s->n * s->h * s->w * s->c * sizeof *dx);
    size_t per_n = (size_t)s->p * s->q * s->c;
    /* Windows overlap, but only within one image: split by image. */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++)
        for (size_t i = n * per_n; i < (n + 1) * per_n; i++)
            if (argmax[i] >= 0) dx[argmax[i]] += dy[i];
    return 0;
}

int cpu_avgpool_fwd(backend *b, int n, int hw, int c, const void *x_, void *y_) {
    const float *x = x_;
    float *y = y_;
    (void)b;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        float *yo = y + (size_t)i * c;
        for (int j = 0; j < c; j++) yo[j] = 0;
        for (int k = 0; k < hw; k++) {
            const float *xr = x + ((size_t)i * hw + k) * c;
            for (int j = 0; j < c; j++) yo[j] += xr[j];
        }
        for (int j = 0; j < c; j++) yo[j] /= (float)hw;
    }
    return 0;
}

int cpu_avgpool_bwd(backend *b, int n, int hw, int c, const void *dy_, void *dx_) {
    const float *dy = dy_;
    float *dx = dx_;
    (void)b;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++)
        for (int k = 0; k < hw; k++)
            for (int j = 0; j < c; j++)
                dx[((size_t)i * hw + k) * c + j] = dy[(size_t)i * c + j] / (float)hw;
    return 0;
}

/* ---- linear ------------------------------------------------------------------- */

int cpu_linear_fwd_ref(backend *b, int n, int in, int out, const void *x_, const float *w,
                       const float *bias, void *y_) {
    const float *x = x_;
    float *y = y_;
    (void)b;
#pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) {
        for (int o = 0; o < out; o++) {
            float acc = bias ? bias[o] : 0;
            for (int k = 0; k < in; k++) acc += x[(size_t)i * in + k] * w[(size_t)o * in + k];
            y[(size_t)i * out + o] = acc;
        }
    }
    return 0;
}

int cpu_linear_bwd_ref(backend *b, int n, int in, int out, const void *x_, const float *w,
                       const void *dy_, void *dx_, float *dw, float *dbias) {
    const float *x = x_;
    const float *dy = dy_;
    float *dx = dx_;
    (void)b;
    if (dx) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < n; i++)
            for (int k = 0; k < in; k++) {
                float acc = 0;
                for (int o = 0; o < out; o++) acc += dy[(size_t)i * out + o] * w[(size_t)o * in + k];
                dx[(size_t)i * in + k] = acc;
            }
    }
#pragma omp parallel for schedule(static)
    for (int o = 0; o < out; o++) {
        for (int k = 0; k < in; k++) {
            float acc = 0;
            for (int i = 0; i < n; i++) acc += dy[(size_t)i * out + o] * x[(size_t)i * in + k];
            dw[(size_t)o * in + k] = acc;
        }
        float acc = 0;
        for (int i = 0; i < n; i++) acc += dy[(size_t)i * out + o];
        if (dbias) dbias[o] = acc;
    }
    return 0;
}

/* ---- loss ----------------------------------------------------------------------- */

int cpu_xent(backend *b, int n, int classes, const void *logits_, const int32_t *labels,
             float smoothing, void *dlogits_, backend_loss *out) {
    const float *logits = logits_;
    float *dlogits = dlogits_;
    (void)b;
    double total = 0;
    int right = 0;
    float off = smoothing / classes, on = 1.0f - smoothing + off;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float *dz = dlogits + (size_t)i * classes;
        int best = 0;
        float mx = z[0];
        for (int k = 1; k < classes; k++)
            if (z[k] > mx) mx = z[k], best = k;
        double se = 0;
        for (int k = 0; k < classes; k++) se += exp((double)z[k] - mx);
        double lse = mx + log(se);
        double li = 0;
        for (int k = 0; k < classes; k++) {
            float t = k == labels[i] ? on : off;
            double logp = z[k] - lse;
            li -= t * logp;
            dz[k] = (float)((exp(logp) - t) / n);
        }
        total += li;
        right += best == labels[i];
    }
    out->sum = total;
    out->correct = right;
    return 0;
}

/* ---- SGD -------------------------------------------------------------------------- */

/* PyTorch's SGD: g = grad + wd*p; buf = g on the first step, else
 * momentum*buf + g; the step is buf, or g + momentum*buf with Nesterov. */
int cpu_sgd(backend *b, size_t n, float *param, const float *grad, float *mom,
            const uint8_t *decay_mask, const float *lr_, float momentum, float weight_decay,
            int nesterov, int first_step) {
    (void)b;
    float lr = *lr_;
#pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        if (weight_decay != 0 && (!decay_mask || decay_mask[i])) g += weight_decay * param[i];
        if (momentum != 0) {
            float buf = first_step ? g : momentum * mom[i] + g;
            mom[i] = buf;
            g = nesterov ? g + momentum * buf : buf;
        }
        param[i] -= lr * g;
    }
    return 0;
}

/* ---- reference convolution (NHWC x, OIHW w) ----------------------------------------- */

int cpu_conv_fwd_ref(backend *b, const conv_shape *s, const void *x_, const float *w, void *y_) {
    const float *x = x_;
    float *y = y_;
    (void)b;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < s->n; n++)
        for (int p = 0; p < s->p; p++)
            for (int q = 0; q < s->q; q++)
                for (int k = 0; k < s->k; k++) {
                    float acc = 0;
                    for (int r = 0; r < s->r; r++) {
                        int ih = p * s->stride - s->pad + r;
                        if (ih < 0 || ih >= s->h) continue;
                        for (int t = 0; t < s->s; t++) {
                            int iw = q * s->stride - s->pad + t;
                            if (iw < 0 || iw >= s->w) continue;
                            const float *xr = x + (((size_t)n * s->h + ih) * s->w + iw) * s->c;
                            for (int c = 0; c < s->c; c++)
                                acc += xr[c] * w[(((size_t)k * s->c + c) * s->r + r) * s->s + t];
                        }
                    }
                    y[(((size_t)n * s->p + p) * s->q + q) * s->k + k] = acc;
                }
    return 0;
}

int cpu_conv_bwd_ref(backend *b, const conv_shape *s, const void *x_, const float *w,
                     const void *dy_, void *dx_, int dx_add, float *dw) {
    const float *x = x_;
    const float *dy = dy_;
    float *dx = dx_;
    (void)b;
    if (dx) {
        if (!dx_add) memset(dx, 0, (size_t)s->n * s->h * s->w * s->c * sizeof *dx);
#pragma omp parallel for schedule(static)
        for (int n = 0; n < s->n; n++)
            for (int p = 0; p < s->p; p++)
                for (int q = 0; q < s->q; q++)
                    for (int k = 0; k < s->k; k++) {
                        float g = dy[(((size_t)n * s->p + p) * s->q + q) * s->k + k];
                        for (int r = 0; r < s->r; r++) {
                            int ih = p * s->stride - s->pad + r;
                            if (ih < 0 || ih >= s->h) continue;
                            for (int t = 0; t < s->s; t++) {
                                int iw = q * s->stride - s->pad + t;
                                if (iw < 0 || iw >= s->w) continue;
                                float *xr = dx + (((size_t)n * s->h + ih) * s->w + iw) * s->c;
                                for (int c = 0; c < s->c; c++)
                                    xr[c] += g * w[(((size_t)k * s->c + c) * s->r + r) * s->s + t];
                            }
                        }
                    }
    }
#pragma omp parallel for schedule(static)
    for (int k = 0; k < s->k; k++)
        for (int c = 0; c < s->c; c++)
            for (int r = 0; r < s->r; r++)
                for (int t = 0; t < s->s; t++) {
                    float acc = 0;
                    for (int n = 0; n < s->n; n++)
                        for (int p = 0; p < s->p; p++) {
                            int ih = p * s->stride - s->pad + r;
                            if (ih < 0 || ih >= s->h) continue;
                            for (int q = 0; q < s->q; q++) {
                                int iw = q * s->stride - s->pad + t;
                                if (iw < 0 || iw >= s->w) continue;
                                acc += dy[(((size_t)n * s->p + p) * s->q + q) * s->k + k] *
                                       x[(((size_t)n * s->h + ih) * s->w + iw) * s->c + c];
                            }
                        }
                    dw[(((size_t)k * s->c + c) * s->r + r) * s->s + t] = acc;
                }
    return 0;
}
