/* ddp-train's data sets: Fashion-MNIST and MNIST IDX files, CIFAR-10
 * binary batches and deterministic synthetic data, with normalisation and
 * augmentation. Each format is a file of its own behind one interface
 * (ds_format.h), found by name in a table (ds_table.c); this header is all
 * the rest of the worker sees. Which samples a rank takes is sampler.h's
 * business.
 *
 * Everything random is a pure function of (seed, epoch, sample index), never
 * of the rank or the world size, so that the same global batch is the same
 * data however many ranks share it: 2 ranks x batch B see exactly what
 * 1 rank x batch 2B sees, and a job resumed at another world size continues
 * the same epoch. */
#ifndef DDPRUN_WORKER_DATA_DATASET_H
#define DDPRUN_WORKER_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct dataset dataset;

typedef struct {
    const char *name;   /* a format's name: one of dataset_format_name's */
    /* NULL: /usr/share/datasets/fashion-mnist for fashion-mnist; mnist and
     * cifar10 need one. IDX files are read as NAME.gz, or as NAME when only
     * the uncompressed file is there; CIFAR-10's data_batch_1..5.bin and
     * test_batch.bin are looked for in dir, then in dir/cifar-10-batches-bin. */
    const char *dir;
    int train;          /* 1: the training split, 0: the test split */
    int image_size;     /* imagefolder: a sample's side (0: 224) */
    int image_plain;    /* imagefolder: each image resized whole to image_size, with
                         * the generic augmentation (not the ResNet recipe's crops) */
    /* synthetic only (0 picks the default) */
    int c, h, w;        /* --input-shape CxHxW; default 3x32x32 */
    int classes;        /* default 10 */
    int64_t size;       /* samples; default 60000 for train, 10000 for test */
    uint64_t seed;      /* sample i is drawn from rng_seed(seed, 0xDA7A, i)
                         * (0xDA7B for the test split): N(0,1) pixels plus
                         * 0.5 on a band of rows of one channel chosen by the
                         * label, so a model can learn it; not normalised */
} dataset_opts;

/* The formats' names (--data's), in the table's order: the i-th, or NULL
 * past the last. */
const char *dataset_format_name(size_t i);

/* Opens a data set (stored sets are read fully into memory, a few hundred
 * MB at most; synthetic samples are made on demand in dataset_batch). 0,
 * or -ENOENT / -EINVAL (-ENOMEM, other -errno) with a message naming the
 * file and the problem (missing, truncated, wrong magic, wrong shape, bad
 * label) and what to do; an unknown name is -EINVAL with a message listing
 * the names. */
int dataset_open(const dataset_opts *o, dataset **out, char *err, size_t errlen);
void dataset_close(dataset *d);
int64_t dataset_size(const dataset *d);
void dataset_shape(const dataset *d, int *c, int *h, int *w);
int dataset_classes(const dataset *d);

/* Fills x (n x C x H x W floats, normalised with the data set's mean and
 * std) and y (n labels) with samples idx[0..n). With augment: random crop
 * with 4 pixels of zero padding (2 for images smaller than 32x32) and a
 * horizontal flip with probability 1/2, drawn from a generator seeded by
 * (seed, epoch, idx[i]). The padding is zero before normalisation (black,
 * as torchvision's RandomCrop before Normalize), so a stored set pads with
 * -mean/std; synthetic data pads with 0. Pure and thread-safe; large
 * batches are filled by OpenMP threads, with the same result. 0, or the
 * error of the first sample in idx's order that failed (see
 * dataset_sample), whichever thread drew it. */
int dataset_batch(const dataset *d, const int64_t *idx, int n, int augment, uint64_t seed,
                  int epoch, float *x, int32_t *y, char *err, size_t errlen);
/* One sample of dataset_batch's: x (C x H x W floats) and *y its label,
 * the same whichever thread draws it and whenever. 0, or -errno with err
 * naming the sample and what failed: the sets read into memory at open
 * never fail here, but a format that reads its files per sample can (a
 * file gone or damaged since). */
int dataset_sample(const dataset *d, int64_t index, int augment, uint64_t seed, int epoch,
                   float *x, int32_t *y, char *err, size_t errlen);
/* Whether the data set's format writes a sample as H x W x C floats (the
 * layout the trainer's batches take) itself, as it decodes it: then
 * dataset_sample_nhwc draws dataset_sample's sample in that layout, the
 * same values, without a pass to reorder them. */
int dataset_native_nhwc(const dataset *d);
int dataset_sample_nhwc(const dataset *d, int64_t index, int augment, uint64_t seed, int epoch,
                        float *x, int32_t *y, char *err, size_t errlen);

/* ---- Decoding elsewhere (ddp-train's --decode gpu) ----
 * A sample handed out as the JPEG file it is decoded from and what to
 * take of it, for a decoder on the training device
 * (worker/backend/jpeg_decoder.h): the whole image decoded, the box
 * resampled to the sample's size as the host does it, mirrored with flip,
 * each byte normalised with dataset_byte_norm's scale and shift. */
typedef struct {
    unsigned char *data; /* the file's bytes (malloc'd: the caller frees them) */
    size_t len;
    int width, height;   /* the image's, in pixels */
    float box[4];        /* x0, y0, x1, y1 of the region taken, in the image's pixels */
    int flip;
} dataset_jpeg;

/* Whether the data set hands out JPEGs to decode elsewhere (imagefolder,
 * with the ResNet recipe; its samples H x W x 3). */
int dataset_has_jpegs(const dataset *d);
/* Sample `index`, as dataset_sample_nhwc would draw it, as its JPEG: 0
 * with *out and *label set; -ENOTSUP for a sample the host must draw
 * (a PNG, a CMYK or 12-bit JPEG, one whose header does not parse, a file
 * cut short: dataset_sample_nhwc then draws it, or names what is wrong,
 * or skips it); or -errno with err naming the file (unreadable). */
int dataset_jpeg_of(const dataset *d, int64_t index, int augment, uint64_t seed, int epoch,
                    dataset_jpeg *out, int32_t *label, char *err, size_t errlen);
/* A byte's normalised value, per channel: byte * scale[c] + shift[c]
 * (ToTensor and Normalize with the data set's mean and std). */
void dataset_byte_norm(const dataset *d, float scale[3], float shift[3]);

/* --skip-bad-images: from now on a sample that cannot be drawn (a damaged
 * or unreadable file) is replaced by the next one in the set that can,
 * and counted, instead of failing the batch; the replacement depends on
 * the index alone, so the batch is the same whatever the threads. The
 * first one's error goes to warn (once). 0, or -ENOMEM. */
int dataset_skip_bad(dataset *d, void (*warn)(const char *message));
/* The samples skipped in an epoch's draws so far (counted by the epoch's
 * parity: the loader works at most into the next epoch), then zeroed. */
int64_t dataset_take_skipped(dataset *d, int epoch);

#endif
