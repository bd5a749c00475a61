/* nvJPEG's decoder (worker/backend/cuda/cuda_jpeg.c) against its host
 * twin (worker/backend/cpu/cpu_jpeg.c), which computes the same crop and
 * resize per pixel (crop_resize.h) from libjpeg-turbo's decode: every
 * image of a folder's training split, in training views (crops, flips)
 * and in one batch, in fp32 and in bf16. The decoders' IDCTs and chroma
 * upsampling differ, so the samples may too, by a little: the per-image
 * mean and largest difference in levels of 255 are printed against two
 * references, the twin (libjpeg-turbo's smooth "fancy" chroma upsampling,
 * as PIL decodes) and the same with plain upsampling (each chroma sample
 * repeated; the two references alone differ by about 3.4 levels on average
 * on these images), and the run fails past MEAN on average or MAX at most
 * against the one the decoder's name says it matches (the smooth, unless
 * it names plain upsampling) for any image, or where a sample the decoder
 * says it decoded was not written, or one it was not asked to decode was.
 *
 *   gpu-jpeg DIR SIZE MEAN MAX
 *
 * Exits 77 ("skipped: no GPU") where no GPU is visible. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include "worker/backend/backend.h"
#include "worker/backend/crop_resize.h"
#include "worker/backend/bf16.h"
#include "worker/backend/jpeg_decoder.h"
#include "worker/data/dataset.h"

#define MAX_IMAGES 256

static void die(const char *what, const char *err) {
    fprintf(stderr, "gpu-jpeg: %s: %s\n", what, err);
    exit(1);
}

static float value(const void *x, backend_dtype dt, size_t i) {
    return dt == DTYPE_BF16 ? bf16_to_float(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* The twin's sample with plain chroma upsampling: libjpeg-turbo's decode
 * without its smoothing, then the same crop_resize.h per pixel. */
static void plain_reference(const jpeg_image *im, int size, const float scale[3],
                            const float shift[3], float *out) {
    struct jpeg_decompress_struct ci;
    struct jpeg_error_mgr e;
    ci.err = jpeg_std_error(&e);
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, im->data, (unsigned long)im->len);
    jpeg_read_header(&ci, TRUE);
    ci.out_color_space = JCS_EXT_RGBX;
    ci.dct_method = JDCT_ISLOW;
    ci.do_fancy_upsampling = FALSE;
    jpeg_start_decompress(&ci);
    size_t stride = (size_t)im->width * 4;
    unsigned char *pix = malloc(stride * (size_t)im->height);
    if (!pix) die("the plain reference", "out of memory");
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = pix + stride * ci.output_scanline;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    for (int oy = 0, at = 0; oy < size; oy++)
        for (int ox = 0; ox < size; ox++, at += 3)
            cr_pixel(pix, im->width, im->height, stride, 4, im->box, im->flip, size, ox, oy, scale,
                     shift, out + at);
    free(pix);
}

/* A bf16 sample g against the twin's float w, in levels, leaving out what
 * bf16's own rounding to nearest may add: half a unit in g's last place
 * (8 significant bits: half of 2^(e-7) for g in [2^e, 2^(e+1))). Rounding
 * the twin's value too and comparing the two would count up to a whole
 * unit (0.9 levels near 2), twice what the device's output can carry. */
static double bf16_levels(double g, double w, float scale) {
    int e = 0;
    frexp(g, &e); /* g = m 2^e, m in [0.5, 1) */
    double off = fabs(g - w) - (g != 0 ? ldexp(1.0, e - 9) : 0);
    return off > 0 ? off / scale : 0;
}

/* One precision: the GPU's batch against the twin's; the failures. */
static int check(dataset *d, backend_precision prec, int size, double mean_max, double max_max) {
    char err[1024];
    backend *gpu, *cpu;
    backend_opts o = {.kind = BACKEND_CUDA, .precision = prec};
    if (backend_create(&o, &gpu, err, sizeof err)) die("the CUDA backend", err);
    if (cpu_backend_create(0, 1, &cpu, err, sizeof err)) die("the CPU backend", err);
    float scale[3], shift[3];
    dataset_byte_norm(d, scale, shift);
    jpeg_decoder *dev, *twin;
    if (jpeg_decoder_create(gpu, size, scale, shift, &dev, err, sizeof err)) die("nvJPEG", err);
    if (jpeg_decoder_create(cpu, size, scale, shift, &twin, err, sizeof err)) die("the twin", err);
    const char *mode = prec == PRECISION_BF16 ? "bf16" : "fp32";
    int plain_chroma = strstr(jpeg_decoder_name(dev), "without interpolation") != NULL;
    printf("%s: %s against %s\n", mode, jpeg_decoder_name(dev), jpeg_decoder_name(twin));
    int n = (int)dataset_size(d);
    if (n > MAX_IMAGES - 1) n = MAX_IMAGES - 1;
    /* the images in training views, and one place left out (data NULL) */
    static jpeg_image im[MAX_IMAGES];
    static dataset_jpeg dj[MAX_IMAGES];
    int total = n + 1, skip = n / 2, host_only = 0;
    for (int i = 0, k = 0; i < total; i++) {
        im[i] = (jpeg_image){0};
        if (i == skip) continue;
        int32_t y;
        int rc = dataset_jpeg_of(d, k, 1, 11, 0, &dj[i], &y, err, sizeof err);
        k++;
        if (rc) { /* a PNG or CMYK: the host's, as in training */
            host_only++;
            continue;
        }
        im[i] = (jpeg_image){.data = dj[i].data, .len = dj[i].len, .width = dj[i].width,
                             .height = dj[i].height, .flip = dj[i].flip};
        memcpy(im[i].box, dj[i].box, sizeof im[i].box);
    }
    size_t per = (size_t)size * size * 3, bytes = per * total * backend_act_size(gpu);
    void *x = gpu->ops->alloc(gpu, bytes), *got = malloc(bytes);
    float *want = malloc(per * total * sizeof *want), *plain = malloc(per * sizeof *plain);
    int nearer[2] = {0, 0};
    unsigned char *sentinel = malloc(bytes), ok_dev[MAX_IMAGES], ok_twin[MAX_IMAGES];
    memset(sentinel, 0x3C, bytes);
    gpu->ops->upload(gpu, x, sentinel, bytes);
    if (jpeg_decoder_run(dev, total, im, x, ok_dev, err, sizeof err)) die("nvJPEG's run", err);
    gpu->ops->download(gpu, got, x, bytes);
    if (gpu->ops->sync(gpu)) die("the GPU's stream", "failed (the log above says which call)");
    if (jpeg_decoder_run(twin, total, im, want, ok_twin, err, sizeof err)) die("the twin", err);
    int failed = 0;
    double worst_mean = 0, worst = 0;
    for (int i = 0; i < total; i++) {
        size_t at = (size_t)i * per * backend_act_size(gpu);
        if (!im[i].data) {
            if (memcmp((char *)got + at, sentinel, per * backend_act_size(gpu)) != 0) {
                printf("%s: FAIL sample %d, not given to the decoder, was written\n", mode, i);
                failed++;
            }
            continue;
        }
        if (!ok_dev[i] || !ok_twin[i]) {
            printf("%s: sample %d (%dx%d) not decoded: nvJPEG %d, twin %d\n", mode, i,
                   im[i].width, im[i].height, ok_dev[i], ok_twin[i]);
            failed += ok_twin[i] && !ok_dev[i] ? 0 : 1; /* nvJPEG may refuse; the twin not */
            continue;
        }
        plain_reference(&im[i], size, scale, shift, plain);
        double sum[2] = {0, 0}, most[2] = {0, 0};
        for (size_t k = 0; k < per; k++) {
            double g = value(got, gpu->act, (size_t)i * per + k);
            float ref[2] = {want[(size_t)i * per + k], plain[k]};
            for (int r = 0; r < 2; r++) {
                double levels = gpu->act == DTYPE_BF16 ? bf16_levels(g, ref[r], scale[k % 3])
                                                       : fabs(g - ref[r]) / scale[k % 3];
                sum[r] += levels;
                if (levels > most[r]) most[r] = levels;
            }
        }
        int r = plain_chroma; /* the reference the decoder says it matches */
        double mean = sum[r] / (double)per;
        if (mean > worst_mean) worst_mean = mean;
        if (most[r] > worst) worst = most[r];
        nearer[sum[1] < sum[0]]++;
        int bad = mean > mean_max || most[r] > max_max;
        failed += bad;
        printf("%s: %s sample %d (%dx%d, box %.0fx%.0f%s): %.3f levels on average, %.1f at most "
               "from the %s twin (%.3f, %.1f from the %s)\n",
               mode, bad ? "FAIL" : "ok  ", i, im[i].width, im[i].height,
               im[i].box[2] - im[i].box[0], im[i].box[3] - im[i].box[1],
               im[i].flip ? ", mirrored" : "", mean, most[r], r ? "plain" : "smooth",
               sum[!r] / (double)per, most[!r], r ? "smooth" : "plain");
    }
    printf("%s: %d samples, %d left to the host (PNG, CMYK); nearer the smooth twin %d, the "
           "plain %d; worst %.3f levels on average, %.1f at most; %d failed\n",
           mode, total - 1 - host_only, host_only, nearer[0], nearer[1], worst_mean, worst,
           failed);
    for (int i = 0; i < total; i++) free(im[i].data ? dj[i].data : NULL);
    free(got), free(want), free(plain), free(sentinel);
    gpu->ops->free(gpu, x);
    jpeg_decoder_destroy(dev);
    jpeg_decoder_destroy(twin);
    gpu->ops->destroy(gpu);
    cpu->ops->destroy(cpu);
    return failed;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: gpu-jpeg DIR SIZE MEAN MAX\n");
        return 2;
    }
    char err[1024];
    if (cuda_device_count(err, sizeof err) <= 0) {
        printf("skipped: no GPU%s%s\n", err[0] ? ": " : "", err);
        return 77;
    }
    int size = atoi(argv[2]);
    dataset_opts o = {.name = "imagefolder", .dir = argv[1], .train = 1, .image_size = size};
    dataset *d;
    if (dataset_open(&o, &d, err, sizeof err)) die(argv[1], err);
    double mean_max = atof(argv[3]), max_max = atof(argv[4]);
    int failed = check(d, PRECISION_FP32, size, mean_max, max_max);
    failed += check(d, PRECISION_BF16, size, mean_max, max_max); /* (bf16's rounding left out) */
    dataset_close(d);
    return failed ? 1 : 0;
}
