/* ddp-train's data sets (see dataset.h): a name looked up in the table of
 * formats (ds_table.c; ds_format.h says what a format provides), and what
 * every format shares: stored bytes turned into the normalised floats the
 * model reads, augmentation, and batches. No format is named here.
 *
 * Byte samples are normalised as a batch is filled, through a 256-entry
 * table per channel. Everything random is drawn from rng_seed(seed, epoch,
 * index) so that a sample looks the same whichever rank or thread loads
 * it. */
#include "worker/data/dataset.h"

#include <assert.h>
#include <stdatomic.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "worker/data/ds_format.h"

/* dataset_batch spreads samples over OpenMP threads (the worker is built
 * with -fopenmp) once a batch holds this many values: a 3x224x224
 * synthetic sample takes milliseconds to draw, a 28x28 one microseconds. */
#define PARALLEL_MIN_VALUES (1 << 16)
#ifdef _OPENMP
#define PARALLEL_FOR_IF_PARALLEL _Pragma("omp parallel for schedule(static) if (parallel)")
#define CRITICAL _Pragma("omp critical(dataset_batch_error)")
#else
#define PARALLEL_FOR_IF_PARALLEL
#define CRITICAL
#endif

/* --skip-bad-images: what was skipped, by the epoch's parity (the loader
 * draws at most into the next epoch); changed through a const dataset. */
typedef struct {
    _Atomic int64_t n[2];
    _Atomic int warned;
    void (*warn)(const char *message);
} skip_count;

/* How many samples after a bad one are tried before giving up. */
#define SKIP_TRIES 64

struct dataset {
    const dataset_format *f;
    void *state;       /* the format's */
    ds_info info;
    float (*lut)[256]; /* DS_BYTES: raw byte -> normalised value, per channel */
    skip_count *skips; /* NULL unless bad samples are skipped */
};

/* ---- The table -------------------------------------------------------- */

const char *dataset_format_name(size_t i) {
    for (size_t k = 0; ds_formats[k]; k++)
        if (k == i) return ds_formats[k]->name;
    return NULL;
}

static const dataset_format *find_format(const char *name) {
    for (size_t k = 0; ds_formats[k]; k++)
        if (strcmp(ds_formats[k]->name, name) == 0) return ds_formats[k];
    return NULL;
}

/* "unknown data set 'x' (use a, b or c)", the names from the table. */
static void unknown(const char *name, char *err, size_t errlen) {
    if (!err || !errlen) return;
    size_t n = (size_t)snprintf(err, errlen, "unknown data set '%s' (use ", name);
    for (size_t k = 0; ds_formats[k] && n < errlen; k++) {
        const char *sep = !ds_formats[k + 1] ? ")" : !ds_formats[k + 2] ? " or " : ", ";
        n += (size_t)snprintf(err + n, errlen - n, "%s%s", ds_formats[k]->name, sep);
    }
}

/* ---- Opening and closing ---------------------------------------------- */

/* Bytes become [0, 1] first (/255), then (v - mean) / std, as torchvision's
 * ToTensor + Normalize do. */
static int set_normalisation(dataset *d, char *err, size_t errlen) {
    const ds_info *in = &d->info;
    d->lut = malloc((size_t)in->c * sizeof *d->lut);
    if (!d->lut) {
        return err_set(err, errlen, -ENOMEM, "out of memory opening a data set");
    }
    for (int ch = 0; ch < in->c; ch++)
        for (int v = 0; v < 256; v++)
            d->lut[ch][v] = (float)(((double)v / 255.0 - in->mean[ch]) / in->std[ch]);
    return 0;
}

int ds_open_format(const dataset_format *f, const dataset_opts *o, dataset **out, char *err,
                   size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    dataset *d = calloc(1, sizeof *d);
    if (!d) {
        return err_set(err, errlen, -ENOMEM, "out of memory opening a data set");
    }
    d->f = f;
    int rc = f->open(f, o, &d->state, &d->info, err, errlen);
    if (rc) {
        free(d);
        return rc;
    }
    const ds_info *in = &d->info;
    assert(in->n > 0 && in->c > 0 && in->h > 0 && in->w > 0 && in->classes > 0);
    assert(in->pixels == DS_FLOATS || (in->mean && in->std));
    if (in->pixels == DS_BYTES && (rc = set_normalisation(d, err, errlen))) {
        dataset_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

int dataset_open(const dataset_opts *o, dataset **out, char *err, size_t errlen) {
    *out = NULL;
    const char *name = o->name ? o->name : "";
    const dataset_format *f = find_format(name);
    if (!f) {
        unknown(name, err, errlen);
        return -EINVAL;
    }
    return ds_open_format(f, o, out, err, errlen);
}

void dataset_close(dataset *d) {
    if (!d) return;
    d->f->close(d->state);
    free(d->lut);
    free(d->skips);
    free(d);
}

int dataset_skip_bad(dataset *d, void (*warn)(const char *message)) {
    if (!d->skips && !(d->skips = calloc(1, sizeof *d->skips))) return -ENOMEM;
    d->skips->warn = warn;
    return 0;
}

int64_t dataset_take_skipped(dataset *d, int epoch) {
    return d->skips ? atomic_exchange(&d->skips->n[epoch & 1], 0) : 0;
}

int64_t dataset_size(const dataset *d) { return d->info.n; }

void dataset_shape(const dataset *d, int *c, int *h, int *w) {
    *c = d->info.c, *h = d->info.h, *w = d->info.w;
}

int dataset_classes(const dataset *d) { return d->info.classes; }

/* ---- Normalisation and augmentation ----------------------------------- */

/* A DS_BYTES sample's bytes, at the start of x, become its floats in
 * place, a block at a time from the last block to the first: a block's
 * bytes are copied out first, and its floats (the 4 bytes at 4i for byte
 * i) then overwrite only bytes at or past the block's start, which are
 * read already. The bytes are read as unsigned char, which may alias the
 * floats. */
static void normalise_in_place(const dataset *d, float *x) {
    enum { BLOCK = 256 };
    unsigned char bytes[BLOCK];
    const unsigned char *px = (const unsigned char *)x;
    size_t plane = (size_t)d->info.h * d->info.w;
    for (int ch = d->info.c - 1; ch >= 0; ch--) {
        const float *lut = d->lut[ch];
        size_t first = (size_t)ch * plane;
        for (size_t end = first + plane; end > first;) {
            size_t b = end - first > BLOCK ? end - BLOCK : first;
            memcpy(bytes, px + b, end - b);
            for (size_t i = b; i < end; i++) x[i] = lut[bytes[i - b]];
            end = b;
        }
    }
}

static void fill_floats(float *p, int n, float v) {
    for (int i = 0; i < n; i++) p[i] = v;
}

/* Moves a plane in place so that out[y][x] = in[y + dy][x + dx], with
 * `fill` where that falls outside. Rows are visited so that each source
 * row is read before it is overwritten (ascending when reading from below,
 * descending otherwise), and memmove copes with dy == 0. */
static void shift_plane(float *p, int h, int w, int dy, int dx, float fill) {
    int adx = abs(dx), x0 = dx < 0 ? -dx : 0, len = w - adx;
    for (int k = 0; k < h; k++) {
        int y = dy > 0 ? k : h - 1 - k, sy = y + dy;
        float *row = p + (size_t)y * w;
        if (sy < 0 || sy >= h || len <= 0) {
            fill_floats(row, w, fill);
            continue;
        }
        memmove(row + x0, p + (size_t)sy * w + x0 + dx, (size_t)len * sizeof *row);
        fill_floats(row, x0, fill);
        fill_floats(row + x0 + len, w - x0 - len, fill);
    }
}

static void flip_plane(float *p, int h, int w) {
    for (int y = 0; y < h; y++) {
        float *row = p + (size_t)y * w;
        for (int a = 0, b = w - 1; a < b; a++, b--) {
            float t = row[a];
            row[a] = row[b];
            row[b] = t;
        }
    }
}

/* Random crop of the image padded by `pad` black pixels on every side,
 * then a horizontal flip with probability 1/2 (torchvision's RandomCrop +
 * RandomHorizontalFlip). Padding is black before normalisation, as there,
 * so a byte set pads with each channel's normalised 0; a float set (not
 * normalised here) pads with 0. */
static void augment_sample(const dataset *d, float *x, uint64_t seed, int epoch, int64_t index) {
    int c = d->info.c, h = d->info.h, w = d->info.w;
    int pad = h >= 32 && w >= 32 ? 4 : 2;
    rng_t r;
    rng_seed(&r, seed, (uint64_t)(int64_t)epoch, (uint64_t)index);
    int dy = (int)rng_below(&r, 2 * (uint64_t)pad + 1) - pad;
    int dx = (int)rng_below(&r, 2 * (uint64_t)pad + 1) - pad;
    int flip = (int)(rng_next(&r) >> 63);
    size_t plane = (size_t)h * w;
    for (int ch = 0; ch < c; ch++) {
        float fill = d->info.pixels == DS_BYTES ? d->lut[ch][0] : 0.0f;
        shift_plane(x + ch * plane, h, w, dy, dx, fill);
        if (flip) flip_plane(x + ch * plane, h, w);
    }
}

/* ---- Samples and batches ---------------------------------------------- */

static int draw(const dataset *d, int64_t index, const ds_draw *dr, float *x, int32_t *y,
                char *err, size_t errlen) {
    int rc = d->f->sample(d->state, index, dr, x, y, err, errlen);
    if (rc) return rc;
    assert(*y >= 0 && *y < d->info.classes);
    if (d->info.pixels == DS_BYTES) normalise_in_place(d, x);
    if (dr->augment && !d->info.own_augment) augment_sample(d, x, dr->seed, dr->epoch, index);
    return 0;
}

/* dataset_sample, drawn as dr says. */
static int sample(const dataset *d, int64_t index, const ds_draw *dr, float *x, int32_t *y,
                  char *err, size_t errlen) {
    assert(index >= 0 && index < d->info.n);
    int rc = draw(d, index, dr, x, y, err, errlen);
    if (rc == 0 || !d->skips) return rc;
    /* the next sample that can be drawn, whichever thread asks */
    char first[512];
    snprintf(first, sizeof first, "%s", err);
    int64_t k = 1;
    for (; rc && k <= SKIP_TRIES && k < d->info.n; k++)
        rc = draw(d, (index + k) % d->info.n, dr, x, y, err, errlen);
    if (rc)
        return err_set(err, errlen, rc, "%s; and the %lld samples after it could not be drawn "
                                        "either (--skip-bad-images gives up)",
                       first, (long long)(k - 1));
    atomic_fetch_add(&d->skips->n[dr->epoch & 1], 1);
    if (!atomic_exchange(&d->skips->warned, 1) && d->skips->warn) d->skips->warn(first);
    return 0;
}

int dataset_sample(const dataset *d, int64_t index, int augment, uint64_t seed, int epoch,
                   float *x, int32_t *y, char *err, size_t errlen) {
    ds_draw dr = {.augment = augment, .seed = seed, .epoch = epoch};
    return sample(d, index, &dr, x, y, err, errlen);
}

int dataset_native_nhwc(const dataset *d) {
    return d->info.nhwc && d->info.pixels == DS_FLOATS && d->info.own_augment;
}

int dataset_sample_nhwc(const dataset *d, int64_t index, int augment, uint64_t seed, int epoch,
                        float *x, int32_t *y, char *err, size_t errlen) {
    assert(dataset_native_nhwc(d));
    ds_draw dr = {.augment = augment, .seed = seed, .epoch = epoch, .nhwc = 1};
    return sample(d, index, &dr, x, y, err, errlen);
}

int dataset_has_jpegs(const dataset *d) { return d->f->jpeg && dataset_native_nhwc(d); }

int dataset_jpeg_of(const dataset *d, int64_t index, int augment, uint64_t seed, int epoch,
                    dataset_jpeg *out, int32_t *label, char *err, size_t errlen) {
    assert(index >= 0 && index < d->info.n);
    *out = (dataset_jpeg){0};
    if (!dataset_has_jpegs(d)) return -ENOTSUP;
    ds_draw dr = {.augment = augment, .seed = seed, .epoch = epoch, .nhwc = 1};
    int rc = d->f->jpeg(d->state, index, &dr, out, label, err, errlen);
    assert(rc || (*label >= 0 && *label < d->info.classes));
    return rc;
}

void dataset_byte_norm(const dataset *d, float scale[3], float shift[3]) {
    for (int ch = 0; ch < 3; ch++) {
        int k = ch < d->info.c ? ch : d->info.c - 1;
        double mean = d->info.mean ? d->info.mean[k] : 0.0, std = d->info.std ? d->info.std[k] : 1.0;
        scale[ch] = (float)(1.0 / (255.0 * std));
        shift[ch] = (float)(-mean / std);
    }
}

/* Each sample depends only on (seed, epoch, index), so filling them in
 * parallel gives the same batch as filling them in order; and of several
 * failures the one reported is the first in idx's order, whichever thread
 * met it first. */
int dataset_batch(const dataset *d, const int64_t *idx, int n, int augment, uint64_t seed,
                  int epoch, float *x, int32_t *y, char *err, size_t errlen) {
    size_t count = (size_t)d->info.c * d->info.h * d->info.w;
    int parallel = (size_t)n * count >= PARALLEL_MIN_VALUES, rc = 0, failed_at = n;
    (void)parallel; /* unused without OpenMP */
    PARALLEL_FOR_IF_PARALLEL
    for (int i = 0; i < n; i++) {
        char why[512];
        int r = dataset_sample(d, idx[i], augment, seed, epoch, x + (size_t)i * count, &y[i], why,
                               sizeof why);
        if (r) {
            CRITICAL
            if (i < failed_at) {
                failed_at = i;
                rc = err_set(err, errlen, r, "%s", why);
            }
        }
    }
    return rc;
}
