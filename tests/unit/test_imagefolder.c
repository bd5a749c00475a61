/* worker/data/ds_imagefolder.c: the crop's geometry, and decoding damaged
 * files: every byte of a JPEG and a PNG flipped in turn, and the files cut
 * at every length, each decoded in both views; the result is a sample or
 * an error naming the file, never a crash (the unit tests also run under
 * AddressSanitizer) or a hang. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <png.h>

#include "tests/unit/test.h"
#include "worker/data/dataset.h"

enum { W = 40, H = 30, S = 16 };

static void pattern(unsigned char *px, int comps) {
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < comps; c++)
                px[(y * W + x) * comps + c] = (unsigned char)((x * 7 + y * 13 + c * 50) % 256);
}

/* A JPEG of W x H into *out (malloc'd), *len its size. */
static void make_jpeg(unsigned char **out, size_t *len) {
    unsigned char px[W * H * 3];
    pattern(px, 3);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned long n = 0;
    *out = NULL;
    jpeg_mem_dest(&c, out, &n);
    c.image_width = W, c.image_height = H, c.input_components = 3, c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = px + c.next_scanline * W * 3;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *len = n;
}

static void make_png(unsigned char **out, size_t *len) {
    unsigned char px[W * H * 4];
    pattern(px, 4);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = W, im.height = H, im.format = PNG_FORMAT_RGBA;
    png_alloc_size_t n = 0;
    CHECK(png_image_write_get_memory_size(im, n, 0, px, 0, NULL));
    *out = malloc(n);
    CHECK(png_image_write_to_memory(&im, *out, &n, 0, px, 0, NULL));
    *len = n;
}

static void put(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(b, 1, n, f) == n);
    fclose(f);
}

/* A folder with one class and one image, at `file` (returned path). */
static dataset *folder_with(const char *name, int train, char *file, size_t filelen) {
    const char *root = test_path("imgs");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s/cls", root, train ? "train" : "val");
    char cmd[700];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(system(cmd) == 0);
    snprintf(file, filelen, "%s/%s", dir, name);
    unsigned char one = 0;
    put(file, &one, 1);
    dataset_opts o = {.name = "imagefolder", .dir = root, .train = train, .image_size = S};
    dataset *d = NULL;
    char err[512];
    if (dataset_open(&o, &d, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    return d;
}

/* Decodes `bytes` as the folder's one image: 0 or an error naming it. */
static int decode(dataset *d, const char *file, const unsigned char *b, size_t n, int augment) {
    put(file, b, n);
    float x[3 * S * S];
    int32_t y;
    char err[1024] = "";
    int rc = dataset_sample(d, 0, augment, 7, 1, x, &y, err, sizeof err);
    if (rc && !strstr(err, file)) test_fail(__FILE__, __LINE__, "an error not naming the file: %s", err);
    if (rc == 0)
        for (int i = 0; i < 3 * S * S; i++) CHECK(x[i] > -3 && x[i] < 3); /* normalised bytes */
    return rc;
}

static void damage(const char *name, void (*make)(unsigned char **, size_t *)) {
    unsigned char *good;
    size_t n;
    make(&good, &n);
    char file[600];
    for (int train = 0; train <= 1; train++) {
        dataset *d = folder_with(name, train, file, sizeof file);
        CHECK_EQ(decode(d, file, good, n, train), 0);
        unsigned char *b = malloc(n);
        int errors = 0;
        for (size_t i = 0; i < n; i++) { /* every byte flipped */
            memcpy(b, good, n);
            b[i] ^= (unsigned char)(0x5A + i);
            errors += decode(d, file, b, n, train) != 0;
        }
        for (size_t k = 0; k < n; k++) /* cut at every length */
            errors += decode(d, file, good, k, train) != 0;
        CHECK(errors >= (int)n); /* every cut file at least is refused */
        free(b);
        dataset_close(d);
    }
    free(good);
}

TEST(imagefolder_damaged_jpeg_is_an_error_never_a_crash) { damage("a.jpg", make_jpeg); }

TEST(imagefolder_damaged_png_is_an_error_never_a_crash) { damage("a.png", make_png); }

/* The training view is the image's crop resized, mirrored or not: the
 * same draw gives the same sample, and views of an image whose columns
 * are all alike differ only where the crop falls, not by the flip. */
TEST(imagefolder_training_views_are_drawn_from_seed_epoch_index) {
    unsigned char *j;
    size_t n;
    make_jpeg(&j, &n);
    char file[600];
    dataset *d = folder_with("a.jpg", 1, file, sizeof file);
    put(file, j, n);
    float a[3 * S * S], b[3 * S * S], c[3 * S * S];
    int32_t y;
    char err[512];
    CHECK_EQ(dataset_sample(d, 0, 1, 7, 1, a, &y, err, sizeof err), 0);
    CHECK_EQ(dataset_sample(d, 0, 1, 7, 1, b, &y, err, sizeof err), 0);
    CHECK_MEM(a, sizeof a, b, sizeof b);
    int differs = 0;
    for (int e = 2; e < 6 && !differs; e++) {
        CHECK_EQ(dataset_sample(d, 0, 1, 7, e, c, &y, err, sizeof err), 0);
        differs = memcmp(a, c, sizeof a) != 0;
    }
    CHECK(differs); /* another epoch, another crop */
    dataset_close(d);
    free(j);
}

/* The layout the trainer takes, written as the image is resampled: the
 * same values as the C x H x W sample, reordered, in both views, whether
 * the view is mirrored or not (several epochs: crops and flips alike). */
static void nhwc_is_chw_reordered(const char *name, void (*make)(unsigned char **, size_t *)) {
    unsigned char *j;
    size_t n;
    make(&j, &n);
    char file[600];
    dataset *d = folder_with(name, 1, file, sizeof file);
    put(file, j, n);
    CHECK(dataset_native_nhwc(d));
    float chw[3 * S * S], hwc[3 * S * S];
    int32_t y;
    char err[512];
    for (int augment = 0; augment <= 1; augment++)
        for (int e = 0; e < 6; e++) {
            CHECK_EQ(dataset_sample(d, 0, augment, 7, e, chw, &y, err, sizeof err), 0);
            CHECK_EQ(dataset_sample_nhwc(d, 0, augment, 7, e, hwc, &y, err, sizeof err), 0);
            int same = 1;
            for (int p = 0; p < S * S; p++)
                for (int ch = 0; ch < 3; ch++) same &= hwc[p * 3 + ch] == chw[ch * S * S + p];
            CHECK(same);
        }
    dataset_close(d);
    free(j);
}

TEST(imagefolder_nhwc_sample_is_the_chw_sample_reordered) {
    nhwc_is_chw_reordered("a.jpg", make_jpeg);
    nhwc_is_chw_reordered("b.png", make_png);
}
