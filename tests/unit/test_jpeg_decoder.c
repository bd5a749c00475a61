/* --decode gpu's parts that run without a GPU: the data set handing out
 * JPEGs with their crop (dataset_jpeg_of), the CPU's twin of the device
 * decoder (worker/backend/cpu/cpu_jpeg.c, which computes per pixel what
 * the CUDA kernel computes: crop_resize.h), and the loader handing the
 * JPEGs on. The twin's samples must be the host pipeline's within the
 * rounding of the two decodes (the host's decodes scaled in the DCT
 * domain, the device's whole): photographs' crops at two sizes, both
 * views, mirrored or not, 4:2:0, 4:4:4, grayscale and progressive; what
 * the device must not decode (PNG, CMYK, damaged files) stays the host's. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>

#include "common/rng.h"
#include "tests/unit/test.h"
#include "worker/backend/bf16.h"
#include "worker/backend/jpeg_decoder.h"
#include "worker/train/loader.h"

typedef enum { PLAIN, FULL_CHROMA, GRAY, PROGRESSIVE, CMYK } jpeg_kind;

/* Photograph-like pixels: smooth gradients, an edge, and noise. */
static unsigned char *photo(int w, int h, int comps, uint64_t seed) {
    unsigned char *px = malloc((size_t)w * h * comps);
    rng_t r;
    rng_seed(&r, seed, 1, 2);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < comps; c++) {
                double v = 128 + 90 * sin(x * 0.05 + c) * cos(y * 0.07 - c) +
                           (x > w / 2 ? 30 : -30) + (double)(rng_next(&r) % 21) - 10;
                px[((size_t)y * w + x) * comps + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return px;
}

static void write_jpeg(const char *path, int w, int h, jpeg_kind kind, uint64_t seed) {
    int comps = kind == GRAY ? 1 : kind == CMYK ? 4 : 3;
    unsigned char *px = photo(w, h, comps, seed);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h, c.input_components = comps;
    c.in_color_space = kind == GRAY ? JCS_GRAYSCALE : kind == CMYK ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (kind == FULL_CHROMA) c.comp_info[0].h_samp_factor = c.comp_info[0].v_samp_factor = 1;
    if (kind == PROGRESSIVE) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = px + (size_t)c.next_scanline * w * comps;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
    free(px);
}

static void write_png(const char *path, int w, int h) {
    unsigned char *px = photo(w, h, 3, 5);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w, im.height = (png_uint_32)h, im.format = PNG_FORMAT_RGB;
    CHECK(png_image_write_to_file(&im, path, 0, px, 0, NULL));
    free(px);
}

/* DIR/{train,val}/c/ with the images the tests below take, in this order
 * (sorted names): a..f JPEGs of each kind and size, g a PNG, h CMYK. */
static const char *make_folder(void) {
    const char *root = test_path("jpegs");
    static const struct {
        const char *name;
        int w, h;
        jpeg_kind kind;
    } imgs[] = {{"a.jpg", 300, 200, PLAIN},      {"b.jpg", 181, 243, FULL_CHROMA},
                {"c.jpg", 250, 170, GRAY},       {"d.jpg", 222, 199, PROGRESSIVE},
                {"e.jpg", 640, 480, PLAIN},      {"f.jpg", 97, 75, PLAIN},
                {"h.jpg", 120, 90, CMYK}};
    for (int split = 0; split < 2; split++) {
        char dir[600], path[700];
        snprintf(dir, sizeof dir, "%s/%s/c", root, split ? "val" : "train");
        char cmd[700];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        CHECK(system(cmd) == 0);
        for (size_t i = 0; i < sizeof imgs / sizeof *imgs; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, imgs[i].name);
            write_jpeg(path, imgs[i].w, imgs[i].h, imgs[i].kind, i);
        }
        snprintf(path, sizeof path, "%s/g.png", dir);
        write_png(path, 150, 100);
    }
    return root;
}

enum { JPEGS = 6, PNG_AT = 6, CMYK_AT = 7, COUNT = 8 };

static dataset *open_folder(const char *root, int train, int size) {
    dataset_opts o = {.name = "imagefolder", .dir = root, .train = train, .image_size = size};
    dataset *d;
    char err[512];
    if (dataset_open(&o, &d, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    CHECK_EQ(dataset_size(d), COUNT);
    return d;
}

static jpeg_decoder *twin(backend *be, const dataset *d, int size) {
    float scale[3], shift[3];
    dataset_byte_norm(d, scale, shift);
    jpeg_decoder *j;
    char err[256];
    if (jpeg_decoder_create(be, size, scale, shift, &j, err, sizeof err))
        test_fail(__FILE__, __LINE__, "%s", err);
    return j;
}

/* The twin's sample against the host pipeline's, in byte levels: the
 * mean and the largest absolute difference over every value; 1 where the
 * host decoded at full scale too (its box too small to scale down in the
 * DCT domain and keep twice the output: ds_imagefolder.c's DCT_MARGIN). */
static int compare(const dataset *d, jpeg_decoder *j, int64_t index, int augment, int epoch,
                   int size, double *mean, double *most) {
    size_t n = (size_t)size * size * 3;
    float *host = malloc(n * sizeof *host), *dev = malloc(n * sizeof *dev);
    char err[512];
    int32_t y, yj;
    if (dataset_sample_nhwc(d, index, augment, 3, epoch, host, &y, err, sizeof err))
        test_fail(__FILE__, __LINE__, "%s", err);
    dataset_jpeg dj;
    CHECK_EQ(dataset_jpeg_of(d, index, augment, 3, epoch, &dj, &yj, err, sizeof err), 0);
    CHECK_EQ(yj, y);
    jpeg_image im = {.data = dj.data, .len = dj.len, .width = dj.width, .height = dj.height,
                     .flip = dj.flip};
    memcpy(im.box, dj.box, sizeof im.box);
    unsigned char ok = 0;
    CHECK_EQ(jpeg_decoder_run(j, 1, &im, dev, &ok, err, sizeof err), 0);
    CHECK_EQ(ok, 1);
    float scale[3], shift[3];
    dataset_byte_norm(d, scale, shift);
    double sum = 0;
    *most = 0;
    for (size_t i = 0; i < n; i++) {
        double levels = fabs((double)dev[i] - host[i]) / scale[i % 3];
        sum += levels;
        if (levels > *most) *most = levels;
    }
    *mean = sum / (double)n;
    free(dj.data);
    free(host), free(dev);
    double w = dj.box[2] - dj.box[0], h = dj.box[3] - dj.box[1], need = 2.0 * size;
    return w * 7 / 8 < need || h * 7 / 8 < need;
}

TEST(jpeg_decoder_host_twin_draws_the_host_pipelines_samples) {
    const char *root = make_folder();
    backend *be;
    char err[256];
    if (cpu_backend_create(0, 1, &be, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    /* the worst mean and largest difference, where the host decoded at
     * full scale (0) and where it scaled in the DCT domain (1) */
    double worst_mean[2] = {0, 0}, worst[2] = {0, 0};
    int cases[2] = {0, 0};
    for (int size = 24; size <= 96; size += 72)
        for (int train = 0; train <= 1; train++) {
            dataset *d = open_folder(root, train, size);
            jpeg_decoder *j = twin(be, d, size);
            for (int64_t i = 0; i < JPEGS; i++)
                for (int epoch = 0; epoch < (train ? 6 : 1); epoch++) {
                    double mean, most;
                    int k = !compare(d, j, i, train, epoch, size, &mean, &most);
                    cases[k]++;
                    if (mean > worst_mean[k]) worst_mean[k] = mean;
                    if (most > worst[k]) worst[k] = most;
                }
            jpeg_decoder_destroy(j);
            dataset_close(d);
        }
    CHECK(cases[0] >= 20 && cases[1] >= 20);
    /* Both decoding whole: the same filter over the same pixels, summed
     * in another order (a value at .5 may round either way). */
    if (worst_mean[0] > 0.01 || worst[0] > 1.5)
        test_fail(__FILE__, __LINE__,
                  "decoded whole, the twin's samples differ from the host's by %.3f levels on "
                  "average, %.0f at most", worst_mean[0], worst[0]);
    /* The host's DCT-domain scaling is a low-pass filter of its own: on
     * these noisy images (noise of +-10 levels a pixel) a few levels on
     * average; on photographs about one. */
    if (worst_mean[1] > 4 || worst[1] > 20)
        test_fail(__FILE__, __LINE__,
                  "the twin's samples differ from the host's scaled decode by %.3f levels on "
                  "average, %.0f at most", worst_mean[1], worst[1]);
    be->ops->destroy(be);
}

/* A crop the twin takes from the wrong place, or mirrored when it should
 * not be, is far from the host's: the comparison above can fail. */
TEST(jpeg_decoder_host_twin_wrong_box_is_seen) {
    const char *root = make_folder();
    backend *be;
    char err[512];
    if (cpu_backend_create(0, 1, &be, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    enum { S = 32 };
    dataset *d = open_folder(root, 1, S);
    jpeg_decoder *j = twin(be, d, S);
    float host[S * S * 3], dev[S * S * 3];
    int32_t y;
    int flips = 0;
    for (int epoch = 0; epoch < 8; epoch++) {
        dataset_jpeg dj;
        CHECK_EQ(dataset_sample_nhwc(d, 0, 1, 3, epoch, host, &y, err, sizeof err), 0);
        CHECK_EQ(dataset_jpeg_of(d, 0, 1, 3, epoch, &dj, &y, err, sizeof err), 0);
        jpeg_image im = {.data = dj.data, .len = dj.len, .width = dj.width,
                         .height = dj.height, .flip = !dj.flip};
        memcpy(im.box, dj.box, sizeof im.box);
        unsigned char ok;
        CHECK_EQ(jpeg_decoder_run(j, 1, &im, dev, &ok, err, sizeof err), 0);
        double sum = 0;
        for (int i = 0; i < S * S * 3; i++) sum += fabs(dev[i] - host[i]);
        flips += sum / (S * S * 3) > 0.1; /* normalised units: about 6 levels */
        free(dj.data);
    }
    CHECK_EQ(flips, 8);
    jpeg_decoder_destroy(j);
    dataset_close(d);
    be->ops->destroy(be);
}

/* PNGs and CMYK JPEGs are the host's; an image the decoder cannot decode
 * is reported, for the host to draw, and its place left alone, as is an
 * image with no data. */
TEST(jpeg_decoder_leaves_what_it_cannot_decode_to_the_host) {
    const char *root = make_folder();
    dataset *d = open_folder(root, 1, 16);
    CHECK(dataset_has_jpegs(d));
    dataset_jpeg dj;
    int32_t y;
    char err[512];
    CHECK_EQ(dataset_jpeg_of(d, PNG_AT, 1, 3, 0, &dj, &y, err, sizeof err), -ENOTSUP);
    CHECK_EQ(dataset_jpeg_of(d, CMYK_AT, 1, 3, 0, &dj, &y, err, sizeof err), -ENOTSUP);
    CHECK(dj.data == NULL);
    CHECK_EQ(dataset_jpeg_of(d, 0, 1, 3, 0, &dj, &y, err, sizeof err), 0);
    backend *be;
    if (cpu_backend_create(0, 1, &be, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    jpeg_decoder *j = twin(be, d, 16);
    jpeg_image im[3] = {{.data = dj.data, .len = dj.len, .width = dj.width, .height = dj.height},
                        /* not the image the box was drawn for: refused */
                        {.data = dj.data, .len = dj.len, .width = dj.width + 1,
                         .height = dj.height},
                        {.data = NULL}};
    memcpy(im[0].box, dj.box, sizeof dj.box);
    memcpy(im[1].box, dj.box, sizeof dj.box);
    float x[3][16 * 16 * 3];
    memset(x, 0x7F, sizeof x);
    unsigned char ok[3] = {9, 9, 9};
    CHECK_EQ(jpeg_decoder_run(j, 3, im, x, ok, err, sizeof err), 0);
    CHECK_EQ(ok[0], 1);
    CHECK_EQ(ok[1], 0);
    CHECK_EQ(ok[2], 0);
    unsigned char untouched[sizeof x[2]];
    memset(untouched, 0x7F, sizeof untouched);
    CHECK_MEM(x[2], sizeof x[2], untouched, sizeof untouched); /* data NULL: left alone */
    free(dj.data);
    jpeg_decoder_destroy(j);
    be->ops->destroy(be);
    /* the plain recipe crops on the host (dataset.c's augmentation) */
    dataset_opts o = {.name = "imagefolder", .dir = root, .train = 1, .image_size = 16,
                      .image_plain = 1};
    dataset *plain;
    CHECK_EQ(dataset_open(&o, &plain, err, sizeof err), 0);
    CHECK(!dataset_has_jpegs(plain));
    dataset_close(plain);
    dataset_close(d);
}

/* A run in two halves: finish writes the batch of the last start (a start
 * not finished is dropped, as the trainer drops a batch decoded ahead for
 * a step that does not come), and a finish with no start is refused. */
TEST(jpeg_decoder_finish_writes_the_last_start) {
    const char *root = make_folder();
    dataset *d = open_folder(root, 1, 16);
    char err[512];
    backend *be;
    if (cpu_backend_create(0, 1, &be, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    jpeg_decoder *j = twin(be, d, 16);
    dataset_jpeg dj[2];
    jpeg_image im[2];
    for (int k = 0; k < 2; k++) {
        int32_t y;
        CHECK_EQ(dataset_jpeg_of(d, k, 1, 3, 0, &dj[k], &y, err, sizeof err), 0);
        im[k] = (jpeg_image){.data = dj[k].data, .len = dj[k].len, .width = dj[k].width,
                             .height = dj[k].height, .flip = dj[k].flip};
        memcpy(im[k].box, dj[k].box, sizeof im[k].box);
    }
    float whole[16 * 16 * 3], halves[16 * 16 * 3];
    unsigned char ok = 0;
    CHECK_EQ(jpeg_decoder_run(j, 1, &im[1], whole, &ok, err, sizeof err), 0);
    CHECK_EQ(ok, 1);
    CHECK_EQ(jpeg_decoder_finish(j, halves, err, sizeof err), -EINVAL); /* run finished it */
    CHECK(strstr(err, "never started") != NULL);
    unsigned char ok0 = 0, ok1 = 0;
    CHECK_EQ(jpeg_decoder_start(j, 1, &im[0], &ok0, err, sizeof err), 0);
    CHECK_EQ(jpeg_decoder_start(j, 1, &im[1], &ok1, err, sizeof err), 0);
    memset(halves, 0x7F, sizeof halves);
    CHECK_EQ(jpeg_decoder_finish(j, halves, err, sizeof err), 0);
    CHECK_EQ(ok1, 1);
    CHECK_MEM(halves, sizeof halves, whole, sizeof whole);
    for (int k = 0; k < 2; k++) free(dj[k].data);
    jpeg_decoder_destroy(j);
    be->ops->destroy(be);
    dataset_close(d);
}

/* The loader with jpegs: every JPEG of the batch handed out with its crop
 * (as dataset_jpeg_of gives it), the rest drawn on the host as without
 * jpegs, the labels alike; loader_draw_again draws a JPEG's sample on the
 * host as the loader would have. */
TEST(loader_hands_out_jpegs_and_draws_the_rest) {
    const char *root = make_folder();
    enum { S = 16 };
    dataset *d = open_folder(root, 1, S);
    backend *be;
    char err[512];
    if (cpu_backend_create(0, 1, &be, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    loader_opts o = {.ds = d, .batch = COUNT, .world = 1, .rank = 0, .seed = 3, .augment = 1,
                     .epochs = 2, .threads = 2, .depth = 1, .be = be, .jpegs = 1};
    loader *l;
    CHECK_EQ(loader_create(&o, &l, err, sizeof err), 0);
    o.jpegs_permille = 500; /* --decode-share 0.5: every other sample at most */
    loader *half;
    CHECK_EQ(loader_create(&o, &half, err, sizeof err), 0);
    o.jpegs = 0;
    loader *plain;
    CHECK_EQ(loader_create(&o, &plain, err, sizeof err), 0);
    jpeg_decoder *j = twin(be, d, S);
    float scale[3], shift[3];
    dataset_byte_norm(d, scale, shift);
    for (int epoch = 0; epoch < 2; epoch++) {
        const void *x, *px;
        const int32_t *y, *py;
        CHECK_EQ(loader_get(l, epoch, 0, &x, &y, err, sizeof err), 0);
        CHECK_EQ(loader_get(plain, epoch, 0, &px, &py, err, sizeof err), 0);
        CHECK_MEM(y, COUNT * sizeof *y, py, COUNT * sizeof *py);
        const jpeg_image *im = loader_jpegs(l);
        CHECK(im != NULL);
        CHECK(loader_jpegs(plain) == NULL);
        size_t per = (size_t)S * S * 3 * sizeof(float);
        int jpegs = 0;
        for (int i = 0; i < COUNT; i++) {
            if (!im[i].data) { /* drawn on the host: as the plain loader drew it */
                CHECK_MEM((const char *)x + i * per, per, (const char *)px + i * per, per);
                continue;
            }
            jpegs++;
            float again[S * S * 3], dev[S * S * 3];
            CHECK_EQ(loader_draw_again(l, i, again, err, sizeof err), 0);
            CHECK_MEM(again, per, (const char *)px + i * per, per);
            /* and decoded by the twin, the host's sample within the DCT
             * scaling's difference (a wrong box or flip is far off) */
            unsigned char ok;
            CHECK_EQ(jpeg_decoder_run(j, 1, &im[i], dev, &ok, err, sizeof err), 0);
            CHECK_EQ(ok, 1);
            double sum = 0;
            for (int k = 0; k < S * S * 3; k++) sum += fabs(dev[k] - again[k]) / scale[k % 3];
            if (sum / (S * S * 3) > 4)
                test_fail(__FILE__, __LINE__, "sample %d decoded from the loader's JPEG differs "
                          "from the host's by %.1f levels on average", i, sum / (S * S * 3));
        }
        CHECK_EQ(jpegs, JPEGS);
        /* with a share, the odd places' JPEGs alone; the rest drawn */
        const void *hx;
        const int32_t *hy;
        CHECK_EQ(loader_get(half, epoch, 0, &hx, &hy, err, sizeof err), 0);
        CHECK_MEM(hy, COUNT * sizeof *hy, py, COUNT * sizeof *py);
        const jpeg_image *him = loader_jpegs(half);
        int handed = 0, could = 0;
        for (int i = 0; i < COUNT; i++) {
            could += i % 2 == 1 && im[i].data;
            if (him[i].data) {
                handed++;
                CHECK(i % 2 == 1 && im[i].data);
                CHECK_MEM(him[i].box, sizeof him[i].box, im[i].box, sizeof im[i].box);
            } else {
                CHECK_MEM((const char *)hx + i * per, per, (const char *)px + i * per, per);
            }
        }
        CHECK_EQ(handed, could);
        CHECK(handed > 0 && handed < JPEGS);
    }
    jpeg_decoder_destroy(j);
    loader_destroy(half);
    loader_destroy(l);
    loader_destroy(plain);
    be->ops->destroy(be);
    dataset_close(d);
}
