/* The CUDA backend's JPEG decoder (jpeg_decoder.h): nvJPEG decodes each
 * image whole into interleaved RGB in device memory, then one kernel
 * (cuda_crop_resize.cu) resamples every image's box into its sample.
 *
 * nvJPEG has two decoders. The hardware one (the NVJPG engines of A100,
 * H100, H200) takes baseline JPEGs with one scan and most subsamplings;
 * the CUDA one (NVJPEG_BACKEND_DEFAULT: Huffman on the host, the rest on
 * the GPU) takes progressive ones too. Each image goes to the hardware
 * decoder when nvJPEG says it supports it, the rest to the CUDA decoder,
 * one batched call each. A batch that fails is decoded again an image at
 * a time, so that only the images nvJPEG cannot decode are left to the
 * host (ok 0); nothing the host could decode is lost to the device.
 *
 * The library is opened with dlopen, as cuBLAS is (cuda_blas.c): linked,
 * it would load into every ddp-train process, GPU or not. Its header comes
 * from the CUDA toolkit or from scripts/nvjpeg-get (the Makefile defines
 * HAVE_NVJPEG where it found one); a build without it has a decoder that
 * says so.
 *
 * The decoded images live in a buffer of the decoder's own that only
 * grows, outside the backend's buffers: the step's CUDA graph never reads
 * it, so growing it does not make the graph stale. Everything is queued on
 * the backend's stream; the host arrays handed to nvJPEG and the kernel
 * stay as they are until the step's end waits for the stream (the loader
 * keeps the files until its next batch, which the trainer asks for after
 * that wait). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/cuda/cuda_internal.h"
#include "worker/backend/jpeg_decoder.h"

#ifdef HAVE_NVJPEG
#include <nvjpeg.h>

#define STR_(x) #x
#define STR(x) STR_(x)

/* nvJPEG's entry points, typed by its own header. */
typedef struct {
    void *lib;
    __typeof__(nvjpegCreateEx) *create;
    __typeof__(nvjpegDestroy) *destroy;
    __typeof__(nvjpegJpegStateCreate) *state_create;
    __typeof__(nvjpegJpegStateDestroy) *state_destroy;
    __typeof__(nvjpegJpegStreamCreate) *stream_create;
    __typeof__(nvjpegJpegStreamDestroy) *stream_destroy;
    __typeof__(nvjpegJpegStreamParseHeader) *parse_header;
    __typeof__(nvjpegDecodeBatchedSupported) *batched_supported;
    __typeof__(nvjpegDecodeBatchedInitialize) *batched_init;
    __typeof__(nvjpegDecodeBatched) *batched;
} nvjpeg_fns;

/* One of nvJPEG's decoders: a handle and its batch state. */
typedef struct {
    nvjpegHandle_t h;
    nvjpegJpegState_t state;
} nvjpeg_dec;

typedef struct {
    nvjpeg_fns fn;
    cuda_state *st;
    nvjpeg_dec hw, sw;         /* hw.h NULL where the GPU has no decoding engine */
    nvjpegJpegStream_t parsed; /* a header, to ask the hardware decoder */
    void *pixels;              /* the decoded images, device memory */
    size_t pixels_bytes;
    kern_crop *crops;          /* page-locked host, cap entries */
    kern_crop *crops_dev;      /* device, cap entries */
    int cap;
    /* per run, cap entries: the images of one batched call */
    const unsigned char **data;
    size_t *len;
    nvjpegImage_t *dest;
    int *which;
    int64_t hw_images, sw_images, failed_images;
} nvj;

static int lookup(nvj *j, const char *name, void *fn, char *err, size_t errlen) {
    void *p = dlsym(j->fn.lib, name);
    if (!p) {
        snprintf(err, errlen, "nvJPEG has no %s: %s", name, dlerror());
        return -ENOENT;
    }
    memcpy(fn, &p, sizeof p);
    return 0;
}

static int load(nvj *j, char *err, size_t errlen) {
    const char *names[] = {"libnvjpeg.so." STR(NVJPEG_VER_MAJOR), "libnvjpeg.so"};
    for (int i = 0; i < 2 && !j->fn.lib; i++) j->fn.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!j->fn.lib) {
        snprintf(err, errlen, "--decode gpu: cannot load nvJPEG (%s): %s; install the CUDA "
                              "toolkit's libnvjpeg, or put it on LD_LIBRARY_PATH "
                              "(scripts/nvjpeg-get fetches it into build/nvjpeg/lib)",
                 names[0], dlerror());
        return -ENOENT;
    }
    int rc = lookup(j, "nvjpegCreateEx", &j->fn.create, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegDestroy", &j->fn.destroy, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegJpegStateCreate", &j->fn.state_create, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegJpegStateDestroy", &j->fn.state_destroy, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegJpegStreamCreate", &j->fn.stream_create, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegJpegStreamDestroy", &j->fn.stream_destroy, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegJpegStreamParseHeader", &j->fn.parse_header, err, errlen);
    if (!rc)
        rc = lookup(j, "nvjpegDecodeBatchedSupported", &j->fn.batched_supported, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegDecodeBatchedInitialize", &j->fn.batched_init, err, errlen);
    if (!rc) rc = lookup(j, "nvjpegDecodeBatched", &j->fn.batched, err, errlen);
    return rc;
}

static int dec_open(nvj *j, nvjpeg_dec *d, nvjpegBackend_t which) {
    if (j->fn.create(which, NULL, NULL, 0, &d->h) != NVJPEG_STATUS_SUCCESS) {
        d->h = NULL;
        return -ENOTSUP;
    }
    if (j->fn.state_create(d->h, &d->state) != NVJPEG_STATUS_SUCCESS) {
        j->fn.destroy(d->h);
        d->h = NULL;
        return -EIO;
    }
    return 0;
}

static void dec_close(nvj *j, nvjpeg_dec *d) {
    if (!d->h) return;
    j->fn.state_destroy(d->state);
    j->fn.destroy(d->h);
    d->h = NULL;
}

static void nvj_free(nvj *j) {
    if (!j) return;
    if (j->fn.lib) {
        if (j->parsed) j->fn.stream_destroy(j->parsed);
        dec_close(j, &j->hw);
        dec_close(j, &j->sw);
    }
    if (j->pixels) cudaFree(j->pixels);
    if (j->crops) cudaFreeHost(j->crops);
    if (j->crops_dev) cudaFree(j->crops_dev);
    free(j->data), free(j->len), free(j->dest), free(j->which);
    if (j->fn.lib) dlclose(j->fn.lib);
    free(j);
}

static int create(jpeg_decoder *d, char *err, size_t errlen) {
    nvj *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory creating the nvJPEG decoder");
        return -ENOMEM;
    }
    j->st = cuda_state_of(d->be);
    int rc = load(j, err, errlen);
    if (rc == 0 && (rc = dec_open(j, &j->sw, NVJPEG_BACKEND_DEFAULT)))
        snprintf(err, errlen, "--decode gpu: nvJPEG's decoder cannot be created on CUDA device "
                              "%d", j->st->device);
    if (rc == 0 && dec_open(j, &j->hw, NVJPEG_BACKEND_HARDWARE) == 0 &&
        j->fn.stream_create(j->hw.h, &j->parsed) != NVJPEG_STATUS_SUCCESS) {
        j->parsed = NULL;
        dec_close(j, &j->hw);
    }
    if (rc) {
        nvj_free(j);
        return rc;
    }
    d->impl = j;
    d->name = j->hw.h ? "nvJPEG (the GPU's hardware decoder, CUDA for the rest)"
                      : "nvJPEG (CUDA; this GPU has no hardware decoder)";
    return 0;
}

/* Room for n images per run. */
static int reserve(nvj *j, int n) {
    if (n <= j->cap) return 0;
    if (j->crops) CUDA_CHECK(cudaStreamSynchronize(j->st->stream));
    if (j->crops) cudaFreeHost(j->crops), j->crops = NULL;
    if (j->crops_dev) cudaFree(j->crops_dev), j->crops_dev = NULL;
    free(j->data), free(j->len), free(j->dest), free(j->which);
    j->cap = 0;
    j->data = malloc((size_t)n * sizeof *j->data);
    j->len = malloc((size_t)n * sizeof *j->len);
    j->dest = calloc((size_t)n, sizeof *j->dest);
    j->which = malloc((size_t)n * sizeof *j->which);
    if (!j->data || !j->len || !j->dest || !j->which) return -ENOMEM;
    CUDA_CHECK(cudaHostAlloc((void **)&j->crops, (size_t)n * sizeof *j->crops,
                             cudaHostAllocPortable));
    CUDA_CHECK(cudaMalloc((void **)&j->crops_dev, (size_t)n * sizeof *j->crops_dev));
    j->cap = n;
    return 0;
}

/* Room for `bytes` of decoded images: grown (half again) after the stream
 * has finished with the old buffer. */
static int reserve_pixels(nvj *j, size_t bytes) {
    if (bytes <= j->pixels_bytes) return 0;
    if (j->pixels) {
        CUDA_CHECK(cudaStreamSynchronize(j->st->stream));
        cudaFree(j->pixels);
        j->pixels = NULL, j->pixels_bytes = 0;
    }
    size_t want = bytes + bytes / 2;
    CUDA_CHECK(cudaMalloc(&j->pixels, want));
    j->pixels_bytes = want;
    return 0;
}

/* Decodes images which[0..k) with dec, batched; a failed batch is tried
 * again an image at a time. Images nvJPEG could not decode get pix NULL. */
static void decode_with(nvj *j, nvjpeg_dec *dec, const jpeg_image *im, int *which, int k) {
    if (k == 0) return;
    for (int i = 0; i < k; i++) {
        const kern_crop *c = &j->crops[which[i]];
        j->data[i] = im[which[i]].data, j->len[i] = im[which[i]].len;
        j->dest[i] = (nvjpegImage_t){0};
        j->dest[i].channel[0] = (unsigned char *)c->pix;
        j->dest[i].pitch[0] = c->pitch;
    }
    cudaStream_t s = j->st->stream;
    if (j->fn.batched_init(dec->h, dec->state, k, 1, NVJPEG_OUTPUT_RGBI) == NVJPEG_STATUS_SUCCESS &&
        j->fn.batched(dec->h, dec->state, j->data, j->len, j->dest, s) == NVJPEG_STATUS_SUCCESS)
        return;
    if (k == 1) {
        j->crops[which[0]].pix = NULL;
        j->failed_images++;
        return;
    }
    for (int i = 0; i < k; i++) decode_with(j, dec, im, &which[i], 1);
}

static int run(jpeg_decoder *d, int n, const jpeg_image *im, void *x, unsigned char *ok,
               char *err, size_t errlen) {
    nvj *j = d->impl;
    int rc = reserve(j, n);
    /* where each image goes in the buffer: 3 bytes a pixel, rows of
     * width * 3, each image 256-byte aligned */
    size_t total = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        if (im[i].data) total += ((size_t)im[i].width * im[i].height * 3 + 255) & ~(size_t)255;
    if (rc == 0) rc = reserve_pixels(j, total ? total : 256);
    if (rc) {
        snprintf(err, errlen, "--decode gpu: out of memory for %d images (%.1f MiB decoded) on "
                              "CUDA device %d", n, (double)total / (1 << 20), j->st->device);
        return rc;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        kern_crop *c = &j->crops[i];
        *c = (kern_crop){0};
        if (!im[i].data) continue;
        c->pix = (unsigned char *)j->pixels + at;
        c->pitch = (size_t)im[i].width * 3;
        c->width = im[i].width, c->height = im[i].height;
        memcpy(c->box, im[i].box, sizeof c->box);
        c->flip = im[i].flip;
        at += ((size_t)im[i].width * im[i].height * 3 + 255) & ~(size_t)255;
    }
    /* the hardware decoder's images first, then the CUDA decoder's */
    int *which = j->which, k = 0;
    for (int pass = 0; pass < 2; pass++) {
        nvjpeg_dec *dec = pass == 0 ? &j->hw : &j->sw;
        if (!dec->h) continue;
        k = 0;
        for (int i = 0; i < n; i++) {
            if (!j->crops[i].pix || ok[i]) continue;
            int unsupported = 1;
            if (pass == 1) unsupported = 0;
            else if (j->fn.parse_header(j->hw.h, im[i].data, im[i].len, j->parsed) ==
                     NVJPEG_STATUS_SUCCESS)
                j->fn.batched_supported(j->hw.h, j->parsed, &unsupported);
            if (unsupported) continue;
            which[k++] = i;
            ok[i] = 1; /* claimed by this pass: the next skips it */
        }
        decode_with(j, dec, im, which, k);
        if (pass == 0) j->hw_images += k;
        else j->sw_images += k;
    }
    for (int i = 0; i < n; i++) ok[i] = j->crops[i].pix != NULL && ok[i];
    CUDA_CHECK(cudaMemcpyAsync(j->crops_dev, j->crops, (size_t)n * sizeof *j->crops,
                               cudaMemcpyHostToDevice, j->st->stream));
    CUDA_CHECK(kern_crop_resize(j->st->stream, d->be->act, n, j->crops_dev, d->size, d->scale,
                                d->shift, x));
    return 0;
}

static void destroy(jpeg_decoder *d) {
    nvj *j = d->impl;
    if (j && j->st) cudaStreamSynchronize(j->st->stream);
    if (j && (j->hw_images || j->sw_images || j->failed_images))
        log_info("nvJPEG decoded %lld images on the hardware decoder and %lld on CUDA; %lld it "
                 "could not were decoded on the host",
                 (long long)j->hw_images, (long long)j->sw_images, (long long)j->failed_images);
    nvj_free(j);
}

const jpeg_decoder_ops cuda_jpeg_decoder = {
    .name = "nvJPEG",
    .create = create,
    .run = run,
    .destroy = destroy,
};

#else /* no nvjpeg.h at build time */

static int create(jpeg_decoder *d, char *err, size_t errlen) {
    (void)d;
    snprintf(err, errlen, "--decode gpu: this ddp-train was built without nvJPEG's header "
                          "(nvjpeg.h was in neither the CUDA toolkit nor build/nvjpeg): run "
                          "scripts/nvjpeg-get, then make, or use --decode cpu");
    return -ENOTSUP;
}

const jpeg_decoder_ops cuda_jpeg_decoder = {.name = "nvJPEG (not in this build)",
                                            .create = create};

#endif
