/* CIFAR-10 from its binary batches (data_batch_1..5.bin, test_batch.bin):
 * records of a label byte and 3 x 32 x 32 pixel bytes, read whole into
 * memory (150 MB for the training split). */
#include "worker/data/ds_format.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CIFAR_SIDE 32
#define CIFAR_PIXELS (3 * CIFAR_SIDE * CIFAR_SIDE)
#define CIFAR_RECORD (1 + CIFAR_PIXELS)
#define CIFAR_SUBDIR "cifar-10-batches-bin"
#define CIFAR_CLASSES 10

static const float cifar_mean[] = {0.4914f, 0.4822f, 0.4465f};
static const float cifar_std[] = {0.2470f, 0.2435f, 0.2616f};

/* The batches sit either in dir itself or in the cifar-10-batches-bin
 * folder that cifar-10-binary.tar.gz unpacks to; dir wins if both do. */
static int cifar_dir(const char *dir, const char *first, char *out, size_t len, char *err,
                     size_t errlen) {
    char sub[PATH_MAX], probe[PATH_MAX];
    int rc = ds_join_path(probe, sizeof probe, dir, first, err, errlen);
    if (rc) return rc;
    const char *found = dir;
    if (!ds_file_exists(probe)) {
        rc = ds_join_path(sub, sizeof sub, dir, CIFAR_SUBDIR, err, errlen);
        if (rc == 0) rc = ds_join_path(probe, sizeof probe, sub, first, err, errlen);
        if (rc) return rc;
        if (ds_file_exists(probe)) found = sub;
    }
    if (strlen(found) >= len) {
        return err_set(err, errlen, -ENAMETOOLONG, "the path %s is too long", found);
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
        return err_set(err, errlen, -e,
                       "cannot open %s: %s (unpack cifar-10-binary.tar.gz and pass its "
                       "folder as --data-dir)", path, strerror(e));
    }
    if (st.st_size <= 0 || st.st_size % CIFAR_RECORD != 0) {
        return err_set(err, errlen, -EINVAL,
                       "%s is truncated or not a CIFAR-10 batch: %lld bytes is not a whole, "
                       "non-zero number of %d-byte records", path, (long long)st.st_size,
                       CIFAR_RECORD);
    }
    *records = st.st_size / CIFAR_RECORD;
    return 0;
}

/* Reads `records` records of one file into d from sample `first` on. */
static int cifar_read(ds_stored *d, const char *path, int64_t first, int64_t records, char *err,
                      size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return err_set(err, errlen, -e, "cannot open %s: %s", path, strerror(e));
    }
    int rc = 0;
    for (int64_t i = first; i < first + records && rc == 0; i++) {
        uint8_t *label = &d->labels[i], *px = d->pixels + (size_t)i * CIFAR_PIXELS;
        if (fread(label, 1, 1, f) != 1 || fread(px, 1, CIFAR_PIXELS, f) != CIFAR_PIXELS) {
            rc = err_set(err, errlen, -EINVAL, "%s is truncated: record %lld is incomplete", path,
                         (long long)(i - first));
        } else if (*label >= CIFAR_CLASSES) {
            rc = err_set(err, errlen, -EINVAL,
                         "%s: label %u of record %lld is not below %d (corrupt file?)", path,
                         *label, (long long)(i - first), CIFAR_CLASSES);
        }
    }
    fclose(f);
    return rc;
}

/* The split's files (1 to 5 of them) into d, in their order. */
static int cifar_load(ds_stored *d, const char *dir, const char **files, int nfiles, char *err,
                      size_t errlen) {
    char path[PATH_MAX];
    int64_t records[5], total = 0;
    for (int i = 0; i < nfiles; i++) {
        int rc = ds_join_path(path, sizeof path, dir, files[i], err, errlen);
        if (rc == 0) rc = cifar_count(path, &records[i], err, errlen);
        if (rc) return rc;
        total += records[i];
    }
    d->n = total;
    d->pixels = malloc((size_t)total * CIFAR_PIXELS);
    d->labels = malloc((size_t)total);
    if (!d->pixels || !d->labels) {
        return err_set(err, errlen, -ENOMEM,
                       "out of memory loading CIFAR-10 (%lld samples)", (long long)total);
    }
    int64_t first = 0;
    for (int i = 0; i < nfiles; first += records[i], i++) {
        int rc = ds_join_path(path, sizeof path, dir, files[i], err, errlen);
        if (rc == 0) rc = cifar_read(d, path, first, records[i], err, errlen);
        if (rc) return rc;
    }
    return 0;
}

static int cifar_open(const dataset_format *f, const dataset_opts *o, void **state,
                      ds_info *info, char *err, size_t errlen) {
    (void)f;
    static const char *train_files[] = {"data_batch_1.bin", "data_batch_2.bin",
                                        "data_batch_3.bin", "data_batch_4.bin",
                                        "data_batch_5.bin"};
    static const char *test_files[] = {"test_batch.bin"};
    const char **files = o->train ? train_files : test_files;
    if (!o->dir) {
        return err_set(err, errlen, -EINVAL,
                       "the cifar10 data set needs --data-dir: the folder holding "
                       "data_batch_1.bin .. data_batch_5.bin and test_batch.bin");
    }
    char dir[PATH_MAX];
    int rc = cifar_dir(o->dir, files[0], dir, sizeof dir, err, errlen);
    if (rc) return rc;
    ds_stored *d = calloc(1, sizeof *d);
    if (!d) {
        return err_set(err, errlen, -ENOMEM, "out of memory opening a data set");
    }
    d->bytes = CIFAR_PIXELS;
    rc = cifar_load(d, dir, files, o->train ? 5 : 1, err, errlen);
    if (rc) {
        ds_stored_close(d);
        return rc;
    }
    *info = (ds_info){.n = d->n, .c = 3, .h = CIFAR_SIDE, .w = CIFAR_SIDE,
                      .classes = CIFAR_CLASSES, .pixels = DS_BYTES, .mean = cifar_mean,
                      .std = cifar_std};
    *state = d;
    return 0;
}

const dataset_format ds_cifar10 = {
    .name = "cifar10",
    .open = cifar_open,
    .sample = ds_stored_sample,
    .close = ds_stored_close,
};
