/* make-images: writes image folders for the imagefolder tests and the data
 * benchmark, with libjpeg-turbo and libpng (no Python imaging library
 * needed).
 *
 *   make-images pattern DIR SPLIT CLASSES PER_CLASS WxH jpeg|png|gray-jpeg|cmyk-jpeg [QUALITY]
 *       DIR/SPLIT/class_K/img_I.{jpg,png}: a class's images share a hue
 *       band and a stripe (so a model can learn them), with noise drawn
 *       from (K, I); sizes vary a little around WxH.
 *   make-images idx DIR IMAGES LABELS SPLIT [COUNT]
 *       an IDX image set (e.g. Fashion-MNIST's, gzip or not) as grayscale
 *       PNGs, DIR/SPLIT/<label>/<index>.png: lossless, so the folder holds
 *       exactly the IDX file's pixels.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "common/fs.h"

static void die(const char *fmt, const char *what) {
    fprintf(stderr, "make-images: ");
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    exit(1);
}

static void mkdirs(const char *path) {
    if (fs_mkdir_p(path) != 0) die("cannot make %s", path);
}

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* comps 1 (gray), 3 (RGB) or 4 (CMYK, written inverted as Adobe's are) */
static void write_jpeg(const char *path, const unsigned char *px, int w, int h, int comps,
                       int quality) {
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write %s", path);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
    c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    if (comps == 4) jpeg_set_colorspace(&c, JCS_YCCK);
    jpeg_set_quality(&c, quality, TRUE);
    c.write_Adobe_marker = comps == 4;
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)px + (size_t)c.next_scanline * w * comps;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

static void write_png(const char *path, const unsigned char *px, int w, int h, int comps) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w, im.height = (png_uint_32)h;
    im.format = comps == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    if (!png_image_write_to_file(&im, path, 0, px, 0, NULL)) die("cannot write %s", path);
}

static int pattern(int argc, char **argv) {
    if (argc < 8) die("%s", "usage: make-images pattern DIR SPLIT CLASSES PER_CLASS WxH FORMAT [QUALITY]");
    const char *dir = argv[2], *split = argv[3], *fmt = argv[7];
    int classes = atoi(argv[4]), per = atoi(argv[5]), W, H;
    if (sscanf(argv[6], "%dx%d", &W, &H) != 2 || W < 4 || H < 4) die("bad size %s", argv[6]);
    int quality = argc > 8 ? atoi(argv[8]) : 90;
    int png = strcmp(fmt, "png") == 0, gray = strcmp(fmt, "gray-jpeg") == 0,
        cmyk = strcmp(fmt, "cmyk-jpeg") == 0;
    if (!png && !gray && !cmyk && strcmp(fmt, "jpeg") != 0) die("unknown format %s", fmt);
    int comps = gray ? 1 : cmyk ? 4 : 3;
    unsigned char *px = malloc((size_t)(W + W / 8 + 1) * (H + H / 8 + 1) * 4);
    for (int k = 0; k < classes; k++) {
        char cdir[4096];
        snprintf(cdir, sizeof cdir, "%s/%s/class_%02d", dir, split, k);
        mkdirs(cdir);
        for (int i = 0; i < per; i++) {
            uint64_t s = mix((uint64_t)k * 1000003u + (uint64_t)i);
            int w = W + (int)(s % (uint64_t)(W / 8 + 1)), h = H + (int)((s >> 16) % (uint64_t)(H / 8 + 1));
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++) {
                    uint64_t n = mix(s ^ ((uint64_t)y << 32 | (uint64_t)x));
                    int band = (y * classes / h) == k, stripe = ((x + k * 7) / 5) % 2;
                    int base = 40 + (int)(n % 60);
                    unsigned char *p = px + ((size_t)y * w + x) * comps;
                    int v[4] = {base + 120 * band, base + 60 * stripe, base + 25 * (k % 4),
                                (int)(n >> 40) % 40};
                    for (int c = 0; c < comps; c++) p[c] = (unsigned char)(v[c] > 255 ? 255 : v[c]);
                    if (cmyk) /* Adobe's inverted CMYK */
                        for (int c = 0; c < 4; c++) p[c] = (unsigned char)(255 - p[c]);
                }
            char path[4200];
            snprintf(path, sizeof path, "%s/img_%05d.%s", cdir, i, png ? "png" : "jpg");
            if (png) write_png(path, px, w, h, comps);
            else write_jpeg(path, px, w, h, comps, quality);
        }
    }
    free(px);
    return 0;
}

static uint32_t be32(const unsigned char *b) {
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static unsigned char *read_gz(const char *path, size_t *len) {
    gzFile g = gzopen(path, "rb");
    if (!g) die("cannot read %s", path);
    size_t cap = 1 << 20, n = 0;
    unsigned char *b = malloc(cap);
    int k;
    while ((k = gzread(g, b + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)k;
        if (n == cap) b = realloc(b, cap *= 2);
    }
    gzclose(g);
    *len = n;
    return b;
}

static int idx(int argc, char **argv) {
    if (argc < 6) die("%s", "usage: make-images idx DIR IMAGES LABELS SPLIT [COUNT]");
    size_t ni, nl;
    unsigned char *im = read_gz(argv[3], &ni), *lb = read_gz(argv[4], &nl);
    if (ni < 16 || nl < 8 || be32(im) != 0x803 || be32(lb) != 0x801) die("%s: not IDX files", argv[3]);
    int n = (int)be32(im + 4), h = (int)be32(im + 8), w = (int)be32(im + 12);
    if (argc > 6 && atoi(argv[6]) < n) n = atoi(argv[6]);
    for (int i = 0; i < n; i++) {
        char d[4096], path[4200];
        snprintf(d, sizeof d, "%s/%s/%d", argv[2], argv[5], lb[8 + i]);
        mkdirs(d);
        snprintf(path, sizeof path, "%s/%05d.png", d, i);
        write_png(path, im + 16 + (size_t)i * w * h, w, h, 1);
    }
    free(im);
    free(lb);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "pattern") == 0) return pattern(argc, argv);
    if (argc > 1 && strcmp(argv[1], "idx") == 0) return idx(argc, argv);
    die("%s", "usage: make-images pattern|idx ...");
}
