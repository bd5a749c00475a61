/* Decoding JPEGs where the model trains (ddp-train's --decode gpu): a
 * batch of JPEG files, each decoded whole on the backend's device, its box
 * resampled to the sample's size as the host pipeline does it
 * (crop_resize.h), mirrored where asked, normalised, and written as NHWC
 * activations into backend memory, ready for the step.
 *
 * One decoder per backend kind, in a table (jpeg_decoder.c): on a GPU,
 * nvJPEG (worker/backend/cuda/cuda_jpeg.c: its hardware decoder for the
 * images the GPU's engines take, its CUDA decoder for the rest); on the
 * CPU backends, the host twin (worker/backend/cpu/cpu_jpeg.c):
 * libjpeg-turbo and the same arithmetic. The twin is slower than the
 * loader's own decoding and is not meant for speed: it is how the path is
 * checked where there is no GPU, and what a GPU's output is judged by. */
#ifndef DDPRUN_WORKER_BACKEND_JPEG_DECODER_H
#define DDPRUN_WORKER_BACKEND_JPEG_DECODER_H

#include <stddef.h>

#include "worker/backend/backend.h"

/* One image (host memory): the JPEG file's bytes, and what to take of it. */
typedef struct {
    const unsigned char *data; /* NULL: not decoded here (its place is filled otherwise) */
    size_t len;
    int width, height;         /* the image's, from its header */
    float box[4];              /* x0, y0, x1, y1: the region resampled to the sample */
    int flip;                  /* mirrored left to right */
} jpeg_image;

typedef struct jpeg_decoder jpeg_decoder;

/* A decoder for backend be, writing size x size x 3 samples with each byte
 * normalised to byte * scale[c] + shift[c]. 0, or -errno with err saying
 * what is missing (-ENOTSUP: this backend or build has no decoder). */
int jpeg_decoder_create(backend *be, int size, const float scale[3], const float shift[3],
                        jpeg_decoder **out, char *err, size_t errlen);
/* What decodes ("nvJPEG (hardware)", "libjpeg-turbo (host twin)", ...). */
const char *jpeg_decoder_name(const jpeg_decoder *d);
/* Decodes the n images into x (backend memory: sample i at
 * x + i * size * size * 3 activations), queued on the backend's stream
 * like its other operations: jpeg_decoder_start, then jpeg_decoder_finish.
 * ok[i] (host) becomes 1 for each image decoded and 0 for one the decoder
 * could not decode (a JPEG feature it lacks, a damaged file): the caller
 * draws that one otherwise and uploads it. Images with data NULL are left
 * alone (ok 0). 0, or -errno with err for a failure of the device itself
 * (out of memory, a failed launch). */
int jpeg_decoder_run(jpeg_decoder *d, int n, const jpeg_image *im, void *x, unsigned char *ok,
                     char *err, size_t errlen);
/* The two halves of a run, so that a batch decodes while the device works
 * on the step before it. start begins decoding the n images (on a GPU: on
 * the decoder's own stream, beside the backend's); finish queues on the
 * backend's stream, after whatever is queued there already, the wait for
 * that decoding and the writing of its samples into x. ok[] is complete
 * once finish returns. The images' bytes (and ok) must stay as they are
 * until the backend's stream is past the finish (jpeg_decoder_mark after
 * it, then jpeg_decoder_wait_mark). A start not finished is dropped by the
 * next start. */
int jpeg_decoder_start(jpeg_decoder *d, int n, const jpeg_image *im, unsigned char *ok,
                       char *err, size_t errlen);
int jpeg_decoder_finish(jpeg_decoder *d, void *x, char *err, size_t errlen);
/* A point on the backend's stream (everything queued on it so far), and a
 * wait on the host until the stream is past the last such point: the
 * caller's way to know that the memory a step's inputs were uploaded from
 * may be refilled while the step itself still runs. 0, or -errno. */
void jpeg_decoder_mark(jpeg_decoder *d);
int jpeg_decoder_wait_mark(jpeg_decoder *d);
void jpeg_decoder_destroy(jpeg_decoder *d);

/* ---- For the decoders (jpeg_decoder.c's table) ---- */

typedef struct {
    const char *name;
    /* Sets d->impl; 0, or -errno with err. */
    int (*create)(jpeg_decoder *d, char *err, size_t errlen);
    /* jpeg_decoder_start and _finish for n > 0 (ok zeroed; the last start
     * not finished is dropped); finish follows a start. */
    int (*start)(jpeg_decoder *d, int n, const jpeg_image *im, unsigned char *ok, char *err,
                 size_t errlen);
    int (*finish)(jpeg_decoder *d, void *x, char *err, size_t errlen);
    /* jpeg_decoder_mark and _wait_mark; NULL where the backend's work is
     * done by the time it is queued (the CPU's). */
    void (*mark)(jpeg_decoder *d);
    int (*wait_mark)(jpeg_decoder *d);
    void (*destroy)(jpeg_decoder *d);
} jpeg_decoder_ops;

struct jpeg_decoder {
    const jpeg_decoder_ops *ops;
    backend *be;
    int size;
    float scale[3], shift[3];
    const char *name; /* ops->name unless create says more */
    int started;      /* images of the start not finished yet; -1: none */
    void *impl;
};

extern const jpeg_decoder_ops cpu_jpeg_decoder;  /* worker/backend/cpu/cpu_jpeg.c */
extern const jpeg_decoder_ops cuda_jpeg_decoder; /* worker/backend/cuda/cuda_jpeg.c, or
                                                  * nocuda's stand-in */

#endif
