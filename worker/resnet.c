/* The ResNets, by name: CIFAR-style resnet20/32/44/56/110 (He et al. 2016:
 * a 3x3 stem and three stages of 16/32/64 channels, (depth-2)/6 basic
 * blocks each) and ImageNet-style resnet18/34 (basic blocks) and
 * resnet50/101/152 (bottlenecks), as torchvision builds them (7x7 stem and
 * max pooling, stride in the bottleneck's 3x3). Where a block changes shape
 * its shortcut is a 1x1 convolution and batch norm (option B). Parameter
 * names and order are torchvision's, so weights map one to one. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "worker/model.h"

typedef struct {
    model *m;
    int act; /* the current activation */
} builder;

static int add_bn(builder *b, const char *name, int relu) {
    model *m = b->m;
    model_act *x = &m->acts[b->act];
    int c = x->c, shape[1] = {c};
    char n[64];
    model_op op = {.kind = OP_BN, .in = b->act, .relu = relu};
    snprintf(n, sizeof n, "%s.weight", name);
    int rc = model_add_param(m, n, 1, shape, 0, &op.w);
    snprintf(n, sizeof n, "%s.bias", name);
    if (rc == 0) rc = model_add_param(m, n, 1, shape, 0, &op.b);
    /* running_mean then running_var, adjacent (the op finds var at buf + c) */
    snprintf(n, sizeof n, "%s.running_mean", name);
    if (rc == 0) rc = model_add_buffer(m, n, (size_t)c, &op.buf);
    size_t unused;
    snprintf(n, sizeof n, "%s.running_var", name);
    if (rc == 0) rc = model_add_buffer(m, n, (size_t)c, &unused);
    if (rc) return rc;
    op.out = model_add_act(m, x->h, x->w, c);
    if (op.out < 0) return op.out;
    b->act = op.out;
    return model_add_op(m, &op) < 0 ? -ENOMEM : 0;
}

static int add_conv(builder *b, const char *name, int k, int r, int stride, int pad) {
    model *m = b->m;
    model_act *x = &m->acts[b->act];
    int shape[4] = {k, x->c, r, r};
    int h = (x->h + 2 * pad - r) / stride + 1, w = (x->w + 2 * pad - r) / stride + 1;
    if (h < 1 || w < 1) return -EDOM;
    char n[64];
    snprintf(n, sizeof n, "%s.weight", name);
    model_op op = {.kind = OP_CONV, .in = b->act, .k = k, .r = r, .stride = stride, .pad = pad};
    int rc = model_add_param(m, n, 4, shape, 1, &op.w);
    if (rc) return rc;
    op.out = model_add_act(m, h, w, k);
    if (op.out < 0) return op.out;
    b->act = op.out;
    return model_add_op(m, &op) < 0 ? -ENOMEM : 0;
}

/* conv -> batch norm (-> ReLU) */
static int conv_bn(builder *b, const char *conv, const char *bn, int k, int r, int stride,
                   int pad, int relu) {
    int rc = add_conv(b, conv, k, r, stride, pad);
    return rc ? rc : add_bn(b, bn, relu);
}

/* out = relu(residual + shortcut), the shortcut projected when the shape
 * changes. */
static int finish_block(builder *b, const char *prefix, int in, int planes, int stride) {
    model *m = b->m;
    int residual = b->act, shortcut = in;
    char c[64], n[64];
    if (stride != 1 || m->acts[in].c != planes) {
        b->act = in;
        snprintf(c, sizeof c, "%s.downsample.0", prefix);
        snprintf(n, sizeof n, "%s.downsample.1", prefix);
        int rc = conv_bn(b, c, n, planes, 1, stride, 0, 0);
        if (rc) return rc;
        shortcut = b->act;
    }
    model_act *r = &m->acts[residual];
    model_op op = {.kind = OP_ADD, .in = residual, .in2 = shortcut, .relu = 1};
    op.out = model_add_act(m, r->h, r->w, r->c);
    if (op.out < 0) return op.out;
    b->act = op.out;
    return model_add_op(m, &op) < 0 ? -ENOMEM : 0;
}

static int basic_block(builder *b, const char *prefix, int planes, int stride) {
    int in = b->act, rc;
    char c[64], n[64];
    snprintf(c, sizeof c, "%s.conv1", prefix), snprintf(n, sizeof n, "%s.bn1", prefix);
    if ((rc = conv_bn(b, c, n, planes, 3, stride, 1, 1))) return rc;
    snprintf(c, sizeof c, "%s.conv2", prefix), snprintf(n, sizeof n, "%s.bn2", prefix);
    if ((rc = conv_bn(b, c, n, planes, 3, 1, 1, 0))) return rc;
    return finish_block(b, prefix, in, planes, stride);
}

static int bottleneck(builder *b, const char *prefix, int planes, int stride) {
    int in = b->act, rc;
    char c[64], n[64];
    snprintf(c, sizeof c, "%s.conv1", prefix), snprintf(n, sizeof n, "%s.bn1", prefix);
    if ((rc = conv_bn(b, c, n, planes, 1, 1, 0, 1))) return rc;
    snprintf(c, sizeof c, "%s.conv2", prefix), snprintf(n, sizeof n, "%s.bn2", prefix);
    if ((rc = conv_bn(b, c, n, planes, 3, stride, 1, 1))) return rc;
    snprintf(c, sizeof c, "%s.conv3", prefix), snprintf(n, sizeof n, "%s.bn3", prefix);
    if ((rc = conv_bn(b, c, n, planes * 4, 1, 1, 0, 0))) return rc;
    return finish_block(b, prefix, in, planes * 4, stride);
}

static int stages(builder *b, int nstages, const int *blocks, const int *planes, int bottle) {
    for (int s = 0; s < nstages; s++) {
        for (int i = 0; i < blocks[s]; i++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d", s + 1, i);
            int stride = i == 0 && s > 0 ? 2 : 1;
            int rc = bottle ? bottleneck(b, prefix, planes[s], stride)
                            : basic_block(b, prefix, planes[s], stride);
            if (rc) return rc;
        }
    }
    return 0;
}

static int head(builder *b) {
    model *m = b->m;
    model_act *x = &m->acts[b->act];
    model_op pool = {.kind = OP_AVGPOOL, .in = b->act};
    pool.out = model_add_act(m, 1, 1, x->c);
    if (pool.out < 0 || model_add_op(m, &pool) < 0) return -ENOMEM;
    int feat = m->acts[pool.out].c, wshape[2] = {m->classes, feat}, bshape[1] = {m->classes};
    model_op fc = {.kind = OP_LINEAR, .in = pool.out, .features = m->classes};
    int rc = model_add_param(m, "fc.weight", 2, wshape, 1, &fc.w);
    if (rc == 0) rc = model_add_param(m, "fc.bias", 1, bshape, 0, &fc.b);
    if (rc) return rc;
    fc.out = model_add_act(m, 1, 1, m->classes);
    return fc.out < 0 || model_add_op(m, &fc) < 0 ? -ENOMEM : 0;
}

static int cifar_resnet(builder *b, int depth) {
    int n = (depth - 2) / 6, blocks[3] = {n, n, n}, planes[3] = {16, 32, 64};
    int rc = conv_bn(b, "conv1", "bn1", 16, 3, 1, 1, 1);
    if (rc == 0) rc = stages(b, 3, blocks, planes, 0);
    return rc ? rc : head(b);
}

static int imagenet_resnet(builder *b, const int *blocks, int bottle) {
    int planes[4] = {64, 128, 256, 512};
    int rc = conv_bn(b, "conv1", "bn1", 64, 7, 2, 3, 1);
    if (rc) return rc;
    model *m = b->m;
    model_act *x = &m->acts[b->act];
    model_op pool = {.kind = OP_MAXPOOL, .in = b->act, .r = 3, .stride = 2, .pad = 1};
    pool.out = model_add_act(m, (x->h - 1) / 2 + 1, (x->w - 1) / 2 + 1, x->c);
    if (pool.out < 0 || model_add_op(m, &pool) < 0) return -ENOMEM;
    b->act = pool.out;
    rc = stages(b, 4, blocks, planes, bottle);
    return rc ? rc : head(b);
}

int resnet_build(model *m, const char *arch, char *err, size_t errlen) {
    static const struct {
        const char *name;
        int depth, cifar, bottle, blocks[4];
    } table[] = {
        {"resnet20", 20, 1, 0, {0}},   {"resnet32", 32, 1, 0, {0}},
        {"resnet44", 44, 1, 0, {0}},   {"resnet56", 56, 1, 0, {0}},
        {"resnet110", 110, 1, 0, {0}}, {"resnet18", 18, 0, 0, {2, 2, 2, 2}},
        {"resnet34", 34, 0, 0, {3, 4, 6, 3}}, {"resnet50", 50, 0, 1, {3, 4, 6, 3}},
        {"resnet101", 101, 0, 1, {3, 4, 23, 3}}, {"resnet152", 152, 0, 1, {3, 8, 36, 3}},
    };
    builder b = {.m = m};
    b.act = model_add_act(m, m->in_h, m->in_w, m->in_c);
    if (b.act < 0) return -ENOMEM;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(table[i].name, arch) != 0) continue;
        int rc = table[i].cifar ? cifar_resnet(&b, table[i].depth)
                                : imagenet_resnet(&b, table[i].blocks, table[i].bottle);
        if (rc == -EDOM)
            snprintf(err, errlen, "--model %s: the input %dx%dx%d is too small for it", arch,
                     m->in_c, m->in_h, m->in_w);
        else if (rc)
            snprintf(err, errlen, "--model %s: cannot build it: %s", arch, strerror(-rc));
        return rc == -EDOM ? -EINVAL : rc;
    }
    snprintf(err, errlen,
             "--model: unknown model '%s' (choose resnet20, resnet32, resnet44, resnet56, "
             "resnet110, resnet18, resnet34, resnet50, resnet101 or resnet152)",
             arch);
    return -EINVAL;
}
