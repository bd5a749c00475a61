/* See jpeg_decoder.h: the decoders by backend kind, and what they share. */
#include "worker/backend/jpeg_decoder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    backend_kind kind;
    const jpeg_decoder_ops *ops;
} DECODERS[] = {
    {BACKEND_CPU, &cpu_jpeg_decoder},
    {BACKEND_CPU_REFERENCE, &cpu_jpeg_decoder},
    {BACKEND_CUDA, &cuda_jpeg_decoder},
};

int jpeg_decoder_create(backend *be, int size, const float scale[3], const float shift[3],
                        jpeg_decoder **out, char *err, size_t errlen) {
    *out = NULL;
    const jpeg_decoder_ops *ops = NULL;
    for (size_t i = 0; i < sizeof DECODERS / sizeof *DECODERS; i++)
        if (DECODERS[i].kind == be->kind) ops = DECODERS[i].ops;
    if (!ops) {
        snprintf(err, errlen, "the %s backend has no JPEG decoder: use --decode cpu",
                 be->ops->name);
        return -ENOTSUP;
    }
    jpeg_decoder *d = calloc(1, sizeof *d);
    if (!d) {
        snprintf(err, errlen, "out of memory creating a JPEG decoder");
        return -ENOMEM;
    }
    d->ops = ops, d->be = be, d->size = size, d->name = ops->name;
    memcpy(d->scale, scale, sizeof d->scale);
    memcpy(d->shift, shift, sizeof d->shift);
    int rc = ops->create(d, err, errlen);
    if (rc) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

const char *jpeg_decoder_name(const jpeg_decoder *d) { return d->name; }

int jpeg_decoder_run(jpeg_decoder *d, int n, const jpeg_image *im, void *x, unsigned char *ok,
                     char *err, size_t errlen) {
    memset(ok, 0, (size_t)n);
    return n > 0 ? d->ops->run(d, n, im, x, ok, err, errlen) : 0;
}

void jpeg_decoder_destroy(jpeg_decoder *d) {
    if (!d) return;
    d->ops->destroy(d);
    free(d);
}
