/* Unit tests of ddp-train's data: the real Fashion-MNIST files load with
 * the right sizes, labels and normalisation; missing, truncated and wrong
 * files give clear errors; small IDX and CIFAR-10 files written here load
 * with the right layout; synthetic data and augmentation are pure
 * functions of (seed, epoch, index); every format in the table has its
 * ops, and a sample that fails is reported the same way whatever the
 * threads; and the sampler splits a global batch across ranks exactly as
 * data.h promises. */
#include "common/rng.h"
#include "tests/unit/test.h"
#include "worker/data/dataset.h"
#include "worker/data/ds_format.h"
#include "worker/data/sampler.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#define FMNIST "/usr/share/datasets/fashion-mnist"
#define SIDE 28
#define PIX (SIDE * SIDE)

/* ---- Helpers ---------------------------------------------------------- */

static dataset *open_ok(dataset_opts o) {
    dataset *d = NULL;
    char err[512] = "";
    int rc = dataset_open(&o, &d, err, sizeof err);
    if (rc != 0) test_fail(__FILE__, __LINE__, "dataset_open(%s) = %d: %s", o.name, rc, err);
    return d;
}

/* dataset_batch, which must succeed. */
static void batch_ok(const dataset *d, const int64_t *idx, int n, int augment, uint64_t seed,
                     int epoch, float *x, int32_t *y) {
    char err[512] = "";
    int rc = dataset_batch(d, idx, n, augment, seed, epoch, x, y, err, sizeof err);
    if (rc != 0) test_fail(__FILE__, __LINE__, "dataset_batch = %d: %s", rc, err);
}

static void path_in(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", test_tmpdir(), name);
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(p, 1, n, f), n);
    CHECK_EQ(fclose(f), 0);
}

static void write_gz(const char *path, const void *p, size_t n) {
    gzFile f = gzopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(gzwrite(f, p, (unsigned)n), (long long)n);
    CHECK_EQ(gzclose(f), Z_OK);
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

/* A small IDX pair in test_tmpdir(): n images whose pixel k of image i is
 * (i + k) % 256 and whose labels are i % 10. `gz` picks the .gz names. */
static void write_idx_pair(const char *prefix, uint32_t n, uint32_t image_magic, int gz) {
    size_t ib = 16 + (size_t)n * PIX, lb = 8 + n;
    uint8_t *img = malloc(ib), *lab = malloc(lb);
    CHECK(img && lab);
    put_be32(img, image_magic), put_be32(img + 4, n), put_be32(img + 8, SIDE),
        put_be32(img + 12, SIDE);
    put_be32(lab, 2049), put_be32(lab + 4, n);
    for (uint32_t i = 0; i < n; i++) {
        for (int k = 0; k < PIX; k++) img[16 + (size_t)i * PIX + k] = (uint8_t)((i + k) % 256);
        lab[8 + i] = (uint8_t)(i % 10);
    }
    char name[128], path[512];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte%s", prefix, gz ? ".gz" : "");
    path_in(path, sizeof path, name);
    gz ? write_gz(path, img, ib) : write_file(path, img, ib);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte%s", prefix, gz ? ".gz" : "");
    path_in(path, sizeof path, name);
    gz ? write_gz(path, lab, lb) : write_file(path, lab, lb);
    free(img);
    free(lab);
}

/* Reads a whole file into memory (the caller frees it). */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    CHECK_EQ(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    CHECK(len > 0);
    rewind(f);
    uint8_t *p = malloc((size_t)len);
    CHECK(p != NULL);
    CHECK_EQ(fread(p, 1, (size_t)len, f), len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

static int open_fails(dataset_opts o, int want_rc, const char *want_in_err, char *err,
                      size_t errlen) {
    dataset *d = NULL;
    int rc = dataset_open(&o, &d, err, errlen);
    if (rc != want_rc)
        test_fail(__FILE__, __LINE__, "dataset_open = %d, expected %d (%s)", rc, want_rc, err);
    if (d != NULL) test_fail(__FILE__, __LINE__, "a failed open returned a data set");
    if (!strstr(err, want_in_err))
        test_fail(__FILE__, __LINE__, "error '%s' does not mention '%s'", err, want_in_err);
    return rc;
}

/* ---- Fashion-MNIST ---------------------------------------------------- */

static void check_fashion_split(int train, int64_t n, int per_class) {
    dataset *d = open_ok((dataset_opts){.name = "fashion-mnist", .train = train});
    CHECK_EQ(dataset_size(d), n);
    int c, h, w;
    dataset_shape(d, &c, &h, &w);
    CHECK_EQ(c, 1); CHECK_EQ(h, 28); CHECK_EQ(w, 28);
    CHECK_EQ(dataset_classes(d), 10);
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    float *x = malloc((size_t)n * PIX * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    CHECK(idx && x && y);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    batch_ok(d, idx, (int)n, 0, 1, 0, x, y);
    int hist[10] = {0};
    for (int64_t i = 0; i < n; i++) {
        CHECK(y[i] >= 0 && y[i] < 10);
        hist[y[i]]++;
    }
    for (int k = 0; k < 10; k++) CHECK_EQ(hist[k], per_class);
    free(idx), free(x), free(y);
    dataset_close(d);
}

TEST(data_fashion_mnist_train_loads) { check_fashion_split(1, 60000, 6000); }

TEST(data_fashion_mnist_test_loads) { check_fashion_split(0, 10000, 1000); }

TEST(data_fashion_mnist_is_normalised) {
    dataset *d = open_ok((dataset_opts){.name = "fashion-mnist", .train = 1});
    enum { N = 4000 };
    int64_t idx[N];
    for (int i = 0; i < N; i++) idx[i] = (int64_t)i * 15; /* spread over the set */
    float *x = malloc((size_t)N * PIX * sizeof *x);
    int32_t y[N];
    CHECK(x != NULL);
    batch_ok(d, idx, N, 0, 0, 0, x, y);
    double sum = 0, sq = 0;
    for (size_t k = 0; k < (size_t)N * PIX; k++) sum += x[k], sq += (double)x[k] * x[k];
    double mean = sum / ((double)N * PIX), sd = sqrt(sq / ((double)N * PIX) - mean * mean);
    if (fabs(mean) > 0.05 || fabs(sd - 1) > 0.1)
        test_fail(__FILE__, __LINE__, "normalised mean %.4f std %.4f", mean, sd);
    /* Black pixels map to -mean/std exactly as torchvision's Normalize does. */
    float lo = x[0];
    for (size_t k = 0; k < (size_t)N * PIX; k++) lo = x[k] < lo ? x[k] : lo;
    CHECK(fabsf(lo - (0.0f - 0.2860f) / 0.3530f) < 1e-5f);
    free(x);
    dataset_close(d);
}

/* ---- Errors ----------------------------------------------------------- */

TEST(data_missing_dir_is_enoent) {
    char dir[512], want[600], err[512];
    path_in(dir, sizeof dir, "no-such-dir");
    snprintf(want, sizeof want, "cannot open %s/train-images-idx3-ubyte.gz: No such file", dir);
    open_fails((dataset_opts){.name = "fashion-mnist", .dir = dir, .train = 1}, -ENOENT, want,
               err, sizeof err);
    CHECK(strstr(err, "install dataset-fashion-mnist or pass --data-dir") != NULL);
}

TEST(data_truncated_gzip_stream_errors) {
    size_t n;
    uint8_t *gz = slurp(FMNIST "/train-images-idx3-ubyte.gz", &n);
    char path[512], err[512];
    path_in(path, sizeof path, "train-images-idx3-ubyte.gz");
    write_file(path, gz, n / 3); /* the compressed stream cut a third of the way */
    free(gz);
    open_fails((dataset_opts){.name = "fashion-mnist", .dir = test_tmpdir(), .train = 1},
               -EINVAL, path, err, sizeof err);
    CHECK(strstr(err, "truncated") != NULL);
}

TEST(data_truncated_pixels_error) {
    /* A well-formed gzip file whose content stops early: the first 1000
     * images of the real file, under a header that still claims 60000. */
    gzFile in = gzopen(FMNIST "/train-images-idx3-ubyte.gz", "rb");
    CHECK(in != NULL);
    size_t n = 16 + 1000 * PIX;
    uint8_t *buf = malloc(n);
    CHECK(buf != NULL);
    CHECK_EQ(gzread(in, buf, (unsigned)n), (long long)n);
    gzclose(in);
    char path[512], err[512];
    path_in(path, sizeof path, "train-images-idx3-ubyte.gz");
    write_gz(path, buf, n);
    free(buf);
    open_fails((dataset_opts){.name = "fashion-mnist", .dir = test_tmpdir(), .train = 1},
               -EINVAL, path, err, sizeof err);
    CHECK(strstr(err, "truncated") != NULL);
}

TEST(data_wrong_magic_errors) {
    write_idx_pair("train", 20, 2049, 1);
    char err[512];
    open_fails((dataset_opts){.name = "fashion-mnist", .dir = test_tmpdir(), .train = 1},
               -EINVAL, "is not an IDX image file: magic number 2049, expected 2051", err,
               sizeof err);
}

TEST(data_label_count_must_match_images) {
    write_idx_pair("t10k", 20, 2051, 1);
    /* Replace the labels with a file holding one label fewer. */
    uint8_t lab[8 + 19] = {0};
    put_be32(lab, 2049), put_be32(lab + 4, 19);
    char path[512], err[512];
    path_in(path, sizeof path, "t10k-labels-idx1-ubyte.gz");
    write_gz(path, lab, sizeof lab);
    open_fails((dataset_opts){.name = "mnist", .dir = test_tmpdir(), .train = 0}, -EINVAL,
               "holds 19 labels but", err, sizeof err);
}

TEST(data_bad_labels_and_counts_error) {
    write_idx_pair("train", 20, 2051, 1);
    uint8_t lab[8 + 20] = {0};
    put_be32(lab, 2049), put_be32(lab + 4, 20);
    lab[8 + 13] = 10;
    char path[512], err[512];
    path_in(path, sizeof path, "train-labels-idx1-ubyte.gz");
    write_gz(path, lab, sizeof lab);
    open_fails((dataset_opts){.name = "mnist", .dir = test_tmpdir(), .train = 1}, -EINVAL,
               "label 10 of sample 13 is not below 10", err, sizeof err);
    /* A header claiming four billion images must not make it allocate them. */
    uint8_t img[16];
    put_be32(img, 2051), put_be32(img + 4, 0xFFFFFFF0u), put_be32(img + 8, 28),
        put_be32(img + 12, 28);
    path_in(path, sizeof path, "train-images-idx3-ubyte.gz");
    write_gz(path, img, sizeof img);
    open_fails((dataset_opts){.name = "mnist", .dir = test_tmpdir(), .train = 1}, -EINVAL,
               "claims 4294967280 images", err, sizeof err);
    put_be32(img + 4, 20), put_be32(img + 12, 32);
    write_gz(path, img, sizeof img);
    open_fails((dataset_opts){.name = "mnist", .dir = test_tmpdir(), .train = 1}, -EINVAL,
               "holds 28x32 images, expected 28x28", err, sizeof err);
}

TEST(data_unknown_name_errors) {
    char err[512];
    open_fails((dataset_opts){.name = "imagenet"}, -EINVAL, "unknown data set 'imagenet'", err,
               sizeof err);
    open_fails((dataset_opts){.name = "cifar10"}, -EINVAL, "needs --data-dir", err, sizeof err);
}

/* ---- Small IDX files -------------------------------------------------- */

TEST(data_mnist_reads_uncompressed_idx) {
    write_idx_pair("train", 12, 2051, 0);
    dataset *d = open_ok((dataset_opts){.name = "mnist", .dir = test_tmpdir(), .train = 1});
    CHECK_EQ(dataset_size(d), 12);
    int64_t idx[2] = {7, 3};
    float x[2 * PIX];
    int32_t y[2];
    batch_ok(d, idx, 2, 0, 0, 0, x, y);
    CHECK_EQ(y[0], 7); CHECK_EQ(y[1], 3);
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < PIX; k++) {
            float want = (float)((((idx[s] + k) % 256) / 255.0 - 0.1307) / 0.3081);
            if (fabsf(x[s * PIX + k] - want) > 1e-5f)
                test_fail(__FILE__, __LINE__, "sample %d pixel %d: %f, expected %f", s, k,
                          x[s * PIX + k], want);
        }
    dataset_close(d);
}

/* ---- CIFAR-10 --------------------------------------------------------- */

#define CIFAR_PIX 3072

/* Pixel (ch, y, x) of CIFAR record `r` in the tiny files below. */
static uint8_t cifar_value(int r, int ch, int y, int x) {
    return (uint8_t)(r * 7 + ch * 80 + y * 2 + x);
}

/* Writes `records` records into dir/name; record r of the whole set (first
 * + i) has label (first + i) % 10. */
static void write_cifar(const char *dir, const char *name, int first, int records) {
    uint8_t *buf = malloc((size_t)records * (1 + CIFAR_PIX));
    CHECK(buf != NULL);
    for (int i = 0; i < records; i++) {
        uint8_t *rec = buf + (size_t)i * (1 + CIFAR_PIX);
        rec[0] = (uint8_t)((first + i) % 10);
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    rec[1 + ch * 1024 + y * 32 + x] = cifar_value(first + i, ch, y, x);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_file(path, buf, (size_t)records * (1 + CIFAR_PIX));
    free(buf);
}

static void write_cifar_set(const char *dir) {
    for (int f = 0; f < 5; f++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", f + 1);
        write_cifar(dir, name, f * 3, 3);
    }
    write_cifar(dir, "test_batch.bin", 100, 2);
}

static void check_cifar_sample(const float *x, int r) {
    static const float mean[] = {0.4914f, 0.4822f, 0.4465f}, std[] = {0.2470f, 0.2435f, 0.2616f};
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < 32; y++)
            for (int xx = 0; xx < 32; xx++) {
                float want = (float)((cifar_value(r, ch, y, xx) / 255.0 - mean[ch]) / std[ch]);
                float got = x[ch * 1024 + y * 32 + xx];
                if (fabsf(got - want) > 1e-5f)
                    test_fail(__FILE__, __LINE__, "record %d (%d,%d,%d) = %f, expected %f", r, ch,
                              y, xx, got, want);
            }
}

TEST(data_cifar10_loads_labels_and_channel_layout) {
    write_cifar_set(test_tmpdir());
    dataset *d = open_ok((dataset_opts){.name = "cifar10", .dir = test_tmpdir(), .train = 1});
    CHECK_EQ(dataset_size(d), 15);
    int c, h, w;
    dataset_shape(d, &c, &h, &w);
    CHECK_EQ(c, 3); CHECK_EQ(h, 32); CHECK_EQ(w, 32);
    int64_t idx[15];
    for (int i = 0; i < 15; i++) idx[i] = 14 - i;
    float *x = malloc(15 * CIFAR_PIX * sizeof *x);
    int32_t y[15];
    CHECK(x != NULL);
    batch_ok(d, idx, 15, 0, 0, 0, x, y);
    for (int i = 0; i < 15; i++) {
        CHECK_EQ(y[i], (14 - i) % 10);
        check_cifar_sample(x + (size_t)i * CIFAR_PIX, 14 - i);
    }
    free(x);
    dataset_close(d);
    d = open_ok((dataset_opts){.name = "cifar10", .dir = test_tmpdir(), .train = 0});
    CHECK_EQ(dataset_size(d), 2);
    float one[CIFAR_PIX];
    batch_ok(d, (int64_t[]){1}, 1, 0, 0, 0, one, y);
    CHECK_EQ(y[0], 101 % 10);
    check_cifar_sample(one, 101);
    dataset_close(d);
}

TEST(data_cifar10_finds_batches_subfolder) {
    char sub[512];
    path_in(sub, sizeof sub, "cifar-10-batches-bin");
    CHECK_EQ(mkdir(sub, 0755), 0);
    write_cifar_set(sub);
    dataset *d = open_ok((dataset_opts){.name = "cifar10", .dir = test_tmpdir(), .train = 0});
    CHECK_EQ(dataset_size(d), 2);
    dataset_close(d);
}

TEST(data_cifar10_truncated_and_missing_files_error) {
    write_cifar_set(test_tmpdir());
    char path[512], err[512];
    path_in(path, sizeof path, "data_batch_4.bin");
    uint8_t partial[100] = {0};
    write_file(path, partial, sizeof partial);
    open_fails((dataset_opts){.name = "cifar10", .dir = test_tmpdir(), .train = 1}, -EINVAL,
               path, err, sizeof err);
    CHECK(strstr(err, "truncated") != NULL);
    CHECK_EQ(remove(path), 0);
    open_fails((dataset_opts){.name = "cifar10", .dir = test_tmpdir(), .train = 1}, -ENOENT,
               path, err, sizeof err);
}

/* ---- Synthetic data --------------------------------------------------- */

static dataset_opts synth(uint64_t seed) {
    return (dataset_opts){.name = "synthetic", .train = 1, .c = 3, .h = 20, .w = 24,
                          .classes = 7, .size = 500, .seed = seed};
}

TEST(data_synthetic_is_deterministic) {
    dataset *a = open_ok(synth(5)), *b = open_ok(synth(5)), *c = open_ok(synth(6));
    int ch, h, w;
    dataset_shape(a, &ch, &h, &w);
    CHECK_EQ(ch, 3); CHECK_EQ(h, 20); CHECK_EQ(w, 24);
    CHECK_EQ(dataset_size(a), 500); CHECK_EQ(dataset_classes(a), 7);
    enum { S = 3 * 20 * 24 };
    static float xa[4 * S], xb[4 * S], xc[4 * S], one[S];
    int32_t ya[4], yb[4], yc[4], y1;
    int64_t idx[4] = {0, 499, 17, 17};
    batch_ok(a, idx, 4, 0, 0, 0, xa, ya);
    batch_ok(b, idx, 4, 0, 0, 0, xb, yb);
    batch_ok(c, idx, 4, 0, 0, 0, xc, yc);
    CHECK_MEM(xa, sizeof xa, xb, sizeof xb);
    CHECK_MEM(ya, sizeof ya, yb, sizeof yb);
    CHECK_MEM(xa + 2 * S, S * sizeof(float), xa + 3 * S, S * sizeof(float));
    CHECK(memcmp(xa, xc, sizeof xa) != 0);
    /* A sample alone is the same as within a batch: it is made on demand. */
    batch_ok(a, (int64_t[]){499}, 1, 0, 0, 0, one, &y1);
    CHECK_MEM(one, sizeof one, xa + S, sizeof one);
    CHECK_EQ(y1, ya[1]);
    dataset_close(a), dataset_close(b), dataset_close(c);
}

TEST(data_synthetic_labels_and_values) {
    dataset *d = open_ok(synth(1));
    enum { N = 500, S = 3 * 20 * 24 };
    int64_t idx[N];
    for (int i = 0; i < N; i++) idx[i] = i;
    float *x = malloc((size_t)N * S * sizeof *x);
    int32_t y[N];
    CHECK(x != NULL);
    batch_ok(d, idx, N, 0, 0, 0, x, y);
    int seen[7] = {0};
    for (int i = 0; i < N; i++) {
        CHECK(y[i] >= 0 && y[i] < 7);
        seen[y[i]]++;
    }
    for (int k = 0; k < 7; k++) CHECK(seen[k] > 40); /* about 71 each */
    double sum = 0, sq = 0;
    for (size_t k = 0; k < (size_t)N * S; k++) sum += x[k], sq += (double)x[k] * x[k];
    double mean = sum / ((double)N * S), sd = sqrt(sq / ((double)N * S) - mean * mean);
    /* N(0,1) plus 0.5 on one band in one channel: mean about 0.5/(7*3). */
    if (fabs(mean - 0.5 / 21) > 0.02 || fabs(sd - 1) > 0.05)
        test_fail(__FILE__, __LINE__, "synthetic mean %.4f std %.4f", mean, sd);
    free(x);
    dataset_close(d);
}

TEST(data_synthetic_classes_are_learnable) {
    /* A nearest-class-mean rule on the mean of each (channel, band) must beat
     * chance by far: the pattern is what lets a smoke test's loss fall. */
    dataset_opts o = synth(2);
    o.c = 1, o.h = 28, o.w = 28, o.classes = 10;
    dataset *d = open_ok(o);
    enum { N = 300 };
    float x[PIX];
    int32_t y;
    int right = 0;
    for (int i = 0; i < N; i++) {
        batch_ok(d, (int64_t[]){i}, 1, 0, 0, 0, x, &y);
        int best = 0;
        double best_mean = -1e9;
        for (int k = 0; k < 10; k++) {
            int y0 = k * 28 / 10, y1 = (k + 1) * 28 / 10;
            double s = 0;
            for (int p = y0 * 28; p < y1 * 28; p++) s += x[p];
            s /= (y1 - y0) * 28;
            if (s > best_mean) best_mean = s, best = k;
        }
        right += best == y;
    }
    if (right < N * 8 / 10) test_fail(__FILE__, __LINE__, "only %d of %d guessed", right, N);
    dataset_close(d);
}

TEST(data_synthetic_test_split_differs) {
    dataset_opts o = synth(3);
    dataset *tr = open_ok(o);
    o.train = 0, o.size = 0;
    dataset *te = open_ok(o);
    CHECK_EQ(dataset_size(te), 10000);
    enum { S = 3 * 20 * 24 };
    static float a[S], b[S];
    int32_t ya, yb;
    batch_ok(tr, (int64_t[]){4}, 1, 0, 0, 0, a, &ya);
    batch_ok(te, (int64_t[]){4}, 1, 0, 0, 0, b, &yb);
    CHECK(memcmp(a, b, sizeof a) != 0);
    dataset_close(tr), dataset_close(te);
}

/* ---- Augmentation ----------------------------------------------------- */

/* Whether aug is img (c x h x w) cropped at offset (dy, dx) from the image
 * padded with pad[ch], then mirrored if flip. */
static int is_transform(const float *aug, const float *img, int c, int h, int w,
                        const float *pad, int dy, int dx, int flip) {
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int sy = y + dy, sx = (flip ? w - 1 - x : x) + dx;
                float want = sy >= 0 && sy < h && sx >= 0 && sx < w
                                 ? img[(ch * h + sy) * w + sx]
                                 : pad[ch];
                if (aug[(ch * h + y) * w + x] != want) return 0;
            }
    return 1;
}

/* Checks that every augmented sample is one of the (2p+1)^2 x 2 crops and
 * flips of its plain version, and that flips and shifts both occur. */
static void check_augment_is_crop_or_flip(dataset *d, int p, const float *pad) {
    int c, h, w;
    dataset_shape(d, &c, &h, &w);
    size_t s = (size_t)c * h * w;
    float *plain = malloc(s * sizeof *plain), *aug = malloc(s * sizeof *aug);
    CHECK(plain && aug);
    int flips = 0, shifts = 0, n = 60;
    for (int i = 0; i < n; i++) {
        int64_t idx = i * 7;
        int32_t y0, y1;
        batch_ok(d, &idx, 1, 0, 9, 2, plain, &y0);
        batch_ok(d, &idx, 1, 1, 9, 2, aug, &y1);
        CHECK_EQ(y0, y1);
        int found = 0;
        for (int dy = -p; dy <= p && !found; dy++)
            for (int dx = -p; dx <= p && !found; dx++)
                for (int f = 0; f < 2 && !found; f++)
                    if (is_transform(aug, plain, c, h, w, pad, dy, dx, f))
                        found = 1, flips += f, shifts += dy != 0 || dx != 0;
        if (!found) test_fail(__FILE__, __LINE__, "sample %lld is no crop or flip", (long long)idx);
    }
    CHECK(flips > n / 5 && flips < n * 4 / 5);
    CHECK(shifts > n / 2);
    free(plain), free(aug);
}

TEST(data_augment_crops_and_flips_fashion_mnist) {
    dataset *d = open_ok((dataset_opts){.name = "fashion-mnist", .train = 0});
    const float pad[] = {(0.0f - 0.2860f) / 0.3530f}; /* a black pixel, normalised */
    check_augment_is_crop_or_flip(d, 2, pad);
    dataset_close(d);
}

TEST(data_augment_crops_and_flips_synthetic) {
    dataset_opts o = synth(4);
    o.h = 32, o.w = 36;
    dataset *d = open_ok(o);
    const float pad[] = {0, 0, 0};
    check_augment_is_crop_or_flip(d, 4, pad);
    dataset_close(d);
}

TEST(data_augment_flip_mirrors) {
    /* An asymmetric image whose mirror is not one of its crops: a flipped
     * sample must be found exactly as the mirror (dy = dx = 0 included). */
    dataset_opts o = synth(8);
    o.c = 1, o.h = 4, o.w = 5, o.size = 2000;
    dataset *d = open_ok(o);
    float plain[20], aug[20];
    const float pad[] = {0};
    int32_t y;
    int mirrored = 0;
    for (int64_t i = 0; i < 2000 && !mirrored; i++) {
        batch_ok(d, &i, 1, 0, 1, 0, plain, &y);
        batch_ok(d, &i, 1, 1, 1, 0, aug, &y);
        mirrored = is_transform(aug, plain, 1, 4, 5, pad, 0, 0, 1);
    }
    CHECK(mirrored);
    for (int r = 0; r < 4; r++)
        for (int x = 0; x < 5; x++) CHECK(aug[r * 5 + x] == plain[r * 5 + 4 - x]);
    dataset_close(d);
}

TEST(data_augment_is_deterministic_per_epoch) {
    dataset *d = open_ok(synth(3));
    enum { N = 8, S = 3 * 20 * 24 };
    static float a[N * S], b[N * S], c[N * S];
    int32_t y[N];
    int64_t idx[N] = {1, 2, 3, 4, 5, 6, 7, 8};
    batch_ok(d, idx, N, 1, 42, 3, a, y);
    batch_ok(d, idx, N, 1, 42, 3, b, y);
    CHECK_MEM(a, sizeof a, b, sizeof b);
    batch_ok(d, idx, N, 1, 42, 4, c, y);
    CHECK(memcmp(a, c, sizeof a) != 0);
    batch_ok(d, idx, N, 1, 43, 3, c, y);
    CHECK(memcmp(a, c, sizeof a) != 0);
    /* A sample's augmentation does not depend on its place in the batch. */
    float one[S];
    batch_ok(d, &idx[5], 1, 1, 42, 3, one, y);
    CHECK_MEM(one, sizeof one, a + 5 * S, sizeof one);
    dataset_close(d);
}

TEST(data_large_batch_matches_samples_one_by_one) {
    /* A batch this large is filled by several threads; each sample must
     * still be exactly what it is when asked for alone. */
    dataset_opts o = synth(12);
    o.h = 32, o.w = 32;
    dataset *d = open_ok(o);
    enum { N = 96, S = 3 * 32 * 32 };
    static float x[N * S], one[S];
    int32_t y[N], y1;
    int64_t idx[N];
    for (int i = 0; i < N; i++) idx[i] = (i * 37) % 500;
    batch_ok(d, idx, N, 1, 5, 7, x, y);
    for (int i = 0; i < N; i++) {
        batch_ok(d, &idx[i], 1, 1, 5, 7, one, &y1);
        CHECK_EQ(y1, y[i]);
        CHECK_MEM(one, sizeof one, x + (size_t)i * S, sizeof one);
    }
    dataset_close(d);
}

/* ---- The format table ------------------------------------------------- */

TEST(data_every_format_has_its_ops) {
    size_t n = 0;
    for (const dataset_format *const *f = ds_formats; *f; f++, n++) {
        if (!(*f)->name || !(*f)->name[0] || !(*f)->open || !(*f)->sample || !(*f)->close)
            test_fail(__FILE__, __LINE__, "format %zu (%s) lacks a name or an op", n,
                      (*f)->name ? (*f)->name : "no name");
        CHECK(dataset_format_name(n) == (*f)->name);
        for (const dataset_format *const *g = ds_formats; g != f; g++)
            if (strcmp((*g)->name, (*f)->name) == 0)
                test_fail(__FILE__, __LINE__, "two formats are named %s", (*f)->name);
    }
    CHECK(n >= 1);
    CHECK(dataset_format_name(n) == NULL);
}

TEST(data_unknown_name_lists_the_table) {
    char want[512], err[512];
    size_t len = (size_t)snprintf(want, sizeof want, "unknown data set 'imagenet' (use ");
    for (size_t i = 0; dataset_format_name(i); i++) {
        const char *sep = !dataset_format_name(i + 1)   ? ")"
                          : !dataset_format_name(i + 2) ? " or "
                                                        : ", ";
        len += (size_t)snprintf(want + len, sizeof want - len, "%s%s", dataset_format_name(i), sep);
    }
    CHECK(len < sizeof want);
    open_fails((dataset_opts){.name = "imagenet"}, -EINVAL, want, err, sizeof err);
    CHECK_STR(err, want);
}

/* A format of the tests' own, as one that reads a file per sample would
 * behave when some files are gone: 1000 samples of 16x16 bytes, sample i
 * all i % 256 with label i % 10, except that those of index 7 mod 10
 * fail. */
enum { FLAKY_N = 1000, FLAKY_SIDE = 16, FLAKY_PIX = FLAKY_SIDE * FLAKY_SIDE };
static const float flaky_mean[] = {0.5f}, flaky_std[] = {0.25f};

static int flaky_open(const dataset_format *f, const dataset_opts *o, void **state,
                      ds_info *info, char *err, size_t errlen) {
    (void)f, (void)o, (void)err, (void)errlen;
    *state = NULL;
    *info = (ds_info){.n = FLAKY_N, .c = 1, .h = FLAKY_SIDE, .w = FLAKY_SIDE, .classes = 10,
                      .pixels = DS_BYTES, .mean = flaky_mean, .std = flaky_std};
    return 0;
}

static int flaky_sample(const void *state, int64_t index, const ds_draw *dr, void *px,
                        int32_t *label, char *err, size_t errlen) {
    (void)state, (void)dr;
    if (index % 10 == 7) {
        snprintf(err, errlen, "sample %lld: its file is gone", (long long)index);
        return -ENOENT;
    }
    memset(px, (int)(index % 256), FLAKY_PIX);
    *label = (int32_t)(index % 10);
    return 0;
}

static void flaky_close(void *state) { (void)state; }

static const dataset_format flaky = {
    .name = "flaky", .open = flaky_open, .sample = flaky_sample, .close = flaky_close};

TEST(data_batch_reports_its_first_failed_sample) {
    dataset *d = NULL;
    char err[512] = "";
    CHECK_EQ(ds_open_format(&flaky, &(dataset_opts){.name = "flaky"}, &d, err, sizeof err), 0);
    /* 400 samples are enough for OpenMP threads; every tenth fails, and
     * the first in idx's order (idx[2] = 997) is the one reported, however
     * the threads ran. */
    enum { N = 400 };
    static float x[N * FLAKY_PIX];
    int32_t y[N];
    int64_t idx[N];
    for (int i = 0; i < N; i++) idx[i] = FLAKY_N - 1 - i;
    for (int round = 0; round < 5; round++) {
        CHECK_EQ(dataset_batch(d, idx, N, 1, 3, 0, x, y, err, sizeof err), -ENOENT);
        CHECK_STR(err, "sample 997: its file is gone");
    }
    /* The samples that did not fail are whole: normalised, and labelled. */
    int64_t good[2] = {998, 3};
    batch_ok(d, good, 2, 0, 0, 0, x, y);
    CHECK_EQ(y[0], 8); CHECK_EQ(y[1], 3);
    for (int k = 0; k < FLAKY_PIX; k++) {
        CHECK(x[k] == (float)((998 % 256 / 255.0 - 0.5f) / 0.25f));
        CHECK(x[FLAKY_PIX + k] == (float)((3 / 255.0 - 0.5f) / 0.25f));
    }
    dataset_close(d);
}

/* ---- Sampler ---------------------------------------------------------- */

static void check_permutation(const int64_t *order, int64_t n) {
    char *seen = calloc((size_t)n, 1);
    CHECK(seen != NULL);
    for (int64_t i = 0; i < n; i++) {
        CHECK(order[i] >= 0 && order[i] < n);
        CHECK(!seen[order[i]]);
        seen[order[i]] = 1;
    }
    free(seen);
}

TEST(data_sampler_epoch_order_is_a_permutation) {
    enum { N = 1000 };
    static int64_t a[N], b[N], c[N], e[N];
    sampler_epoch_order(N, 7, 0, 1, a);
    sampler_epoch_order(N, 7, 1, 1, b);
    sampler_epoch_order(N, 7, 0, 1, c);
    check_permutation(a, N);
    check_permutation(b, N);
    CHECK(memcmp(a, b, sizeof a) != 0);
    CHECK_MEM(a, sizeof a, c, sizeof c);
    sampler_epoch_order(N, 8, 0, 1, c);
    CHECK(memcmp(a, c, sizeof a) != 0);
    int fixed = 0;
    for (int i = 0; i < N; i++) fixed += a[i] == i;
    CHECK(fixed < 10); /* a shuffle keeps about one element in place */
    sampler_epoch_order(N, 7, 3, 0, e);
    for (int i = 0; i < N; i++) CHECK_EQ(e[i], i);
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* All ranks of one global step together hold order[pos .. pos+world*batch)
 * (wrapping at n), each position exactly once. */
static void check_global_step(const int64_t *order, int64_t n, int64_t pos, int world,
                              int batch) {
    int64_t got[256], want[256], idx[64];
    int total = world * batch;
    for (int r = 0; r < world; r++) {
        sampler_rank_batch(order, n, pos, world, r, batch, idx);
        for (int j = 0; j < batch; j++) got[r * batch + j] = idx[j];
    }
    for (int k = 0; k < total; k++) want[k] = order[(pos + k) % n];
    qsort(got, (size_t)total, sizeof *got, cmp_i64);
    qsort(want, (size_t)total, sizeof *want, cmp_i64);
    CHECK_MEM(got, total * sizeof *got, want, total * sizeof *want);
}

TEST(data_sampler_ranks_cover_the_global_batch) {
    enum { N = 103 };
    static int64_t order[N];
    sampler_epoch_order(N, 11, 2, 1, order);
    for (int world = 1; world <= 4; world++)
        for (int64_t pos = 0; pos < N; pos += world * 6)
            check_global_step(order, N, pos, world, 6);
}

TEST(data_sampler_two_ranks_interleave_one) {
    enum { N = 50, B = 4 };
    static int64_t order[N];
    sampler_epoch_order(N, 5, 1, 1, order);
    int64_t one[2 * B], r0[B], r1[B];
    int64_t pos = 16;
    sampler_rank_batch(order, N, pos, 1, 0, 2 * B, one);
    sampler_rank_batch(order, N, pos, 2, 0, B, r0);
    sampler_rank_batch(order, N, pos, 2, 1, B, r1);
    for (int j = 0; j < B; j++) {
        CHECK_EQ(r0[j], order[pos + 2 * j]);
        CHECK_EQ(r1[j], order[pos + 1 + 2 * j]);
        CHECK_EQ(r0[j], one[2 * j]);
        CHECK_EQ(r1[j], one[2 * j + 1]);
    }
}

TEST(data_sampler_wraps_at_the_epoch_end) {
    int64_t order[10], idx[3];
    sampler_epoch_order(10, 1, 0, 1, order);
    sampler_rank_batch(order, 10, 8, 2, 0, 3, idx);
    CHECK_EQ(idx[0], order[8]); CHECK_EQ(idx[1], order[0]); CHECK_EQ(idx[2], order[2]);
    sampler_rank_batch(order, 10, 8, 2, 1, 3, idx);
    CHECK_EQ(idx[0], order[9]); CHECK_EQ(idx[1], order[1]); CHECK_EQ(idx[2], order[3]);
    check_global_step(order, 10, 8, 3, 2);
}

TEST(data_sampler_steps) {
    CHECK_EQ(sampler_steps(60000, 1, 128, 0), 469);
    CHECK_EQ(sampler_steps(60000, 1, 128, 1), 468);
    CHECK_EQ(sampler_steps(60000, 4, 32, 0), 469);
    CHECK_EQ(sampler_steps(60000, 2, 100, 0), 300);
    CHECK_EQ(sampler_steps(60000, 2, 100, 1), 300);
    CHECK_EQ(sampler_steps(10, 3, 2, 0), 2);
    CHECK_EQ(sampler_steps(10, 3, 2, 1), 1);
    CHECK_EQ(sampler_steps(5, 4, 2, 0), 1);
    CHECK_EQ(sampler_steps(5, 4, 2, 1), 0);
}

/* ---- Generator -------------------------------------------------------- */

TEST(data_rng_streams_and_distributions) {
    rng_t a, b;
    rng_seed(&a, 1, 2, 3);
    rng_seed(&b, 1, 2, 3);
    for (int i = 0; i < 100; i++) CHECK(rng_next(&a) == rng_next(&b));
    rng_seed(&a, 1, 2, 3);
    rng_seed(&b, 2, 1, 3); /* the words' order matters */
    CHECK(rng_next(&a) != rng_next(&b));
    rng_seed(&a, 0, 0, 0);
    int hist[7] = {0};
    double fsum = 0, nsum = 0, nsq = 0;
    enum { N = 70000 };
    for (int i = 0; i < N; i++) {
        uint64_t k = rng_below(&a, 7);
        CHECK(k < 7);
        hist[k]++;
        float f = rng_float(&a);
        CHECK(f >= 0.0f && f < 1.0f);
        fsum += f;
        double z = rng_normal(&a);
        nsum += z, nsq += z * z;
    }
    for (int k = 0; k < 7; k++) CHECK(abs(hist[k] - N / 7) < 500);
    CHECK(fabs(fsum / N - 0.5) < 0.01);
    CHECK(fabs(nsum / N) < 0.02);
    CHECK(fabs(nsq / N - 1) < 0.03);
}
