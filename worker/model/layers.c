/* See layers.h. */
#include "worker/model/layers.h"

#include <errno.h>
#include <stdio.h>

/* Adds op with a new output activation of the given shape and makes it the
 * current one. */
static int emit(layer_builder *b, model_op *op, int h, int w, int c) {
    if (h < 1 || w < 1) return -EDOM;
    op->out = model_add_act(b->m, h, w, c);
    if (op->out < 0 || model_add_op(b->m, op) < 0) return -ENOMEM;
    b->act = op->out;
    return 0;
}

/* Registers the parameter "prefix.leaf". */
static int param(layer_builder *b, const char *prefix, const char *leaf, model_param p,
                 size_t *offset) {
    snprintf(p.name, sizeof p.name, "%s.%s", prefix, leaf);
    return model_add_param(b->m, &p, offset);
}

layer_builder layer_builder_start(model *m) { return (layer_builder){.m = m, .act = 0}; }

int layer_conv(layer_builder *b, const char *name, layer_conv_geom g) {
    const model_act x = b->m->acts[b->act];
    model_op op = {.kind = OP_CONV, .in = b->act, .k = g.k, .r = g.r, .stride = g.stride,
                   .pad = g.pad};
    model_param w = {.ndim = 4, .shape = {g.k, x.c, g.r, g.r}, .decay = 1,
                     .init = INIT_KAIMING_FAN_OUT};
    int h = (x.h + 2 * g.pad - g.r) / g.stride + 1, wd = (x.w + 2 * g.pad - g.r) / g.stride + 1;
    if (h < 1 || wd < 1) return -EDOM;
    int rc = param(b, name, "weight", w, &op.w);
    return rc ? rc : emit(b, &op, h, wd, g.k);
}

int layer_bn(layer_builder *b, const char *name, int relu) {
    const model_act x = b->m->acts[b->act];
    model_op op = {.kind = OP_BN, .in = b->act, .relu = relu};
    model_param gamma = {.ndim = 1, .shape = {x.c}, .init = INIT_ONES};
    model_param beta = {.ndim = 1, .shape = {x.c}, .init = INIT_ZEROS};
    char n[64];
    size_t var;
    int rc = param(b, name, "weight", gamma, &op.w);
    if (rc == 0) rc = param(b, name, "bias", beta, &op.b);
    /* running_mean then running_var, adjacent (the op finds var at buf + c) */
    snprintf(n, sizeof n, "%s.running_mean", name);
    if (rc == 0) rc = model_add_buffer(b->m, n, (size_t)x.c, 0.0f, &op.buf);
    snprintf(n, sizeof n, "%s.running_var", name);
    if (rc == 0) rc = model_add_buffer(b->m, n, (size_t)x.c, 1.0f, &var);
    return rc ? rc : emit(b, &op, x.h, x.w, x.c);
}

int layer_conv_bn(layer_builder *b, const char *conv, const char *bn, layer_conv_geom g,
                  int relu) {
    int rc = layer_conv(b, conv, g);
    return rc ? rc : layer_bn(b, bn, relu);
}

int layer_add(layer_builder *b, int residual, int shortcut, int relu) {
    int fused = model_fuse_add(b->m, residual, shortcut, relu);
    if (fused >= 0) {
        b->act = fused;
        return 0;
    }
    const model_act r = b->m->acts[residual];
    model_op op = {.kind = OP_ADD, .in = residual, .in2 = shortcut, .relu = relu};
    return emit(b, &op, r.h, r.w, r.c);
}

int layer_maxpool(layer_builder *b, int r, int stride, int pad) {
    const model_act x = b->m->acts[b->act];
    model_op op = {.kind = OP_MAXPOOL, .in = b->act, .r = r, .stride = stride, .pad = pad};
    return emit(b, &op, (x.h + 2 * pad - r) / stride + 1, (x.w + 2 * pad - r) / stride + 1, x.c);
}

int layer_global_avgpool(layer_builder *b) {
    model_op op = {.kind = OP_AVGPOOL, .in = b->act};
    return emit(b, &op, 1, 1, b->m->acts[b->act].c);
}

int layer_linear(layer_builder *b, const char *name, int features) {
    const model_act x = b->m->acts[b->act];
    int in = x.h * x.w * x.c;
    model_op op = {.kind = OP_LINEAR, .in = b->act, .features = features};
    model_param w = {.ndim = 2, .shape = {features, in}, .decay = 1,
                     .init = INIT_UNIFORM_FAN_IN, .fan_in = in};
    model_param bias = {.ndim = 1, .shape = {features}, .init = INIT_UNIFORM_FAN_IN, .fan_in = in};
    int rc = param(b, name, "weight", w, &op.w);
    if (rc == 0) rc = param(b, name, "bias", bias, &op.b);
    return rc ? rc : emit(b, &op, 1, 1, features);
}
