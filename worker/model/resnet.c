/* The ResNets: CIFAR-style resnet20/32/44/56/110 (He et al. 2016: a 3x3
 * stem and three stages of 16/32/64 channels, (depth-2)/6 basic blocks
 * each) and ImageNet-style resnet18/34 (basic blocks) and resnet50/101/152
 * (bottlenecks), as torchvision builds them (7x7 stem and max pooling,
 * stride in the bottleneck's 3x3). Where a block changes shape its shortcut
 * is a 1x1 convolution and batch norm (option B). Parameter names and order
 * are torchvision's, so weights map one to one. */
#include "worker/model/resnet.h"

#include <errno.h>
#include <stdio.h>

/* conv -> bn (-> ReLU) named PREFIX.convI and PREFIX.bnI. */
static int unit(layer_builder *b, const char *prefix, int i, layer_conv_geom g, int relu) {
    char c[64], n[64];
    snprintf(c, sizeof c, "%s.conv%d", prefix, i);
    snprintf(n, sizeof n, "%s.bn%d", prefix, i);
    return layer_conv_bn(b, c, n, g, relu);
}

/* out = relu(residual + shortcut), the shortcut projected when the shape
 * changes. */
static int finish_block(layer_builder *b, const char *prefix, int in, int planes, int stride) {
    int residual = b->act, shortcut = in;
    if (stride != 1 || b->m->acts[in].c != planes) {
        char c[64], n[64];
        snprintf(c, sizeof c, "%s.downsample.0", prefix);
        snprintf(n, sizeof n, "%s.downsample.1", prefix);
        b->act = in;
        int rc = layer_conv_bn(b, c, n, (layer_conv_geom){planes, 1, stride, 0}, 0);
        if (rc) return rc;
        shortcut = b->act;
    }
    return layer_add(b, residual, shortcut, 1);
}

static int basic_block(layer_builder *b, const char *prefix, int planes, int stride) {
    int in = b->act, rc;
    if ((rc = unit(b, prefix, 1, (layer_conv_geom){planes, 3, stride, 1}, 1))) return rc;
    if ((rc = unit(b, prefix, 2, (layer_conv_geom){planes, 3, 1, 1}, 0))) return rc;
    return finish_block(b, prefix, in, planes, stride);
}

static int bottleneck(layer_builder *b, const char *prefix, int planes, int stride) {
    int in = b->act, rc;
    if ((rc = unit(b, prefix, 1, (layer_conv_geom){planes, 1, 1, 0}, 1))) return rc;
    if ((rc = unit(b, prefix, 2, (layer_conv_geom){planes, 3, stride, 1}, 1))) return rc;
    if ((rc = unit(b, prefix, 3, (layer_conv_geom){planes * 4, 1, 1, 0}, 0))) return rc;
    return finish_block(b, prefix, in, planes * 4, stride);
}

/* layer1 .. layerN: blocks[s] blocks of planes[s], the first of each stage
 * after the first with stride 2. */
static int stages(layer_builder *b, int nstages, const int *blocks, const int *planes,
                  int bottle) {
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

/* Global average pooling and the classifier "fc". */
static int head(layer_builder *b) {
    int rc = layer_global_avgpool(b);
    return rc ? rc : layer_linear(b, "fc", b->m->classes);
}

int resnet_cifar(layer_builder *b, int depth) {
    if (depth < 8 || (depth - 2) % 6) return -EINVAL;
    int n = (depth - 2) / 6, blocks[3] = {n, n, n}, planes[3] = {16, 32, 64};
    int rc = layer_conv_bn(b, "conv1", "bn1", (layer_conv_geom){16, 3, 1, 1}, 1);
    if (rc == 0) rc = stages(b, 3, blocks, planes, 0);
    return rc ? rc : head(b);
}

int resnet_imagenet(layer_builder *b, int depth) {
    static const struct {
        int depth, bottle, blocks[4];
    } table[] = {
        {18, 0, {2, 2, 2, 2}},  {34, 0, {3, 4, 6, 3}},  {50, 1, {3, 4, 6, 3}},
        {101, 1, {3, 4, 23, 3}}, {152, 1, {3, 8, 36, 3}},
    };
    static const int planes[4] = {64, 128, 256, 512};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (table[i].depth != depth) continue;
        int rc = layer_conv_bn(b, "conv1", "bn1", (layer_conv_geom){64, 7, 2, 3}, 1);
        if (rc == 0) rc = layer_maxpool(b, 3, 2, 1);
        if (rc == 0) rc = stages(b, 4, table[i].blocks, planes, table[i].bottle);
        return rc ? rc : head(b);
    }
    return -EINVAL;
}
