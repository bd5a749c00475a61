/* --data imagefolder: a folder of images as torchvision's ImageFolder
 * reads it. DIR/train/<class>/... and DIR/val/<class>/...: the classes are
 * the sorted names of the subfolders, and a class's images every .jpg,
 * .jpeg and .png file below its folder (any case), in the order of
 * sorted(os.walk()). Images are decoded per sample, from the file, with
 * the reference ResNet recipe applied on the way:
 *   training    RandomResizedCrop(S) (scale 0.08 to 1, ratio 3/4 to 4/3,
 *               ten tries, then the centre) and a horizontal flip with
 *               probability 1/2, both drawn from (seed, epoch, index);
 *   evaluation  Resize(S * 256 / 224) of the shorter side, CenterCrop(S);
 * (--image-recipe plain: the whole image resized to S x S instead, and
 * the padded random crop and flip of the small data sets for training.)
 * S is --image-size; resampling is bilinear with PIL's antialiasing (the
 * filter widens with the reduction), values ImageNet's mean and std.
 * JPEGs are decoded with libjpeg-turbo no larger and no further than the
 * crop needs: DCT-domain scaling to the smallest of 1/8 .. 8/8 that keeps
 * the crop at least twice S wide and high (DCT_MARGIN), and only the rows
 * and (to the iMCU) the columns the crop and its filter read. Grayscale images become RGB,
 * CMYK ones (Adobe's inverted included) RGB as PIL converts them, a PNG's
 * alpha is dropped as PIL's convert("RGB") does. A file that is not a
 * JPEG or a PNG, a truncated or corrupt one, is an error naming it. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>

#include "common/fs.h"
#include "common/jpeg_fail.h"
#include "common/rng.h"
#include "worker/data/ds_format.h"

/* libjpeg-turbo's DCT-domain scaling decodes a reduced image at the cost
 * of a fraction of the pixels, but it is a low-pass filter of its own:
 * scaled down to the output's size it departs from PIL's full decode and
 * bilinear reduction by 5 levels of 255 on average on detailed images (up
 * to 50). Keeping twice the output's resolution leaves the last reduction
 * to the same filter as PIL's, within a level on average. */
#define DCT_MARGIN 2

/* An image of more pixels is refused, as PIL refuses one of more than
 * twice its Image.MAX_IMAGE_PIXELS (a decompression bomb, or a damaged
 * header): decoding it would take gigabytes. */
#define MAX_PIXELS (2 * 89478485LL)

static const float IMAGENET_MEAN[3] = {0.485f, 0.456f, 0.406f};
static const float IMAGENET_STD[3] = {0.229f, 0.224f, 0.225f};

/* The extensions torchvision's ImageFolder takes that ddp-train does not
 * decode: such a file is an error rather than an image silently left out. */
static const char *const FOREIGN[] = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", NULL};

typedef struct {
    char *paths;     /* the images' paths, NUL-terminated, one after another */
    size_t *off;     /* n: where each path starts */
    int32_t *labels; /* n */
    int64_t n;
    int size;  /* the side of a sample: --image-size */
    int train; /* the training recipe (else evaluation's) */
    int plain; /* --image-recipe plain: the whole image resized, no crop of our own */
    /* the ResNet recipe: samples are written as normalised floats at once,
     * byte * scale + shift (ToTensor and Normalize, in float: within an
     * ulp or two of the bytes dataset.c would normalise) */
    float scale[4], shift[4];
} folder;

/* ---- Listing ----------------------------------------------------------- */

typedef struct {
    char *path; /* root + "/" + name */
    size_t root_len;
} entry;

typedef struct {
    entry *e;
    size_t n, cap;
} entries;

static int dot_or_dotdot(const char *name) {
    return name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2]));
}

static int has_ext(const char *name, const char *ext) {
    size_t n = strlen(name), k = strlen(ext);
    return n > k && strcasecmp(name + n - k, ext) == 0;
}

static int is_image_name(const char *name) {
    return has_ext(name, ".jpg") || has_ext(name, ".jpeg") || has_ext(name, ".png");
}

static int is_foreign_name(const char *name) {
    for (int i = 0; FOREIGN[i]; i++)
        if (has_ext(name, FOREIGN[i])) return 1;
    return 0;
}

/* sorted(os.walk()): by the directory's path, then by the file's name. */
static int entry_order(const void *a, const void *b) {
    const entry *x = a, *y = b;
    size_t n = x->root_len < y->root_len ? x->root_len : y->root_len;
    int c = memcmp(x->path, y->path, n);
    if (c) return c;
    if (x->root_len != y->root_len) return x->root_len < y->root_len ? -1 : 1;
    return strcmp(x->path + x->root_len + 1, y->path + y->root_len + 1);
}

static int name_order(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The images below dir (following links, as os.walk(followlinks=True)),
 * appended to out. depth bounds a loop of links. */
static int walk(const char *dir, entries *out, int depth, char *err, size_t errlen) {
    if (depth > 32)
        return err_set(err, errlen, -ELOOP, "%s: folders nested more than 32 deep (a loop of "
                                            "symbolic links?)", dir);
    DIR *d = opendir(dir);
    if (!d) return err_set(err, errlen, -errno, "cannot read the folder %s: %s", dir, strerror(errno));
    struct dirent *de;
    int rc = 0;
    size_t root_len = strlen(dir);
    while (rc == 0 && (de = readdir(d))) {
        if (dot_or_dotdot(de->d_name)) continue;
        char *path = NULL;
        if (asprintf(&path, "%s/%s", dir, de->d_name) < 0) {
            rc = err_set(err, errlen, -ENOMEM, "out of memory listing %s", dir);
            break;
        }
        struct stat st;
        if (stat(path, &st) != 0) { /* a dangling link: os.walk leaves it out too */
            free(path);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            rc = walk(path, out, depth + 1, err, errlen);
            free(path);
            continue;
        }
        if (!is_image_name(de->d_name)) {
            if (is_foreign_name(de->d_name))
                rc = err_set(err, errlen, -EINVAL,
                             "%s: ddp-train reads JPEG and PNG images only (torchvision's "
                             "ImageFolder would read this one): convert it or move it out",
                             path);
            free(path);
            continue;
        }
        if (out->n == out->cap) {
            size_t cap = out->cap ? 2 * out->cap : 1024;
            entry *e = realloc(out->e, cap * sizeof *e);
            if (!e) {
                free(path);
                rc = err_set(err, errlen, -ENOMEM, "out of memory listing %s", dir);
                break;
            }
            out->e = e, out->cap = cap;
        }
        out->e[out->n++] = (entry){path, root_len};
    }
    closedir(d);
    return rc;
}

/* The class folders of root, sorted: *names (each malloc'd) and *n. */
static int list_classes(const char *root, char ***names, int *n, char *err, size_t errlen) {
    *names = NULL, *n = 0;
    DIR *d = opendir(root);
    if (!d) return err_set(err, errlen, -errno, "cannot read %s: %s", root, strerror(errno));
    struct dirent *de;
    int cap = 0, rc = 0;
    while ((de = readdir(d))) {
        if (dot_or_dotdot(de->d_name)) continue;
        char path[PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", root, de->d_name) >= (int)sizeof path ||
            stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **v = realloc(*names, (size_t)cap * sizeof *v);
            if (!v) {
                rc = -ENOMEM;
                break;
            }
            *names = v;
        }
        if (!((*names)[*n] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (rc) return err_set(err, errlen, rc, "out of memory listing %s", root);
    if (*n) qsort(*names, (size_t)*n, sizeof **names, name_order);
    return 0;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void folder_close(void *state) {
    folder *f = state;
    if (!f) return;
    free(f->paths);
    free(f->off);
    free(f->labels);
    free(f);
}

/* Every class's images, in order, into f (paths, offsets, labels). */
static int list_images(folder *f, const char *root, char **classes, int nclasses, char *err,
                       size_t errlen) {
    entries all = {0};
    size_t bytes = 0;
    int rc = 0;
    for (int k = 0; k < nclasses && rc == 0; k++) {
        size_t first = all.n;
        char dir[PATH_MAX];
        if (snprintf(dir, sizeof dir, "%s/%s", root, classes[k]) >= (int)sizeof dir) {
            rc = err_set(err, errlen, -ENAMETOOLONG, "%s/%s: the path is too long", root,
                         classes[k]);
            break;
        }
        if ((rc = walk(dir, &all, 0, err, errlen))) break;
        if (all.n == first) {
            rc = err_set(err, errlen, -ENOENT,
                         "the class folder %s holds no .jpg, .jpeg or .png image (torchvision's "
                         "ImageFolder refuses an empty class too): remove it or add its images",
                         dir);
            break;
        }
        qsort(all.e + first, all.n - first, sizeof *all.e, entry_order);
        for (size_t i = first; i < all.n; i++) {
            bytes += strlen(all.e[i].path) + 1;
            all.e[i].root_len = (size_t)k; /* sorted: now the label */
        }
    }
    if (rc == 0) {
        f->n = (int64_t)all.n;
        f->paths = malloc(bytes ? bytes : 1);
        f->off = malloc((all.n ? all.n : 1) * sizeof *f->off);
        f->labels = malloc((all.n ? all.n : 1) * sizeof *f->labels);
        if (!f->paths || !f->off || !f->labels)
            rc = err_set(err, errlen, -ENOMEM, "out of memory listing %s", root);
    }
    size_t at = 0;
    for (size_t i = 0; i < all.n; i++) {
        if (rc == 0) {
            size_t len = strlen(all.e[i].path) + 1;
            memcpy(f->paths + at, all.e[i].path, len);
            f->off[i] = at;
            f->labels[i] = (int32_t)all.e[i].root_len;
            at += len;
        }
        free(all.e[i].path);
    }
    free(all.e);
    return rc;
}

static int folder_open(const dataset_format *fmt, const dataset_opts *o, void **state,
                       ds_info *info, char *err, size_t errlen) {
    (void)fmt;
    *state = NULL;
    if (!o->dir || !o->dir[0])
        return err_set(err, errlen, -EINVAL,
                       "--data imagefolder needs --data-dir DIR: the folder with train/ and "
                       "val/, each with a folder of images per class (torchvision's "
                       "ImageFolder layout)");
    char root[PATH_MAX];
    const char *split = o->train ? "train" : "val";
    if (snprintf(root, sizeof root, "%s/%s", o->dir, split) >= (int)sizeof root)
        return err_set(err, errlen, -ENAMETOOLONG, "--data-dir %s: the path is too long", o->dir);
    struct stat st;
    if (stat(root, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, errlen, -ENOENT,
                       "%s: no such folder (--data imagefolder reads DIR/train/<class>/... and "
                       "DIR/val/<class>/..., torchvision's ImageFolder layout)",
                       root);
    char **classes;
    int nclasses;
    int rc = list_classes(root, &classes, &nclasses, err, errlen);
    if (rc) return rc;
    if (nclasses == 0) {
        free_names(classes, nclasses);
        return err_set(err, errlen, -ENOENT,
                       "%s has no class folders (one folder of images per class)", root);
    }
    folder *f = calloc(1, sizeof *f);
    if (!f) {
        free_names(classes, nclasses);
        return err_set(err, errlen, -ENOMEM, "out of memory opening %s", root);
    }
    f->size = o->image_size > 0 ? o->image_size : 224;
    f->train = o->train;
    f->plain = o->image_plain;
    rc = list_images(f, root, classes, nclasses, err, errlen);
    free_names(classes, nclasses);
    if (rc) {
        folder_close(f);
        return rc;
    }
    for (int ch = 0; ch < 3; ch++) {
        f->scale[ch] = (float)(1.0 / (255.0 * IMAGENET_STD[ch]));
        f->shift[ch] = (float)(-IMAGENET_MEAN[ch] / IMAGENET_STD[ch]);
    }
    /* plain: bytes, which dataset.c normalises and pads with black as it
     * augments; the ResNet recipe pads nothing, and its floats are written
     * directly (a pass over the sample saved) */
    *info = (ds_info){.n = f->n, .c = 3, .h = f->size, .w = f->size, .classes = nclasses,
                      .pixels = f->plain ? DS_BYTES : DS_FLOATS, .mean = IMAGENET_MEAN,
                      .std = IMAGENET_STD, .own_augment = !f->plain, .nhwc = !f->plain};
    *state = f;
    return 0;
}

/* ---- The crop -------------------------------------------------------- */

/* A region of the image, in its pixels (the resampling's box). */
typedef struct {
    double x0, y0, x1, y1;
} box;

static double uniform(rng_t *r, double lo, double hi) {
    return lo + (hi - lo) * (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* torchvision's RandomResizedCrop.get_params, drawn from r. */
static box random_resized_crop(rng_t *r, int width, int height) {
    double area = (double)width * height, lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    for (int t = 0; t < 10; t++) {
        double target = area * uniform(r, 0.08, 1.0), ratio = exp(uniform(r, lr0, lr1));
        int w = (int)nearbyint(sqrt(target * ratio)), h = (int)nearbyint(sqrt(target / ratio));
        if (w > 0 && w <= width && h > 0 && h <= height) {
            int i = (int)rng_below(r, (uint64_t)(height - h + 1));
            int j = (int)rng_below(r, (uint64_t)(width - w + 1));
            return (box){j, i, j + w, i + h};
        }
    }
    double in_ratio = (double)width / height;
    int w = width, h = height;
    if (in_ratio < 3.0 / 4.0) h = (int)nearbyint(w / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0) w = (int)nearbyint(h * (4.0 / 3.0));
    int i = (height - h) / 2, j = (width - w) / 2;
    return (box){j, i, j + w, i + h};
}

/* Resize(size * 256 / 224) then CenterCrop(size), as a box of the image. */
static box resize_center_crop(int size, int width, int height) {
    int r = size * 256 / 224, nw, nh;
    if (width <= height) nw = r, nh = (int)((long long)r * height / width);
    else nh = r, nw = (int)((long long)r * width / height);
    double top = nearbyint((nh - size) / 2.0), left = nearbyint((nw - size) / 2.0);
    double sx = (double)width / nw, sy = (double)height / nh;
    return (box){left * sx, top * sy, (left + size) * sx, (top + size) * sy};
}

/* ---- Resampling ------------------------------------------------------- */

/* One axis of PIL's bilinear resampling of [b0, b1) of `in` pixels to `out`:
 * each output pixel's first source pixel, how many it reads, and `taps`
 * weights (zero past its last), the triangle filter widened by the
 * reduction (antialiasing). */
typedef struct {
    int taps, most; /* weights kept per pixel; the most that are not zero */
    int *first, *count;
    float *w;
} axis;

static int axis_plan(axis *a, double b0, double b1, int in, int out) {
    double scale = (b1 - b0) / out, fscale = scale > 1 ? scale : 1, support = fscale;
    a->taps = (int)ceil(support) * 2 + 1;
    a->first = malloc((size_t)out * sizeof *a->first);
    a->count = malloc((size_t)out * sizeof *a->count);
    a->w = calloc((size_t)out * a->taps, sizeof *a->w);
    if (!a->first || !a->count || !a->w) return -ENOMEM;
    for (int o = 0; o < out; o++) {
        double center = b0 + (o + 0.5) * scale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        if (lo < 0) lo = 0;
        if (hi > in) hi = in;
        if (hi - lo > a->taps) hi = lo + a->taps;
        float *w = a->w + (size_t)o * a->taps;
        double sum = 0;
        for (int x = lo; x < hi; x++) {
            double d = fabs((x - center + 0.5) / fscale);
            w[x - lo] = d < 1 ? (float)(1 - d) : 0.0f;
            sum += w[x - lo];
        }
        if (sum > 0)
            for (int x = 0; x < hi - lo; x++) w[x] = (float)(w[x] / sum);
        while (hi > lo && w[hi - 1 - lo] == 0) hi--; /* the zero weights at the end */
        a->first[o] = lo;
        a->count[o] = hi > lo ? hi - lo : 0;
        if (a->count[o] > a->most) a->most = a->count[o];
    }
    return 0;
}

static void axis_free(axis *a) {
    free(a->first);
    free(a->count);
    free(a->w);
}

/* Four floats, four integers: a pixel's R, G, B and a fourth value
 * carried along. */
typedef float px4 __attribute__((vector_size(16)));
typedef int32_t int4 __attribute__((vector_size(16)));

/* Where resample writes a sample. */
typedef struct {
    void *px;
    const float *scale, *shift; /* floats, byte * scale + shift (4 each); NULL: bytes */
    int nhwc;                   /* H x W x 3 (floats only); else 3 planes */
} sink;

/* The box of an image of 4-byte pixels (R, G, B, and one not used; iw x
 * ih, rows of stride bytes) resampled to size x size into out, mirrored
 * with flip. An output row at a time: vertically first, the source rows
 * the filter reads weighed into one row of floats (contiguous values,
 * which the compiler vectorises: AVX2 where the CPU has it, each value
 * computed alike either way); then each pixel horizontally, its four
 * values a vector, rounded to bytes as PIL's image holds them, and
 * written out. */
__attribute__((target_clones("avx2", "default"))) static int
resample(const unsigned char *img, int iw, int ih, size_t stride, box b, int size, int flip,
         sink out) {
    axis ax = {0}, ay = {0};
    float *row = NULL;
    int rc = -ENOMEM;
    if (axis_plan(&ax, b.x0, b.x1, iw, size) || axis_plan(&ay, b.y0, b.y1, ih, size)) goto out;
    /* the columns the horizontal pass reads; and room past them, zero, for
     * the pixels that read fewer than the most (the rest of their weights
     * are zero), so that every pixel reads as many */
    int c0 = ax.first[0], c1 = ax.first[size - 1] + ax.count[size - 1];
    if (c1 < c0) c1 = c0;
    size_t nv = (size_t)(c1 - c0) * 4;
    row = calloc(nv + (size_t)(ax.most + ax.first[size - 1] - c0 + 1) * 4, sizeof *row);
    if (!row) goto out;
    size_t plane = (size_t)size * size, last = plane - 1;
    const int4 zero = {0, 0, 0, 0}, top = {255, 255, 255, 255};
    px4 scale = {0}, shift = {0};
    if (out.scale) memcpy(&scale, out.scale, sizeof scale), memcpy(&shift, out.shift, sizeof shift);
    for (int o = 0; o < size; o++) {
        const float *w = ay.w + (size_t)o * ay.taps;
        memset(row, 0, nv * sizeof *row);
        for (int k = 0; k < ay.count[o]; k++) {
            const unsigned char *src = img + (size_t)(ay.first[o] + k) * stride + (size_t)c0 * 4;
            float wk = w[k];
            for (size_t i = 0; i < nv; i++) row[i] += wk * (float)src[i];
        }
        const px4 *r4 = (const px4 *)row;
        size_t at = (size_t)o * size;
        /* in the output's order, so that each pixel's 16 bytes written
         * below overrun only into the next one's, still to come */
        for (int ox = 0; ox < size; ox++) {
            int x = flip ? size - 1 - ox : ox;
            const float *wx = ax.w + (size_t)x * ax.taps;
            const px4 *p = r4 + (ax.first[x] - c0);
            px4 s = {0, 0, 0, 0};
            for (int k = 0; k < ax.most; k++) s += wx[k] * p[k];
            /* PIL's rounding to a byte: the weights are positive and sum
             * to 1, so a value is within rounding of [0, 255], converted
             * first and then clamped as an integer */
            int4 q = __builtin_convertvector(s + 0.5f, int4);
            q &= q > zero;   /* a comparison: all ones where true */
            int4 high = q > top;
            q = (q & ~high) | (top & high);
            size_t i = at + (size_t)ox;
            if (!out.scale) {
                unsigned char *px = out.px;
                for (int ch = 0; ch < 3; ch++) px[ch * plane + i] = (unsigned char)q[ch];
                continue;
            }
            px4 v = __builtin_convertvector(q, px4) * scale + shift;
            float *px = out.px;
            if (out.nhwc && i != last) memcpy(px + 3 * i, &v, sizeof v);
            else if (out.nhwc) px[3 * i] = v[0], px[3 * i + 1] = v[1], px[3 * i + 2] = v[2];
            else px[i] = v[0], px[plane + i] = v[1], px[2 * plane + i] = v[2];
        }
    }
    rc = 0;
out:
    axis_free(&ax);
    axis_free(&ay);
    free(row);
    return rc;
}

/* ---- Decoding ------------------------------------------------------------ */

static sink sink_of(const folder *f, const ds_draw *dr, void *px) {
    return (sink){px, f->plain ? NULL : f->scale, f->plain ? NULL : f->shift, dr->nhwc};
}

/* The box of the image this sample takes, and whether it is mirrored. */
static box draw_box(const folder *f, const ds_draw *dr, int64_t index, int w, int h, int *flip) {
    *flip = 0;
    if (f->plain) return (box){0, 0, w, h};
    if (!f->train || !dr->augment) return resize_center_crop(f->size, w, h);
    rng_t r;
    rng_seed(&r, dr->seed, (uint64_t)(int64_t)dr->epoch, (uint64_t)index);
    box b = random_resized_crop(&r, w, h);
    *flip = (int)(rng_next(&r) >> 63);
    return b;
}

static int too_large(const char *path, int w, int h, char *err, size_t errlen) {
    return err_set(err, errlen, -EFBIG,
                   "%s: %d x %d pixels, more than %lld (PIL refuses it too: a decompression "
                   "bomb, or a damaged header)",
                   path, w, h, MAX_PIXELS);
}

/* CMYK (inverted: Adobe's) to RGB as PIL's convert("RGB") from CMYK:
 * R = (255 - C)(255 - K) / 255, rounded. In place, 4 bytes a pixel. */
static void cmyk_to_rgb(unsigned char *row, int n, int inverted) {
    for (int i = 0; i < n; i++) {
        unsigned char *p = row + 4 * i;
        int c = p[0], m = p[1], y = p[2], k = p[3];
        if (inverted) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
        int nk = 255 - k;
        p[0] = (unsigned char)((255 - c) * nk / 255.0 + 0.5);
        p[1] = (unsigned char)((255 - m) * nk / 255.0 + 0.5);
        p[2] = (unsigned char)((255 - y) * nk / 255.0 + 0.5);
    }
}

static int decode_jpeg(const folder *f, const ds_draw *dr, int64_t index, const char *path,
                       const unsigned char *data, size_t len, void *out, char *err,
                       size_t errlen) {
    struct jpeg_decompress_struct ci;
    struct jpeg_fail e;
    unsigned char *volatile pix = NULL;
    jpeg_fail_init(&ci, &e);
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&ci);
        free(pix);
        return err_set(err, errlen, -EBADMSG, "%s: a damaged JPEG image: %s", path, e.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    int w = (int)ci.image_width, h = (int)ci.image_height, flip;
    if ((long long)w * h > MAX_PIXELS) {
        jpeg_destroy_decompress(&ci);
        return too_large(path, w, h, err, errlen);
    }
    box b = draw_box(f, dr, index, w, h, &flip);
    /* DCT scaling: the smallest m/8 at which the box is still DCT_MARGIN
     * times the output, wide and high */
    int m = 1;
    double need = (double)DCT_MARGIN * f->size;
    while (m < 8 && ((b.x1 - b.x0) * m / 8 < need || (b.y1 - b.y0) * m / 8 < need)) m++;
    ci.scale_num = (unsigned)m, ci.scale_denom = 8;
    int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    ci.out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGBX; /* 4 bytes a pixel, for resample */
    ci.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&ci);
    int sw = (int)ci.output_width, sh = (int)ci.output_height;
    double fx = (double)sw / w, fy = (double)sh / h;
    box sb = {b.x0 * fx, b.y0 * fy, b.x1 * fx, b.y1 * fy};
    /* the rows and columns the filter reads, with a pixel to spare */
    double sup_x = (sb.x1 - sb.x0) / f->size, sup_y = (sb.y1 - sb.y0) / f->size;
    sup_x = (sup_x > 1 ? sup_x : 1) + 2, sup_y = (sup_y > 1 ? sup_y : 1) + 2;
    int c0 = (int)floor(sb.x0 - sup_x), c1 = (int)ceil(sb.x1 + sup_x);
    int r0 = (int)floor(sb.y0 - sup_y), r1 = (int)ceil(sb.y1 + sup_y);
    c0 = c0 < 0 ? 0 : c0, r0 = r0 < 0 ? 0 : r0, c1 = c1 > sw ? sw : c1, r1 = r1 > sh ? sh : r1;
    JDIMENSION xoff = (JDIMENSION)c0, cw = (JDIMENSION)(c1 - c0);
    if (cw < (JDIMENSION)sw) jpeg_crop_scanline(&ci, &xoff, &cw); /* widened to iMCUs */
    int comps = ci.output_components;
    size_t stride = (size_t)cw * comps;
    pix = malloc(stride * (size_t)(r1 - r0));
    if (!pix) {
        jpeg_destroy_decompress(&ci);
        return err_set(err, errlen, -ENOMEM, "%s: out of memory decoding", path);
    }
    if (r0 > 0) jpeg_skip_scanlines(&ci, (JDIMENSION)r0);
    while ((int)ci.output_scanline < r1) {
        JSAMPROW row = pix + stride * (ci.output_scanline - (JDIMENSION)r0);
        jpeg_read_scanlines(&ci, &row, 1);
    }
    if (cmyk)
        for (int y = 0; y < r1 - r0; y++) cmyk_to_rgb(pix + stride * y, (int)cw, ci.saw_Adobe_marker);
    jpeg_abort_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    box rel = {sb.x0 - xoff, sb.y0 - r0, sb.x1 - xoff, sb.y1 - r0};
    int rc = resample(pix, (int)cw, r1 - r0, stride, rel, f->size, flip, sink_of(f, dr, out));
    free(pix);
    if (rc) return err_set(err, errlen, rc, "%s: out of memory resampling", path);
    return 0;
}

static int decode_png(const folder *f, const ds_draw *dr, int64_t index, const char *path,
                      const unsigned char *data, size_t len, void *out, char *err,
                      size_t errlen) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, data, len))
        return err_set(err, errlen, -EBADMSG, "%s: a damaged PNG image: %s", path, im.message);
    if ((long long)im.width * im.height > MAX_PIXELS) {
        png_image_free(&im);
        return too_large(path, (int)im.width, (int)im.height, err, errlen);
    }
    im.format = PNG_FORMAT_RGBA; /* the alpha then dropped, as PIL's convert("RGB") */
    size_t stride = (size_t)im.width * 4;
    unsigned char *pix = malloc(stride * im.height);
    if (!pix) {
        png_image_free(&im);
        return err_set(err, errlen, -ENOMEM, "%s: out of memory decoding", path);
    }
    if (!png_image_finish_read(&im, NULL, pix, (png_int_32)stride, NULL)) {
        free(pix);
        return err_set(err, errlen, -EBADMSG, "%s: a damaged PNG image: %s", path, im.message);
    }
    int w = (int)im.width, h = (int)im.height, flip;
    box b = draw_box(f, dr, index, w, h, &flip);
    int rc = resample(pix, w, h, stride, b, f->size, flip, sink_of(f, dr, out)); /* (alpha unread) */
    free(pix);
    if (rc) return err_set(err, errlen, rc, "%s: out of memory resampling", path);
    return 0;
}

/* The whole file into memory. */
static int read_file(const char *path, unsigned char **data, size_t *len, char *err,
                     size_t errlen) {
    *data = NULL;
    const char *kind;
    int fd = fs_open_regular(path, O_RDONLY, &kind); /* a FIFO never holds the loader up */
    if (fd < 0)
        return kind ? err_set(err, errlen, fd, "%s is %s, not an image file", path, kind)
                    : err_set(err, errlen, fd, "cannot read %s: %s", path, strerror(-fd));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, errlen, -e, "cannot read %s: %s", path, strerror(e));
    }
    size_t n = (size_t)st.st_size, got = 0;
    unsigned char *b = malloc(n ? n : 1);
    if (!b) {
        close(fd);
        return err_set(err, errlen, -ENOMEM, "out of memory reading %s (%zu bytes)", path, n);
    }
    while (got < n) {
        ssize_t k = read(fd, b + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            close(fd);
            free(b);
            return err_set(err, errlen, -e, "cannot read %s: %s", path,
                           k < 0 ? strerror(e) : "the file shrank while it was read");
        }
        got += (size_t)k;
    }
    close(fd);
    *data = b, *len = n;
    return 0;
}

/* Whether a JPEG's end (its EOI marker) is there: a file cut short is an
 * error even where the crop would not read the part that is missing. */
static int jpeg_has_end(const unsigned char *d, size_t n) {
    while (n >= 2 && d[n - 1] == 0) n--; /* padding some writers leave */
    return n >= 2 && d[n - 2] == 0xFF && d[n - 1] == 0xD9;
}

static int folder_sample(const void *state, int64_t index, const ds_draw *dr, void *px,
                         int32_t *label, char *err, size_t errlen) {
    const folder *f = state;
    const char *path = f->paths + f->off[index];
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = read_file(path, &data, &len, err, errlen);
    if (rc) return rc;
    static const unsigned char png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
        if (!jpeg_has_end(data, len))
            rc = err_set(err, errlen, -EBADMSG,
                         "%s: a truncated JPEG image (it lacks its end marker)", path);
        else
            rc = decode_jpeg(f, dr, index, path, data, len, px, err, errlen);
    } else if (len >= 8 && memcmp(data, png_magic, 8) == 0) {
        rc = decode_png(f, dr, index, path, data, len, px, err, errlen);
    } else {
        rc = err_set(err, errlen, -EBADMSG, "%s is not a JPEG or PNG image%s", path,
                     len == 0 ? " (it is empty)" : "");
    }
    free(data);
    if (rc == 0) *label = f->labels[index];
    return rc;
}

/* ---- Decoding elsewhere ------------------------------------------------ */

/* The sample as its JPEG file and the box to take of it (--decode gpu):
 * what decode_jpeg would decode, checked as far as the header says, so
 * that the device's decoder is handed only what it decodes as the host
 * would. Anything else is -ENOTSUP, for the host to draw: PNGs, CMYK and
 * YCCK images (PIL's conversion, not a device's), samples not 8-bit, and
 * the plain recipe (dataset.c's augmentation). */
static int folder_jpeg(const void *state, int64_t index, const ds_draw *dr, dataset_jpeg *out,
                       int32_t *label, char *err, size_t errlen) {
    const folder *f = state;
    if (f->plain) return -ENOTSUP;
    const char *path = f->paths + f->off[index];
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = read_file(path, &data, &len, err, errlen);
    if (rc) return rc;
    if (len < 3 || data[0] != 0xFF || data[1] != 0xD8 || data[2] != 0xFF || !jpeg_has_end(data, len)) {
        free(data);
        return -ENOTSUP; /* a PNG, or damaged: the host says which */
    }
    struct jpeg_decompress_struct ci;
    struct jpeg_fail e;
    jpeg_fail_init(&ci, &e);
    if (setjmp(e.jump)) {
        jpeg_destroy_decompress(&ci);
        free(data);
        return -ENOTSUP;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    int w = (int)ci.image_width, h = (int)ci.image_height;
    int ok = (ci.jpeg_color_space == JCS_YCbCr || ci.jpeg_color_space == JCS_GRAYSCALE) &&
             ci.data_precision == 8 && !ci.arith_code && (long long)w * h <= MAX_PIXELS;
    jpeg_destroy_decompress(&ci);
    if (!ok) {
        free(data);
        return -ENOTSUP;
    }
    int flip;
    box b = draw_box(f, dr, index, w, h, &flip);
    *out = (dataset_jpeg){.data = data, .len = len, .width = w, .height = h,
                          .box = {(float)b.x0, (float)b.y0, (float)b.x1, (float)b.y1},
                          .flip = flip};
    *label = f->labels[index];
    return 0;
}

const dataset_format ds_imagefolder = {
    .name = "imagefolder",
    .open = folder_open,
    .sample = folder_sample,
    .close = folder_close,
    .jpeg = folder_jpeg,
};
