/* The ResNets, built from layers.h. arch.c lists them by name. */
#ifndef DDPRUN_WORKER_MODEL_RESNET_H
#define DDPRUN_WORKER_MODEL_RESNET_H

#include "worker/model/layers.h"

/* CIFAR-style ResNet of `depth` (6n+2: 20, 32, 44, 56, 110): 16/32/64
 * channels. -EINVAL for another depth. */
int resnet_cifar(layer_builder *b, int depth);
/* torchvision's ResNet of `depth` (18, 34, 50, 101, 152). -EINVAL for
 * another depth. */
int resnet_imagenet(layer_builder *b, int depth);

#endif
