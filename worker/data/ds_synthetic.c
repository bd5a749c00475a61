/* Deterministic synthetic data, made per sample on demand and held
 * nowhere: sample i is drawn from rng_seed(seed, stream, i), N(0, 1)
 * pixels plus an offset on a band of rows chosen by the label, so that a
 * model can learn it. Any shape and class count (--input-shape,
 * --classes, --synthetic-size); not normalised. */
#include "worker/data/ds_format.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "common/rng.h"

/* The second seed word of the samples' streams. The test split uses its
 * own word so that it is not a copy of the training split. */
#define SYNTH_STREAM_TRAIN 0xDA7Aull
#define SYNTH_STREAM_TEST 0xDA7Bull
/* What the images add to their class's band: enough for a model to
 * learn, small enough that the noise still matters. */
#define SYNTH_OFFSET 0.5f

typedef struct {
    int c, h, w, classes;
    uint64_t seed;
    uint64_t stream; /* SYNTH_STREAM_TRAIN or _TEST */
} synthetic;

static int synthetic_open(const dataset_format *f, const dataset_opts *o, void **state,
                          ds_info *info, char *err, size_t errlen) {
    (void)f;
    int c = o->c ? o->c : 3, h = o->h ? o->h : 32, w = o->w ? o->w : 32;
    if (c < 0 || h < 0 || w < 0 || (int64_t)c * h * w > (1 << 26)) {
        return err_set(err, errlen, -EINVAL,
                       "synthetic data: input shape %dx%dx%d is not valid (--input-shape "
                       "CxHxW, positive, at most 2^26 values)", o->c, o->h, o->w);
    }
    if (o->classes < 0 || o->size < 0) {
        return err_set(err, errlen, -EINVAL,
                       "synthetic data: classes (%d) and size (%lld) must not be "
                       "negative (0 picks the default)",
                       o->classes, (long long)o->size);
    }
    synthetic *s = malloc(sizeof *s);
    if (!s) {
        return err_set(err, errlen, -ENOMEM, "out of memory opening a data set");
    }
    *s = (synthetic){.c = c, .h = h, .w = w, .classes = o->classes ? o->classes : 10,
                     .seed = o->seed, .stream = o->train ? SYNTH_STREAM_TRAIN : SYNTH_STREAM_TEST};
    *info = (ds_info){.n = o->size ? o->size : (o->train ? 60000 : 10000), .c = c, .h = h,
                      .w = w, .classes = s->classes, .pixels = DS_FLOATS};
    *state = s;
    return 0;
}

/* Fills x with n standard normals. Box-Muller gives two per draw (the
 * cosine and the sine half), both used here because a 3x224x224 sample
 * needs 150528 of them; 24 bits each for u1 and u2 are plenty for pixels. */
static void fill_normal(rng_t *r, float *x, size_t n) {
    const float two_pi = 6.28318530717958647692f, scale = 1.0f / 16777216.0f;
    for (size_t i = 0; i < n; i += 2) {
        uint64_t bits = rng_next(r);
        float u1 = (float)((bits >> 40) + 1) * scale; /* (0, 1]: log is finite */
        float u2 = (float)(bits & 0xFFFFFF) * scale;
        float rad = sqrtf(-2.0f * logf(u1)), s, c;
        sincosf(two_pi * u2, &s, &c);
        x[i] = rad * c;
        if (i + 1 < n) x[i + 1] = rad * s;
    }
}

/* The learnable part of an image: the class's band of rows in the class's
 * channel is raised, so the label can be read from the image (classes
 * beyond h bands per channel share bands and are told apart less well,
 * which is fine for smoke tests). */
static void synthetic_pattern(const synthetic *d, int label, float *x) {
    int ch = label % d->c;
    int64_t y0 = (int64_t)label * d->h / d->classes;
    int64_t y1 = (int64_t)(label + 1) * d->h / d->classes;
    if (y1 <= y0) y1 = y0 + 1; /* fewer rows than classes: one row each */
    float *p = x + (size_t)ch * d->h * d->w;
    for (int64_t k = y0 * d->w; k < y1 * d->w; k++) p[k] += SYNTH_OFFSET;
}

/* Pure computation: nothing can fail, err stays untouched. */
static int synthetic_sample(const void *state, int64_t index, const ds_draw *dr, void *px,
                            int32_t *label, char *err, size_t errlen) {
    (void)dr, (void)err, (void)errlen;
    const synthetic *d = state;
    float *x = px;
    rng_t r;
    rng_seed(&r, d->seed, d->stream, (uint64_t)index);
    *label = (int32_t)rng_below(&r, (uint64_t)d->classes);
    fill_normal(&r, x, (size_t)d->c * d->h * d->w);
    synthetic_pattern(d, *label, x);
    return 0;
}

static void synthetic_close(void *state) { free(state); }

const dataset_format ds_synthetic = {
    .name = "synthetic",
    .open = synthetic_open,
    .sample = synthetic_sample,
    .close = synthetic_close,
};
