/* The CUDA backend against the CPU backend: every operation of backend.h
 * on fresh random inputs, over several shapes (strided, 1x1 and 3x3
 * convolutions, the 7x7 stride-2 stem, channel counts that are not a
 * multiple of 8), one line per check. The error measure is the largest
 * absolute difference over the largest magnitude of the CPU's result:
 * sums added in another order differ in their last bits, so each element
 * is judged against the tensor's scale. Arithmetic the two backends do in
 * the same order (ReLU, add, pooling) must agree exactly.
 *
 * Everything runs twice: in fp32 (TF32 off) against the fp32 CPU backend
 * within 1e-5, then in bf16 mixed precision against the CPU's emulated
 * bf16 backend (worker/backend/cpu/cpu_bf16.c) on the same bf16 input bits. There,
 * results that pass through bf16 (activations, and the filter gradient
 * cuDNN writes in bf16) may differ by a rounding step where the fp32 sums
 * before it differ in their last bits, so they are held to 1e-2; fp32 sums
 * of bf16 data (batch-norm statistics, the bias gradient) stay at 1e-5,
 * and the exact operations stay exact. A test of the weight cache checks
 * that the GPU sees weights change through every way they can. The CUDA
 * backend's table is made from backend.h's list, so an operation left out
 * fails to compile; here it is also checked whole (backend_missing_op).
 *
 * Exits 77 ("skipped: no GPU") when no GPU is visible, 1 if a check fails.
 * `gpu-ops --device-count` prints the number of visible GPUs (for the
 * scripts in tests/gpu). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "worker/backend/backend.h"
#include "worker/backend/bf16.h"

#define TOL 1e-5      /* fp32, TF32 off; and fp32 sums in bf16 mode */
#define TOL_BF16 1e-2 /* results that pass through bf16 */
#define MAX_TRACKED 64

typedef struct {
    backend *cpu, *gpu;
    const char *mode; /* "fp32" or "bf16", the prefix of every line */
    backend_dtype act; /* both backends' activation type */
    double tol;        /* for results that pass through activations */
    int timed;         /* convolution algorithms chosen by timing: maybe
                          nondeterministic ones, as PyTorch's benchmark mode */
    unsigned seed;
    int checks, failed;
    void *dev[MAX_TRACKED], *host[MAX_TRACKED]; /* the current case's buffers */
    int ndev, nhost;
} ctx;

/* ---- buffers: each case's are freed together by done() -------------------------- */

static void *track_host(ctx *t, void *p) {
    if (!p || t->nhost == MAX_TRACKED) {
        fprintf(stderr, "gpu-ops: out of host memory or tracking slots\n");
        exit(1);
    }
    return t->host[t->nhost++] = p;
}

static void *dnew(ctx *t, size_t bytes) {
    void *p = t->gpu->ops->alloc(t->gpu, bytes);
    if (!p || t->ndev == MAX_TRACKED) {
        fprintf(stderr, "gpu-ops: cannot allocate %zu bytes on the GPU\n", bytes);
        exit(1);
    }
    return t->dev[t->ndev++] = p;
}

/* A device copy of host memory. */
static void *dput(ctx *t, const void *h, size_t bytes) {
    void *d = dnew(t, bytes);
    t->gpu->ops->upload(t->gpu, d, h, bytes);
    return d;
}

/* A host copy of device memory (waits for the GPU). Prefilled with NaN
 * bytes, so a copy that never happened cannot pass for a result. */
static void *hget(ctx *t, const void *d, size_t bytes) {
    void *h = track_host(t, malloc(bytes ? bytes : 1));
    memset(h, 0xFF, bytes);
    t->gpu->ops->download(t->gpu, h, d, bytes);
    return h;
}

static float frand(ctx *t) {
    t->seed = t->seed * 1664525u + 1013904223u;
    return ((t->seed >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

/* n uniform values in [lo, hi). */
static float *hrand(ctx *t, size_t n, float lo, float hi) {
    float *p = track_host(t, malloc((n ? n : 1) * sizeof *p));
    for (size_t i = 0; i < n; i++) p[i] = lo + (frand(t) + 1.0f) / 2 * (hi - lo);
    return p;
}

static float *hzero(ctx *t, size_t n) {
    return track_host(t, calloc(n ? n : 1, sizeof(float)));
}

static void *hdup(ctx *t, const void *p, size_t bytes) {
    return memcpy(track_host(t, malloc(bytes ? bytes : 1)), p, bytes);
}

/* ---- activations: fp32 or bf16 on both sides ------------------------------------ */

/* Bytes per activation element. */
static size_t asz(const ctx *t) { return t->act == DTYPE_BF16 ? 2 : 4; }

/* f (n floats) as host activations: f itself in fp32, its bf16 rounding
 * in bf16 mode. */
static void *hact(ctx *t, float *f, size_t n) {
    if (t->act == DTYPE_F32) return f;
    uint16_t *h = track_host(t, malloc((n ? n : 1) * sizeof *h));
    bf16_from_floats(h, f, n);
    return h;
}

static void *arand(ctx *t, size_t n, float lo, float hi) { return hact(t, hrand(t, n, lo, hi), n); }

static void *azero(ctx *t, size_t n) { return track_host(t, calloc(n ? n : 1, asz(t))); }

/* Host activations as floats. */
static const float *awiden(ctx *t, const void *h, size_t n) {
    if (t->act == DTYPE_F32) return h;
    float *f = track_host(t, malloc((n ? n : 1) * sizeof *f));
    bf16_to_floats(f, h, n);
    return f;
}

static void done(ctx *t) {
    for (int i = 0; i < t->ndev; i++) t->gpu->ops->free(t->gpu, t->dev[i]);
    for (int i = 0; i < t->nhost; i++) free(t->host[i]);
    t->ndev = t->nhost = 0;
}

/* ---- checks ------------------------------------------------------------------------ */

static void report(ctx *t, int ok, const char *detail, const char *fmt, va_list ap) {
    char what[192];
    vsnprintf(what, sizeof what, fmt, ap);
    t->checks++;
    if (!ok) t->failed++;
    printf("%s %s: %s%s\n", ok ? "ok  " : "FAIL", t->mode, what, detail);
}

/* Both backends returned 0 (a failing call fails its check outright). */
static int calls_ok(ctx *t, int rc_cpu, int rc_gpu, const char *fmt, ...) {
    if (!rc_cpu && !rc_gpu) return 1;
    char detail[96];
    snprintf(detail, sizeof detail, ": returned %d on the CPU, %d on the GPU", rc_cpu, rc_gpu);
    va_list ap;
    va_start(ap, fmt);
    report(t, 0, detail, fmt, ap);
    va_end(ap);
    return 0;
}

/* got against want, both host floats; tol 0 asks for the same values. */
static void compare(ctx *t, const float *got, const float *want, size_t n, double tol,
                    const char *fmt, va_list ap) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)want[i]));
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (isnan(e)) e = INFINITY; /* NaN on either side fails */
        worst = fmax(worst, e);
    }
    double rel = worst / scale;
    char detail[96];
    snprintf(detail, sizeof detail, " (error %.2e, limit %.0e)", rel, tol);
    report(t, tol == 0 ? worst == 0 : rel <= tol, detail, fmt, ap);
}

/* The GPU's d (device memory, fp32) against the CPU's want (host memory). */
static void close_to(ctx *t, const float *d, const float *want, size_t n, double tol,
                     const char *fmt, ...) {
    const float *got = hget(t, d, n * sizeof *got);
    va_list ap;
    va_start(ap, fmt);
    compare(t, got, want, n, tol, fmt, ap);
    va_end(ap);
}

/* The same for activations (fp32 or bf16 on both sides), compared as
 * floats. */
static void close_act(ctx *t, const void *d, const void *want, size_t n, double tol,
                      const char *fmt, ...) {
    const float *got = awiden(t, hget(t, d, n * asz(t)), n);
    const float *w = awiden(t, want, n);
    va_list ap;
    va_start(ap, fmt);
    compare(t, got, w, n, tol, fmt, ap);
    va_end(ap);
}

static void same_ints(ctx *t, const int32_t *d, const int32_t *want, size_t n,
                      const char *fmt, ...) {
    const int32_t *got = hget(t, d, n * sizeof *got);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != want[i];
    char detail[64];
    snprintf(detail, sizeof detail, bad ? " (%zu of %zu differ)" : "", bad, n);
    va_list ap;
    va_start(ap, fmt);
    report(t, bad == 0, detail, fmt, ap);
    va_end(ap);
}

static void check(ctx *t, int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report(t, ok, "", fmt, ap);
    va_end(ap);
}

#define GPU(op, ...) t->gpu->ops->op(t->gpu, __VA_ARGS__)
#define CPU(op, ...) t->cpu->ops->op(t->cpu, __VA_ARGS__)

/* ---- memory ------------------------------------------------------------------------ */

static void test_memory(ctx *t) {
    size_t n = 1000;
    float *zero = hzero(t, n), *src = hrand(t, n, -1, 1);
    float *d = dnew(t, n * sizeof(float));
    close_to(t, d, zero, n, 0, "memory: alloc returns zeroed memory");
    GPU(upload, d, src, n * sizeof(float));
    close_to(t, d, src, n, 0, "memory: upload then download");
    float *d2 = dnew(t, n * sizeof(float));
    GPU(copy, d2, d, n * sizeof(float));
    close_to(t, d2, src, n, 0, "memory: copy");
    GPU(zero, d2, n * sizeof(float));
    close_to(t, d2, zero, n, 0, "memory: zero");
    check(t, t->gpu->ops->sync(t->gpu) == 0, "memory: sync");
    done(t);
}

/* ---- convolution --------------------------------------------------------------------- */

static void test_conv(ctx *t, int n, int h, int c, int k, int r, int stride, int pad) {
    conv_shape s;
    conv_shape_init(&s, n, h, h, c, k, r, stride, pad);
    char name[96];
    snprintf(name, sizeof name, "conv n%d %dx%dx%d -> %d, %dx%d stride %d pad %d", n, h, h, c, k,
             r, r, stride, pad);
    size_t nx = (size_t)n * h * h * c, nw = (size_t)k * c * r * r, ny = (size_t)n * s.p * s.q * k;
    size_t a = asz(t);
    void *x = arand(t, nx, -1, 1), *dy = arand(t, ny, -1, 1);
    float *w = hrand(t, nw, -1, 1), *dw = hzero(t, nw);
    void *y = azero(t, ny), *dx = arand(t, nx, -1, 1);
    void *gx = dput(t, x, nx * a), *gdy = dput(t, dy, ny * a);
    float *gw = dput(t, w, nw * 4), *gdw = dnew(t, nw * 4);
    void *gy = dnew(t, ny * a), *gdx = dput(t, dx, nx * a);
    if (calls_ok(t, CPU(conv_fwd, &s, x, w, y), GPU(conv_fwd, &s, gx, gw, gy), "%s fwd", name))
        close_act(t, gy, y, ny, t->tol, "%s fwd", name);
    /* dx_add first: a shape's first backward chooses its algorithm (by
     * timing them in the bf16 pass), which must not lose what dx held */
    if (calls_ok(t, CPU(conv_bwd, &s, x, w, dy, dx, 1, dw),
                 GPU(conv_bwd, &s, gx, gw, gdy, gdx, 1, gdw), "%s bwd dx_add", name))
        close_act(t, gdx, dx, nx, t->tol, "%s bwd dx_add", name);
    if (calls_ok(t, CPU(conv_bwd, &s, x, w, dy, dx, 0, dw),
                 GPU(conv_bwd, &s, gx, gw, gdy, gdx, 0, gdw), "%s bwd", name)) {
        close_act(t, gdx, dx, nx, t->tol, "%s bwd dx", name);
        close_to(t, gdw, dw, nw, t->tol, "%s bwd dw", name);
    }
    /* Without dx, dw alone; and the same bits as the first time, where the
     * algorithms are cuDNN's deterministic ones (heuristics). */
    float *dw1 = hget(t, gdw, nw * 4);
    GPU(zero, gdw, nw * 4);
    if (calls_ok(t, 0, GPU(conv_bwd, &s, gx, gw, gdy, NULL, 0, gdw), "%s bwd without dx", name))
        close_to(t, gdw, dw1, nw, t->timed ? t->tol : 0, "%s bwd without dx: dw %s", name,
                 t->timed ? "as before" : "deterministic");
    done(t);
}

/* The GPU converts weights into cuDNN's layout (and bf16) once and keeps
 * the copy until they change: every way of changing them (upload, sgd,
 * copy, zero, on a view inside a larger buffer as the model's are) must
 * show in the next convolution and linear layer. A 3x3 kernel over 8
 * channels, so that fp32 needs the transposed copy too. */
static void test_weight_cache(ctx *t) {
    conv_shape s;
    conv_shape_init(&s, 2, 8, 8, 8, 16, 3, 1, 1);
    size_t nx = 2 * 8 * 8 * 8, ny = 2 * 8 * 8 * 16, nw = 16 * 8 * 9, off = 40, np = off + nw;
    size_t a = asz(t);
    void *x = arand(t, nx, -1, 1), *dy = arand(t, ny, -1, 1);
    void *gx = dput(t, x, nx * a), *gdy = dput(t, dy, ny * a);
    void *y = azero(t, ny), *gy = dnew(t, ny * a), *dx = azero(t, nx), *gdx = dnew(t, nx * a);
    float *p = hrand(t, np, -1, 1), *gp = dput(t, p, np * 4), *w = p + off, *gw = gp + off;
    float *dw = hzero(t, nw), *gdw = dnew(t, nw * 4);
#define FWD_SAME(what)                                                                       \
    if (calls_ok(t, CPU(conv_fwd, &s, x, w, y), GPU(conv_fwd, &s, gx, gw, gy),               \
                 "weight cache: conv after %s", what))                                       \
        close_act(t, gy, y, ny, t->tol, "weight cache: conv after %s", what);
    FWD_SAME("the first upload");
    memcpy(w, hrand(t, nw, -1, 1), nw * 4);
    GPU(upload, gw, w, nw * 4);
    FWD_SAME("an upload of new weights");
    float *g = hrand(t, np, -1, 1), *gg = dput(t, g, np * 4);
    float *m = hzero(t, np), *gm = dnew(t, np * 4);
    float lr = 0.5f, *glr = dput(t, &lr, sizeof lr);
    if (calls_ok(t, CPU(sgd, np, p, g, m, NULL, &lr, 0.9f, 0, 0, 1),
                 GPU(sgd, np, gp, gg, gm, NULL, glr, 0.9f, 0, 0, 1), "weight cache: sgd"))
        FWD_SAME("an sgd step");
    /* The backward pass after a step reads the new weights too. */
    if (calls_ok(t, CPU(conv_bwd, &s, x, w, dy, dx, 0, dw),
                 GPU(conv_bwd, &s, gx, gw, gdy, gdx, 0, gdw),
                 "weight cache: conv bwd after an sgd step"))
        close_act(t, gdx, dx, nx, t->tol, "weight cache: conv bwd dx after an sgd step");
    float *w2 = hrand(t, nw, -1, 1), *gw2 = dput(t, w2, nw * 4);
    memcpy(w, w2, nw * 4);
    GPU(copy, gw, gw2, nw * 4);
    FWD_SAME("a device copy");
    memset(w, 0, nw * 4);
    GPU(zero, gw, nw * 4);
    FWD_SAME("zeroing");
    GPU(upload, gp, p, np * 4); /* the whole buffer, the weights among it */
    memcpy(w, hrand(t, nw, -1, 1), nw * 4);
    GPU(upload, gw + nw / 2, w + nw / 2, nw / 2 * 4); /* half of them */
    GPU(upload, gw, w, nw / 2 * 4);                   /* and the other half */
    FWD_SAME("uploads in two halves");
#undef FWD_SAME
    /* The linear layer's bf16 copy of its weight, the same way. */
    int ln = 4, in = 32, out = 10;
    void *lx = arand(t, (size_t)ln * in, -1, 1), *glx = dput(t, lx, (size_t)ln * in * a);
    void *ly = azero(t, (size_t)ln * out), *gly = dnew(t, (size_t)ln * out * a);
    float *lw = hrand(t, (size_t)out * in, -1, 1), *glw = dput(t, lw, (size_t)out * in * 4);
    for (int round = 0; round < 2; round++) {
        if (round) {
            memcpy(lw, hrand(t, (size_t)out * in, -1, 1), (size_t)out * in * 4);
            GPU(upload, glw, lw, (size_t)out * in * 4);
        }
        if (calls_ok(t, CPU(linear_fwd, ln, in, out, lx, lw, NULL, ly),
                     GPU(linear_fwd, ln, in, out, glx, glw, NULL, gly),
                     "weight cache: linear %s", round ? "after new weights" : "first"))
            close_act(t, gly, ly, (size_t)ln * out, t->tol, "weight cache: linear %s",
                      round ? "after new weights" : "first");
    }
    done(t);
}

/* ---- batch norm ---------------------------------------------------------------------------- */

/* Inputs with a per-channel offset, as activations have. */
static void *bn_input(ctx *t, int rows, int c) {
    float *x = hrand(t, (size_t)rows * c, -1, 1);
    for (size_t i = 0; i < (size_t)rows * c; i++) x[i] += (float)(i % c) * 0.25f;
    return hact(t, x, (size_t)rows * c);
}

static void test_bn_forward(ctx *t, int rows, int c) {
    size_t n = (size_t)rows * c, a = asz(t);
    void *x = bn_input(t, rows, c), *gx = dput(t, x, n * a);
    float *sum = hzero(t, c), *sumsq = hzero(t, c), *gsum = dnew(t, c * 4), *gsq = dnew(t, c * 4);
    bn_args ca = {.rows = rows, .c = c, .x = x, .sum = sum, .sumsq = sumsq, .count = rows,
                  .eps = 1e-5f, .momentum = 0.1f};
    bn_args ga = ca;
    ga.x = gx, ga.sum = gsum, ga.sumsq = gsq;
    if (calls_ok(t, CPU(bn_stats, &ca), GPU(bn_stats, &ga), "bn_stats %dx%d", rows, c)) {
        close_to(t, gsum, sum, c, TOL, "bn_stats %dx%d sum", rows, c);
        close_to(t, gsq, sumsq, c, TOL, "bn_stats %dx%d sumsq", rows, c);
    }
    /* finalize from the CPU's sums, so each op is judged on its own */
    float *run = hrand(t, 2 * (size_t)c, 0.5f, 1.5f), *grun = dput(t, run, 2 * c * 4);
    float *mean = hzero(t, c), *inv = hzero(t, c), *gmean = dnew(t, c * 4), *ginv = dnew(t, c * 4);
    ca.mean = mean, ca.invstd = inv, ca.running = run;
    ga.mean = gmean, ga.invstd = ginv, ga.running = grun;
    ga.sum = dput(t, sum, c * 4), ga.sumsq = dput(t, sumsq, c * 4);
    if (calls_ok(t, CPU(bn_finalize, &ca), GPU(bn_finalize, &ga), "bn_finalize c%d", c)) {
        close_to(t, gmean, mean, c, TOL, "bn_finalize c%d mean", c);
        close_to(t, ginv, inv, c, TOL, "bn_finalize c%d invstd", c);
        close_to(t, grun, run, 2 * (size_t)c, TOL, "bn_finalize c%d running", c);
    }
    float *m2 = hzero(t, c), *i2 = hzero(t, c);
    ca.mean = m2, ca.invstd = i2;
    if (calls_ok(t, CPU(bn_running, &ca), GPU(bn_running, &ga), "bn_running c%d", c)) {
        close_to(t, gmean, m2, c, TOL, "bn_running c%d mean", c);
        close_to(t, ginv, i2, c, TOL, "bn_running c%d invstd", c);
    }
    float *gamma = hrand(t, c, 0.5f, 1.5f), *beta = hrand(t, c, -0.5f, 0.5f);
    void *y = azero(t, n), *gy = dnew(t, n * a);
    ca.mean = mean, ca.invstd = inv, ca.gamma = gamma, ca.beta = beta, ca.y = y;
    ga.mean = dput(t, mean, c * 4), ga.invstd = dput(t, inv, c * 4);
    ga.gamma = dput(t, gamma, c * 4), ga.beta = dput(t, beta, c * 4), ga.y = gy;
    /* then with a residual sum folded in (res), as model_fuse_add makes it */
    void *res = arand(t, n, -1, 1), *gres = dput(t, res, n * a);
    for (int k = 0; k < 4; k++) {
        int relu = k & 1, add = k >> 1;
        ca.relu = ga.relu = relu;
        ca.res = add ? res : NULL, ga.res = add ? gres : NULL;
        if (calls_ok(t, CPU(bn_apply, &ca), GPU(bn_apply, &ga), "bn_apply %dx%d relu %d res %d",
                     rows, c, relu, add))
            close_act(t, gy, y, n, t->tol, "bn_apply %dx%d relu %d res %d", rows, c, relu, add);
    }
    done(t);
}

static void test_bn_backward(ctx *t, int rows, int c, int relu) {
    size_t n = (size_t)rows * c, a = asz(t);
    void *x = bn_input(t, rows, c), *y = azero(t, n);
    float *mean = hrand(t, c, -0.1f, 0.1f), *inv = hrand(t, c, 0.5f, 2);
    float *gamma = hrand(t, c, 0.5f, 1.5f), *beta = hrand(t, c, -0.5f, 0.5f);
    bn_args ca = {.rows = rows, .c = c, .x = x, .y = y, .gamma = gamma, .beta = beta,
                  .mean = mean, .invstd = inv, .relu = relu};
    CPU(bn_apply, &ca); /* a real ReLU mask */
    void *dy = arand(t, n, -1, 1), *gdy = dput(t, dy, n * a);
    void *gx = dput(t, x, n * a), *gy = dput(t, y, n * a);
    float *gmean = dput(t, mean, c * 4), *ginv = dput(t, inv, c * 4), *gg = dput(t, gamma, c * 4);
    float *s1 = hzero(t, c), *s2 = hzero(t, c), *gs1 = dnew(t, c * 4), *gs2 = dnew(t, c * 4);
    ca.dy = dy, ca.sum_dy = s1, ca.sum_dy_xhat = s2;
    bn_args ga = {.rows = rows, .c = c, .x = gx, .y = gy, .dy = gdy, .gamma = gg,
                  .mean = gmean, .invstd = ginv, .sum_dy = gs1, .sum_dy_xhat = gs2,
                  .relu = relu};
    if (calls_ok(t, CPU(bn_bwd_reduce, &ca), GPU(bn_bwd_reduce, &ga),
                 "bn_bwd_reduce %dx%d relu %d", rows, c, relu)) {
        close_act(t, gdy, dy, n, 0, "bn_bwd_reduce %dx%d relu %d: dy masked", rows, c, relu);
        close_to(t, gs1, s1, c, TOL, "bn_bwd_reduce %dx%d relu %d: sum_dy", rows, c, relu);
        close_to(t, gs2, s2, c, TOL, "bn_bwd_reduce %dx%d relu %d: sum_dy_xhat", rows, c, relu);
    }
    ga.sum_dy = dput(t, s1, c * 4), ga.sum_dy_xhat = dput(t, s2, c * 4);
    ca.count = ga.count = (double)rows * 2; /* as if another rank had as many rows */
    for (int add_to = 0; add_to <= 1; add_to++) {
        void *dx = arand(t, n, -1, 1), *gdx = dput(t, dx, n * a);
        ca.dx = dx, ga.dx = gdx, ca.add_to = ga.add_to = add_to;
        if (calls_ok(t, CPU(bn_bwd_apply, &ca), GPU(bn_bwd_apply, &ga),
                     "bn_bwd_apply %dx%d add_to %d", rows, c, add_to))
            close_act(t, gdx, dx, n, t->tol, "bn_bwd_apply %dx%d add_to %d", rows, c, add_to);
    }
    done(t);
}

/* The same reduction twice gives the same bits. */
static void test_bn_deterministic(ctx *t, int rows, int c) {
    size_t n = (size_t)rows * c;
    void *gx = dput(t, bn_input(t, rows, c), n * asz(t));
    float *a = dnew(t, c * 4), *b = dnew(t, c * 4), *a2 = dnew(t, c * 4), *b2 = dnew(t, c * 4);
    bn_args first = {.rows = rows, .c = c, .x = gx, .sum = a, .sumsq = b};
    bn_args again = {.rows = rows, .c = c, .x = gx, .sum = a2, .sumsq = b2};
    GPU(bn_stats, &first);
    GPU(bn_stats, &again);
    close_to(t, a2, hget(t, a, c * 4), c, 0, "bn_stats %dx%d deterministic: sum", rows, c);
    close_to(t, b2, hget(t, b, c * 4), c, 0, "bn_stats %dx%d deterministic: sumsq", rows, c);
    done(t);
}

/* ---- elementwise ------------------------------------------------------------------------------ */

/* offset shifts every device pointer by that many elements, off the
 * 16-byte alignment the vectorised kernels want (the scalar path). */
static void test_elementwise(ctx *t, size_t n, size_t offset) {
    size_t a = asz(t), o = offset * a;
    void *ha = arand(t, n, -1, 1), *hb = arand(t, n, -1, 1), *y = azero(t, n);
    char *ga = (char *)dnew(t, (n + offset) * a) + o, *gb = (char *)dnew(t, (n + offset) * a) + o;
    char *gy = (char *)dnew(t, (n + offset) * a) + o;
    GPU(upload, ga, ha, n * a);
    GPU(upload, gb, hb, n * a);
    char name[48];
    snprintf(name, sizeof name, "n%zu%s", n, offset ? " unaligned" : "");
    if (calls_ok(t, CPU(relu_fwd, n, ha, y), GPU(relu_fwd, n, ga, gy), "relu_fwd %s", name))
        close_act(t, gy, y, n, 0, "relu_fwd %s", name);
    void *dx = azero(t, n);
    char *gdx = (char *)dnew(t, (n + offset) * a) + o;
    if (calls_ok(t, CPU(relu_bwd, n, y, hb, dx), GPU(relu_bwd, n, gy, gb, gdx), "relu_bwd %s", name))
        close_act(t, gdx, dx, n, 0, "relu_bwd %s", name);
    void *inplace = hdup(t, ha, n * a);
    char *gin = (char *)dnew(t, (n + offset) * a) + o;
    GPU(upload, gin, ha, n * a);
    CPU(relu_fwd, n, inplace, inplace);
    GPU(relu_fwd, n, gin, gin);
    close_act(t, gin, inplace, n, 0, "relu_fwd %s in place", name);
    for (int relu = 0; relu <= 1; relu++)
        if (calls_ok(t, CPU(add_fwd, n, ha, hb, relu, y), GPU(add_fwd, n, ga, gb, relu, gy),
                     "add_fwd %s relu %d", name, relu))
            close_act(t, gy, y, n, 0, "add_fwd %s relu %d", name, relu);
    void *acc = hdup(t, hb, n * a);
    char *gacc = (char *)dnew(t, (n + offset) * a) + o;
    GPU(upload, gacc, hb, n * a);
    if (calls_ok(t, CPU(accumulate, n, ha, acc), GPU(accumulate, n, ga, gacc), "accumulate %s",
                 name))
        close_act(t, gacc, acc, n, 0, "accumulate %s", name);
    /* scale is fp32 in both modes (parameter gradients) */
    float *f = hrand(t, n, -1, 1), *gf = dput(t, f, n * 4);
    if (calls_ok(t, CPU(scale, n, 0.37f, f), GPU(scale, n, 0.37f, gf), "scale n%zu", n))
        close_to(t, gf, f, n, 0, "scale n%zu", n);
    done(t);
}

/* ---- pooling ------------------------------------------------------------------------------------- */

static void test_maxpool(ctx *t, int n, int h, int c, int r, int stride, int pad) {
    pool_shape s = {.n = n, .h = h, .w = h, .c = c, .r = r, .stride = stride, .pad = pad};
    s.p = s.q = (h + 2 * pad - r) / stride + 1;
    size_t nx = (size_t)n * h * h * c, ny = (size_t)n * s.p * s.q * c, a = asz(t);
    void *x = arand(t, nx, -1, 1), *y = azero(t, ny), *dy = arand(t, ny, -1, 1);
    int32_t *am = track_host(t, calloc(ny, sizeof *am));
    void *gx = dput(t, x, nx * a), *gy = dnew(t, ny * a), *gdy = dput(t, dy, ny * a);
    int32_t *gam = dnew(t, ny * sizeof *gam);
    char name[80];
    snprintf(name, sizeof name, "maxpool n%d %dx%dx%d %dx%d stride %d pad %d", n, h, h, c, r, r,
             stride, pad);
    if (calls_ok(t, CPU(maxpool_fwd, &s, x, y, am), GPU(maxpool_fwd, &s, gx, gy, gam), "%s", name)) {
        close_act(t, gy, y, ny, 0, "%s fwd", name);
        same_ints(t, gam, am, ny, "%s fwd argmax", name);
    }
    void *dx = azero(t, nx), *gdx = dput(t, arand(t, nx, -1, 1), nx * a); /* overwritten */
    gam = dput(t, am, ny * sizeof *am);
    if (calls_ok(t, CPU(maxpool_bwd, &s, dy, am, dx), GPU(maxpool_bwd, &s, gdy, gam, gdx),
                 "%s bwd", name))
        close_act(t, gdx, dx, nx, 0, "%s bwd", name);
    done(t);
}

static void test_avgpool(ctx *t, int n, int hw, int c) {
    size_t nx = (size_t)n * hw * c, ny = (size_t)n * c, a = asz(t);
    void *x = arand(t, nx, -1, 1), *y = azero(t, ny), *dy = arand(t, ny, -1, 1), *dx = azero(t, nx);
    void *gx = dput(t, x, nx * a), *gy = dnew(t, ny * a), *gdy = dput(t, dy, ny * a);
    void *gdx = dnew(t, nx * a);
    if (calls_ok(t, CPU(avgpool_fwd, n, hw, c, x, y), GPU(avgpool_fwd, n, hw, c, gx, gy),
                 "avgpool_fwd n%d hw%d c%d", n, hw, c))
        close_act(t, gy, y, ny, 0, "avgpool_fwd n%d hw%d c%d", n, hw, c);
    if (calls_ok(t, CPU(avgpool_bwd, n, hw, c, dy, dx), GPU(avgpool_bwd, n, hw, c, gdy, gdx),
                 "avgpool_bwd n%d hw%d c%d", n, hw, c))
        close_act(t, gdx, dx, nx, 0, "avgpool_bwd n%d hw%d c%d", n, hw, c);
    done(t);
}

/* ---- linear ------------------------------------------------------------------------------------- */

static void test_linear(ctx *t, int n, int in, int out, int with_bias, int with_dx) {
    char name[80];
    snprintf(name, sizeof name, "linear n%d %d -> %d%s%s", n, in, out,
             with_bias ? " bias" : "", with_dx ? "" : " no dx");
    size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out, a = asz(t);
    void *x = arand(t, nx, -1, 1), *dy = arand(t, ny, -1, 1), *y = azero(t, ny), *dx = azero(t, nx);
    float *w = hrand(t, nw, -1, 1), *bias = hrand(t, out, -1, 1), *dw = hzero(t, nw);
    float *db = hzero(t, out), *gw = dput(t, w, nw * 4), *gbias = dput(t, bias, out * 4);
    void *gx = dput(t, x, nx * a), *gdy = dput(t, dy, ny * a), *gy = dnew(t, ny * a);
    void *gdx = dnew(t, nx * a);
    float *gdw = dnew(t, nw * 4), *gdb = dnew(t, out * 4);
    if (calls_ok(t, CPU(linear_fwd, n, in, out, x, w, with_bias ? bias : NULL, y),
                 GPU(linear_fwd, n, in, out, gx, gw, with_bias ? gbias : NULL, gy), "%s fwd", name))
        close_act(t, gy, y, ny, t->tol, "%s fwd", name);
    if (!calls_ok(t, CPU(linear_bwd, n, in, out, x, w, dy, with_dx ? dx : NULL, dw, with_bias ? db : NULL),
                  GPU(linear_bwd, n, in, out, gx, gw, gdy, with_dx ? gdx : NULL, gdw,
                      with_bias ? gdb : NULL), "%s bwd", name)) {
        done(t);
        return;
    }
    if (with_dx) close_act(t, gdx, dx, nx, t->tol, "%s bwd dx", name);
    close_to(t, gdw, dw, nw, t->tol, "%s bwd dw", name);
    if (with_bias) close_to(t, gdb, db, out, TOL, "%s bwd dbias", name);
    done(t);
}

/* ---- loss and SGD ---------------------------------------------------------------------------------- */

static void test_xent(ctx *t, int n, int classes, float smoothing) {
    size_t nz = (size_t)n * classes, a = asz(t);
    float *zf = hrand(t, nz, -3, 3);
    int32_t *labels = track_host(t, malloc(n * sizeof *labels));
    for (int i = 0; i < n; i++) labels[i] = (int32_t)((frand(t) + 1) / 2 * classes) % classes;
    /* Make some predictions right, so the count is tested. */
    for (int i = 0; i < n; i += 3) zf[(size_t)i * classes + labels[i]] = 4;
    void *z = hact(t, zf, nz), *dz = azero(t, nz);
    void *gz = dput(t, z, nz * a), *gdz = dnew(t, nz * a);
    int32_t *gl = dput(t, labels, n * sizeof *labels);
    backend_loss cl = {0}, gl_host = {.correct = -1};
    backend_loss *gout = dnew(t, sizeof *gout);
    if (!calls_ok(t, CPU(xent, n, classes, z, labels, smoothing, dz, &cl),
                  GPU(xent, n, classes, gz, gl, smoothing, gdz, gout),
                  "xent n%d classes %d smoothing %.1f", n, classes, smoothing)) {
        done(t);
        return;
    }
    close_act(t, gdz, dz, nz, t->tol, "xent n%d classes %d smoothing %.1f: dlogits", n, classes,
              smoothing);
    t->gpu->ops->download(t->gpu, &gl_host, gout, sizeof gl_host);
    double loss = cl.sum, gloss = gl_host.sum;
    int right = cl.correct, gright = gl_host.correct;
    check(t, fabs(gloss - loss) <= 1e-9 * fabs(loss), "xent n%d classes %d: loss %.9g (CPU %.9g)",
          n, classes, gloss, loss);
    check(t, gright == right, "xent n%d classes %d: %d correct (CPU %d)", n, classes, gright, right);
    done(t);
}

typedef struct {
    float momentum, weight_decay;
    int nesterov, first_step, masked;
} sgd_case;

static void test_sgd(ctx *t, size_t n, sgd_case c) {
    float *p = hrand(t, n, -1, 1), *g = hrand(t, n, -1, 1), *m = hrand(t, n, -1, 1);
    uint8_t *mask = track_host(t, malloc(n));
    for (size_t i = 0; i < n; i++) mask[i] = frand(t) > 0;
    float *gp = dput(t, p, n * 4), *gg = dput(t, g, n * 4), *gm = dput(t, m, n * 4);
    uint8_t *gmask = dput(t, mask, n);
    float lr = 0.1f, *glr = dput(t, &lr, sizeof lr);
    char name[96];
    snprintf(name, sizeof name, "sgd momentum %.1f wd %.0e nesterov %d first %d mask %d",
             c.momentum, c.weight_decay, c.nesterov, c.first_step, c.masked);
    if (calls_ok(t, CPU(sgd, n, p, g, m, c.masked ? mask : NULL, &lr, c.momentum, c.weight_decay,
                        c.nesterov, c.first_step),
                 GPU(sgd, n, gp, gg, gm, c.masked ? gmask : NULL, glr, c.momentum,
                     c.weight_decay, c.nesterov, c.first_step), "%s", name)) {
        close_to(t, gp, p, n, TOL, "%s: params", name);
        close_to(t, gm, m, n, TOL, "%s: momentum", name);
    }
    done(t);
}

/* ---- main ---------------------------------------------------------------------------------------- */

static void run_all(ctx *t) {
    test_memory(t);
    test_conv(t, 4, 16, 16, 16, 3, 1, 1);  /* ResNet basic block */
    test_conv(t, 4, 16, 16, 32, 3, 2, 1);  /* downsampling 3x3 */
    test_conv(t, 4, 16, 16, 32, 1, 2, 0);  /* downsampling shortcut */
    test_conv(t, 2, 8, 24, 40, 1, 1, 0);   /* bottleneck 1x1 */
    test_conv(t, 2, 32, 3, 64, 7, 2, 3);   /* ImageNet stem */
    test_conv(t, 8, 32, 3, 16, 3, 1, 1);   /* CIFAR stem */
    test_conv(t, 4, 28, 1, 16, 3, 1, 1);   /* Fashion-MNIST stem */
    test_conv(t, 3, 9, 5, 12, 3, 1, 1);    /* odd channel counts */
    test_conv(t, 2, 11, 7, 13, 3, 2, 1);
    test_weight_cache(t);
    test_bn_forward(t, 256, 16);
    test_bn_forward(t, 1000, 7);
    test_bn_forward(t, 70000, 3);          /* many row blocks */
    test_bn_forward(t, 2 * 7 * 7, 2048);   /* wide */
    for (int relu = 0; relu <= 1; relu++) {
        test_bn_backward(t, 512, 16, relu);
        test_bn_backward(t, 3000, 13, relu);
        test_bn_backward(t, 70000, 5, relu);
    }
    test_bn_deterministic(t, 70000, 24);
    test_elementwise(t, 1, 0);
    test_elementwise(t, 100003, 0);
    test_elementwise(t, 100003, 1);
    test_maxpool(t, 2, 16, 16, 3, 2, 1);
    test_maxpool(t, 3, 9, 5, 3, 2, 1);
    test_maxpool(t, 2, 8, 4, 2, 2, 0);
    test_avgpool(t, 8, 64, 64);
    test_avgpool(t, 3, 49, 10);
    for (int v = 0; v < 4; v++) test_linear(t, 32, 64, 10, v & 1, v & 2);
    test_linear(t, 7, 33, 5, 1, 1);
    test_xent(t, 32, 10, 0.0f);
    test_xent(t, 33, 10, 0.1f);
    test_xent(t, 5, 1000, 0.1f);
    test_sgd(t, 10007, (sgd_case){0.9f, 5e-4f, 0, 1, 1});
    test_sgd(t, 10007, (sgd_case){0.9f, 5e-4f, 1, 0, 1});
    test_sgd(t, 10007, (sgd_case){0.9f, 5e-4f, 0, 0, 0});
    test_sgd(t, 10007, (sgd_case){0.0f, 0.0f, 0, 0, 0});
}

/* One precision: both backends made for it, every test, both freed. 1 if
 * a backend could not be made (a failure), 0 otherwise (also when the GPU
 * is too old for bf16, which is said and skipped). */
static int run_mode(ctx *t, backend_precision p) {
    char err[512];
    backend_opts co = {.kind = BACKEND_CPU, .precision = p};
    /* bf16 chooses algorithms by timing them (--cudnn-benchmark), fp32 by
     * cuDNN's heuristics: both ways of choosing are checked */
    backend_opts go = {.kind = BACKEND_CUDA, .device = 0, .precision = p,
                       .benchmark = p == PRECISION_BF16};
    t->mode = p == PRECISION_BF16 ? "bf16" : "fp32";
    t->tol = p == PRECISION_BF16 ? TOL_BF16 : TOL;
    t->timed = go.benchmark;
    if (backend_create(&co, &t->cpu, err, sizeof err)) {
        fprintf(stderr, "gpu-ops: %s: CPU backend: %s\n", t->mode, err);
        return 1;
    }
    int rc = backend_create(&go, &t->gpu, err, sizeof err);
    if (rc) {
        t->cpu->ops->destroy(t->cpu);
        /* bf16 needs an Ampere or newer GPU: an older one skips it, visibly */
        if (rc == -ENOTSUP && p == PRECISION_BF16) {
            printf("%s: skipped: %s\n", t->mode, err);
            return 0;
        }
        fprintf(stderr, "gpu-ops: %s: CUDA backend: %s\n", t->mode, err);
        return 1;
    }
    t->act = t->gpu->act;
    const char *missing = backend_missing_op(t->gpu->ops);
    check(t, !missing && t->gpu->ops->record_begin,
          "the CUDA backend has every operation of backend.h, recording included (missing: %s)",
          missing ? missing : t->gpu->ops->record_begin ? "none" : "record_begin");
    int mismatch = t->cpu->act != t->gpu->act;
    check(t, !mismatch, "both backends hold activations as %s", t->mode);
    printf("%s: comparing %s with %s (algorithms by %s)\n", t->mode, t->gpu->ops->name,
           t->cpu->ops->name, t->timed ? "timing" : "heuristics");
    if (!mismatch) run_all(t);
    check(t, t->gpu->ops->sync(t->gpu) == 0, "no errors left on the GPU stream");
    t->gpu->ops->destroy(t->gpu);
    t->cpu->ops->destroy(t->cpu);
    t->cpu = t->gpu = NULL;
    return 0;
}

int main(int argc, char **argv) {
    /* Line by line even into a file: a crash or a kill keeps every check
     * printed before it. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    log_init("gpu-ops");
    /* A GPU that CUDA cannot use fails loudly (cuda_probe.c): it must
     * never read as "no GPU" and skip. */
    char why[768];
    int gpus = cuda_device_count(why, sizeof why);
    if (gpus < 0) fprintf(stderr, "gpu-ops: %s\n", why);
    if (argc > 1 && !strcmp(argv[1], "--device-count")) {
        printf("%d\n", gpus);
        return gpus < 0;
    }
    if (gpus < 0) return 1;
    if (gpus == 0) {
        printf("skipped: no GPU\n");
        return 77;
    }
    ctx t = {.seed = 12345};
    int broken = run_mode(&t, PRECISION_FP32);
    broken |= run_mode(&t, PRECISION_BF16);
    printf("%d checks, %d failed\n", t.checks, t.failed);
    return broken || t.failed ? 1 : 0;
}
