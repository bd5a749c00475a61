/* Fashion-MNIST and MNIST from their IDX files, gzip'd or not: two rows of
 * the format table, one reader. The two differ only in where their files
 * are by default, what a user whose files are missing is told, and their
 * mean and std. Read whole into memory as raw bytes (60000 x 784 bytes is
 * 47 MB). */
#include "worker/data/ds_format.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define IDX_IMAGES_MAGIC 2051u
#define IDX_LABELS_MAGIC 2049u
#define IDX_SIDE 28
/* A header claiming more samples than this is corrupt, and must not make
 * us try to allocate terabytes. */
#define IDX_MAX_COUNT (1u << 24)
#define IDX_CLASSES 10

/* What tells the IDX sets apart (dataset_format.variant). */
typedef struct {
    const char *dir;         /* the default folder; NULL: --data-dir is required */
    const char *no_dir;      /* the message when it is required and missing */
    const char *hint;        /* appended to "cannot open" errors: what to do */
    float mean[1], std[1];
} idx_set;

static const idx_set fashion_mnist = {
    .dir = FASHION_MNIST_DIR,
    .hint = " (install dataset-fashion-mnist or pass --data-dir)",
    .mean = {0.2860f},
    .std = {0.3530f},
};

static const idx_set mnist = {
    .no_dir = "the mnist data set needs --data-dir: a folder holding "
              "train-images-idx3-ubyte.gz and the other three IDX files",
    .hint = " (put MNIST's IDX files there or pass another --data-dir)",
    .mean = {0.1307f},
    .std = {0.3081f},
};

/* Where one split's files are. */
typedef struct {
    const char *dir;
    const char *hint;
    const char *prefix; /* "train" or "t10k" */
} idx_source;

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Opens dir/name.gz, or dir/name when only the uncompressed file is there
 * (gzread reads plain files too). A missing file is reported under its
 * .gz name, the one the data set ships with. */
static int idx_open(const idx_source *s, const char *name, char *path, size_t plen,
                    gzFile *out, char *err, size_t errlen) {
    char gz[64];
    snprintf(gz, sizeof gz, "%s.gz", name);
    int rc = ds_join_path(path, plen, s->dir, gz, err, errlen);
    if (rc == 0 && !ds_file_exists(path)) {
        rc = ds_join_path(path, plen, s->dir, name, err, errlen);
        if (rc == 0 && !ds_file_exists(path))
            rc = ds_join_path(path, plen, s->dir, gz, err, errlen);
    }
    if (rc) return rc;
    errno = 0;
    *out = gzopen(path, "rb");
    if (!*out) {
        int e = errno ? errno : ENOMEM;
        return err_set(err, errlen, -e, "cannot open %s: %s%s", path, strerror(e), s->hint);
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
                return err_set(err, errlen, -e, "cannot read %s: %s", path, strerror(e));
            }
            return err_set(err, errlen, -EINVAL,
                           "%s is truncated or corrupt (%s) after %zu of the %zu bytes of %s",
                           path, msg, done, n, what);
        }
        if (got == 0) {
            return err_set(err, errlen, -EINVAL,
                           "%s is truncated: it ends after %zu of the %zu bytes of %s", path,
                           done, n, what);
        }
        done += (size_t)got;
    }
    return 0;
}

static int idx_check_images_header(const uint8_t *hdr, const char *path, char *err,
                                   size_t errlen) {
    uint32_t magic = be32(hdr), count = be32(hdr + 4), rows = be32(hdr + 8), cols = be32(hdr + 12);
    if (magic != IDX_IMAGES_MAGIC) {
        return err_set(err, errlen, -EINVAL,
                       "%s is not an IDX image file: magic number %u, expected %u", path,
                       magic, IDX_IMAGES_MAGIC);
    }
    if (count == 0 || count > IDX_MAX_COUNT) {
        return err_set(err, errlen, -EINVAL,
                       "%s claims %u images, which is not plausible (corrupt header?)", path,
                       count);
    }
    if (rows != IDX_SIDE || cols != IDX_SIDE) {
        return err_set(err, errlen, -EINVAL,
                       "%s holds %ux%u images, expected %dx%d", path, rows, cols, IDX_SIDE,
                       IDX_SIDE);
    }
    return 0;
}

static int idx_read_images(ds_stored *d, const idx_source *s, char *path, size_t plen, char *err,
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
    size_t bytes = (size_t)d->n * d->bytes;
    d->pixels = malloc(bytes);
    if (!d->pixels) {
        rc = err_set(err, errlen, -ENOMEM, "out of memory reading %s (%zu bytes)", path, bytes);
        goto out;
    }
    rc = gz_read_exact(f, path, "the pixels", d->pixels, bytes, err, errlen);
out:
    if (f) gzclose(f);
    return rc;
}

static int idx_check_labels(const ds_stored *d, const char *path, char *err, size_t errlen) {
    for (int64_t i = 0; i < d->n; i++) {
        if (d->labels[i] >= IDX_CLASSES) {
            return err_set(err, errlen, -EINVAL,
                           "%s: label %u of sample %lld is not below %d (corrupt file?)", path,
                           d->labels[i], (long long)i, IDX_CLASSES);
        }
    }
    return 0;
}

/* images_path names the image file read before, for the count mismatch. */
static int idx_read_labels(ds_stored *d, const idx_source *s, const char *images_path, char *err,
                           size_t errlen) {
    char name[64], path[PATH_MAX];
    uint8_t hdr[8];
    gzFile f = NULL;
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", s->prefix);
    int rc = idx_open(s, name, path, sizeof path, &f, err, errlen);
    if (rc) goto out;
    rc = gz_read_exact(f, path, "the header", hdr, sizeof hdr, err, errlen);
    if (rc) goto out;
    if (be32(hdr) != IDX_LABELS_MAGIC) {
        rc = err_set(err, errlen, -EINVAL, "%s is not an IDX label file: magic number %u, "
                     "expected %u", path, be32(hdr), IDX_LABELS_MAGIC);
        goto out;
    }
    if (be32(hdr + 4) != (uint64_t)d->n) {
        rc = err_set(err, errlen, -EINVAL, "%s holds %u labels but %s holds %lld images", path,
                     be32(hdr + 4), images_path, (long long)d->n);
        goto out;
    }
    d->labels = malloc((size_t)d->n);
    if (!d->labels) {
        rc = err_set(err, errlen, -ENOMEM, "out of memory reading %s", path);
        goto out;
    }
    rc = gz_read_exact(f, path, "the labels", d->labels, (size_t)d->n, err, errlen);
    if (rc) goto out;
    rc = idx_check_labels(d, path, err, errlen);
out:
    if (f) gzclose(f);
    return rc;
}

static int idx_open_set(const dataset_format *f, const dataset_opts *o, void **state,
                        ds_info *info, char *err, size_t errlen) {
    const idx_set *set = f->variant;
    if (!o->dir && !set->dir) {
        return err_set(err, errlen, -EINVAL, "%s", set->no_dir);
    }
    idx_source s = {
        .dir = o->dir ? o->dir : set->dir,
        .hint = set->hint,
        .prefix = o->train ? "train" : "t10k",
    };
    ds_stored *d = calloc(1, sizeof *d);
    if (!d) {
        return err_set(err, errlen, -ENOMEM, "out of memory opening a data set");
    }
    d->bytes = IDX_SIDE * IDX_SIDE;
    char images_path[PATH_MAX];
    int rc = idx_read_images(d, &s, images_path, sizeof images_path, err, errlen);
    if (rc == 0) rc = idx_read_labels(d, &s, images_path, err, errlen);
    if (rc) {
        ds_stored_close(d);
        return rc;
    }
    *info = (ds_info){.n = d->n, .c = 1, .h = IDX_SIDE, .w = IDX_SIDE, .classes = IDX_CLASSES,
                      .pixels = DS_BYTES, .mean = set->mean, .std = set->std};
    *state = d;
    return 0;
}

const dataset_format ds_idx_fashion_mnist = {
    .name = "fashion-mnist",
    .open = idx_open_set,
    .sample = ds_stored_sample,
    .close = ds_stored_close,
    .variant = &fashion_mnist,
};

const dataset_format ds_idx_mnist = {
    .name = "mnist",
    .open = idx_open_set,
    .sample = ds_stored_sample,
    .close = ds_stored_close,
    .variant = &mnist,
};
