/* CPU kernel tests: oneDNN's convolution and linear layer against the
 * plain-C reference, and every layer's backward against finite differences
 * of its forward (the loss is sum(y * g) for a fixed random g, so dL/dy = g). */
#include <math.h>
#include <stdlib.h>

#include "tests/unit/test.h"
#include "worker/backend/backend.h"
#include "worker/backend/cpu/cpu_kernels.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((*s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

static float *rnd(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand(&seed);
    return p;
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Largest |a-b| relative to the larger of `floor` and the reference's
 * largest magnitude: sums of thousands of products legitimately differ in
 * their last bits when added in another order, so each element is judged
 * against the tensor's scale. */
static double rel_err(const float *a, const float *b, size_t n, double floor) {
    double worst = 0, scale = floor;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
    return worst;
}

static backend *mk(int reference) {
    backend *b = NULL;
    char err[256];
    if (cpu_backend_create(reference, 2, &b, err, sizeof err) != 0) test_fail(__FILE__, __LINE__, "%s", err);
    return b;
}

static void conv_case(int n, int h, int c, int k, int r, int stride, int pad) {
    backend *ref = mk(1), *dn = mk(0);
    conv_shape s;
    conv_shape_init(&s, n, h, h, c, k, r, stride, pad);
    size_t nx = (size_t)n * h * h * c, nw = (size_t)k * c * r * r, ny = (size_t)n * s.p * s.q * k;
    float *x = rnd(nx, 1), *w = rnd(nw, 2), *dy = rnd(ny, 3);
    float *y1 = calloc(ny, 4), *y2 = calloc(ny, 4), *dx1 = calloc(nx, 4), *dx2 = calloc(nx, 4),
          *dw1 = calloc(nw, 4), *dw2 = calloc(nw, 4);
    CHECK_EQ(ref->ops->conv_fwd(ref, &s, x, w, y1), 0);
    CHECK_EQ(dn->ops->conv_fwd(dn, &s, x, w, y2), 0);
    CHECK(rel_err(y2, y1, ny, 1.0) < 1e-5);
    CHECK_EQ(ref->ops->conv_bwd(ref, &s, x, w, dy, dx1, 0, dw1), 0);
    CHECK_EQ(dn->ops->conv_bwd(dn, &s, x, w, dy, dx2, 0, dw2), 0);
    CHECK(rel_err(dx2, dx1, nx, 1.0) < 1e-5);
    CHECK(rel_err(dw2, dw1, nw, 1.0) < 1e-5);
    /* Twice through the cached primitives gives the same bits. */
    CHECK_EQ(dn->ops->conv_bwd(dn, &s, x, w, dy, dx2, 0, dw1), 0);
    CHECK_MEM(dw1, nw * 4, dw2, nw * 4);
    /* dx_add: a second gradient adds to the first, in both backends */
    float *before = malloc(nx * 4);
    memcpy(before, dx1, nx * 4);
    CHECK_EQ(ref->ops->conv_bwd(ref, &s, x, w, dy, dx1, 1, dw1), 0);
    CHECK_EQ(dn->ops->conv_bwd(dn, &s, x, w, dy, dx2, 1, dw2), 0);
    for (size_t i = 0; i < nx; i++) before[i] *= 2;
    CHECK(rel_err(dx1, before, nx, 1.0) < 1e-6);
    CHECK(rel_err(dx2, before, nx, 1.0) < 1e-5);
    free(before);
    free(x), free(w), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dw1), free(dw2);
    ref->ops->destroy(ref);
    dn->ops->destroy(dn);
}

TEST(conv_dnnl_matches_reference_3x3) { conv_case(2, 8, 16, 16, 3, 1, 1); }
TEST(conv_dnnl_matches_reference_strided) { conv_case(3, 9, 8, 32, 3, 2, 1); }
TEST(conv_dnnl_matches_reference_1x1_stride2) { conv_case(2, 8, 16, 32, 1, 2, 0); }
TEST(conv_dnnl_matches_reference_stem_7x7) { conv_case(1, 20, 3, 8, 7, 2, 3); }
TEST(conv_dnnl_matches_reference_one_channel) { conv_case(4, 28, 1, 16, 3, 1, 1); }

TEST(conv_backward_matches_finite_differences) {
    backend *b = mk(1);
    conv_shape s;
    conv_shape_init(&s, 2, 5, 5, 3, 4, 3, 2, 1);
    size_t nx = 2 * 5 * 5 * 3, nw = 4 * 3 * 9, ny = (size_t)2 * s.p * s.q * 4;
    float *x = rnd(nx, 4), *w = rnd(nw, 5), *g = rnd(ny, 6), *y = calloc(ny, 4);
    float *dx = calloc(nx, 4), *dw = calloc(nw, 4);
    b->ops->conv_bwd(b, &s, x, w, g, dx, 0, dw);
    const float eps = 1e-2f;
    for (size_t i = 0; i < nx; i += 7) {
        float keep = x[i];
        x[i] = keep + eps, b->ops->conv_fwd(b, &s, x, w, y);
        double up = dot(y, g, ny);
        x[i] = keep - eps, b->ops->conv_fwd(b, &s, x, w, y);
        double down = dot(y, g, ny);
        x[i] = keep;
        CHECK(fabs((up - down) / (2 * eps) - dx[i]) < 1e-2 * fmax(1, fabs(dx[i])));
    }
    for (size_t i = 0; i < nw; i += 5) {
        float keep = w[i];
        w[i] = keep + eps, b->ops->conv_fwd(b, &s, x, w, y);
        double up = dot(y, g, ny);
        w[i] = keep - eps, b->ops->conv_fwd(b, &s, x, w, y);
        double down = dot(y, g, ny);
        w[i] = keep;
        CHECK(fabs((up - down) / (2 * eps) - dw[i]) < 1e-2 * fmax(1, fabs(dw[i])));
    }
    free(x), free(w), free(g), free(y), free(dx), free(dw);
    b->ops->destroy(b);
}

/* Training-mode batch norm as one function of x, for the check below (no
 * ReLU: its kink would break the finite differences). */
static void bn_forward(backend *b, int rows, int c, const float *x, const float *gamma,
                       const float *beta, float *y, float *mean, float *invstd) {
    float *sum = calloc(c, 4), *sq = calloc(c, 4);
    bn_args a = {.rows = rows, .c = c, .x = x, .y = y, .gamma = gamma, .beta = beta,
                 .mean = mean, .invstd = invstd, .sum = sum, .sumsq = sq};
    b->ops->bn_stats(b, &a);
    for (int j = 0; j < c; j++) {
        mean[j] = sum[j] / rows;
        float var = sq[j] / rows - mean[j] * mean[j];
        invstd[j] = 1.0f / sqrtf(var + 1e-5f);
    }
    b->ops->bn_apply(b, &a);
    free(sum), free(sq);
}

TEST(batchnorm_backward_matches_finite_differences) {
    backend *b = mk(1);
    int rows = 40, c = 3;
    size_t n = (size_t)rows * c;
    float *x = rnd(n, 7), *g = rnd(n, 8), *y = calloc(n, 4), *dx = calloc(n, 4);
    float gamma[3] = {1.5f, -0.7f, 0.9f}, beta[3] = {0.1f, 0.2f, -0.3f};
    float mean[3], invstd[3], sdy[3], sdx[3];
    bn_forward(b, rows, c, x, gamma, beta, y, mean, invstd);
    float *dy = malloc(n * 4);
    memcpy(dy, g, n * 4);
    bn_args a = {.rows = rows, .c = c, .x = x, .y = y, .dy = dy, .dx = dx, .gamma = gamma,
                 .mean = mean, .invstd = invstd, .sum_dy = sdy, .sum_dy_xhat = sdx,
                 .count = rows};
    b->ops->bn_bwd_reduce(b, &a);
    b->ops->bn_bwd_apply(b, &a);
    /* dgamma = sum_dy_xhat, dbeta = sum_dy. */
    const float eps = 1e-3f;
    float m2[3], i2[3];
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + eps, bn_forward(b, rows, c, x, gamma, beta, y, m2, i2);
        double up = dot(y, g, n);
        x[i] = keep - eps, bn_forward(b, rows, c, x, gamma, beta, y, m2, i2);
        double down = dot(y, g, n);
        x[i] = keep;
        CHECK(fabs((up - down) / (2 * eps) - dx[i]) < 2e-2 * fmax(1, fabs(dx[i])));
    }
    for (int j = 0; j < c; j++) {
        float keep = gamma[j];
        gamma[j] = keep + eps, bn_forward(b, rows, c, x, gamma, beta, y, m2, i2);
        double up = dot(y, g, n);
        gamma[j] = keep - eps, bn_forward(b, rows, c, x, gamma, beta, y, m2, i2);
        double down = dot(y, g, n);
        gamma[j] = keep;
        CHECK(fabs((up - down) / (2 * eps) - sdx[j]) < 2e-2 * fmax(1, fabs(sdx[j])));
    }
    free(x), free(g), free(y), free(dx), free(dy);
    b->ops->destroy(b);
}

TEST(batchnorm_fused_relu_masks_the_gradient) {
    backend *b = mk(1);
    int rows = 64, c = 4;
    size_t n = (size_t)rows * c;
    float *x = rnd(n, 21), *y = calloc(n, 4), *dy = rnd(n, 22), *dy0 = malloc(n * 4);
    float gamma[4] = {1, 1, 1, 1}, beta[4] = {0, 0, 0, 0}, mean[4], invstd[4], s1[4], s2[4];
    float sum[4], sq[4];
    bn_args a = {.rows = rows, .c = c, .x = x, .y = y, .dy = dy, .gamma = gamma, .beta = beta,
                 .mean = mean, .invstd = invstd, .sum = sum, .sumsq = sq, .sum_dy = s1,
                 .sum_dy_xhat = s2, .relu = 1};
    b->ops->bn_stats(b, &a);
    for (int j = 0; j < c; j++) {
        mean[j] = sum[j] / rows;
        invstd[j] = 1.0f / sqrtf(sq[j] / rows - mean[j] * mean[j] + 1e-5f);
    }
    b->ops->bn_apply(b, &a);
    memcpy(dy0, dy, n * 4);
    b->ops->bn_bwd_reduce(b, &a);
    int zeros = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(y[i] >= 0);
        CHECK(dy[i] == (y[i] > 0 ? dy0[i] : 0.0f));
        zeros += y[i] == 0;
    }
    CHECK(zeros > 0 && zeros < (int)n);
    free(x), free(y), free(dy), free(dy0);
    b->ops->destroy(b);
}

TEST(linear_dnnl_matches_reference_and_finite_differences) {
    backend *ref = mk(1), *dn = mk(0);
    int n = 5, in = 7, out = 3;
    float *x = rnd(n * in, 9), *w = rnd(out * in, 10), *bias = rnd(out, 11), *g = rnd(n * out, 12);
    float y1[15], y2[15], dx1[35], dx2[35], dw1[21], dw2[21], db1[3], db2[3];
    ref->ops->linear_fwd(ref, n, in, out, x, w, bias, y1);
    dn->ops->linear_fwd(dn, n, in, out, x, w, bias, y2);
    CHECK(rel_err(y2, y1, 15, 1.0) < 1e-5);
    ref->ops->linear_bwd(ref, n, in, out, x, w, g, dx1, dw1, db1);
    dn->ops->linear_bwd(dn, n, in, out, x, w, g, dx2, dw2, db2);
    CHECK(rel_err(dx2, dx1, 35, 1.0) < 1e-5);
    CHECK(rel_err(dw2, dw1, 21, 1.0) < 1e-5);
    CHECK(rel_err(db2, db1, 3, 1.0) < 1e-5);
    const float eps = 1e-2f;
    for (int i = 0; i < out * in; i++) {
        float keep = w[i];
        w[i] = keep + eps, ref->ops->linear_fwd(ref, n, in, out, x, w, bias, y1);
        double up = dot(y1, g, 15);
        w[i] = keep - eps, ref->ops->linear_fwd(ref, n, in, out, x, w, bias, y1);
        double down = dot(y1, g, 15);
        w[i] = keep;
        CHECK(fabs((up - down) / (2 * eps) - dw1[i]) < 1e-3 * fmax(1, fabs(dw1[i])));
    }
    free(x), free(w), free(bias), free(g);
    ref->ops->destroy(ref);
    dn->ops->destroy(dn);
}

TEST(xent_gradient_and_smoothing) {
    backend *b = mk(1);
    int n = 3, k = 4;
    float z[12], dz[12];
    unsigned seed = 13;
    for (int i = 0; i < 12; i++) z[i] = 2 * frand(&seed);
    int32_t labels[3] = {0, 3, 1};
    backend_loss l, up, down;
    b->ops->xent(b, n, k, z, labels, 0.1f, dz, &l);
    const float eps = 1e-3f;
    float dummy[12];
    for (int i = 0; i < 12; i++) {
        float keep = z[i];
        z[i] = keep + eps, b->ops->xent(b, n, k, z, labels, 0.1f, dummy, &up);
        z[i] = keep - eps, b->ops->xent(b, n, k, z, labels, 0.1f, dummy, &down);
        z[i] = keep;
        CHECK(fabs((up.sum - down.sum) / (2 * eps) / n - dz[i]) < 1e-3);
    }
    /* Without smoothing and with certain logits the loss is ~0 and all correct. */
    float sure[8] = {20, 0, 0, 0, 0, 0, 0, 20};
    int32_t l2[2] = {0, 3};
    b->ops->xent(b, 2, 4, sure, l2, 0, dz, &l);
    CHECK(l.sum < 1e-6);
    CHECK_EQ(l.correct, 2);
    b->ops->destroy(b);
}

TEST(maxpool_and_avgpool_backward_route_gradients) {
    backend *b = mk(1);
    pool_shape s = {.n = 2, .h = 5, .w = 5, .c = 3, .r = 3, .stride = 2, .pad = 1};
    s.p = (s.h + 2 * s.pad - s.r) / s.stride + 1;
    s.q = s.p;
    size_t nx = 2 * 5 * 5 * 3, ny = (size_t)2 * s.p * s.q * 3;
    float *x = rnd(nx, 14), *g = rnd(ny, 15), *y = calloc(ny, 4), *dx = calloc(nx, 4);
    int32_t *am = calloc(ny, 4);
    b->ops->maxpool_fwd(b, &s, x, y, am);
    b->ops->maxpool_bwd(b, &s, g, am, dx);
    const float eps = 1e-3f;
    for (size_t i = 0; i < nx; i++) {
        float keep = x[i];
        x[i] = keep + eps, b->ops->maxpool_fwd(b, &s, x, y, am);
        double up = dot(y, g, ny);
        x[i] = keep - eps, b->ops->maxpool_fwd(b, &s, x, y, am);
        double down = dot(y, g, ny);
        x[i] = keep;
        CHECK(fabs((up - down) / (2 * eps) - dx[i]) < 1e-2);
    }
    float ay[6], ag[6] = {1, 2, 3, 4, 5, 6}, adx[2 * 4 * 3];
    b->ops->avgpool_fwd(b, 2, 4, 3, x, ay);
    CHECK(fabs(ay[0] - (x[0] + x[3] + x[6] + x[9]) / 4) < 1e-6);
    b->ops->avgpool_bwd(b, 2, 4, 3, ag, adx);
    CHECK(adx[3 * 3 + 2] == 3.0f / 4);
    free(x), free(g), free(y), free(dx), free(am);
    b->ops->destroy(b);
}

TEST(sgd_follows_pytorch_semantics) {
    backend *b = mk(1);
    float p[2] = {1, 2}, g[2] = {0.5f, -1}, m[2] = {0, 0};
    uint8_t mask[2] = {1, 0};
    float lr = 0.1f; /* read from backend memory */
    /* first step: buf = g + wd*p; p -= lr*buf */
    b->ops->sgd(b, 2, p, g, m, mask, &lr, 0.9f, 0.01f, 0, 1);
    CHECK(fabsf(m[0] - 0.51f) < 1e-6 && fabsf(m[1] + 1) < 1e-6);
    CHECK(fabsf(p[0] - (1 - 0.051f)) < 1e-6 && fabsf(p[1] - 2.1f) < 1e-6);
    /* second step with Nesterov: buf = 0.9*buf + g'; step = g' + 0.9*buf */
    float p1 = p[1];
    b->ops->sgd(b, 2, p, g, m, mask, &lr, 0.9f, 0.01f, 1, 0);
    float buf = 0.9f * -1 + -1;
    CHECK(fabsf(m[1] - buf) < 1e-6);
    CHECK(fabsf(p[1] - (p1 - 0.1f * (-1 + 0.9f * buf))) < 1e-6);
    b->ops->destroy(b);
}

TEST(batchnorm_stats_do_not_depend_on_thread_count) {
    backend *b = mk(1);
    int rows = 5000, c = 16;
    float *x = rnd((size_t)rows * c, 16);
    float s1[16], q1[16], s2[16], q2[16];
    bn_args a1 = {.rows = rows, .c = c, .x = x, .sum = s1, .sumsq = q1};
    bn_args a2 = {.rows = rows, .c = c, .x = x, .sum = s2, .sumsq = q2};
    b->ops->bn_stats(b, &a1);
    backend *one = NULL;
    char err[128];
    CHECK_EQ(cpu_backend_create(1, 1, &one, err, sizeof err), 0);
    one->ops->bn_stats(one, &a2);
    CHECK_MEM(s1, sizeof s1, s2, sizeof s2);
    CHECK_MEM(q1, sizeof q1, q2, sizeof q2);
    free(x);
    b->ops->destroy(b);
    one->ops->destroy(one);
}

/* axpy: y += alpha x, over a length that is no multiple of any vector
 * width (the parameter gradients accumulated over micro-batches). */
TEST(axpy_adds_a_scaled_vector) {
    backend *b = mk(0);
    size_t n = 1003;
    float *x = rnd(n, 5), *y = rnd(n, 6), *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = y[i] + 0.375f * x[i];
    CHECK_EQ(b->ops->axpy(b, n, 0.375f, x, y), 0);
    CHECK_MEM(y, n * sizeof *y, want, n * sizeof *want);
    free(x), free(y), free(want);
    b->ops->destroy(b);
}
