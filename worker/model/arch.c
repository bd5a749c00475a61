/* See arch.h. */
#include "worker/model/arch.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "worker/model/resnet.h"

/* A family's architectures are adjacent; its name is what --help says of
 * them. */
static const struct {
    const char *name;
    int (*build)(layer_builder *b, int variant);
    int variant;
    const char *family;
} archs[] = {
    {"resnet20", resnet_cifar, 20, "CIFAR-style"},
    {"resnet32", resnet_cifar, 32, "CIFAR-style"},
    {"resnet44", resnet_cifar, 44, "CIFAR-style"},
    {"resnet56", resnet_cifar, 56, "CIFAR-style"},
    {"resnet110", resnet_cifar, 110, "CIFAR-style"},
    {"resnet18", resnet_imagenet, 18, "ImageNet-style"},
    {"resnet34", resnet_imagenet, 34, "ImageNet-style"},
    {"resnet50", resnet_imagenet, 50, "ImageNet-style"},
    {"resnet101", resnet_imagenet, 101, "ImageNet-style"},
    {"resnet152", resnet_imagenet, 152, "ImageNet-style"},
};
#define NARCHS (sizeof archs / sizeof archs[0])

const char *arch_name(size_t i) { return i < NARCHS ? archs[i].name : NULL; }

static void unknown(const char *name, char *err, size_t errlen) {
    int n = snprintf(err, errlen, "--model: unknown model '%s' (choose ", name);
    for (size_t i = 0; i < NARCHS && n >= 0 && (size_t)n < errlen; i++)
        n += snprintf(err + n, errlen - (size_t)n, "%s%s", archs[i].name,
                      i + 2 == NARCHS ? " or " : i + 1 == NARCHS ? ")" : ", ");
}

/* Appends to buf, which holds *len characters, cutting at size. */
__attribute__((format(printf, 4, 5))) static void append(char *buf, size_t size, size_t *len,
                                                         const char *fmt, ...) {
    if (*len >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n > 0) *len = *len + (size_t)n < size ? *len + (size_t)n : size;
}

/* Where entry i's family starts. */
static size_t family_start(size_t i) {
    while (i > 0 && strcmp(archs[i - 1].family, archs[i].family) == 0) i--;
    return i;
}

void arch_help(char *buf, size_t size) {
    size_t len = 0;
    if (size) buf[0] = 0;
    for (size_t i = 0; i < NARCHS; i++) {
        size_t first = family_start(i);
        /* The letters before the first name's first digit ("resnet"). */
        size_t stem = strcspn(archs[first].name, "0123456789");
        const char *name = archs[i].name;
        if (i != first && strncmp(name, archs[first].name, stem) == 0) name += stem;
        append(buf, size, &len, "%s%s", i == first ? "" : "|", name);
        if (i + 1 == NARCHS || family_start(i + 1) == i + 1)
            append(buf, size, &len, " (%s)%s", archs[i].family, i + 1 < NARCHS ? " or\n" : "");
    }
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
    if (rc == 0) rc = model_finish(m);
    if (rc == 0 && !spec->undrawn) rc = model_draw_weights(m, spec->seed);
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
