/* The JPEG decoder of the CPU backends (jpeg_decoder.h): the host twin of
 * the GPU's. Each image decoded whole by libjpeg-turbo (accurate integer
 * IDCT, RGB), then every output pixel computed by crop_resize.h's
 * cr_pixel, the function the CUDA kernel computes per thread. Images are
 * spread over OpenMP threads; each writes only its own sample. */
#include <errno.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "common/jpeg_fail.h"
#include "worker/backend/bf16.h"
#include "worker/backend/crop_resize.h"
#include "worker/backend/jpeg_decoder.h"

/* The whole image as RGBX (4 bytes a pixel, rows of w * 4) into *pix
 * (malloc'd); 0, or -1 where libjpeg-turbo cannot decode it. */
static int decode_whole(const jpeg_image *im, unsigned char **pix) {
    struct jpeg_decompress_struct ci;
    struct jpeg_fail e;
    unsigned char *volatile p = NULL;
    jpeg_fail_init(&ci, &e);
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&ci);
        free(p);
        return -1;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, im->data, (unsigned long)im->len);
    jpeg_read_header(&ci, TRUE);
    if ((int)ci.image_width != im->width || (int)ci.image_height != im->height)
        jpeg_fail_exit((j_common_ptr)&ci); /* not the file the box was drawn for */
    ci.out_color_space = JCS_EXT_RGBX;
    ci.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&ci);
    size_t stride = (size_t)im->width * 4;
    p = malloc(stride * (size_t)im->height);
    if (!p) jpeg_fail_exit((j_common_ptr)&ci);
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = p + stride * ci.output_scanline;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    *pix = p;
    return 0;
}

/* The started batch: the host decodes it when it is finished, where its
 * samples go (the CPU backend's work is done as it is queued anyway). */
typedef struct {
    int n;
    const jpeg_image *im;
    unsigned char *ok;
} twin;

static int create(jpeg_decoder *d, char *err, size_t errlen) {
    d->impl = calloc(1, sizeof(twin));
    if (!d->impl) {
        snprintf(err, errlen, "out of memory creating the JPEG decoder");
        return -ENOMEM;
    }
    return 0;
}

static int start(jpeg_decoder *d, int n, const jpeg_image *im, unsigned char *ok, char *err,
                 size_t errlen) {
    (void)err, (void)errlen;
    *(twin *)d->impl = (twin){.n = n, .im = im, .ok = ok};
    return 0;
}

static int finish(jpeg_decoder *d, void *x, char *err, size_t errlen) {
    (void)err, (void)errlen;
    twin *w = d->impl;
    const jpeg_image *im = w->im;
    int size = d->size, bf16 = d->be->act == DTYPE_BF16;
    size_t per = (size_t)size * size * 3;
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < w->n; i++) {
        unsigned char *pix = NULL;
        if (!im[i].data || decode_whole(&im[i], &pix)) continue;
        size_t at = (size_t)i * per;
        for (int oy = 0; oy < size; oy++)
            for (int ox = 0; ox < size; ox++, at += 3) {
                float v[3];
                cr_pixel(pix, im[i].width, im[i].height, (size_t)im[i].width * 4, 4, im[i].box,
                         im[i].flip, size, ox, oy, d->scale, d->shift, v);
                for (int c = 0; c < 3; c++) {
                    if (bf16) ((uint16_t *)x)[at + c] = bf16_from_float(v[c]);
                    else ((float *)x)[at + c] = v[c];
                }
            }
        free(pix);
        w->ok[i] = 1;
    }
    return 0;
}

static void destroy(jpeg_decoder *d) { free(d->impl); }

const jpeg_decoder_ops cpu_jpeg_decoder = {
    .name = "libjpeg-turbo on the host (the GPU decoder's twin)",
    .create = create,
    .start = start,
    .finish = finish,
    .destroy = destroy,
};
