/* Layers, as PyTorch names them, built from the model runner's blocks
 * (model_add_*): each takes the builder's current activation as its input,
 * registers its parameters under `name` (PyTorch's state_dict names: a
 * convolution's "NAME.weight", batch norm's "NAME.weight", "NAME.bias",
 * "NAME.running_mean", "NAME.running_var") and makes its output the
 * current activation. An architecture (resnet.c) is a sequence of these.
 * Each returns 0, -ENOMEM, or -EDOM when the input is too small for the
 * layer. */
#ifndef DDPRUN_WORKER_MODEL_LAYERS_H
#define DDPRUN_WORKER_MODEL_LAYERS_H

#include "worker/model/model.h"

typedef struct {
    model *m;
    int act; /* the current activation */
} layer_builder;

/* A convolution's geometry: k output channels, r x r kernel. */
typedef struct {
    int k, r, stride, pad;
} layer_conv_geom;

/* Starts at the model's input. */
layer_builder layer_builder_start(model *m);

/* A convolution without bias (Kaiming-initialised, weight decay). */
int layer_conv(layer_builder *b, const char *name, layer_conv_geom g);
/* Batch norm over the channels, ReLU fused after when relu. */
int layer_bn(layer_builder *b, const char *name, int relu);
/* conv -> batch norm (-> ReLU). */
int layer_conv_bn(layer_builder *b, const char *conv, const char *bn, layer_conv_geom g, int relu);
/* residual + shortcut (-> ReLU), two activations of the same shape: folded
 * into the batch norm that made one of them where it can (model_fuse_add). */
int layer_add(layer_builder *b, int residual, int shortcut, int relu);
/* Max pooling over r x r windows. */
int layer_maxpool(layer_builder *b, int r, int stride, int pad);
/* Average pooling over the whole image (to 1 x 1). */
int layer_global_avgpool(layer_builder *b);
/* A fully connected layer of `features` outputs, with bias. */
int layer_linear(layer_builder *b, const char *name, int features);

#endif
