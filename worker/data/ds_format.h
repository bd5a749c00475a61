/* The data set formats behind dataset.h: what one format provides (a
 * dataset_format: open, sample, close), the table of them by --data name
 * (ds_table.c), and what the formats share (ds_format.c). A format only
 * opens its files and hands out samples; dataset.c does what is common to
 * all of them: the lookup by name, turning stored bytes into normalised
 * floats, augmentation, batches.
 *
 * A new format is one file, ds_NAME.c, defining its dataset_format, and its
 * row in ds_table.c; nothing outside worker/data/ names a format. */
#ifndef DDPRUN_WORKER_DATA_DS_FORMAT_H
#define DDPRUN_WORKER_DATA_DS_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "worker/data/dataset.h"

/* What a format's samples hold. */
typedef enum {
    /* C x H x W bytes, 0 (black) to 255, which dataset.c turns into floats
     * as torchvision's ToTensor and Normalize do, with ds_info's mean and
     * std; augmentation pads with black (normalised). */
    DS_BYTES,
    /* C x H x W floats as the model reads them (dataset.c normalises
     * nothing); augmentation pads with 0. */
    DS_FLOATS,
} ds_pixels;

/* What open tells dataset.c: the same for every sample. */
typedef struct {
    int64_t n;               /* samples, at least 1 */
    int c, h, w;             /* every sample's shape */
    int classes;             /* labels are 0 .. classes - 1 */
    ds_pixels pixels;
    const float *mean, *std; /* DS_BYTES: c each, of values in [0, 1] */
    int own_augment;         /* the format crops and flips as it decodes (ds_draw):
                              * dataset.c adds no augmentation of its own */
    int nhwc;                /* a DS_FLOATS format with own_augment that writes
                              * H x W x C floats when ds_draw asks (nhwc) */
} ds_info;

/* How a sample is drawn: what a format that augments on its own
 * (own_augment) draws its crop and flip from, (seed, epoch, index) alone. */
typedef struct {
    int augment; /* 0: the evaluation's view */
    uint64_t seed;
    int epoch;
    int nhwc; /* H x W x C rather than C x H x W (only where ds_info's nhwc) */
} ds_draw;

typedef struct dataset_format dataset_format;

struct dataset_format {
    const char *name; /* --data's name */
    /* Opens the data set o describes (o->name is f's), reading into memory
     * what the format keeps there, and checks it: fills *info and sets
     * *state (the format's own, NULL if it needs none). 0, or -errno with
     * err naming the file, the problem and what to do; a failed open
     * leaves nothing to close. */
    int (*open)(const dataset_format *f, const dataset_opts *o, void **state, ds_info *info,
                char *err, size_t errlen);
    /* Sample `index` (0 <= index < n), drawn as dr says, into px and its
     * label into *label.
     * px is the start of room for C x H x W floats: a DS_FLOATS format
     * fills it, a DS_BYTES one writes its C x H x W bytes at its start.
     * Called by several threads at once with the same state, which open
     * left read-only. May read files: 0, or -errno with err naming the
     * file and the sample. */
    int (*sample)(const void *state, int64_t index, const ds_draw *dr, void *px, int32_t *label,
                  char *err, size_t errlen);
    /* Frees what open made (state may be NULL). */
    void (*close)(void *state);
    /* Optional (NULL: never): sample `index` as the JPEG file it is
     * decoded from and the box of it that sample takes (dataset.h's
     * dataset_jpeg_of), or -ENOTSUP for a sample the host must draw. */
    int (*jpeg)(const void *state, int64_t index, const ds_draw *dr, dataset_jpeg *out,
                int32_t *label, char *err, size_t errlen);
    /* The format's own constant, for a file that serves several names (the
     * IDX sets: where each is and its mean and std); NULL if unused. */
    const void *variant;
};

/* Every format, in the order --help lists them; NULL after the last. */
extern const dataset_format *const ds_formats[];

/* dataset_open with the format given rather than looked up by name (tests
 * open formats of their own with it). */
int ds_open_format(const dataset_format *f, const dataset_opts *o, dataset **out, char *err,
                   size_t errlen);

/* ---- What the formats share (ds_format.c; messages: common/err.h) ---- */

/* dir + "/" + name into out; a path too long for out is an error
 * (-ENAMETOOLONG, with a message), not a silently truncated name that
 * would then be "missing". */
int ds_join_path(char *out, size_t len, const char *dir, const char *name, char *err,
                 size_t errlen);
int ds_file_exists(const char *path);

/* A set read whole into memory as bytes (the IDX files, CIFAR-10's
 * batches): n samples of `bytes` bytes each, and a byte label each. A
 * format that reads into one uses ds_stored_sample and ds_stored_close as
 * its sample and close (state: the ds_stored). */
typedef struct {
    int64_t n;
    size_t bytes;    /* per sample: C x H x W */
    uint8_t *pixels; /* n x bytes */
    uint8_t *labels; /* n */
} ds_stored;

int ds_stored_sample(const void *state, int64_t index, const ds_draw *dr, void *px,
                     int32_t *label, char *err, size_t errlen);
void ds_stored_close(void *state);

#endif
