/* data-dump: samples of a data set as ddp-train's loader makes them
 * (decoded, cropped, resized, normalised), for the comparisons with
 * torchvision's transforms in tests/compat.
 *
 *   data-dump NAME DIR train|val IMAGE_SIZE AUGMENT SEED EPOCH INDEX...
 *
 * writes, for each INDEX, C x H x W float32 values to stdout, and their
 * shape and labels to stderr ("C H W" then one label per line). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/data/dataset.h"

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
    for (int i = 8; i < argc; i++) {
        int32_t y;
        if (dataset_sample(d, atoll(argv[i]), augment, seed, epoch, x, &y, err, sizeof err)) {
            fprintf(stderr, "data-dump: %s\n", err);
            return 1;
        }
        fwrite(x, sizeof *x, (size_t)c * h * w, stdout);
        fprintf(stderr, "%d\n", y);
    }
    free(x);
    dataset_close(d);
    return 0;
}
