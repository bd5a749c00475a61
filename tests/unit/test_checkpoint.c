/* Unit tests of checkpoints: the byte layout docs/checkpoint.md describes,
 * round trips, names and retention, and that every damaged file (each byte
 * flipped, cut at every length, garbage lengths) is refused with a message
 * and without a crash or a large allocation; atomic writing leaves no
 * temporary file and never harms existing checkpoints; inspect prints JSON
 * with a stable weights digest. */
#include "tests/unit/test.h"
#include "worker/train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- helpers ---- */

static char *path_in(const char *name) {
    static char p[16][512];
    static int k;
    char *s = p[k++ % 16];
    snprintf(s, 512, "%s/%s", test_tmpdir(), name);
    return s;
}

static unsigned char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    CHECK(b != NULL);
    CHECK_EQ(fread(b, 1, (size_t)n, f), n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spill(const char *path, const void *b, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(b, 1, len, f), len);
    CHECK_EQ(fclose(f), 0);
}

static int exists(const char *path) { return access(path, F_OK) == 0; }

/* Names in dir, sorted, joined by spaces (dot files included). */
static const char *listing(const char *dir) {
    static char out[4096];
    struct dirent **v;
    int n = scandir(dir, &v, NULL, alphasort);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(v[i]->d_name, ".") != 0 && strcmp(v[i]->d_name, "..") != 0) {
            if (out[0]) strncat(out, " ", sizeof out - strlen(out) - 1);
            strncat(out, v[i]->d_name, sizeof out - strlen(out) - 1);
        }
        free(v[i]);
    }
    if (n >= 0) free(v);
    return out;
}

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void wr64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Under a memory limit a reader that trusted a length field and allocated
 * from it fails with -ENOMEM instead of -EBADMSG. ASan reserves too much
 * address space for RLIMIT_AS; there its allocator aborts on absurd sizes
 * instead, which fails the test just as well. */
#if defined(__SANITIZE_ADDRESS__)
static void limit_memory(void) {}
#else
static void limit_memory(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    if (!f || fscanf(f, "%lu", &pages) != 1) test_skip("no /proc/self/statm");
    fclose(f);
    rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (256u << 20);
    struct rlimit rl = {cap, cap};
    CHECK_EQ(setrlimit(RLIMIT_AS, &rl), 0);
    void *big = malloc(512u << 20);
    CHECK(big == NULL); /* the limit really holds */
}
#endif

/* A small checkpoint with odd sizes, an empty tensor and a nested header. */
static const char *HEADER =
    "{\"epoch\": 3, \"step\": 1200, \"config\": {\"model\": \"resnet18\", \"lr\": 0.1, "
    "\"milestones\": [30, 60], \"nested\": {\"deep\": [true, null, \"x\"]}}}";
static float params[5] = {1.5f, -2.25f, 3.0f, 0.0f, 1e-7f};
static const float momentum[3] = {0.125f, -0.5f, 8.0f};
static const unsigned char rng[7] = {1, 2, 3, 4, 5, 6, 7};

static int fill(ckpt_tensor *t) {
    t[0] = (ckpt_tensor){"params", CKPT_F32, params, sizeof params};
    t[1] = (ckpt_tensor){"empty", CKPT_BYTES, NULL, 0};
    t[2] = (ckpt_tensor){"grads_momentum", CKPT_F32, momentum, sizeof momentum};
    t[3] = (ckpt_tensor){"rng", CKPT_BYTES, rng, sizeof rng};
    t[4] = (ckpt_tensor){"x", CKPT_BYTES, "!", 1};
    return 5;
}

/* Writes the sample checkpoint for `step` into dir; returns its path. */
static const char *write_sample(const char *dir, uint64_t step, int keep) {
    static char path[4][512];
    static int k;
    char *p = path[k++ % 4], err[512];
    ckpt_tensor t[5];
    int n = fill(t);
    int rc = ckpt_write(&(ckpt_save){dir, step, HEADER, t, n, keep}, p, 512, err, sizeof err);
    if (rc != 0) test_fail(__FILE__, __LINE__, "ckpt_write: %s", err);
    return p;
}

/* Offsets of the sample's tensor records, found by walking the format as
 * docs/checkpoint.md describes it: rec[i] is where record i starts,
 * data[i] where its data starts, and rec[n] is where the trailer starts. */
static void walk(const unsigned char *b, size_t len, size_t *rec, size_t *data, int *n) {
    uint64_t hlen = rd64(b + 16);
    *n = (int)rd32(b + 24);
    size_t off = 32 + hlen + 4;
    for (int i = 0; i < *n; i++) {
        rec[i] = off;
        size_t nl = (size_t)(b[off] | b[off + 1] << 8);
        uint64_t nb = rd64(b + off + 2 + nl + 2);
        off += 2 + nl + 18;
        off += (64 - off % 64) % 64;
        data[i] = off;
        off += nb;
    }
    rec[*n] = off;
    CHECK_EQ(off + 16, len);
}

/* Flips a bit of the sample checkpoint at path, `at` bytes into tensor
 * `tensor`'s data: damage inside, the trailer intact. */
static void damage_tensor(const char *path, int tensor, size_t at) {
    size_t len, rec[8], data[8];
    int n;
    unsigned char *b = slurp(path, &len);
    walk(b, len, rec, data, &n);
    b[data[tensor] + at] ^= 0x10;
    spill(path, b, len);
    free(b);
}

/* ---- tests ---- */

TEST(ckpt_crc32_matches_zlib) {
    CHECK_EQ(ckpt_crc32(0, "123456789", 9), 0xCBF43926u);
    CHECK_EQ(ckpt_crc32(ckpt_crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
    CHECK_EQ(ckpt_crc32(0, NULL, 0), 0);
}

TEST(ckpt_layout_is_byte_exact) {
    /* The smallest interesting file, built by hand from the documented
     * layout, must be exactly what ckpt_write produces. */
    const char *dir = path_in("c");
    char path[512], err[256];
    ckpt_tensor t = {"w", CKPT_BYTES, "abc", 3};
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 7, "{}", &t, 1, 0}, path, sizeof path, err, sizeof err), 0);
    unsigned char want[83] = {0};
    memcpy(want, "DDPCKPT\0", 8);
    wr32(want + 8, 1);           /* version */
    wr32(want + 12, 0);          /* flags */
    wr64(want + 16, 2);          /* header length */
    wr32(want + 24, 1);          /* tensor count; 28..31 reserved */
    memcpy(want + 32, "{}", 2);
    wr32(want + 34, (uint32_t)crc32(0, want, 34));
    unsigned char *r = want + 38; /* the record */
    r[0] = 1, r[1] = 0, r[2] = 'w', r[3] = CKPT_BYTES, r[4] = 0;
    wr64(r + 5, 3);
    wr32(r + 13, (uint32_t)crc32(0, (const unsigned char *)"abc", 3));
    wr32(r + 17, (uint32_t)crc32(0, r, 17));
    /* 38 + 21 = 59: five zero bytes pad the data to offset 64 */
    memcpy(want + 64, "abc", 3);
    wr64(want + 67, 83);
    memcpy(want + 75, "DDPCKEND", 8);
    size_t len;
    unsigned char *got = slurp(path, &len);
    CHECK_MEM(got, len, want, sizeof want);
    free(got);
}

TEST(ckpt_round_trip) {
    const char *dir = path_in("ckpts");
    const char *path = write_sample(dir, 1200, 0);
    ckpt_data d;
    char err[512];
    CHECK_EQ(ckpt_read(path, &d, err, sizeof err), 0);
    CHECK_STR(d.header, HEADER);
    ckpt_tensor t[5];
    int n = fill(t);
    CHECK_EQ(d.n, n);
    for (int i = 0; i < n; i++) {
        CHECK_STR(d.t[i].name, t[i].name);
        CHECK_EQ(d.t[i].dtype, t[i].dtype);
        CHECK(d.t[i].data != NULL);
        CHECK_MEM(d.t[i].data, d.t[i].nbytes, t[i].data ? t[i].data : "", t[i].nbytes);
    }
    ckpt_data_free(&d);
    ckpt_data_free(&d); /* freeing twice is harmless */
    /* Every data block starts 64-byte aligned in the file. */
    size_t len, rec[8], data[8];
    unsigned char *b = slurp(path, &len);
    walk(b, len, rec, data, &n);
    CHECK_EQ(n, 5);
    for (int i = 0; i < n; i++) CHECK_EQ(data[i] % 64, 0);
    CHECK_MEM(b + data[0], sizeof params, params, sizeof params);
    free(b);
}

TEST(ckpt_find_by_name) {
    const char *path = write_sample(path_in("c"), 1, 0);
    ckpt_data d;
    char err[256];
    CHECK_EQ(ckpt_read(path, &d, err, sizeof err), 0);
    uint64_t nb = 99;
    const float *p = ckpt_find(&d, "grads_momentum", &nb);
    CHECK(p != NULL);
    CHECK_EQ(nb, sizeof momentum);
    CHECK(p[2] == 8.0f);
    CHECK(ckpt_find(&d, "empty", &nb) != NULL); /* present, even with no bytes */
    CHECK_EQ(nb, 0);
    CHECK(ckpt_find(&d, "nope", &nb) == NULL);
    CHECK_EQ(nb, 0);
    CHECK(ckpt_find(&d, "param", NULL) == NULL); /* no prefix matches */
    CHECK(ckpt_find(&d, "x", NULL) != NULL);
    ckpt_data_free(&d);
}

TEST(ckpt_file_name_is_step_with_10_digits) {
    char dir[512]; /* created with its parents */
    snprintf(dir, sizeof dir, "%s", path_in("a/b/c"));
    CHECK_STR(write_sample(dir, 42, 0), path_in("a/b/c/ckpt-0000000042.ddpt"));
    CHECK_STR(write_sample(dir, 0, 0), path_in("a/b/c/ckpt-0000000000.ddpt"));
    CHECK_STR(write_sample(dir, 12345678901ull, 0), path_in("a/b/c/ckpt-12345678901.ddpt"));
    /* Newest means the largest step, not the last name in sorted order. */
    char path[512], err[256];
    ckpt_data d;
    CHECK_EQ(ckpt_latest(dir, path, sizeof path, &d, NULL, err, sizeof err), 0);
    CHECK_STR(path, path_in("a/b/c/ckpt-12345678901.ddpt"));
    ckpt_data_free(&d);
}

TEST(ckpt_keep_two_leaves_the_newest_two) {
    const char *dir = path_in("c");
    CHECK_EQ(mkdir(dir, 0755), 0);
    spill(path_in("c/notes.txt"), "x", 1);
    spill(path_in("c/ckpt-abc.ddpt"), "x", 1);
    for (uint64_t s = 100; s <= 500; s += 100) write_sample(dir, s, 2);
    CHECK_STR(listing(dir), "ckpt-0000000400.ddpt ckpt-0000000500.ddpt ckpt-abc.ddpt notes.txt");
    write_sample(dir, 600, 1);
    CHECK_STR(listing(dir), "ckpt-0000000600.ddpt ckpt-abc.ddpt notes.txt");
    write_sample(dir, 700, 0); /* keep <= 0 keeps all */
    write_sample(dir, 800, 0);
    CHECK_STR(listing(dir),
              "ckpt-0000000600.ddpt ckpt-0000000700.ddpt ckpt-0000000800.ddpt ckpt-abc.ddpt "
              "notes.txt");
}

/* A damaged checkpoint does not count towards --keep: with keep 2, a valid
 * ckpt-6, a truncated ckpt-7 and a new ckpt-8, the valid ckpt-6 stays (it
 * is the only fallback if ckpt-8 is lost); the broken ckpt-7 is left as it
 * is, for a look at what broke it. */
TEST(ckpt_keep_counts_only_whole_checkpoints) {
    const char *dir = path_in("c");
    write_sample(dir, 6, 0);
    const char *seven = write_sample(dir, 7, 0);
    CHECK_EQ(truncate(seven, 100), 0);
    write_sample(dir, 8, 2);
    CHECK_STR(listing(dir), "ckpt-0000000006.ddpt ckpt-0000000007.ddpt ckpt-0000000008.ddpt");
    write_sample(dir, 9, 2); /* the next save: ckpt-6 is the oldest whole one beyond 2 */
    CHECK_STR(listing(dir), "ckpt-0000000007.ddpt ckpt-0000000008.ddpt ckpt-0000000009.ddpt");
}

/* The same when the damage is inside (a flipped data byte, the trailer
 * intact): retention reads the whole file before it counts it, so the
 * valid ckpt-6 is still the fallback kept. */
TEST(ckpt_keep_counts_only_checkpoints_that_read_back) {
    const char *dir = path_in("c");
    write_sample(dir, 6, 0);
    damage_tensor(write_sample(dir, 7, 0), 0, 3); /* inside 'params' */
    write_sample(dir, 8, 2);
    CHECK_STR(listing(dir), "ckpt-0000000006.ddpt ckpt-0000000007.ddpt ckpt-0000000008.ddpt");
    write_sample(dir, 9, 2);
    CHECK_STR(listing(dir), "ckpt-0000000007.ddpt ckpt-0000000008.ddpt ckpt-0000000009.ddpt");
}

TEST(ckpt_keep_never_deletes_the_one_just_written) {
    /* A newer checkpoint from a rolled-back run is not "older": it stays,
     * and so does the one just written even with keep = 1. */
    const char *dir = path_in("c");
    write_sample(dir, 100, 0);
    write_sample(dir, 900, 0);
    write_sample(dir, 200, 1);
    CHECK_STR(listing(dir), "ckpt-0000000200.ddpt ckpt-0000000900.ddpt");
}

TEST(ckpt_flipped_data_byte_names_the_tensor) {
    const char *path = write_sample(path_in("c"), 5, 0);
    size_t len, rec[8], data[8];
    int n;
    unsigned char *b = slurp(path, &len);
    walk(b, len, rec, data, &n);
    b[data[0] + 3] ^= 0x10; /* inside 'params' */
    spill(path, b, len);
    ckpt_data d;
    char err[512];
    CHECK_EQ(ckpt_read(path, &d, err, sizeof err), -EBADMSG);
    CHECK(strstr(err, path) != NULL);
    CHECK(strstr(err, "tensor 'params' fails its CRC") != NULL);
    CHECK(d.n == 0 && d.t == NULL && d.header == NULL);
    b[data[0] + 3] ^= 0x10;
    b[data[3]] ^= 0x01; /* inside 'rng' */
    spill(path, b, len);
    CHECK_EQ(ckpt_read(path, &d, err, sizeof err), -EBADMSG);
    CHECK(strstr(err, "tensor 'rng' fails its CRC") != NULL);
    free(b);
}

TEST(ckpt_every_flipped_byte_is_detected) {
    /* Every byte is covered by a CRC, a literal or a must-be-zero rule. */
    const char *path = write_sample(path_in("c"), 5, 0);
    const char *bad = path_in("bad.ddpt");
    size_t len;
    unsigned char *b = slurp(path, &len);
    limit_memory();
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 7) {
            b[i] ^= (unsigned char)(1u << bit);
            spill(bad, b, len);
            b[i] ^= (unsigned char)(1u << bit);
            ckpt_data d;
            char err[512] = "";
            int rc = ckpt_read(bad, &d, err, sizeof err);
            if (rc != -EBADMSG)
                test_fail(__FILE__, __LINE__, "flip of bit %d at %zu: rc %d (%s)", bit, i, rc, err);
            CHECK(strstr(err, bad) != NULL);
        }
    }
    free(b);
}

TEST(ckpt_truncation_at_every_length_is_an_error) {
    const char *path = write_sample(path_in("c"), 5, 0);
    const char *cut = path_in("cut.ddpt");
    size_t len, rec[8], data[8];
    int n;
    unsigned char *b = slurp(path, &len);
    walk(b, len, rec, data, &n);
    /* The lengths that matter most: exactly between two tensors, exactly
     * before the trailer, and one byte short of the end. */
    size_t special[] = {rec[1], rec[2], rec[4], rec[n], len - 1, len - 8, 0, 8, 32};
    CHECK(rec[n] == len - 16);
    limit_memory();
    for (size_t k = 0; k < len + sizeof special / sizeof *special; k++) {
        size_t l = k < len ? k : special[k - len];
        spill(cut, b, l);
        ckpt_data d;
        char err[512] = "";
        int rc = ckpt_read(cut, &d, err, sizeof err);
        if (rc != -EBADMSG || !strstr(err, "is truncated"))
            test_fail(__FILE__, __LINE__, "cut at %zu of %zu: rc %d (%s)", l, len, rc, err);
    }
    /* A file with extra bytes after the trailer is not valid either. */
    unsigned char *longer = malloc(len + 5);
    memcpy(longer, b, len);
    memcpy(longer + len, "junk!", 5);
    spill(cut, longer, len + 5);
    ckpt_data d;
    char err[512];
    CHECK_EQ(ckpt_read(cut, &d, err, sizeof err), -EBADMSG);
    free(longer);
    free(b);
}

/* Recomputes the CRC that covers a record, so that a garbage length
 * survives the CRC check and has to be caught by the bounds check. */
static void fix_record_crc(unsigned char *b, size_t rec) {
    size_t nl = (size_t)(b[rec] | b[rec + 1] << 8), body = 2 + nl + 14;
    wr32(b + rec + body, (uint32_t)crc32(0, b + rec, (uInt)body));
}
static void fix_header_crc(unsigned char *b) {
    uint64_t hlen = rd64(b + 16);
    wr32(b + 32 + hlen, (uint32_t)crc32(0, b, (uInt)(32 + hlen)));
}

TEST(ckpt_garbage_lengths_are_errors_not_allocations) {
    const char *path = write_sample(path_in("c"), 5, 0);
    const char *bad = path_in("bad.ddpt");
    size_t len, rec[8], data[8];
    int n;
    unsigned char *b = slurp(path, &len);
    walk(b, len, rec, data, &n);
    limit_memory();
    const uint64_t huge[] = {1ull << 30, 1ull << 40, 1ull << 62, UINT64_MAX, UINT64_MAX - 3,
                             len};
    for (size_t k = 0; k < sizeof huge / sizeof *huge; k++) {
        unsigned char *c = malloc(len);
        ckpt_data d;
        char err[512] = "";
        /* a tensor's byte count, with a valid record CRC */
        memcpy(c, b, len);
        size_t at = rec[0] + 2 + strlen("params") + 2;
        wr64(c + at, huge[k] & ~3ull);
        fix_record_crc(c, rec[0]);
        spill(bad, c, len);
        int rc = ckpt_read(bad, &d, err, sizeof err);
        if (rc != -EBADMSG || !strstr(err, "tensor 'params' needs"))
            test_fail(__FILE__, __LINE__, "nbytes %" PRIu64 ": rc %d (%s)", huge[k], rc, err);
        /* the header length (its CRC cannot be checked before reading it) */
        memcpy(c, b, len);
        wr64(c + 16, huge[k]);
        spill(bad, c, len);
        rc = ckpt_read(bad, &d, err, sizeof err);
        if (rc != -EBADMSG || !strstr(err, "the header"))
            test_fail(__FILE__, __LINE__, "header length %" PRIu64 ": rc %d (%s)", huge[k], rc,
                      err);
        /* the tensor count, with a valid header CRC */
        memcpy(c, b, len);
        wr32(c + 24, (uint32_t)huge[k] | 0x80000000u);
        fix_header_crc(c);
        spill(bad, c, len);
        rc = ckpt_read(bad, &d, err, sizeof err);
        if (rc != -EBADMSG || !strstr(err, "tensors cannot fit"))
            test_fail(__FILE__, __LINE__, "count %" PRIx64 ": rc %d (%s)", huge[k], rc, err);
        free(c);
    }
    free(b);
}

TEST(ckpt_other_files_are_refused_by_name) {
    const char *bad = path_in("bad.ddpt");
    ckpt_data d;
    char err[512];
    spill(bad, "PK\3\4 this is a zip file, not a checkpoint at all, really", 56);
    CHECK_EQ(ckpt_read(bad, &d, err, sizeof err), -EBADMSG);
    CHECK(strstr(err, "is not a ddprun checkpoint") != NULL);
    CHECK_EQ(ckpt_read(path_in("missing.ddpt"), &d, err, sizeof err), -ENOENT);
    CHECK(strstr(err, "missing.ddpt cannot be opened") != NULL);
    /* A newer format version says so instead of "corrupt". */
    const char *path = write_sample(path_in("c"), 5, 0);
    size_t len;
    unsigned char *b = slurp(path, &len);
    wr32(b + 8, 2);
    fix_header_crc(b);
    spill(bad, b, len);
    CHECK_EQ(ckpt_read(bad, &d, err, sizeof err), -EBADMSG);
    CHECK(strstr(err, "format version 2") != NULL);
    free(b);
}

static int warnings;
static char last_warning[1024];
static void count_warning(const char *line) {
    warnings++;
    snprintf(last_warning, sizeof last_warning, "%s", line);
}

TEST(ckpt_latest_skips_a_corrupt_newest) {
    const char *dir = path_in("c");
    const char *older = write_sample(dir, 100, 0);
    const char *newest = write_sample(dir, 200, 0);
    size_t len, rec[8], data[8];
    int n;
    unsigned char *b = slurp(newest, &len);
    walk(b, len, rec, data, &n);
    b[data[0]] ^= 0xff;
    spill(newest, b, len);
    char path[512], err[512];
    ckpt_data d;
    CHECK_EQ(ckpt_latest(dir, path, sizeof path, &d, count_warning, err, sizeof err), 0);
    CHECK_STR(path, older);
    CHECK_EQ(d.n, 5);
    CHECK_EQ(warnings, 1);
    CHECK_STR(last_warning, "checkpoint ckpt-0000000200.ddpt is corrupt (tensor 'params' fails "
                            "its CRC); using an older one");
    ckpt_data_free(&d);
    /* The corrupt file is reported, not removed or repaired. */
    size_t len2;
    unsigned char *after = slurp(newest, &len2);
    CHECK_MEM(after, len2, b, len);
    free(after);
    free(b);
}

TEST(ckpt_latest_skips_a_truncated_newest) {
    const char *dir = path_in("c");
    const char *older = write_sample(dir, 100, 0);
    const char *newest = write_sample(dir, 200, 0);
    CHECK_EQ(truncate(newest, 100), 0);
    char path[512], err[512];
    ckpt_data d;
    CHECK_EQ(ckpt_latest(dir, path, sizeof path, &d, count_warning, err, sizeof err), 0);
    CHECK_STR(path, older);
    CHECK_EQ(warnings, 1);
    CHECK(strstr(last_warning, "ckpt-0000000200.ddpt is truncated") != NULL);
    ckpt_data_free(&d);
}

TEST(ckpt_latest_with_only_corrupt_ones_is_an_error) {
    /* Not -ENOENT: a run must not silently start over from scratch. */
    const char *dir = path_in("c");
    const char *a = write_sample(dir, 100, 0), *b = write_sample(dir, 200, 0);
    CHECK_EQ(truncate(a, 50), 0);
    CHECK_EQ(truncate(b, 60), 0);
    char path[512], err[512];
    ckpt_data d;
    CHECK_EQ(ckpt_latest(dir, path, sizeof path, &d, count_warning, err, sizeof err), -EBADMSG);
    CHECK_EQ(warnings, 2);
    CHECK(strstr(last_warning, "ckpt-0000000100.ddpt is truncated") != NULL);
    CHECK(strstr(last_warning, "no older one") != NULL);
    CHECK(strstr(err, "no valid checkpoint in") != NULL);
    CHECK(d.n == 0 && d.header == NULL);
}

TEST(ckpt_latest_on_empty_or_missing_dir_is_enoent) {
    char path[512], err[512];
    ckpt_data d;
    CHECK_EQ(ckpt_latest(path_in("nope"), path, sizeof path, &d, count_warning, err, sizeof err),
             -ENOENT);
    CHECK(strstr(err, "nope") != NULL);
    const char *dir = path_in("empty");
    CHECK_EQ(mkdir(dir, 0755), 0);
    spill(path_in("empty/.ckpt-5.tmp.123"), "x", 1); /* a dead write is no checkpoint */
    spill(path_in("empty/ckpt-0000000001.ddpt.bak"), "x", 1);
    CHECK_EQ(ckpt_latest(dir, path, sizeof path, &d, count_warning, err, sizeof err), -ENOENT);
    CHECK_EQ(warnings, 0);
}

TEST(ckpt_write_where_the_parent_is_a_file_fails_cleanly) {
    const char *file = path_in("file");
    spill(file, "data", 4);
    char err[512], path[512];
    ckpt_tensor t[5];
    int n = fill(t);
    int rc = ckpt_write(&(ckpt_save){path_in("file/ckpts"), 1, HEADER, t, n, 2}, path, sizeof path, err,
                        sizeof err);
    CHECK(rc == -ENOTDIR);
    CHECK(strstr(err, "file/ckpts") != NULL);
    CHECK_STR(listing(test_tmpdir()), "file");
    size_t len;
    unsigned char *b = slurp(file, &len);
    CHECK_MEM(b, len, "data", 4);
    free(b);
}

TEST(ckpt_write_failing_midway_leaves_old_checkpoints_alone) {
    const char *dir = path_in("c");
    const char *old = write_sample(dir, 100, 1);
    size_t len;
    unsigned char *before = slurp(old, &len);
    /* A file size limit makes the next write fail partway, like a full disk. */
    static float big[1 << 16];
    ckpt_tensor t = {"params", CKPT_F32, big, sizeof big};
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {100000, 100000};
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &rl), 0);
    char err[512];
    int rc = ckpt_write(&(ckpt_save){dir, 200, HEADER, &t, 1, 1}, NULL, 0, err, sizeof err);
    CHECK_EQ(rc, -EFBIG);
    CHECK(strstr(err, "ckpt-0000000200.ddpt") != NULL);
    CHECK_STR(listing(dir), "ckpt-0000000100.ddpt");
    size_t len2;
    unsigned char *after = slurp(old, &len2);
    CHECK_MEM(after, len2, before, len);
    free(after);
    free(before);
}

TEST(ckpt_write_leaves_no_temporary_file) {
    const char *dir = path_in("c");
    CHECK_EQ(mkdir(dir, 0755), 0);
    /* Temporary files of writes that died (kill -9) are swept once a
     * checkpoint at least as new is in place; newer ones are not ours to judge. */
    spill(path_in("c/.ckpt-50.tmp.99999"), "torn", 4);
    spill(path_in("c/.ckpt-900.tmp.1"), "torn", 4);
    write_sample(dir, 100, 3);
    CHECK_STR(listing(dir), ".ckpt-900.tmp.1 ckpt-0000000100.ddpt");
    write_sample(dir, 900, 3);
    CHECK_STR(listing(dir), "ckpt-0000000100.ddpt ckpt-0000000900.ddpt");
}

TEST(ckpt_write_refuses_what_cannot_be_read_back) {
    const char *dir = path_in("c");
    char err[512];
    float f[2] = {0};
    ckpt_tensor dup[2] = {{"a", CKPT_F32, f, 8}, {"a", CKPT_F32, f, 8}};
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 1, "{}", dup, 2, 0}, NULL, 0, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "'a' is used twice") != NULL);
    ckpt_tensor odd = {"a", CKPT_F32, f, 5};
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 1, "{}", &odd, 1, 0}, NULL, 0, err, sizeof err), -EINVAL);
    ckpt_tensor noname = {"", CKPT_BYTES, f, 5};
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 1, "{}", &noname, 1, 0}, NULL, 0, err, sizeof err), -EINVAL);
    ckpt_tensor nodata = {"a", CKPT_BYTES, NULL, 5};
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 1, "{}", &nodata, 1, 0}, NULL, 0, err, sizeof err), -EINVAL);
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 1, "{\"a\": ", NULL, 0, 0}, NULL, 0, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "header is not a JSON object") != NULL);
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 1, "[1, 2]", NULL, 0, 0}, NULL, 0, err, sizeof err), -EINVAL);
    CHECK(!exists(dir));
    /* No tensors at all is fine. */
    char path[512];
    CHECK_EQ(ckpt_write(&(ckpt_save){dir, 1, "{\"only\": \"header\"}", NULL, 0, 0}, path, sizeof path, err,
                        sizeof err), 0);
    ckpt_data d;
    CHECK_EQ(ckpt_read(path, &d, err, sizeof err), 0);
    CHECK_EQ(d.n, 0);
    CHECK_STR(d.header, "{\"only\": \"header\"}");
    ckpt_data_free(&d);
}

/* Runs ckpt_inspect into memory and parses what it printed. */
static json_t *inspect(const char *path) {
    char *buf = NULL, err[512];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    int rc = ckpt_inspect(path, f, err, sizeof err);
    fclose(f);
    if (rc != 0) test_fail(__FILE__, __LINE__, "ckpt_inspect(%s): %s", path, err);
    json_error_t jerr;
    json_t *j = json_loads(buf, 0, &jerr);
    if (!j) test_fail(__FILE__, __LINE__, "inspect printed bad JSON (%s): %s", jerr.text, buf);
    CHECK(strstr(buf, "\n  \"path\": ") != NULL); /* indented by 2 */
    free(buf);
    return j;
}

static const char *digest_of(json_t *j) {
    static char d[4][64];
    static int k;
    const char *s = json_string_value(json_object_get(j, "weights_digest"));
    CHECK(s != NULL);
    char *out = d[k++ % 4];
    snprintf(out, 64, "%s", s);
    return out;
}

TEST(ckpt_inspect_prints_the_header_as_json) {
    const char *path = write_sample(path_in("c"), 1200, 0);
    json_t *j = inspect(path);
    CHECK_STR(json_string_value(json_object_get(j, "path")), path);
    struct stat st;
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(json_integer_value(json_object_get(j, "file_bytes")), st.st_size);
    CHECK_EQ(json_integer_value(json_object_get(j, "epoch")), 3);
    CHECK_EQ(json_integer_value(json_object_get(j, "step")), 1200);
    json_t *deep = json_object_get(json_object_get(json_object_get(j, "config"), "nested"), "deep");
    CHECK(json_is_array(deep) && json_array_size(deep) == 3);
    json_t *ts = json_object_get(j, "tensors");
    ckpt_tensor t[5];
    int n = fill(t);
    CHECK_EQ(json_array_size(ts), n);
    /* The documented digest: FNV-1a 64 over name, NUL, u64 length, data. */
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(ts, (size_t)i);
        CHECK_STR(json_string_value(json_object_get(e, "name")), t[i].name);
        CHECK_STR(json_string_value(json_object_get(e, "dtype")),
                  t[i].dtype == CKPT_F32 ? "f32" : "bytes");
        CHECK_EQ(json_integer_value(json_object_get(e, "bytes")), t[i].nbytes);
        char crc[16];
        snprintf(crc, sizeof crc, "%08lx", crc32(0, t[i].data, (uInt)t[i].nbytes));
        CHECK_STR(json_string_value(json_object_get(e, "crc32")), crc);
        unsigned char l[8];
        wr64(l, t[i].nbytes);
        const unsigned char *parts[3] = {(const unsigned char *)t[i].name, l, t[i].data};
        size_t sizes[3] = {strlen(t[i].name) + 1, 8, (size_t)t[i].nbytes};
        for (int p = 0; p < 3; p++)
            for (size_t k = 0; k < sizes[p]; k++) h = (h ^ parts[p][k]) * 0x100000001b3ull;
    }
    char want[64];
    snprintf(want, sizeof want, "fnv1a64:%016" PRIx64, h);
    CHECK_STR(digest_of(j), want);
    json_decref(j);
}

TEST(ckpt_weights_digest_is_stable_and_sensitive) {
    json_t *a = inspect(write_sample(path_in("a"), 10, 0));
    json_t *b = inspect(write_sample(path_in("b"), 20, 0)); /* same data, another step */
    CHECK_STR(digest_of(a), digest_of(b));
    CHECK(strlen(digest_of(a)) == strlen("fnv1a64:") + 16);
    params[4] = 2e-7f; /* one changed weight */
    json_t *c = inspect(write_sample(path_in("c"), 10, 0));
    CHECK(strcmp(digest_of(a), digest_of(c)) != 0);
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

TEST(ckpt_inspect_of_a_directory_uses_the_newest_valid) {
    const char *dir = path_in("c");
    const char *older = write_sample(dir, 100, 0);
    const char *newest = write_sample(dir, 200, 0);
    CHECK_EQ(truncate(newest, 300), 0);
    /* The warning goes to stderr: catch it in a file. */
    const char *log = path_in("stderr.txt");
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644), saved = dup(2);
    CHECK(fd >= 0 && saved >= 0);
    dup2(fd, 2);
    json_t *j = inspect(dir);
    dup2(saved, 2);
    close(fd);
    close(saved);
    CHECK_STR(json_string_value(json_object_get(j, "path")), older);
    json_decref(j);
    size_t len;
    char *text = (char *)slurp(log, &len);
    text[len] = 0;
    CHECK(strstr(text, "ckpt-0000000200.ddpt is truncated") != NULL);
    free(text);
}

TEST(ckpt_inspect_of_a_truncated_file_is_a_clear_error) {
    const char *path = write_sample(path_in("c"), 100, 0);
    CHECK_EQ(truncate(path, 200), 0);
    char *buf = NULL, err[512];
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_EQ(ckpt_inspect(path, f, err, sizeof err), -EBADMSG);
    fclose(f);
    CHECK_EQ(len, 0); /* nothing printed */
    CHECK(strstr(err, path) != NULL && strstr(err, "is truncated") != NULL);
    free(buf);
    CHECK_EQ(ckpt_inspect(path_in("nothing"), stdout, err, sizeof err), -ENOENT);
    CHECK(strstr(err, "nothing") != NULL);
}

/* A FIFO where a checkpoint should be: an open() of it waits for a writer
 * (forever: the test's timeout would end it), so it must never be opened
 * for reading as a file. */
TEST(ckpt_read_and_inspect_refuse_a_fifo_at_once) {
    const char *fifo = path_in("fifo.ddpt");
    CHECK_EQ(mkfifo(fifo, 0644), 0);
    char err[512];
    ckpt_data d;
    CHECK_EQ(ckpt_read(fifo, &d, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "is a FIFO, not a checkpoint file") != NULL && strstr(err, fifo) != NULL);
    CHECK(d.n == 0 && d.header == NULL);
    CHECK_EQ(ckpt_inspect(fifo, stdout, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "is a FIFO, not a checkpoint file") != NULL);
}

TEST(ckpt_latest_skips_a_fifo_and_retention_leaves_it) {
    const char *dir = path_in("c");
    const char *older = write_sample(dir, 100, 0);
    const char *fifo = path_in("c/ckpt-0000000200.ddpt");
    CHECK_EQ(mkfifo(fifo, 0644), 0);
    char path[512], err[512];
    ckpt_data d;
    CHECK_EQ(ckpt_latest(dir, path, sizeof path, &d, count_warning, err, sizeof err), 0);
    CHECK_STR(path, older);
    CHECK_EQ(warnings, 1);
    char want[1024];
    snprintf(want, sizeof want, "ckpt-0000000200.ddpt in %s is a FIFO, not a checkpoint file: "
             "skipped", dir);
    CHECK_STR(last_warning, want);
    ckpt_data_free(&d);
    /* --keep 1 at a newer step: the older checkpoint goes, the FIFO (not a
     * whole checkpoint, and never opened for long) stays. */
    write_sample(dir, 300, 1);
    CHECK_STR(listing(dir), "ckpt-0000000200.ddpt ckpt-0000000300.ddpt");
    struct stat st;
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode));
}

TEST(ckpt_latest_with_only_a_fifo_or_a_directory_is_enoent) {
    /* No checkpoint was ever there: a fresh start, not "all unreadable". */
    const char *dir = path_in("c");
    CHECK_EQ(mkdir(dir, 0755), 0);
    CHECK_EQ(mkfifo(path_in("c/ckpt-0000000200.ddpt"), 0644), 0);
    CHECK_EQ(mkdir(path_in("c/ckpt-0000000100.ddpt"), 0755), 0);
    char path[512], err[512];
    ckpt_data d;
    CHECK_EQ(ckpt_latest(dir, path, sizeof path, &d, count_warning, err, sizeof err), -ENOENT);
    CHECK_EQ(warnings, 2);
    CHECK(strstr(last_warning, "ckpt-0000000100.ddpt in ") != NULL &&
          strstr(last_warning, "is a directory, not a checkpoint file: skipped") != NULL);
    CHECK(strstr(err, "no checkpoint in") != NULL);
}
