/* The input pipeline: the batches of the coming steps are built by a pool
 * of threads while the current step runs, straight into the layout and
 * type the model reads (NHWC, fp32 or bf16) in host memory the backend
 * uploads from fastest (page-locked on a GPU), so that the step never
 * waits for the host. Memory is bounded: depth + 1 batches.
 *
 * What a batch holds depends only on (seed, epoch, position) and the data
 * set, never on the thread count or on timing: each sample is drawn by
 * dataset_sample into its own place. So a run resumed from a checkpoint,
 * or one with another --loader-threads, sees the same batches, bit for bit.
 *
 * With jpegs (--decode gpu), a sample the data set hands out as a JPEG
 * is only read, not decoded: its file and crop go to the device's decoder
 * (loader_jpegs), and only the others (PNGs, CMYK JPEGs, damaged files:
 * dataset_jpeg_of says which) are drawn on the host.
 *
 * The steps are predicted (each position follows the last, an epoch
 * follows the last at its end); a request for another position (a resume,
 * an evaluation in between does not count: it does not use the loader)
 * drops what was built ahead and starts again from there. */
#ifndef DDPRUN_WORKER_TRAIN_LOADER_H
#define DDPRUN_WORKER_TRAIN_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "worker/backend/backend.h"
#include "worker/backend/jpeg_decoder.h"
#include "worker/data/dataset.h"

typedef struct loader loader;

typedef struct {
    const dataset *ds;
    int batch;     /* this rank's samples per step */
    int global_batch; /* all ranks' samples per step (0: batch x world, an even share) */
    int world, rank;
    uint64_t seed; /* the sampler's order and the augmentation */
    int augment;
    int epochs;    /* nothing is built ahead past the last epoch */
    int threads;   /* pool threads; 0: the caller builds each batch when asked */
    int depth;     /* batches built ahead (at least 1 with threads) */
    backend *be;   /* whose alloc_host holds the batches, and whose activation type */
    int jpegs;     /* --decode gpu: samples the data set hands out as JPEGs
                    * (dataset_jpeg_of) are read, not decoded: loader_jpegs */
    int jpegs_permille; /* with jpegs: of every 1000 samples of the batch, how many
                         * may go to the device (spread evenly; the rest are
                         * drawn on the host); 0: all */
} loader_opts;

/* 0, or -errno with err saying what failed. */
int loader_create(const loader_opts *o, loader **out, char *err, size_t errlen);
/* This rank's batch of the step at (epoch, pos) (pos: samples of the epoch
 * consumed before it, globally): *x is batch x H x W x C in the backend's
 * activation type, *y the labels. Both stay as they are until the next
 * loader_get, which may refill them: by then the caller must be done with
 * them, an upload_async of them included (a sync in between). Waits until
 * the batch is built. 0, or the error of the batch's first sample (in the
 * batch's order) that dataset_sample could not draw, with its message in
 * err; the batch is then incomplete. */
int loader_get(loader *l, int epoch, int64_t pos, const void **x, const int32_t **y, char *err,
               size_t errlen);
/* With jpegs: the batch loader_get gave last, as JPEGs for a decoder on
 * the device (jpeg_decoder.h): entry i with data set is sample i, to
 * decode into its place; entry i with data NULL was drawn on the host
 * into *x as usual. Valid until the next loader_get. NULL without jpegs. */
const jpeg_image *loader_jpegs(const loader *l);
/* The indices (in the data set) of that batch's samples, in its order.
 * Valid until the next loader_get. */
const int64_t *loader_indices(const loader *l);
/* Sample i of that batch drawn on the host after all (the device's decoder
 * could not decode it), into x: one sample, in the activation type, in
 * host memory. The caller's thread, between loader_gets. 0, or -errno
 * with err naming the file (it would have failed the batch on the host). */
int loader_draw_again(loader *l, int i, void *x, char *err, size_t errlen);
/* Gets so far, and how many of them found their batch already built. */
void loader_stats(const loader *l, int64_t *gets, int64_t *ready);
void loader_destroy(loader *l);

/* One sample, C x H x W floats, as NHWC (one pixel's channels together)
 * in fp32 or bf16 at out: the conversion the loader does, for others
 * (the evaluation's batches) to share. */
void loader_to_nhwc(const float *chw, int c, int hw, backend_dtype dt, void *out);

#endif
