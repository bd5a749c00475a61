/* See arch.h. */
#include "worker/model/arch.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "worker/model/resnet.h"

static const struct {
    const char *name;
    int (*build)(layer_builder *b, int variant);
    int variant;
} archs[] = {
    {"resnet20", resnet_cifar, 20},       {"resnet32", resnet_cifar, 32},
    {"resnet44", resnet_cifar, 44},       {"resnet56", resnet_cifar, 56},
    {"resnet110", resnet_cifar, 110},     {"resnet18", resnet_imagenet, 18},
    {"resnet34", resnet_imagenet, 34},    {"resnet50", resnet_imagenet, 50},
    {"resnet101", resnet_imagenet, 101},  {"resnet152", resnet_imagenet, 152},
};
#define NARCHS (sizeof archs / sizeof archs[0])

const char *arch_name(size_t i) { return i < NARCHS ? archs[i].name : NULL; }

static void unknown(const char *name, char *err, size_t errlen) {
    int n = snprintf(err, errlen, "--model: unknown model '%s' (choose ", name);
    for (size_t i = 0; i < NARCHS && n >= 0 && (size_t)n < errlen; i++)
        n += snprintf(err + n, errlen - (size_t)n, "%s%s", archs[i].name,
                      i + 2 == NARCHS ? " or " : i + 1 == NARCHS ? ")" : ", ");
}

int arch_build(backend *be, const model_spec *spec, model **out, char *err, size_t errlen) {
    *out = NULL;
    size_t i = 0;
    while (i < NARCHS && strcmp(archs[i].name, spec->arch) != 0) i++;
    if (i == NARCHS) {
        unknown(spec->arch, err, errlen);
        return -EINVAL;
    }
    model *m;
    int rc = model_new(be, spec, &m, err, errlen);
    if (rc) return rc;
    layer_builder b = layer_builder_start(m);
    rc = archs[i].build(&b, archs[i].variant);
    if (rc == 0) rc = model_finish(m, spec->seed);
    if (rc == -EDOM)
        snprintf(err, errlen, "--model %s: the input %dx%dx%d is too small for it", spec->arch,
                 spec->in_c, spec->in_h, spec->in_w);
    else if (rc)
        snprintf(err, errlen, "--model %s: cannot build it: %s", spec->arch, strerror(-rc));
    if (rc) {
        model_destroy(m);
        return rc == -EDOM ? -EINVAL : rc;
    }
    *out = m;
    return 0;
}
