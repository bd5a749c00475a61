/* ddp-train's data sets: Fashion-MNIST and MNIST from their IDX files
 * (gzip'd or not), CIFAR-10 from its binary batches, and a synthetic set
 * generated per sample on demand; plus normalisation and augmentation,
 * which turn stored samples into the float batches the model reads.
 *
 * Stored sets are kept as raw bytes (60000 x 784 bytes is 47 MB; CIFAR-10
 * is 150 MB) and normalised while a batch is filled, through a 256-entry
 * table per channel. Everything random is drawn from rng_seed(seed, epoch,
 * index) so that a sample looks the same whichever rank loads it. */
#include "worker/data/dataset.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/rng.h"

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define IDX_IMAGES_MAGIC 2051u
#define IDX_LABELS_MAGIC 2049u
#define IDX_SIDE 28
/* A header claiming more samples than this is corrupt, and must not make
 * us try to allocate terabytes. */
#define IDX_MAX_COUNT (1u << 24)
#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_SUBDIR "cifar-10-batches-bin"
#define REAL_CLASSES 10
/* The second seed word of the synthetic samples' streams. The test split
 * uses its own word so that it is not a copy of the training split. */
#define SYNTH_STREAM_TRAIN 0xDA7Aull
#define SYNTH_STREAM_TEST 0xDA7Bull
/* What the synthetic images add to their class's band: enough for a
 * model to learn, small enough that the noise still matters. */
#define SYNTH_OFFSET 0.5f
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

typedef enum { DS_STORED, DS_SYNTHETIC } ds_kind;

struct dataset {
    ds_kind kind;
    int64_t n;
    int c, h, w, classes;
    uint8_t *pixels;    /* n x c x h x w raw bytes (stored sets only) */
    uint8_t *labels;    /* n labels (stored sets only) */
    float lut[3][256];  /* raw byte -> normalised value, per channel */
    uint64_t seed;      /* synthetic: the data set's seed */
    uint64_t stream;    /* synthetic: SYNTH_STREAM_TRAIN or _TEST */
};

__attribute__((format(printf, 3, 4))) static void set_err(char *err, size_t errlen,
                                                          const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* dir + "/" + name into out; a path too long for out is an error, not a
 * silently truncated name that would then be "missing". */
static int join_path(char *out, size_t len, const char *dir, const char *name, char *err,
                     size_t errlen) {
    int n = snprintf(out, len, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= len) {
        set_err(err, errlen, "the path %s/%s is too long", dir, name);
        return -ENAMETOOLONG;
    }
    return 0;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* ---- Normalisation ---------------------------------------------------- */

/* Bytes become [0, 1] first (/255), then (v - mean) / std, as torchvision's
 * ToTensor + Normalize do. */
static void set_normalisation(dataset *d, const float *mean, const float *std) {
    for (int ch = 0; ch < d->c; ch++)
        for (int v = 0; v < 256; v++)
            d->lut[ch][v] = (float)(((double)v / 255.0 - mean[ch]) / std[ch]);
}

/* ---- IDX files (Fashion-MNIST, MNIST) --------------------------------- */

typedef struct {
    const char *dir;
    const char *hint;   /* appended to "cannot open" errors: what to do */
    const char *prefix; /* "train" or "t10k" */
} idx_source;

/* Opens dir/name.gz, or dir/name when only the uncompressed file is there
 * (gzread reads plain files too). A missing file is reported under its
 * .gz name, the one the data set ships with. */
static int idx_open(const idx_source *s, const char *name, char *path, size_t plen,
                    gzFile *out, char *err, size_t errlen) {
    char gz[64];
    snprintf(gz, sizeof gz, "%s.gz", name);
    int rc = join_path(path, plen, s->dir, gz, err, errlen);
    if (rc == 0 && !file_exists(path)) {
        rc = join_path(path, plen, s->dir, name, err, errlen);
        if (rc == 0 && !file_exists(path)) rc = join_path(path, plen, s->dir, gz, err, errlen);
    }
    if (rc) return rc;
    errno = 0;
    *out = gzopen(path, "rb");
    if (!*out) {
        int e = errno ? errno : ENOMEM;
        set_err(err, errlen, "cannot open %s: %s%s", path, strerror(e), s->hint);
        return -e;
    }
    gzbuffer(*out, 1 << 17);
    return 0;
}

/* Reads exactly n bytes; a short read means the file is truncated or its
 * gzip stream is damaged, and the message says which bytes were missing. */
static int gz_read_exact(gzFile f, const char *path, const char *what, void *buf, size_t n,
                         char *err, size_t errlen) {
    size_t done = 0;
    while (done < n) {
        size_t chunk = n - done > (1u << 30) ? (1u << 30) : n - done;
        int got = gzread(f, (uint8_t *)buf + done, (unsigned)chunk);
        if (got < 0) {
            int zerr = 0;
            const char *msg = gzerror(f, &zerr);
            if (zerr == Z_ERRNO) {
                int e = errno ? errno : EIO;
                set_err(err, errlen, "cannot read %s: %s", path, strerror(e));
                return -e;
            }
            set_err(err, errlen, "%s is truncated or corrupt (%s) after %zu of the %zu bytes of %s",
                    path, msg, done, n, what);
            return -EINVAL;
        }
        if (got == 0) {
            set_err(err, errlen, "%s is truncated: it ends after %zu of the %zu bytes of %s", path,
                    done, n, what);
            return -EINVAL;
        }
        done += (size_t)got;
    }
    return 0;
}

static int idx_check_images_header(const uint8_t *hdr, const char *path, char *err,
                                   size_t errlen) {
    uint32_t magic = be32(hdr), count = be32(hdr + 4), rows = be32(hdr + 8), cols = be32(hdr + 12);
    if (magic != IDX_IMAGES_MAGIC) {
        set_err(err, errlen, "%s is not an IDX image file: magic number %u, expected %u", path,
                magic, IDX_IMAGES_MAGIC);
        return -EINVAL;
    }
    if (count == 0 || count > IDX_MAX_COUNT) {
        set_err(err, errlen, "%s claims %u images, which is not plausible (corrupt header?)", path,
                count);
        return -EINVAL;
    }
    if (rows != IDX_SIDE || cols != IDX_SIDE) {
        set_err(err, errlen, "%s holds %ux%u images, expected %dx%d", path, rows, cols, IDX_SIDE,
                IDX_SIDE);
        return -EINVAL;
    }
    return 0;
}

static int idx_read_images(dataset *d, const idx_source *s, char *path, size_t plen, char *err,
                           size_t errlen) {
    char name[64];
    uint8_t hdr[16];
    gzFile f = NULL;
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", s->prefix);
    int rc = idx_open(s, name, path, plen, &f, err, errlen);
    if (rc) goto out;
    rc = gz_read_exact(f, path, "the header", hdr, sizeof hdr, err, errlen);
    if (rc) goto out;
    rc = idx_check_images_header(hdr, path, err, errlen);
    if (rc) goto out;
    d->n = be32(hdr + 4);
    size_t bytes = (size_t)d->n * IDX_SIDE * IDX_SIDE;
    d->pixels = malloc(bytes);
    if (!d->pixels) {
        set_err(err, errlen, "out of memory reading %s (%zu bytes)", path, bytes);
        rc = -ENOMEM;
        goto out;
    }
    rc = gz_read_exact(f, path, "the pixels", d->pixels, bytes, err, errlen);
out:
    if (f) gzclose(f);
    return rc;
}

static int idx_check_labels(const dataset *d, const char *path, char *err, size_t errlen) {
    for (int64_t i = 0; i < d->n; i++) {
        if (d->labels[i] >= REAL_CLASSES) {
            set_err(err, errlen, "%s: label %u of sample %lld is not below %d (corrupt file?)",
                    path, d->labels[i], (long long)i, REAL_CLASSES);
            return -EINVAL;
        }
    }
    return 0;
}

/* images_path names the image file read before, for the count mismatch. */
static int idx_read_labels(dataset *d, const idx_source *s, const char *images_path, char *err,
                           size_t errlen) {
    char name[64], path[PATH_MAX];
    uint8_t hdr[8];
    gzFile f = NULL;
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", s->prefix);
    int rc = idx_open(s, name, path, sizeof path, &f, err, errlen);
    if (rc) goto out;
    rc = gz_read_exact(f, path, "the header", hdr, sizeof hdr, err, errlen);
    if (rc) goto out;
    rc = -EINVAL;
    if (be32(hdr) != IDX_LABELS_MAGIC) {
        set_err(err, errlen, "%s is not an IDX label file: magic number %u, expected %u", path,
                be32(hdr), IDX_LABELS_MAGIC);
        goto out;
    }
    if (be32(hdr + 4) != (uint64_t)d->n) {
        set_err(err, errlen, "%s holds %u labels but %s holds %lld images", path, be32(hdr + 4),
                images_path, (long long)d->n);
        goto out;
    }
    rc = -ENOMEM;
    d->labels = malloc((size_t)d->n);
    if (!d->labels) {
        set_err(err, errlen, "out of memory reading %s", path);
        goto out;
    }
    rc = gz_read_exact(f, path, "the labels", d->labels, (size_t)d->n, err, errlen);
    if (rc) goto out;
    rc = idx_check_labels(d, path, err, errlen);
out:
    if (f) gzclose(f);
    return rc;
}

static int idx_load(dataset *d, const dataset_opts *o, int fashion, char *err, size_t errlen) {
    static const float fashion_mean[] = {0.2860f}, fashion_std[] = {0.3530f};
    static const float mnist_mean[] = {0.1307f}, mnist_std[] = {0.3081f};
    const char *dir = o->dir;
    if (!dir && !fashion) {
        set_err(err, errlen, "the mnist data set needs --data-dir: a folder holding "
                             "train-images-idx3-ubyte.gz and the other three IDX files");
        return -EINVAL;
    }
    idx_source s = {
        .dir = dir ? dir : FASHION_MNIST_DIR,
        .hint = fashion ? " (install dataset-fashion-mnist or pass --data-dir)"
                        : " (put MNIST's IDX files there or pass another --data-dir)",
        .prefix = o->train ? "train" : "t10k",
    };
    char images_path[PATH_MAX];
    d->kind = DS_STORED;
    d->c = 1, d->h = IDX_SIDE, d->w = IDX_SIDE, d->classes = REAL_CLASSES;
    int rc = idx_read_images(d, &s, images_path, sizeof images_path, err, errlen);
    if (rc) return rc;
    rc = idx_read_labels(d, &s, images_path, err, errlen);
    if (rc) return rc;
    set_normalisation(d, fashion ? fashion_mean : mnist_mean, fashion ? fashion_std : mnist_std);
    return 0;
}

/* ---- CIFAR-10 binary batches ------------------------------------------ */

/* The batches sit either in dir itself or in the cifar-10-batches-bin
 * folder that cifar-10-binary.tar.gz unpacks to; dir wins if both do. */
static int cifar_dir(const char *dir, const char *first, char *out, size_t len, char *err,
                     size_t errlen) {
    char sub[PATH_MAX], probe[PATH_MAX];
    int rc = join_path(probe, sizeof probe, dir, first, err, errlen);
    if (rc) return rc;
    const char *found = dir;
    if (!file_exists(probe)) {
        rc = join_path(sub, sizeof sub, dir, CIFAR_SUBDIR, err, errlen);
        if (rc == 0) rc = join_path(probe, sizeof probe, sub, first, err, errlen);
        if (rc) return rc;
        if (file_exists(probe)) found = sub;
    }
    if (strlen(found) >= len) {
        set_err(err, errlen, "the path %s is too long", found);
        return -ENAMETOOLONG;
    }
    memcpy(out, found, strlen(found) + 1);
    return 0;
}

/* Counts the records of one batch file, refusing a missing, empty or
 * partial one. */
static int cifar_count(const char *path, int64_t *records, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        set_err(err, errlen, "cannot open %s: %s (unpack cifar-10-binary.tar.gz and pass its "
                             "folder as --data-dir)", path, strerror(e));
        return -e;
    }
    if (st.st_size <= 0 || st.st_size % CIFAR_RECORD != 0) {
        set_err(err, errlen, "%s is truncated or not a CIFAR-10 batch: %lld bytes is not a whole, "
                             "non-zero number of %d-byte records", path, (long long)st.st_size,
                CIFAR_RECORD);
        return -EINVAL;
    }
    *records = st.st_size / CIFAR_RECORD;
    return 0;
}

/* Reads `records` records of one file into d from sample `first` on. */
static int cifar_read(dataset *d, const char *path, int64_t first, int64_t records, char *err,
                      size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        set_err(err, errlen, "cannot open %s: %s", path, strerror(e));
        return -e;
    }
    int rc = 0;
    for (int64_t i = first; i < first + records && rc == 0; i++) {
        uint8_t *label = &d->labels[i], *px = d->pixels + (size_t)i * CIFAR_PIXELS;
        if (fread(label, 1, 1, f) != 1 || fread(px, 1, CIFAR_PIXELS, f) != CIFAR_PIXELS) {
            set_err(err, errlen, "%s is truncated: record %lld is incomplete", path,
                    (long long)(i - first));
            rc = -EINVAL;
        } else if (*label >= REAL_CLASSES) {
            set_err(err, errlen, "%s: label %u of record %lld is not below %d (corrupt file?)",
                    path, *label, (long long)(i - first), REAL_CLASSES);
            rc = -EINVAL;
        }
    }
    fclose(f);
    return rc;
}

static int cifar_load(dataset *d, const dataset_opts *o, char *err, size_t errlen) {
    static const float mean[] = {0.4914f, 0.4822f, 0.4465f}, std[] = {0.2470f, 0.2435f, 0.2616f};
    static const char *train_files[] = {"data_batch_1.bin", "data_batch_2.bin",
                                        "data_batch_3.bin", "data_batch_4.bin",
                                        "data_batch_5.bin"};
    static const char *test_files[] = {"test_batch.bin"};
    const char **files = o->train ? train_files : test_files;
    int nfiles = o->train ? 5 : 1;
    if (!o->dir) {
        set_err(err, errlen, "the cifar10 data set needs --data-dir: the folder holding "
                             "data_batch_1.bin .. data_batch_5.bin and test_batch.bin");
        return -EINVAL;
    }
    char dir[PATH_MAX], path[PATH_MAX];
    int64_t records[5], total = 0;
    int rc = cifar_dir(o->dir, files[0], dir, sizeof dir, err, errlen);
    if (rc) return rc;
    for (int i = 0; i < nfiles; i++) {
        rc = join_path(path, sizeof path, dir, files[i], err, errlen);
        if (rc == 0) rc = cifar_count(path, &records[i], err, errlen);
        if (rc) return rc;
        total += records[i];
    }
    d->kind = DS_STORED;
    d->n = total, d->c = 3, d->h = CIFAR_SIDE, d->w = CIFAR_SIDE, d->classes = REAL_CLASSES;
    d->pixels = malloc((size_t)total * CIFAR_PIXELS);
    d->labels = malloc((size_t)total);
    if (!d->pixels || !d->labels) {
        set_err(err, errlen, "out of memory loading CIFAR-10 (%lld samples)", (long long)total);
        return -ENOMEM;
    }
    int64_t first = 0;
    for (int i = 0; i < nfiles; first += records[i], i++) {
        rc = join_path(path, sizeof path, dir, files[i], err, errlen);
        if (rc == 0) rc = cifar_read(d, path, first, records[i], err, errlen);
        if (rc) return rc;
    }
    set_normalisation(d, mean, std);
    return 0;
}

/* ---- Synthetic data --------------------------------------------------- */

static int synthetic_open(dataset *d, const dataset_opts *o, char *err, size_t errlen) {
    int c = o->c ? o->c : 3, h = o->h ? o->h : 32, w = o->w ? o->w : 32;
    if (c < 0 || h < 0 || w < 0 || (int64_t)c * h * w > (1 << 26)) {
        set_err(err, errlen, "synthetic data: input shape %dx%dx%d is not valid (--input-shape "
                             "CxHxW, positive, at most 2^26 values)", o->c, o->h, o->w);
        return -EINVAL;
    }
    if (o->classes < 0 || o->size < 0) {
        set_err(err, errlen, "synthetic data: classes (%d) and size (%lld) must not be "
                             "negative (0 picks the default)",
                o->classes, (long long)o->size);
        return -EINVAL;
    }
    d->kind = DS_SYNTHETIC;
    d->c = c, d->h = h, d->w = w;
    d->classes = o->classes ? o->classes : 10;
    d->n = o->size ? o->size : (o->train ? 60000 : 10000);
    d->seed = o->seed;
    d->stream = o->train ? SYNTH_STREAM_TRAIN : SYNTH_STREAM_TEST;
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

/* The learnable part of a synthetic image: the class's band of rows in
 * the class's channel is raised, so the label can be read from the image
 * (classes beyond h bands per channel share bands and are told apart less
 * well, which is fine for smoke tests). */
static void synthetic_pattern(const dataset *d, int label, float *x) {
    int ch = label % d->c;
    int64_t y0 = (int64_t)label * d->h / d->classes;
    int64_t y1 = (int64_t)(label + 1) * d->h / d->classes;
    if (y1 <= y0) y1 = y0 + 1; /* fewer rows than classes: one row each */
    float *p = x + (size_t)ch * d->h * d->w;
    for (int64_t k = y0 * d->w; k < y1 * d->w; k++) p[k] += SYNTH_OFFSET;
}

static int32_t synthetic_sample(const dataset *d, int64_t index, float *x) {
    rng_t r;
    rng_seed(&r, d->seed, d->stream, (uint64_t)index);
    int32_t label = (int32_t)rng_below(&r, (uint64_t)d->classes);
    fill_normal(&r, x, (size_t)d->c * d->h * d->w);
    synthetic_pattern(d, label, x);
    return label;
}

/* ---- Opening and closing ---------------------------------------------- */

int dataset_open(const dataset_opts *o, dataset **out, char *err, size_t errlen) {
    *out = NULL;
    if (err && errlen) err[0] = '\0';
    dataset *d = calloc(1, sizeof *d);
    if (!d) {
        set_err(err, errlen, "out of memory opening a data set");
        return -ENOMEM;
    }
    const char *name = o->name ? o->name : "";
    int rc;
    if (strcmp(name, "fashion-mnist") == 0 || strcmp(name, "mnist") == 0)
        rc = idx_load(d, o, name[0] == 'f', err, errlen);
    else if (strcmp(name, "cifar10") == 0)
        rc = cifar_load(d, o, err, errlen);
    else if (strcmp(name, "synthetic") == 0)
        rc = synthetic_open(d, o, err, errlen);
    else {
        set_err(err, errlen, "unknown data set '%s' (use fashion-mnist, mnist, cifar10 or "
                             "synthetic)", name);
        rc = -EINVAL;
    }
    if (rc) {
        dataset_close(d);
        return rc;
    }
    *out = d;
    return 0;
}

void dataset_close(dataset *d) {
    if (!d) return;
    free(d->pixels);
    free(d->labels);
    free(d);
}

int64_t dataset_size(const dataset *d) { return d->n; }

void dataset_shape(const dataset *d, int *c, int *h, int *w) {
    *c = d->c, *h = d->h, *w = d->w;
}

int dataset_classes(const dataset *d) { return d->classes; }

/* ---- Batches and augmentation ----------------------------------------- */

static int32_t stored_sample(const dataset *d, int64_t index, float *x) {
    size_t count = (size_t)d->c * d->h * d->w, plane = (size_t)d->h * d->w;
    const uint8_t *src = d->pixels + (size_t)index * count;
    for (int ch = 0; ch < d->c; ch++)
        for (size_t k = 0; k < plane; k++)
            x[ch * plane + k] = d->lut[ch][src[ch * plane + k]];
    return d->labels[index];
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
 * so a stored set pads with each channel's normalised 0; synthetic data,
 * never normalised, pads with 0. */
static void augment_sample(const dataset *d, float *x, uint64_t seed, int epoch, int64_t index) {
    int pad = d->h >= 32 && d->w >= 32 ? 4 : 2;
    rng_t r;
    rng_seed(&r, seed, (uint64_t)(int64_t)epoch, (uint64_t)index);
    int dy = (int)rng_below(&r, 2 * (uint64_t)pad + 1) - pad;
    int dx = (int)rng_below(&r, 2 * (uint64_t)pad + 1) - pad;
    int flip = (int)(rng_next(&r) >> 63);
    size_t plane = (size_t)d->h * d->w;
    for (int ch = 0; ch < d->c; ch++) {
        float fill = d->kind == DS_STORED ? d->lut[ch][0] : 0.0f;
        shift_plane(x + ch * plane, d->h, d->w, dy, dx, fill);
        if (flip) flip_plane(x + ch * plane, d->h, d->w);
    }
}

int dataset_sample(const dataset *d, int64_t index, int augment, uint64_t seed, int epoch,
                   float *x, int32_t *y, char *err, size_t errlen) {
    (void)err, (void)errlen; /* no format here fails per sample */
    assert(index >= 0 && index < d->n);
    *y = d->kind == DS_SYNTHETIC ? synthetic_sample(d, index, x) : stored_sample(d, index, x);
    if (augment) augment_sample(d, x, seed, epoch, index);
    return 0;
}

/* Each sample depends only on (seed, epoch, index), so filling them in
 * parallel gives the same batch as filling them in order; and of several
 * failures the one reported is the first in idx's order, whichever thread
 * met it first. */
int dataset_batch(const dataset *d, const int64_t *idx, int n, int augment, uint64_t seed,
                  int epoch, float *x, int32_t *y, char *err, size_t errlen) {
    size_t count = (size_t)d->c * d->h * d->w;
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
                failed_at = i, rc = r;
                set_err(err, errlen, "%s", why);
            }
        }
    }
    return rc;
}
