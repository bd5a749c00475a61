/* Model tests: the ResNets' structure (parameter counts as torchvision's),
 * the whole network's gradient against finite differences of its loss,
 * and the oneDNN backend against the reference on a full step. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"
#include "worker/backend/backend.h"
#include "worker/model/arch.h"

static backend *mk(int reference) {
    backend *b = NULL;
    char err[256];
    if (cpu_backend_create(reference, 2, &b, err, sizeof err) != 0) test_fail(__FILE__, __LINE__, "%s", err);
    return b;
}

static model *build(backend *b, const char *arch, int c, int h, int classes) {
    model *m = NULL;
    char err[256];
    model_spec s = {arch, c, h, h, classes, 42, 0, 0};
    int rc = arch_build(b, &s, &m, err, sizeof err);
    if (rc) test_fail(__FILE__, __LINE__, "%s", err);
    return m;
}

TEST(model_parameter_counts_match_torchvision) {
    backend *b = mk(0);
    /* resnet18 for 1000 classes has 11,689,512 parameters in torchvision. */
    model *m = build(b, "resnet18", 3, 64, 1000);
    CHECK_EQ(m->nparam, 11689512);
    CHECK_STR(m->params[0].name, "conv1.weight");
    CHECK_STR(m->params[m->nparams - 1].name, "fc.bias");
    model_destroy(m);
    /* resnet50: 25,557,032. */
    m = build(b, "resnet50", 3, 64, 1000);
    CHECK_EQ(m->nparam, 25557032);
    model_destroy(m);
    /* resnet20 (option B shortcuts) for 10 classes. */
    m = build(b, "resnet20", 3, 32, 10);
    CHECK_EQ(m->nparam, 272474);
    model_destroy(m);
    b->ops->destroy(b);
}

/* The weights drawn later (a run that may resume) and drawn on any number
 * of threads are the weights drawn at once on one: each parameter has its
 * own stream of the seed. */
TEST(model_weights_drawn_later_on_threads_are_the_same) {
    backend *b = mk(0);
    char err[256];
    model *at_once = NULL, *later = NULL;
    omp_set_num_threads(1);
    CHECK_EQ(arch_build(b, &(model_spec){"resnet18", 3, 32, 32, 10, 5, 0, 0}, &at_once, err,
                        sizeof err), 0);
    CHECK_EQ(arch_build(b, &(model_spec){"resnet18", 3, 32, 32, 10, 5, 0, 1}, &later, err,
                        sizeof err), 0);
    size_t n = at_once->nparam;
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    b->ops->download(b, want, at_once->param, n * sizeof *want);
    omp_set_num_threads(4);
    CHECK_EQ(model_draw_weights(later, 5), 0);
    b->ops->download(b, got, later->param, n * sizeof *got);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += memcmp(&want[i], &got[i], sizeof *got) != 0;
    CHECK_EQ(differ, 0);
    double sq = 0;
    for (size_t i = 0; i < n; i++) sq += (double)want[i] * want[i];
    CHECK(sq > 1.0); /* drawn, not left at zero */
    CHECK_EQ(model_draw_weights(later, 6), 0); /* another seed, other weights */
    b->ops->download(b, got, later->param, n * sizeof *got);
    CHECK(memcmp(want, got, n * sizeof *got) != 0);
    free(want);
    free(got);
    model_destroy(at_once);
    model_destroy(later);
    b->ops->destroy(b);
}

TEST(model_refuses_unknown_names_and_tiny_inputs) {
    backend *b = mk(0);
    model *m = NULL;
    char err[256];
    CHECK_EQ(arch_build(b, &(model_spec){"resnet7", 1, 28, 28, 10, 1, 0, 0}, &m, err, sizeof err),
             -EINVAL);
    CHECK(strstr(err, "unknown model 'resnet7' (choose resnet20, ") != NULL);
    CHECK(strstr(err, "resnet101 or resnet152)") != NULL);
    /* arch_name lists the same table (--help reads it). */
    size_t n = 0;
    for (; arch_name(n); n++) CHECK(strstr(err, arch_name(n)) != NULL);
    CHECK_EQ(n, 10);
    CHECK_STR(arch_name(0), "resnet20");
    CHECK_EQ(arch_build(b, &(model_spec){"resnet20", 0, 28, 28, 10, 1, 0, 0}, &m, err, sizeof err),
             -EINVAL);
    CHECK(strstr(err, "input shape") != NULL);
    CHECK_EQ(arch_build(b, &(model_spec){"resnet20", 1, 28, 28, 1, 1, 0, 0}, &m, err, sizeof err),
             -EINVAL);
    CHECK(strstr(err, "classes") != NULL);
    b->ops->destroy(b);
}

/* --model's help is arch.c's table: every name in it, a family to a line;
 * a short buffer is cut, terminated. */
TEST(model_help_lists_the_table) {
    char help[256];
    arch_help(help, sizeof help);
    CHECK_STR(help, "resnet20|32|44|56|110 (CIFAR-style) or\n"
                    "resnet18|34|50|101|152 (ImageNet-style)");
    char cut[12];
    arch_help(cut, sizeof cut);
    CHECK_STR(cut, "resnet20|32");
}

static float *input(int n, int h, int c, unsigned seed) {
    float *x = malloc((size_t)n * h * h * c * sizeof *x);
    for (int i = 0; i < n * h * h * c; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((seed >> 9) & 0xFFFF) / 32768.0f - 1.0f;
    }
    return x;
}

static double loss_of(model *m, const float *x, int n, const int32_t *y) {
    void *logits;
    double loss;
    int correct;
    if (model_set_labels(m, y, n) || model_forward(m, x, n, 1, &logits) || model_loss(m, n))
        test_fail(__FILE__, __LINE__, "forward failed");
    CHECK_EQ(model_read_loss(m, &loss, &correct), 0);
    return loss / n;
}

TEST(model_gradient_matches_finite_differences) {
    backend *b = mk(0);
    model *m = build(b, "resnet20", 2, 8, 5);
    int n = 4;
    float *x = input(n, 8, 2, 3);
    int32_t y[4] = {0, 1, 2, 4};
    void *logits;
    CHECK_EQ(model_set_labels(m, y, n), 0);
    CHECK_EQ(model_forward(m, x, n, 1, &logits), 0);
    CHECK_EQ(model_backward(m, n, 0), 0);
    float *g = malloc(m->nparam * sizeof *g);
    memcpy(g, m->grad, m->nparam * sizeof *g);
    /* A few elements of several tensors: stem, a shortcut, a BN, the head.
     * ReLU kinks make finite differences noisy, more so far from the loss:
     * an element passes if the central difference at any of three step
     * sizes agrees within 3% (or 2e-3 absolute); a wrong gradient (a lost
     * residual path, a missing factor) is far outside that. */
    const char *names[] = {"conv1.weight", "layer2.0.downsample.0.weight", "layer3.2.bn2.weight",
                           "layer1.1.conv2.weight", "fc.weight", "fc.bias"};
    const double steps[] = {1e-3, 3e-4, 1e-4};
    int checked = 0;
    for (int k = 0; k < m->nparams; k++) {
        for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
            if (strcmp(m->params[k].name, names[t]) != 0) continue;
            for (size_t j = 0; j < m->params[k].count; j += m->params[k].count / 2 + 1) {
                float *p = m->param + m->params[k].offset + j;
                double an = g[m->params[k].offset + j], best = 1e9, fd = 0;
                for (int e = 0; e < 3; e++) {
                    float keep = *p;
                    *p = keep + (float)steps[e];
                    double up = loss_of(m, x, n, y);
                    *p = keep - (float)steps[e];
                    double down = loss_of(m, x, n, y);
                    *p = keep;
                    double d = (up - down) / (2 * steps[e]);
                    if (fabs(d - an) < best) best = fabs(d - an), fd = d;
                }
                if (best > fmax(3e-2 * fabs(an), 2e-3))
                    test_fail(__FILE__, __LINE__, "%s[%zu]: finite difference %g, backward %g",
                              m->params[k].name, j, fd, an);
                checked++;
            }
        }
    }
    CHECK(checked >= 10);
    free(g), free(x);
    model_destroy(m);
    b->ops->destroy(b);
}

TEST(model_onednn_step_matches_reference) {
    backend *ref = mk(1), *dn = mk(0);
    model *a = build(ref, "resnet20", 1, 12, 10), *c = build(dn, "resnet20", 1, 12, 10);
    CHECK_MEM(a->param, a->nparam * 4, c->param, c->nparam * 4); /* same seed, same init */
    int n = 8;
    float *x = input(n, 12, 1, 7);
    int32_t y[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    void *la, *lc;
    double l1, l2;
    int c1, c2;
    CHECK_EQ(model_forward(a, x, n, 1, &la), 0);
    CHECK_EQ(model_forward(c, x, n, 1, &lc), 0);
    CHECK_EQ(model_set_labels(a, y, n), 0);
    CHECK_EQ(model_set_labels(c, y, n), 0);
    CHECK_EQ(model_backward(a, n, 0.1f), 0);
    CHECK_EQ(model_backward(c, n, 0.1f), 0);
    CHECK_EQ(model_read_loss(a, &l1, &c1), 0);
    CHECK_EQ(model_read_loss(c, &l2, &c2), 0);
    CHECK(fabs(l1 - l2) < 1e-5 * fabs(l1));
    double worst = 0, scale = 1e-3;
    for (size_t i = 0; i < a->nparam; i++) scale = fmax(scale, fabs(a->grad[i]));
    for (size_t i = 0; i < a->nparam; i++) worst = fmax(worst, fabs(a->grad[i] - c->grad[i]) / scale);
    CHECK(worst < 1e-4);
    free(x);
    model_destroy(a), model_destroy(c);
    ref->ops->destroy(ref), dn->ops->destroy(dn);
}

TEST(model_eval_uses_running_statistics) {
    backend *b = mk(0);
    model *m = build(b, "resnet20", 1, 8, 3);
    int n = 4;
    float *x = input(n, 8, 1, 11);
    void *l;
    float first[12], second[12];
    CHECK_EQ(model_forward(m, x, n, 0, &l), 0);
    memcpy(first, l, sizeof first);
    /* Training forward moves the running statistics, so eval output moves. */
    CHECK_EQ(model_forward(m, x, n, 1, &l), 0);
    CHECK_EQ(model_forward(m, x, n, 0, &l), 0);
    memcpy(second, l, sizeof second);
    CHECK(memcmp(first, second, sizeof first) != 0);
    /* Eval is a pure function of the input: twice gives the same bits. */
    CHECK_EQ(model_forward(m, x, n, 0, &l), 0);
    CHECK_MEM(l, sizeof second, second, sizeof second);
    free(x);
    model_destroy(m);
    b->ops->destroy(b);
}

/* Batches whose activations would pass 2^31 elements are refused before
 * anything is allocated: the backends index them with 32-bit integers. */
TEST(model_batch_limited_by_32_bit_indices) {
    backend *b = mk(0);
    model *m = build(b, "resnet18", 3, 224, 1000);
    /* The largest activation per image: the stem's 112 x 112 x 64. */
    CHECK_EQ(model_max_batch(m), INT32_MAX / (112 * 112 * 64));
    CHECK_EQ(model_set_batch(m, model_max_batch(m) + 1), -EOVERFLOW);
    CHECK_EQ(model_set_batch(m, 2), 0);
    model_destroy(m);
    b->ops->destroy(b);
}

/* A residual sum folded into the batch norm before it (model_fuse_add)
 * computes what the separate sum does: the same logits, loss and
 * gradients, with one operation fewer per block. ResNet-20's blocks fold
 * into their second batch norm (or, where the shape changes, the
 * shortcut's), ResNet-50's into the third or the shortcut's. */
static void fused_matches_separate(const char *arch, int c, int h, int blocks) {
    backend *b = mk(0);
    model *f = NULL, *u = NULL;
    char err[256];
    CHECK_EQ(arch_build(b, &(model_spec){arch, c, h, h, 5, 9, 0, 0}, &f, err, sizeof err), 0);
    CHECK_EQ(arch_build(b, &(model_spec){arch, c, h, h, 5, 9, 1, 0}, &u, err, sizeof err), 0);
    CHECK_EQ(u->nops - f->nops, blocks);
    CHECK_EQ(f->nparam, u->nparam);
    int n = 4;
    float *x = input(n, h, c, 5);
    int32_t y[4] = {0, 1, 4, 2};
    void *lf, *lu;
    double sf, su;
    int cf, cu;
    for (int step = 0; step < 2; step++) { /* the second from updated running stats */
        CHECK_EQ(model_set_labels(f, y, n), 0);
        CHECK_EQ(model_set_labels(u, y, n), 0);
        CHECK_EQ(model_forward(f, x, n, 1, &lf), 0);
        CHECK_EQ(model_forward(u, x, n, 1, &lu), 0);
        CHECK_MEM(lf, (size_t)n * 5 * 4, lu, (size_t)n * 5 * 4);
        CHECK_EQ(model_backward(f, n, 0.1f), 0);
        CHECK_EQ(model_backward(u, n, 0.1f), 0);
        CHECK_EQ(model_read_loss(f, &sf, &cf), 0);
        CHECK_EQ(model_read_loss(u, &su, &cu), 0);
        CHECK(sf == su && cf == cu);
        double worst = 0, scale = 1e-6;
        for (size_t i = 0; i < f->nparam; i++) scale = fmax(scale, fabs(u->grad[i]));
        for (size_t i = 0; i < f->nparam; i++)
            worst = fmax(worst, fabs(f->grad[i] - u->grad[i]) / scale);
        if (worst > 1e-6) test_fail(__FILE__, __LINE__, "%s: gradients differ by %g", arch, worst);
        CHECK_MEM(f->buf, f->nbuf * 4, u->buf, u->nbuf * 4);
    }
    CHECK_EQ(model_forward(f, x, n, 0, &lf), 0); /* evaluation, too */
    CHECK_EQ(model_forward(u, x, n, 0, &lu), 0);
    CHECK_MEM(lf, (size_t)n * 5 * 4, lu, (size_t)n * 5 * 4);
    free(x);
    model_destroy(f), model_destroy(u);
    b->ops->destroy(b);
}

TEST(model_fused_residual_sums_match_separate_ones) {
    fused_matches_separate("resnet20", 2, 8, 9);
    fused_matches_separate("resnet50", 3, 32, 16);
}
