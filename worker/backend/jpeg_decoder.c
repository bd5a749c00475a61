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
    d->ops = ops, d->be = be, d->size = size, d->name = ops->name, d->started = -1;
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

int jpeg_decoder_start(jpeg_decoder *d, int n, const jpeg_image *im, unsigned char *ok,
                       char *err, size_t errlen) {
    memset(ok, 0, (size_t)n);
    d->started = -1;
    int rc = n > 0 ? d->ops->start(d, n, im, ok, err, errlen) : 0;
    if (rc == 0) d->started = n;
    return rc;
}

int jpeg_decoder_finish(jpeg_decoder *d, void *x, char *err, size_t errlen) {
    if (d->started < 0) {
        snprintf(err, errlen, "the JPEG decoder was asked to finish a batch it never started");
        return -EINVAL;
    }
    int n = d->started;
    d->started = -1;
    return n > 0 ? d->ops->finish(d, x, err, errlen) : 0;
}

int jpeg_decoder_run(jpeg_decoder *d, int n, const jpeg_image *im, void *x, unsigned char *ok,
                     char *err, size_t errlen) {
    int rc = jpeg_decoder_start(d, n, im, ok, err, errlen);
    return rc ? rc : jpeg_decoder_finish(d, x, err, errlen);
}

void jpeg_decoder_mark(jpeg_decoder *d) {
    if (d->ops->mark) d->ops->mark(d);
}

int jpeg_decoder_wait_mark(jpeg_decoder *d) { return d->ops->wait_mark ? d->ops->wait_mark(d) : 0; }

void jpeg_decoder_destroy(jpeg_decoder *d) {
    if (!d) return;
    d->ops->destroy(d);
    free(d);
}
