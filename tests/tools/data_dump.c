/* data-dump: samples of a data set as ddp-train's loader makes them
 * (decoded, cropped, resized, normalised), for the comparisons with
 * torchvision's transforms in tests/compat.
 *
 *   data-dump NAME DIR train|val IMAGE_SIZE AUGMENT SEED EPOCH INDEX...
 *
 * writes, for each INDEX, C x H x W float32 values to stdout, and their
 * shape and labels to stderr ("C H W" then one label per line).
 * DATA_DUMP_DECODE=gpu draws the JPEGs as ddp-train's --decode gpu does,
 * through the CPU's twin of the device decoder (worker/backend/
 * jpeg_decoder.h), and the rest (PNGs, CMYK) as the loader does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/jpeg_decoder.h"
#include "worker/data/dataset.h"

/* Sample index as --decode gpu draws it, C x H x W into x. */
static int twin_sample(const dataset *d, jpeg_decoder *twin, int64_t index, int augment,
                       uint64_t seed, int epoch, float *x, int32_t *y, char *err, size_t errlen) {
    int c, h, w;
    dataset_shape(d, &c, &h, &w);
    float *hwc = malloc((size_t)c * h * w * sizeof *hwc);
    dataset_jpeg j;
    int rc = dataset_jpeg_of(d, index, augment, seed, epoch, &j, y, err, errlen);
    if (rc == 0) {
        jpeg_image im = {.data = j.data, .len = j.len, .width = j.width, .height = j.height,
                         .flip = j.flip};
        memcpy(im.box, j.box, sizeof im.box);
        unsigned char ok = 0;
        rc = jpeg_decoder_run(twin, 1, &im, hwc, &ok, err, errlen);
        if (rc == 0 && !ok) rc = -1, snprintf(err, errlen, "sample %lld: the twin refused it", (long long)index);
        free(j.data);
    } else {
        rc = dataset_sample_nhwc(d, index, augment, seed, epoch, hwc, y, err, errlen);
    }
    for (int p = 0; rc == 0 && p < h * w; p++)
        for (int ch = 0; ch < c; ch++) x[(size_t)ch * h * w + p] = hwc[(size_t)p * c + ch];
    free(hwc);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 9) {
        fprintf(stderr, "usage: data-dump NAME DIR train|val IMAGE_SIZE AUGMENT SEED EPOCH INDEX...\n");
        return 2;
    }
    dataset_opts o = {.name = argv[1], .dir = argv[2], .train = strcmp(argv[3], "train") == 0,
                      .image_size = atoi(argv[4])};
    int augment = atoi(argv[5]), epoch = atoi(argv[7]);
    uint64_t seed = strtoull(argv[6], NULL, 10);
    char err[1024];
    dataset *d;
    if (dataset_open(&o, &d, err, sizeof err)) {
        fprintf(stderr, "data-dump: %s\n", err);
        return 1;
    }
    int c, h, w;
    dataset_shape(d, &c, &h, &w);
    fprintf(stderr, "%d %d %d\n", c, h, w);
    float *x = malloc((size_t)c * h * w * sizeof *x);
    const char *decode = getenv("DATA_DUMP_DECODE");
    jpeg_decoder *twin = NULL;
    backend *be = NULL;
    if (decode && strcmp(decode, "gpu") == 0) {
        float scale[3], shift[3];
        dataset_byte_norm(d, scale, shift);
        if (cpu_backend_create(0, 1, &be, err, sizeof err) ||
            jpeg_decoder_create(be, h, scale, shift, &twin, err, sizeof err)) {
            fprintf(stderr, "data-dump: %s\n", err);
            return 1;
        }
    }
    for (int i = 8; i < argc; i++) {
        int32_t y;
        int rc = twin ? twin_sample(d, twin, atoll(argv[i]), augment, seed, epoch, x, &y, err,
                                    sizeof err)
                      : dataset_sample(d, atoll(argv[i]), augment, seed, epoch, x, &y, err,
                                       sizeof err);
        if (rc) {
            fprintf(stderr, "data-dump: %s\n", err);
            return 1;
        }
        fwrite(x, sizeof *x, (size_t)c * h * w, stdout);
        fprintf(stderr, "%d\n", y);
    }
    free(x);
    jpeg_decoder_destroy(twin);
    if (be) be->ops->destroy(be);
    dataset_close(d);
    return 0;
}
