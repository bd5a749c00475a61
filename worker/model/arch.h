/* The architectures by name: --model's names mapped to the functions that
 * build them. A new architecture is one new file (a build function over
 * layers.h) and its lines in arch.c's table. */
#ifndef DDPRUN_WORKER_MODEL_ARCH_H
#define DDPRUN_WORKER_MODEL_ARCH_H

#include <stddef.h>

#include "worker/model/model.h"

/* Builds the model spec->arch names ("resnet20", "resnet50", ...) for
 * spec's input and classes, with weights initialised from spec->seed
 * (unless spec->undrawn: then model_draw_weights draws them).
 * -EINVAL with a message naming the problem for an unknown name, a bad
 * shape or an input too small for the architecture. */
int arch_build(backend *be, const model_spec *spec, model **out, char *err, size_t errlen);

/* The architectures' names (--model's), in the table's order: the i-th,
 * or NULL past the last. */
const char *arch_name(size_t i);

/* The names arch_build knows, for --model's help, from the same table:
 * one family to a line, the names after its first without the letters
 * they share ("resnet20|32|44|56|110 (CIFAR-style) or\nresnet18|34|...").
 * Written into buf, cut to size and terminated (when size > 0). */
void arch_help(char *buf, size_t size);

#endif
