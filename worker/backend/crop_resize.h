/* One output pixel of a decoded image's crop, resampled as PIL's bilinear
 * resize with a box does (the triangle filter, widened by the reduction:
 * antialiasing), mirrored on request, rounded to a byte as PIL's image
 * holds it and then normalised: byte * scale + shift. Shared by the JPEG
 * decoders behind jpeg_decoder.h, the CUDA kernel (CUDA C++) and its host
 * twin (C), so both compute the same expressions in the same types, and
 * the host's checks of the arithmetic hold for the kernel.
 *
 * The weights are computed where they are used (twice per axis: their sum,
 * then the weighted sum), not planned ahead: a GPU thread per pixel has no
 * room for a plan, and a box as wide as a whole photograph needs dozens of
 * taps. The source is 8-bit RGB with `bpp` bytes a pixel (3: nvJPEG's
 * interleaved RGB; 4: libjpeg-turbo's RGBX) in rows of `pitch` bytes. */
#ifndef DDPRUN_WORKER_BACKEND_CROP_RESIZE_H
#define DDPRUN_WORKER_BACKEND_CROP_RESIZE_H

#include <stddef.h>

#ifdef __CUDACC__
#define CR_FN static inline __host__ __device__
#define CR_FLOOR floorf
#define CR_FABS fabsf
#else
#include <math.h>
#define CR_FN static inline
#define CR_FLOOR floorf
#define CR_FABS fabsf
#endif

/* One axis of the resampling for output pixel o of out: the source
 * pixels [*lo, *hi) it reads, its filter's centre and width, and the sum
 * of its weights (1 / the normaliser); the region is [b0, b1) of `in`. */
typedef struct {
    int lo, hi;
    float center, fscale, norm;
} cr_taps;

CR_FN float cr_weight(const cr_taps *t, int x) {
    float d = CR_FABS(((float)x - t->center + 0.5f) / t->fscale);
    return d < 1.0f ? 1.0f - d : 0.0f;
}

CR_FN cr_taps cr_axis(float b0, float b1, int in, int out, int o) {
    cr_taps t;
    float scale = (b1 - b0) / (float)out;
    t.fscale = scale > 1.0f ? scale : 1.0f;
    float support = t.fscale;
    t.center = b0 + ((float)o + 0.5f) * scale;
    /* (int) truncates toward zero, as PIL's does */
    t.lo = (int)(t.center - support + 0.5f);
    t.hi = (int)(t.center + support + 0.5f);
    if (t.lo < 0) t.lo = 0;
    if (t.hi > in) t.hi = in;
    float sum = 0.0f;
    for (int x = t.lo; x < t.hi; x++) sum += cr_weight(&t, x);
    t.norm = sum > 0.0f ? 1.0f / sum : 0.0f;
    return t;
}

/* Output pixel (ox, oy) of a size x size sample from the box
 * (x0, y0)-(x1, y1) of an iw x ih image, mirrored when flip: its three
 * values, normalised, into out. */
CR_FN void cr_pixel(const unsigned char *img, int iw, int ih, size_t pitch, int bpp,
                    const float box[4], int flip, int size, int ox, int oy, const float scale[3],
                    const float shift[3], float out[3]) {
    int x = flip ? size - 1 - ox : ox;
    cr_taps tx = cr_axis(box[0], box[2], iw, size, x);
    cr_taps ty = cr_axis(box[1], box[3], ih, size, oy);
    float acc[3] = {0.0f, 0.0f, 0.0f};
    for (int y = ty.lo; y < ty.hi; y++) {
        float wy = cr_weight(&ty, y) * ty.norm;
        if (wy == 0.0f) continue;
        const unsigned char *row = img + (size_t)y * pitch;
        float r[3] = {0.0f, 0.0f, 0.0f};
        for (int k = tx.lo; k < tx.hi; k++) {
            float wx = cr_weight(&tx, k) * tx.norm;
            const unsigned char *p = row + (size_t)k * bpp;
            r[0] += wx * (float)p[0], r[1] += wx * (float)p[1], r[2] += wx * (float)p[2];
        }
        acc[0] += wy * r[0], acc[1] += wy * r[1], acc[2] += wy * r[2];
    }
    for (int c = 0; c < 3; c++) {
        /* PIL's rounding to a byte: the weights sum to 1, so a value is
         * within rounding of [0, 255]; rounded, then clamped */
        float q = CR_FLOOR(acc[c] + 0.5f);
        q = q < 0.0f ? 0.0f : q > 255.0f ? 255.0f : q;
        out[c] = q * scale[c] + shift[c];
    }
}

#endif
