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
 * Decoding runs on a stream of the decoder's own, so that the trainer can
 * start the next step's batch while the backend's stream runs this step
 * (jpeg_decoder_start); the finish makes the backend's stream wait for it
 * (an event) before the resampling. Two slots, each with its decoded
 * images, its crops and nvJPEG's batch states, take turns: a start fills
 * one while the other may still be read by the backend's stream, and
 * waits (on the host) until the backend is done with the slot it reuses,
 * two batches back.
 *
 * The hardware decoder is made with NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE.
 * Pipelined (nvJPEG's default), its work on the GPU waited behind every
 * kernel queued before it, at any priority of our stream (its work does
 * not seem to run on our stream), so a batch started beside a training
 * step ended with the step: 256 images took 50 ms of the host beside a 45 ms ResNet-50
 * step, against 10-12 ms on an idle GPU. Not pipelined, it runs beside
 * kernels that fill every SM and slows them by 1% (bench/nvjpeg_beside.cu;
 * docs/results.md). DDP_TRAIN_NVJPEG_PIPELINED=1 restores the default, for
 * comparison (bench/gpu_jpeg_bench.sh's gpu-N-pipelined row).
 *
 * Chroma is upsampled with interpolation where nvJPEG can (12.1 on), as
 * libjpeg-turbo does by default: the samples are then --decode cpu's
 * within a level (tests/gpu/gpu_jpeg.sh); nvJPEG's plain upsampling is
 * 2 to 3 levels off on average.
 *
 * The library is opened with dlopen, as cuBLAS is (cuda_blas.c): linked,
 * it would load into every ddp-train process, GPU or not. Its header comes
 * from the CUDA toolkit or from scripts/nvjpeg-get (the Makefile defines
 * HAVE_NVJPEG where it found one); a build without it has a decoder that
 * says so.
 *
 * The decoded images live in buffers of the decoder's own that only grow,
 * outside the backend's buffers: the step's CUDA graph never reads them,
 * so growing one does not make the graph stale. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "worker/backend/cuda/cuda_internal.h"
#include "worker/backend/jpeg_decoder.h"

#ifdef HAVE_NVJPEG
#include <nvjpeg.h>

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

/* One batch's place, used in turn with the other. */
typedef struct {
    nvjpegJpegState_t hw_state, sw_state; /* nvJPEG's batch state, per decoder */
    int hw_k, sw_k;                       /* the batch size each was initialised for */
    void *pixels;                         /* the decoded images, device memory */
    size_t pixels_bytes;
    kern_crop *crops;                     /* page-locked host, cap entries */
    kern_crop *crops_dev;                 /* device, cap entries */
    int cap, n;
    cudaEvent_t begun, decoded;           /* on the decoder's stream */
    cudaEvent_t taken;                    /* on the backend's, after the resampling */
    int decoding, resampling;             /* decoded, taken recorded and not waited for */
} nvj_slot;

typedef struct {
    nvjpeg_fns fn;
    cuda_state *st;
    int smooth;                /* chroma upsampled with interpolation, as libjpeg-turbo */
    nvjpegHandle_t hw, sw;     /* hw NULL where the GPU has no decoding engine */
    nvjpegJpegStream_t parsed; /* a header, to ask the hardware decoder */
    cudaStream_t stream;       /* the decoding's */
    cudaEvent_t mark;          /* jpeg_decoder_mark's, on the backend's stream */
    int marked;
    nvj_slot slot[2];
    int next;                  /* the slot the next start fills */
    int started;               /* the slot started and not finished, or -1 */
    /* per start, cap entries: the images of one batched call */
    const unsigned char **data;
    size_t *len;
    nvjpegImage_t *dest;
    int *which;
    int cap;
    int64_t hw_images, sw_images, failed_images, batches;
    double decode_ms, host_ms; /* summed: the decoding's on its stream; start's on the host */
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

/* One of nvJPEG's handles, with chroma upsampled with interpolation as
 * libjpeg-turbo does it (and so PIL, torchvision and --decode cpu) where
 * this nvJPEG can (12.1 on); else nvJPEG's plain upsampling, each chroma
 * sample repeated (*smooth 0). NULL where the backend is missing. */
static nvjpegHandle_t handle_open(nvj *j, nvjpegBackend_t backend, int *smooth) {
    nvjpegHandle_t h = NULL;
    unsigned flags = 0;
    const char *pipelined = getenv("DDP_TRAIN_NVJPEG_PIPELINED");
    if (backend == NVJPEG_BACKEND_HARDWARE && !(pipelined && !strcmp(pipelined, "1")))
        flags |= NVJPEG_FLAGS_HW_DECODE_NO_PIPELINE;
#ifdef NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION
    *smooth = j->fn.create(backend, NULL, NULL, flags | NVJPEG_FLAGS_UPSAMPLING_WITH_INTERPOLATION,
                           &h) == NVJPEG_STATUS_SUCCESS;
    if (*smooth) return h;
#endif
    *smooth = 0;
    return j->fn.create(backend, NULL, NULL, flags, &h) == NVJPEG_STATUS_SUCCESS ? h : NULL;
}

static void slot_free(nvj *j, nvj_slot *s) {
    if (s->hw_state) j->fn.state_destroy(s->hw_state);
    if (s->sw_state) j->fn.state_destroy(s->sw_state);
    if (s->pixels) cudaFree(s->pixels);
    if (s->crops) cudaFreeHost(s->crops);
    if (s->crops_dev) cudaFree(s->crops_dev);
    if (s->begun) cudaEventDestroy(s->begun);
    if (s->decoded) cudaEventDestroy(s->decoded);
    if (s->taken) cudaEventDestroy(s->taken);
}

static void nvj_free(nvj *j) {
    if (!j) return;
    if (j->stream) cudaStreamSynchronize(j->stream);
    if (j->fn.lib) {
        for (int i = 0; i < 2; i++) slot_free(j, &j->slot[i]);
        if (j->parsed) j->fn.stream_destroy(j->parsed);
        if (j->hw) j->fn.destroy(j->hw);
        if (j->sw) j->fn.destroy(j->sw);
    }
    if (j->mark) cudaEventDestroy(j->mark);
    if (j->stream) cudaStreamDestroy(j->stream);
    free(j->data), free(j->len), free(j->dest), free(j->which);
    if (j->fn.lib) dlclose(j->fn.lib);
    free(j);
}

/* The stream, the events and each slot's batch states. */
static int streams_and_states(nvj *j) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&j->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&j->mark, cudaEventDisableTiming));
    for (int i = 0; i < 2; i++) {
        nvj_slot *s = &j->slot[i];
        CUDA_CHECK(cudaEventCreate(&s->begun));
        CUDA_CHECK(cudaEventCreate(&s->decoded));
        CUDA_CHECK(cudaEventCreateWithFlags(&s->taken, cudaEventDisableTiming));
        if (j->fn.state_create(j->sw, &s->sw_state) != NVJPEG_STATUS_SUCCESS) return -EIO;
        if (j->hw && j->fn.state_create(j->hw, &s->hw_state) != NVJPEG_STATUS_SUCCESS)
            return -EIO;
    }
    return 0;
}

static int create(jpeg_decoder *d, char *err, size_t errlen) {
    nvj *j = calloc(1, sizeof *j);
    if (!j) {
        snprintf(err, errlen, "out of memory creating the nvJPEG decoder");
        return -ENOMEM;
    }
    j->st = cuda_state_of(d->be);
    j->started = -1;
    int rc = load(j, err, errlen);
    int sw_smooth = 0, hw_smooth = 0;
    if (rc == 0 && !(j->sw = handle_open(j, NVJPEG_BACKEND_DEFAULT, &sw_smooth))) {
        rc = -ENOTSUP;
        snprintf(err, errlen, "--decode gpu: nvJPEG's decoder cannot be created on CUDA device "
                              "%d", j->st->device);
    }
    if (rc == 0) j->hw = handle_open(j, NVJPEG_BACKEND_HARDWARE, &hw_smooth); /* NULL: no engine */
    if (j->hw && j->fn.stream_create(j->hw, &j->parsed) != NVJPEG_STATUS_SUCCESS) {
        j->parsed = NULL;
        j->fn.destroy(j->hw);
        j->hw = NULL;
    }
    if (rc == 0 && (rc = streams_and_states(j)))
        snprintf(err, errlen, "--decode gpu: nvJPEG's stream and batch states cannot be set up "
                              "on CUDA device %d (the log above says which call failed)",
                 j->st->device);
    if (rc) {
        nvj_free(j);
        return rc;
    }
    d->impl = j;
    j->smooth = sw_smooth && (!j->hw || hw_smooth);
    d->name = j->hw ? (j->smooth ? "nvJPEG (the GPU's hardware decoder, CUDA for the rest)"
                                 : "nvJPEG (the GPU's hardware decoder, CUDA for the rest; "
                                   "chroma upsampled without interpolation)")
                    : (j->smooth ? "nvJPEG (CUDA; this GPU has no hardware decoder)"
                                 : "nvJPEG (CUDA; this GPU has no hardware decoder; chroma "
                                   "upsampled without interpolation)");
    return 0;
}

/* Waits until slot s is free: its decoding done (and timed), the backend
 * done reading it. */
static int slot_wait(nvj *j, nvj_slot *s) {
    if (s->decoding) {
        CUDA_CHECK(cudaEventSynchronize(s->decoded));
        float ms = 0;
        if (cudaEventElapsedTime(&ms, s->begun, s->decoded) == cudaSuccess) j->decode_ms += ms;
        s->decoding = 0;
    }
    if (s->resampling) {
        CUDA_CHECK(cudaEventSynchronize(s->taken));
        s->resampling = 0;
    }
    return 0;
}

/* Room for n images in slot s and in the per-start arrays. */
static int reserve(nvj *j, nvj_slot *s, int n) {
    if (n > j->cap) {
        free(j->data), free(j->len), free(j->dest), free(j->which);
        j->cap = 0;
        j->data = malloc((size_t)n * sizeof *j->data);
        j->len = malloc((size_t)n * sizeof *j->len);
        j->dest = calloc((size_t)n, sizeof *j->dest);
        j->which = malloc((size_t)n * sizeof *j->which);
        if (!j->data || !j->len || !j->dest || !j->which) return -ENOMEM;
        j->cap = n;
    }
    if (n <= s->cap) return 0;
    if (s->crops) cudaFreeHost(s->crops), s->crops = NULL;
    if (s->crops_dev) cudaFree(s->crops_dev), s->crops_dev = NULL;
    s->cap = 0;
    CUDA_CHECK(cudaHostAlloc((void **)&s->crops, (size_t)n * sizeof *s->crops,
                             cudaHostAllocPortable));
    CUDA_CHECK(cudaMalloc((void **)&s->crops_dev, (size_t)n * sizeof *s->crops_dev));
    s->cap = n;
    return 0;
}

/* Room for `bytes` of decoded images in slot s (free: slot_wait), grown
 * half again. */
static int reserve_pixels(nvj_slot *s, size_t bytes) {
    if (bytes <= s->pixels_bytes) return 0;
    if (s->pixels) cudaFree(s->pixels);
    s->pixels = NULL, s->pixels_bytes = 0;
    size_t want = bytes + bytes / 2;
    CUDA_CHECK(cudaMalloc(&s->pixels, want));
    s->pixels_bytes = want;
    return 0;
}

/* Decodes images which[0..k) of slot s with one of nvJPEG's decoders,
 * batched; a failed batch is tried again an image at a time. Images nvJPEG
 * could not decode get pix NULL. */
static void decode_with(nvj *j, nvj_slot *s, int hw, const jpeg_image *im, int *which, int k) {
    if (k == 0) return;
    for (int i = 0; i < k; i++) {
        const kern_crop *c = &s->crops[which[i]];
        j->data[i] = im[which[i]].data, j->len[i] = im[which[i]].len;
        j->dest[i] = (nvjpegImage_t){0};
        j->dest[i].channel[0] = (unsigned char *)c->pix;
        j->dest[i].pitch[0] = c->pitch;
    }
    nvjpegHandle_t h = hw ? j->hw : j->sw;
    nvjpegJpegState_t state = hw ? s->hw_state : s->sw_state;
    int *ready_k = hw ? &s->hw_k : &s->sw_k; /* (initialised again only for another size) */
    if (*ready_k != k && j->fn.batched_init(h, state, k, 1, NVJPEG_OUTPUT_RGBI) == NVJPEG_STATUS_SUCCESS)
        *ready_k = k;
    if (*ready_k == k &&
        j->fn.batched(h, state, j->data, j->len, j->dest, j->stream) == NVJPEG_STATUS_SUCCESS)
        return;
    *ready_k = 0;
    if (k == 1) {
        s->crops[which[0]].pix = NULL;
        j->failed_images++;
        return;
    }
    for (int i = 0; i < k; i++) decode_with(j, s, hw, im, &which[i], 1);
}

static int start(jpeg_decoder *d, int n, const jpeg_image *im, unsigned char *ok, char *err,
                 size_t errlen) {
    nvj *j = d->impl;
    int64_t t0 = clock_now_ns();
    nvj_slot *s = &j->slot[j->next];
    j->started = -1;
    int rc = slot_wait(j, s);
    if (rc) {
        snprintf(err, errlen, "--decode gpu: the GPU failed while decoding an earlier batch (the "
                              "log above says which call)");
        return rc;
    }
    rc = reserve(j, s, n);
    /* where each image goes in the buffer: 3 bytes a pixel, rows of
     * width * 3, each image 256-byte aligned */
    size_t total = 0;
    for (int i = 0; rc == 0 && i < n; i++)
        if (im[i].data) total += ((size_t)im[i].width * im[i].height * 3 + 255) & ~(size_t)255;
    if (rc == 0) rc = reserve_pixels(s, total ? total : 256);
    if (rc) {
        snprintf(err, errlen, "--decode gpu: out of memory for %d images (%.1f MiB decoded) on "
                              "CUDA device %d", n, (double)total / (1 << 20), j->st->device);
        return rc;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        kern_crop *c = &s->crops[i];
        *c = (kern_crop){0};
        if (!im[i].data) continue;
        c->pix = (unsigned char *)s->pixels + at;
        c->pitch = (size_t)im[i].width * 3;
        c->width = im[i].width, c->height = im[i].height;
        memcpy(c->box, im[i].box, sizeof c->box);
        c->flip = im[i].flip;
        at += ((size_t)im[i].width * im[i].height * 3 + 255) & ~(size_t)255;
    }
    CUDA_CHECK(cudaEventRecord(s->begun, j->stream));
    /* the hardware decoder's images first, then the CUDA decoder's */
    int *which = j->which, k = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 0 && !j->hw) continue;
        k = 0;
        for (int i = 0; i < n; i++) {
            if (!s->crops[i].pix || ok[i]) continue;
            int unsupported = 1;
            if (pass == 1) unsupported = 0;
            else if (j->fn.parse_header(j->hw, im[i].data, im[i].len, j->parsed) ==
                     NVJPEG_STATUS_SUCCESS)
                j->fn.batched_supported(j->hw, j->parsed, &unsupported);
            if (unsupported) continue;
            which[k++] = i;
            ok[i] = 1; /* claimed by this pass: the next skips it */
        }
        decode_with(j, s, pass == 0, im, which, k);
        if (pass == 0) j->hw_images += k;
        else j->sw_images += k;
    }
    CUDA_CHECK(cudaEventRecord(s->decoded, j->stream));
    s->decoding = 1;
    for (int i = 0; i < n; i++) ok[i] = s->crops[i].pix != NULL && ok[i];
    s->n = n;
    j->started = j->next;
    j->next ^= 1;
    j->batches++;
    j->host_ms += (double)(clock_now_ns() - t0) * 1e-6;
    return 0;
}

static int finish(jpeg_decoder *d, void *x, char *err, size_t errlen) {
    nvj *j = d->impl;
    (void)err, (void)errlen;
    nvj_slot *s = &j->slot[j->started];
    j->started = -1;
    cudaStream_t st = j->st->stream;
    CUDA_CHECK(cudaStreamWaitEvent(st, s->decoded, 0));
    CUDA_CHECK(cudaMemcpyAsync(s->crops_dev, s->crops, (size_t)s->n * sizeof *s->crops,
                               cudaMemcpyHostToDevice, st));
    CUDA_CHECK(kern_crop_resize(st, d->be->act, s->n, s->crops_dev, d->size, d->scale, d->shift,
                                x));
    CUDA_CHECK(cudaEventRecord(s->taken, st));
    s->resampling = 1;
    return 0;
}

static void mark(jpeg_decoder *d) {
    nvj *j = d->impl;
    j->marked = cudaEventRecord(j->mark, j->st->stream) == cudaSuccess;
}

static int wait_mark(jpeg_decoder *d) {
    nvj *j = d->impl;
    if (j->marked) CUDA_CHECK(cudaEventSynchronize(j->mark));
    return 0;
}

static void destroy(jpeg_decoder *d) {
    nvj *j = d->impl;
    if (j && j->st) cudaStreamSynchronize(j->st->stream);
    for (int i = 0; j && i < 2; i++) slot_wait(j, &j->slot[i]);
    if (j && (j->hw_images || j->sw_images || j->failed_images))
        log_info("nvJPEG decoded %lld images on the hardware decoder and %lld on CUDA; %lld it "
                 "could not were decoded on the host; a batch took %.1f ms on its stream and "
                 "%.1f ms of the host's time to start (means of %lld)",
                 (long long)j->hw_images, (long long)j->sw_images, (long long)j->failed_images,
                 j->decode_ms / (double)j->batches, j->host_ms / (double)j->batches,
                 (long long)j->batches);
    nvj_free(j);
}

const jpeg_decoder_ops cuda_jpeg_decoder = {
    .name = "nvJPEG",
    .create = create,
    .start = start,
    .finish = finish,
    .mark = mark,
    .wait_mark = wait_mark,
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
