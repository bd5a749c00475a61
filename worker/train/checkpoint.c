/* Checkpoints: the file format and its I/O (docs/checkpoint.md has the
 * format byte by byte). Writing goes to a temporary file that is fsynced
 * and renamed into place, so a reader only ever sees a complete checkpoint
 * or none; reading trusts nothing in the file: every length is checked
 * against the file's size before anything is allocated from it, and every
 * byte is covered by a CRC, a literal comparison or a must-be-zero rule, so
 * a torn, truncated or bit-flipped file is refused with a message naming
 * what is wrong. */
#include "worker/train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fs.h"
#include "common/crc32.h"
#include "common/hash.h"

/* Tensor data is written as the host holds it; the format is little-endian,
 * so a big-endian host would need byte swapping that nothing here does. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint.c assumes a little-endian host"
#endif

#define CKPT_MAGIC "DDPCKPT\0"
#define CKPT_END_MAGIC "DDPCKEND"
#define CKPT_VERSION 1u
#define CKPT_PREAMBLE 32u   /* magic, version, flags, header length, count, reserved */
#define CKPT_TRAILER 16u    /* file length + end magic */
#define CKPT_ALIGN 64u      /* tensor data starts at a multiple of this */
#define CKPT_REC_FIXED 20u  /* a tensor record without its name */
#define CKPT_NAME_MAX 65535u

/* ------------------------------------------------------------------ */
/* Little helpers                                                      */

uint32_t ckpt_crc32(uint32_t crc, const void *p, size_t n) { return crc32_update(crc, p, n); }

static void put_u16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint16_t get_u16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Padding that brings offset `off` to the next multiple of CKPT_ALIGN. */
static uint64_t pad_for(uint64_t off) { return (CKPT_ALIGN - off % CKPT_ALIGN) % CKPT_ALIGN; }

static const char *dtype_name(ckpt_dtype t) {
    return t == CKPT_F32 ? "f32" : t == CKPT_BYTES ? "bytes" : "?";
}

/* snprintf that reports whether the result fit. */
static int fmt_path(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fmt_path(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n >= 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

/* "ckpt-<digits>.ddpt" -> step. Returns 0 if the name matches. */
static int parse_ckpt_name(const char *name, uint64_t *step) {
    if (strncmp(name, "ckpt-", 5) != 0) return -1;
    const char *d = name + 5, *e = d;
    while (*e >= '0' && *e <= '9') e++;
    if (e == d || e - d > 20 || strcmp(e, ".ddpt") != 0) return -1;
    errno = 0;
    unsigned long long v = strtoull(d, NULL, 10);
    if (errno == ERANGE) return -1;
    *step = v;
    return 0;
}

/* ".ckpt-<digits>.tmp.<digits>" -> step. Returns 0 if the name matches. */
static int parse_tmp_name(const char *name, uint64_t *step) {
    if (strncmp(name, ".ckpt-", 6) != 0) return -1;
    const char *d = name + 6, *e = d;
    while (*e >= '0' && *e <= '9') e++;
    if (e == d || e - d > 20 || strncmp(e, ".tmp.", 5) != 0) return -1;
    const char *p = e + 5, *q = p;
    while (*q >= '0' && *q <= '9') q++;
    if (q == p || *q != 0) return -1;
    errno = 0;
    unsigned long long v = strtoull(d, NULL, 10);
    if (errno == ERANGE) return -1;
    *step = v;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Listing a directory                                                 */

typedef struct {
    uint64_t step;
    char *name;
} ckpt_entry;

static int entry_cmp_desc(const void *a, const void *b) {
    const ckpt_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1;
    return -strcmp(x->name, y->name);
}

static void entries_free(ckpt_entry *e, int n) {
    for (int i = 0; i < n; i++) free(e[i].name);
    free(e);
}

/* The checkpoint files in dir (tmp = 0) or the temporary files (tmp = 1),
 * newest step first. 0, or -errno from opendir. */
static int list_dir(const char *dir, int tmp, ckpt_entry **out, int *nout) {
    *out = NULL;
    *nout = 0;
    DIR *d = opendir(dir);
    if (!d) return -errno;
    ckpt_entry *e = NULL;
    int n = 0, cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t step;
        if ((tmp ? parse_tmp_name(de->d_name, &step) : parse_ckpt_name(de->d_name, &step)) != 0)
            continue;
        if (n == cap) {
            int nc = cap ? 2 * cap : 16;
            ckpt_entry *ne = realloc(e, (size_t)nc * sizeof *ne);
            if (!ne) { rc = -ENOMEM; break; }
            e = ne;
            cap = nc;
        }
        e[n].step = step;
        e[n].name = strdup(de->d_name);
        if (!e[n].name) { rc = -ENOMEM; break; }
        n++;
    }
    closedir(d);
    if (rc < 0) {
        entries_free(e, n);
        return rc;
    }
    if (n > 1) qsort(e, (size_t)n, sizeof *e, entry_cmp_desc);
    *out = e;
    *nout = n;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Writing                                                             */

static int write_all(int fd, const void *p, uint64_t n) {
    const char *b = p;
    while (n > 0) {
        size_t k = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = write(fd, b, k);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (w == 0) return -EIO;
        b += w;
        n -= (uint64_t)w;
    }
    return 0;
}

/* Refuses what could not be read back as written: names that are empty,
 * too long or repeated, unknown dtypes, f32 tensors of a size that is not
 * a multiple of 4, missing data, a header that is not a JSON object. */
static int check_input(const char *header_json, const ckpt_tensor *ts, int n, char *err,
                       size_t errlen) {
    json_error_t jerr;
    json_t *h = json_loads(header_json, 0, &jerr);
    int ok = h && json_is_object(h);
    json_decref(h);
    if (!ok) {
        snprintf(err, errlen, "checkpoint header is not a JSON object (%s)",
                 h ? "another JSON value" : jerr.text);
        return -EINVAL;
    }
    if (n < 0 || (n > 0 && !ts)) {
        snprintf(err, errlen, "checkpoint: bad tensor list (n = %d)", n);
        return -EINVAL;
    }
    for (int i = 0; i < n; i++) {
        const ckpt_tensor *t = &ts[i];
        size_t len = t->name ? strlen(t->name) : 0;
        if (len == 0 || len > CKPT_NAME_MAX) {
            snprintf(err, errlen, "checkpoint tensor %d has %s name", i,
                     len ? "a too long" : "no");
            return -EINVAL;
        }
        if (t->dtype != CKPT_F32 && t->dtype != CKPT_BYTES) {
            snprintf(err, errlen, "checkpoint tensor '%s' has unknown dtype %d", t->name,
                     (int)t->dtype);
            return -EINVAL;
        }
        if ((t->dtype == CKPT_F32 && t->nbytes % 4 != 0) || (t->nbytes > 0 && !t->data)) {
            snprintf(err, errlen, "checkpoint tensor '%s': %" PRIu64 " bytes %s", t->name,
                     t->nbytes, t->data ? "is not a whole number of floats" : "but no data");
            return -EINVAL;
        }
        for (int j = 0; j < i; j++)
            if (strcmp(ts[j].name, t->name) == 0) {
                snprintf(err, errlen, "checkpoint tensor name '%s' is used twice", t->name);
                return -EINVAL;
            }
    }
    return 0;
}

/* Writes the whole checkpoint to fd, which is at offset 0. */
static int write_body(int fd, const char *header_json, const ckpt_tensor *ts, int n) {
    uint64_t hlen = strlen(header_json), off = 0;
    unsigned char pre[CKPT_PREAMBLE] = {0}, b4[4];
    memcpy(pre, CKPT_MAGIC, 8);
    put_u32(pre + 8, CKPT_VERSION);
    put_u32(pre + 12, 0);                /* flags */
    put_u64(pre + 16, hlen);
    put_u32(pre + 24, (uint32_t)n);      /* bytes 28..31 stay zero (reserved) */
    put_u32(b4, ckpt_crc32(ckpt_crc32(0, pre, sizeof pre), header_json, hlen));
    int rc;
    if ((rc = write_all(fd, pre, sizeof pre)) < 0 || (rc = write_all(fd, header_json, hlen)) < 0 ||
        (rc = write_all(fd, b4, 4)) < 0)
        return rc;
    off = CKPT_PREAMBLE + hlen + 4;
    /* One record at a time: fixed part, name, then zero padding up to the
     * aligned start of the data. The buffer holds the longest possible. */
    static const unsigned char zeros[CKPT_ALIGN];
    unsigned char rec[CKPT_REC_FIXED + CKPT_NAME_MAX];
    for (int i = 0; i < n; i++) {
        const ckpt_tensor *t = &ts[i];
        size_t len = strlen(t->name);
        put_u16(rec, (uint16_t)len);
        memcpy(rec + 2, t->name, len);
        unsigned char *f = rec + 2 + len;
        f[0] = (unsigned char)t->dtype;
        f[1] = 0;
        put_u64(f + 2, t->nbytes);
        put_u32(f + 10, ckpt_crc32(0, t->data, (size_t)t->nbytes));
        size_t rlen = 2 + len + 14;
        put_u32(rec + rlen, ckpt_crc32(0, rec, rlen));
        rlen += 4;
        off += rlen;
        uint64_t pad = pad_for(off);
        if ((rc = write_all(fd, rec, rlen)) < 0 || (rc = write_all(fd, zeros, pad)) < 0 ||
            (rc = write_all(fd, t->data, t->nbytes)) < 0)
            return rc;
        off += pad + t->nbytes;
    }
    unsigned char tr[CKPT_TRAILER];
    put_u64(tr, off + CKPT_TRAILER);
    memcpy(tr + 8, CKPT_END_MAGIC, 8);
    return write_all(fd, tr, sizeof tr);
}

/* Whether the file at path ends as a whole checkpoint does: its trailer's
 * length is the file's and the end magic is there. Cheap (16 bytes read),
 * it catches a truncated or overwritten tail; ckpt_read checks the rest. */
static int looks_whole(const char *path) {
    int fd = fs_open_regular(path, O_RDONLY, NULL); /* a FIFO is not whole, and never waited on */
    if (fd < 0) return 0;
    struct stat st;
    unsigned char tr[CKPT_TRAILER];
    int ok = fstat(fd, &st) == 0 && st.st_size >= (off_t)CKPT_TRAILER &&
             pread(fd, tr, sizeof tr, st.st_size - (off_t)CKPT_TRAILER) == (ssize_t)sizeof tr &&
             get_u64(tr) == (uint64_t)st.st_size && memcmp(tr + 8, CKPT_END_MAGIC, 8) == 0;
    close(fd);
    return ok;
}

static int read_ckpt(const char *path, ckpt_data *out, char *why, size_t whylen);

/* The files known to read back whole: the ones this process wrote, and
 * the ones retention read whole once; by identity (device, inode, size,
 * change time), so that a file changed or replaced since is read again. */
#define KNOWN_MAX 64
typedef struct {
    uint64_t dev, ino, size, ctime_ns;
} known_file;
static known_file known_files[KNOWN_MAX];
static int known_n, known_next; /* entries, and the next place (a ring: the oldest goes) */
static pthread_mutex_t known_mu = PTHREAD_MUTEX_INITIALIZER;

/* The file at path as known_file; 0, or -1 when it cannot be looked at. */
static int file_id(const char *path, known_file *f) {
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    f->dev = (uint64_t)st.st_dev, f->ino = (uint64_t)st.st_ino, f->size = (uint64_t)st.st_size;
    f->ctime_ns = (uint64_t)st.st_ctim.tv_sec * 1000000000u + (uint64_t)st.st_ctim.tv_nsec;
    return 0;
}

/* Under known_mu. */
static int is_known(const known_file *f) {
    for (int i = 0; i < known_n; i++)
        if (memcmp(&known_files[i], f, sizeof *f) == 0) return 1;
    return 0;
}

/* (Only files not known yet come here: one this process just wrote, or
 * one reads_back read whole.) */
static void know(const char *path) {
    pthread_mutex_lock(&known_mu);
    if (file_id(path, &known_files[known_next]) == 0) { /* (file_id writes only on success) */
        known_next = (known_next + 1) % KNOWN_MAX;
        if (known_n < KNOWN_MAX) known_n++;
    }
    pthread_mutex_unlock(&known_mu);
}

/* Whether the file at path reads back as a whole checkpoint: its trailer
 * first (cheap), then, once per file, every record and CRC. A trailer
 * alone would count a file damaged inside as a fallback, and retention
 * would then delete a good one for it. */
static int reads_back(const char *path) {
    known_file f;
    if (!looks_whole(path) || file_id(path, &f) != 0) return 0;
    pthread_mutex_lock(&known_mu);
    int seen = is_known(&f);
    pthread_mutex_unlock(&known_mu);
    if (seen) return 1;
    ckpt_data d;
    char why[512];
    if (read_ckpt(path, &d, why, sizeof why) < 0) return 0;
    ckpt_data_free(&d);
    know(path);
    return 1;
}

/* Deletes checkpoints older than `step` beyond the newest `keep` whole
 * ones (the one just written counts as one), and temporary files of writes
 * that died at a step no newer than this one. A damaged older checkpoint
 * neither counts (kept in place of a good one, it would leave no fallback)
 * nor is deleted (resuming skips it with a warning; what broke it may be
 * worth a look). Checkpoints with a newer step than the one just
 * written (left by a run that was rolled back) are not "older" and stay.
 * Failures only leave a file behind, so they are ignored. */
static void prune(const char *dir, uint64_t step, const char *written, int keep) {
    char p[PATH_MAX];
    ckpt_entry *e;
    int n;
    if (keep > 0 && list_dir(dir, 0, &e, &n) == 0) {
        int kept = 1; /* the one just written */
        for (int i = 0; i < n; i++) {
            if (e[i].step >= step || strcmp(e[i].name, written) == 0) continue;
            if (fmt_path(p, sizeof p, "%s/%s", dir, e[i].name) != 0) continue;
            if (!reads_back(p)) continue; /* left for whoever wants to see what broke */
            if (kept < keep) {
                kept++;
                continue;
            }
            unlink(p);
        }
        entries_free(e, n);
    }
    if (list_dir(dir, 1, &e, &n) == 0) {
        for (int i = 0; i < n; i++)
            if (e[i].step <= step && fmt_path(p, sizeof p, "%s/%s", dir, e[i].name) == 0)
                unlink(p);
        entries_free(e, n);
    }
}

static int fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) == 0 || errno == EINVAL ? 0 : -errno; /* EINVAL: not supported here */
    close(fd);
    return rc;
}

int ckpt_write(const ckpt_save *save, char *path_out, size_t path_len, char *err,
               size_t errlen) {
    const char *dir = save->dir && *save->dir ? save->dir : ".";
    const char *header_json = save->header_json ? save->header_json : "{}";
    const ckpt_tensor *ts = save->tensors;
    int n = save->ntensors, keep = save->keep;
    uint64_t step = save->step;
    char tmp[PATH_MAX], final[PATH_MAX], name[64];
    int fd = -1, rc;
    tmp[0] = 0;
    if ((rc = check_input(header_json, ts, n, err, errlen)) < 0) return rc;
    snprintf(name, sizeof name, "ckpt-%010" PRIu64 ".ddpt", step);
    if (fmt_path(final, sizeof final, "%s/%s", dir, name) < 0 ||
        fmt_path(tmp, sizeof tmp, "%s/.ckpt-%" PRIu64 ".tmp.%d", dir, step, (int)getpid()) < 0 ||
        (path_out && strlen(final) >= path_len)) {
        tmp[0] = 0;
        snprintf(err, errlen, "checkpoint path %s/%s is too long", dir, name);
        return -ENAMETOOLONG;
    }
    if ((rc = fs_mkdir_p(dir)) < 0) {
        tmp[0] = 0;
        snprintf(err, errlen, "cannot create checkpoint directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        tmp[0] = 0; /* not ours: never unlink it */
        snprintf(err, errlen, "cannot create checkpoint file %s: %s", final, strerror(-rc));
        goto out;
    }
    if ((rc = write_body(fd, header_json, ts, n)) < 0 || (rc = fsync(fd) == 0 ? 0 : -errno) < 0) {
        snprintf(err, errlen, "cannot write checkpoint %s: %s", final, strerror(-rc));
        goto out;
    }
    rc = close(fd) == 0 ? 0 : -errno;
    fd = -1;
    if (rc < 0) {
        snprintf(err, errlen, "cannot write checkpoint %s: %s", final, strerror(-rc));
        goto out;
    }
    if (rename(tmp, final) != 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot rename %s to %s: %s", tmp, final, strerror(-rc));
        goto out;
    }
    tmp[0] = 0; /* renamed: nothing to clean up */
    if ((rc = fsync_dir(dir)) < 0) {
        snprintf(err, errlen, "wrote checkpoint %s but cannot sync directory %s: %s", final, dir,
                 strerror(-rc));
        goto out;
    }
    if (path_out) snprintf(path_out, path_len, "%s", final);
    know(final); /* what this process wrote reads back: it is not read again */
    prune(dir, step, name, keep);
out:
    if (fd >= 0) close(fd);
    if (tmp[0]) unlink(tmp);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Reading                                                             */

/* A reader keeps the file and the end of the region that may hold
 * records (the start of the trailer); `why` receives the phrase that
 * follows the file's name in messages ("is corrupt (...)"). */
typedef struct {
    int fd;
    uint64_t size, limit, off;
    char *why;
    size_t whylen;
} reader;

static int bad(reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(reader *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = err_vset(r->why, r->whylen, -EBADMSG, fmt, ap);
    va_end(ap);
    return rc;
}

/* Reads n bytes at r->off, which the caller has checked lie within the
 * file. A short read means the file shrank under us. */
static int rd(reader *r, void *buf, uint64_t n) {
    char *b = buf;
    uint64_t left = n, off = r->off;
    while (left > 0) {
        size_t k = left > (1u << 30) ? (1u << 30) : (size_t)left;
        ssize_t got = pread(r->fd, b, k, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            snprintf(r->why, r->whylen, "cannot be read (%s)", strerror(e));
            return -e;
        }
        if (got == 0) return bad(r, "is truncated (it shrank while being read)");
        b += got;
        off += (uint64_t)got;
        left -= (uint64_t)got;
    }
    r->off = off;
    return 0;
}

/* Checks that n more bytes of `what` fit before the trailer. */
static int need(reader *r, uint64_t n, const char *what) {
    if (n > r->limit - r->off)
        return bad(r, "is corrupt (%s needs %" PRIu64 " bytes at offset %" PRIu64
                      " but only %" PRIu64 " are left)",
                   what, n, r->off, r->limit - r->off);
    return 0;
}

static int read_preamble(reader *r, ckpt_data *d, uint32_t *count) {
    unsigned char pre[CKPT_PREAMBLE], b4[4];
    int rc;
    if ((rc = rd(r, pre, sizeof pre)) < 0) return rc;
    uint32_t version = get_u32(pre + 8), flags = get_u32(pre + 12);
    uint64_t hlen = get_u64(pre + 16);
    if (version != CKPT_VERSION)
        return bad(r, "has format version %" PRIu32 "; this ddp-train reads version %u", version,
                   CKPT_VERSION);
    if (flags != 0 || get_u32(pre + 28) != 0)
        return bad(r, "is corrupt (unknown flags 0x%08" PRIx32 " or reserved bytes set)", flags);
    if ((rc = need(r, hlen, "the header")) < 0 || (rc = need(r, hlen + 4, "the header CRC")) < 0)
        return rc;
    d->header = malloc((size_t)hlen + 1);
    if (!d->header) return -ENOMEM;
    if ((rc = rd(r, d->header, hlen)) < 0 || (rc = rd(r, b4, 4)) < 0) return rc;
    d->header[hlen] = 0;
    uint32_t crc = ckpt_crc32(ckpt_crc32(0, pre, sizeof pre), d->header, (size_t)hlen);
    if (crc != get_u32(b4)) return bad(r, "is corrupt (the header fails its CRC)");
    /* The CRC held, so what follows is what the writer wrote; these can
     * only fail for a file written by something else. */
    if (memchr(d->header, 0, (size_t)hlen)) return bad(r, "is corrupt (NUL byte in the header)");
    json_error_t jerr;
    json_t *h = json_loads(d->header, 0, &jerr);
    int ok = json_is_object(h);
    json_decref(h);
    if (!ok) return bad(r, "is corrupt (the header is not a JSON object)");
    *count = get_u32(pre + 24);
    /* Every record takes at least CKPT_REC_FIXED + 1 bytes, which bounds
     * the count by the file's size before the table is allocated. */
    if (*count > (r->limit - r->off) / (CKPT_REC_FIXED + 1))
        return bad(r, "is corrupt (%" PRIu32 " tensors cannot fit in %" PRIu64 " bytes)", *count,
                   r->size);
    return 0;
}

static int read_tensor(reader *r, ckpt_data *d, uint32_t i) {
    unsigned char rec[CKPT_REC_FIXED + CKPT_NAME_MAX];
    int rc;
    if ((rc = need(r, 2, "a tensor record")) < 0 || (rc = rd(r, rec, 2)) < 0) return rc;
    uint16_t len = get_u16(rec);
    if (len == 0) return bad(r, "is corrupt (tensor %" PRIu32 " has an empty name)", i);
    if ((rc = need(r, (uint64_t)len + CKPT_REC_FIXED - 2, "a tensor record")) < 0 ||
        (rc = rd(r, rec + 2, (uint64_t)len + CKPT_REC_FIXED - 2)) < 0)
        return rc;
    const unsigned char *f = rec + 2 + len;
    if (ckpt_crc32(0, rec, 2u + len + 14) != get_u32(f + 14))
        return bad(r, "is corrupt (the record of tensor %" PRIu32 " fails its CRC)", i);
    d->t[i].name = malloc(len + 1u);
    if (!d->t[i].name) return -ENOMEM;
    memcpy(d->t[i].name, rec + 2, len);
    d->t[i].name[len] = 0;
    const char *name = d->t[i].name;
    uint64_t nbytes = get_u64(f + 2);
    d->t[i].dtype = (ckpt_dtype)f[0];
    if ((f[0] != CKPT_F32 && f[0] != CKPT_BYTES) || f[1] != 0 || memchr(name, 0, len) ||
        (f[0] == CKPT_F32 && nbytes % 4 != 0))
        return bad(r, "is corrupt (tensor '%s' has a bad dtype, name or size)", name);
    /* Padding first, then the data: both must fit before any allocation. */
    unsigned char pad[CKPT_ALIGN];
    uint64_t plen = pad_for(r->off);
    if ((rc = need(r, plen, "padding")) < 0 || (rc = rd(r, pad, plen)) < 0) return rc;
    for (uint64_t k = 0; k < plen; k++)
        if (pad[k]) return bad(r, "is corrupt (nonzero padding before tensor '%s')", name);
    char what[96];
    snprintf(what, sizeof what, "tensor '%.60s'", name);
    if ((rc = need(r, nbytes, what)) < 0) return rc;
    d->t[i].data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!d->t[i].data) return -ENOMEM;
    d->t[i].nbytes = nbytes;
    if ((rc = rd(r, d->t[i].data, nbytes)) < 0) return rc;
    if (ckpt_crc32(0, d->t[i].data, (size_t)nbytes) != get_u32(f + 10))
        return bad(r, "is corrupt (tensor '%s' fails its CRC)", name);
    return 0;
}

/* Whether read_ckpt's code says the path is no regular file at all (a
 * FIFO, a directory, a device: fs_open_regular's -EINVAL and -EISDIR). */
#define NOT_A_FILE(rc) ((rc) == -EINVAL || (rc) == -EISDIR)

/* Reads and verifies path into out (zeroed first; freed on failure).
 * On failure, `why` continues "checkpoint <path> ...". A path that is not
 * a regular file is refused without waiting on it (NOT_A_FILE). */
static int read_ckpt(const char *path, ckpt_data *out, char *why, size_t whylen) {
    reader r = {.fd = -1, .why = why, .whylen = whylen};
    int rc;
    memset(out, 0, sizeof *out);
    const char *kind;
    r.fd = fs_open_regular(path, O_RDONLY, &kind);
    struct stat st;
    if (r.fd < 0 || fstat(r.fd, &st) != 0) {
        rc = r.fd < 0 ? r.fd : -errno;
        if (kind)
            snprintf(why, whylen, "is %s, not a checkpoint file", kind);
        else
            snprintf(why, whylen, "cannot be opened (%s)", strerror(-rc));
        goto out;
    }
    r.size = (uint64_t)st.st_size;
    unsigned char b[CKPT_TRAILER];
    if (r.size < CKPT_PREAMBLE + 4 + CKPT_TRAILER) {
        rc = bad(&r, "is truncated (%" PRIu64 " bytes, shorter than any checkpoint)", r.size);
        goto out;
    }
    if ((rc = rd(&r, b, 8)) < 0) goto out;
    if (memcmp(b, CKPT_MAGIC, 8) != 0) {
        rc = bad(&r, "is not a ddprun checkpoint (bad magic)");
        goto out;
    }
    /* The trailer is checked before anything else, so that a file cut
     * short anywhere (even between two tensors) reads as truncated. */
    r.off = r.size - CKPT_TRAILER;
    if ((rc = rd(&r, b, CKPT_TRAILER)) < 0) goto out;
    if (memcmp(b + 8, CKPT_END_MAGIC, 8) != 0 || get_u64(b) != r.size) {
        rc = bad(&r, "is truncated (%" PRIu64 " bytes, no end marker)", r.size);
        goto out;
    }
    r.off = 0;
    r.limit = r.size - CKPT_TRAILER;
    uint32_t count = 0;
    if ((rc = read_preamble(&r, out, &count)) < 0) goto out;
    out->t = calloc(count ? count : 1, sizeof *out->t);
    if (!out->t) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < count; i++) {
        out->n = (int)i + 1; /* so that a failure frees what was read */
        if ((rc = read_tensor(&r, out, i)) < 0) goto out;
    }
    out->n = (int)count;
    if (r.off != r.limit)
        rc = bad(&r, "is corrupt (%" PRIu64 " stray bytes after the last tensor)",
                 r.limit - r.off);
out:
    if (rc == -ENOMEM) snprintf(why, whylen, "cannot be read (out of memory)");
    if (r.fd >= 0) close(r.fd);
    if (rc < 0) ckpt_data_free(out);
    return rc;
}

int ckpt_read(const char *path, ckpt_data *out, char *err, size_t errlen) {
    char why[512];
    int rc = read_ckpt(path, out, why, sizeof why);
    if (rc < 0) snprintf(err, errlen, "checkpoint %s %s", path, why);
    return rc;
}

void ckpt_data_free(ckpt_data *d) {
    if (!d) return;
    for (int i = 0; d->t && i < d->n; i++) {
        free(d->t[i].name);
        free(d->t[i].data);
    }
    free(d->t);
    free(d->header);
    memset(d, 0, sizeof *d);
}

const void *ckpt_find(const ckpt_data *d, const char *name, uint64_t *nbytes) {
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->t[i].name, name) == 0) {
            if (nbytes) *nbytes = d->t[i].nbytes;
            return d->t[i].data;
        }
    if (nbytes) *nbytes = 0;
    return NULL;
}

int ckpt_latest(const char *dir, char *path, size_t path_len, ckpt_data *out,
                void (*warn)(const char *line), char *err, size_t errlen) {
    ckpt_entry *e;
    int n, rc = list_dir(dir, 0, &e, &n);
    memset(out, 0, sizeof *out);
    if (rc < 0) {
        /* Only a missing directory means "no checkpoint yet"; anything else
         * (permissions, not a directory) must not make a run start over. */
        if (rc == -ENOENT)
            snprintf(err, errlen, "no checkpoint in %s (%s)", dir, strerror(-rc));
        else
            snprintf(err, errlen, "cannot list checkpoint directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    if (n == 0) {
        entries_free(e, n);
        snprintf(err, errlen, "no checkpoint in %s", dir);
        return -ENOENT;
    }
    rc = -EBADMSG;
    int files = 0; /* entries that are files: damaged ones count, FIFOs do not */
    for (int i = 0; i < n; i++) {
        char p[PATH_MAX], why[512], line[1024];
        if (fmt_path(p, sizeof p, "%s/%s", dir, e[i].name) < 0) continue;
        int r = read_ckpt(p, out, why, sizeof why);
        if (NOT_A_FILE(r)) { /* no checkpoint was ever there */
            snprintf(line, sizeof line, "%s in %s %s: skipped", e[i].name, dir, why);
            if (warn) warn(line);
            continue;
        }
        files++;
        if (r == 0) {
            if (path && fmt_path(path, path_len, "%s", p) < 0) {
                ckpt_data_free(out);
                snprintf(err, errlen, "checkpoint path %s is too long", p);
                rc = -ENAMETOOLONG;
            } else {
                rc = 0;
            }
            break;
        }
        if (r == -ENOMEM) { /* not the file's fault: do not fall back */
            snprintf(err, errlen, "checkpoint %s %s", p, why);
            rc = r;
            break;
        }
        snprintf(line, sizeof line, "checkpoint %s %s; %s", e[i].name, why,
                 i + 1 < n ? "using an older one" : "no older one is left");
        if (warn) warn(line);
    }
    if (rc == -EBADMSG && files == 0) {
        snprintf(err, errlen, "no checkpoint in %s (only entries that are not files)", dir);
        rc = -ENOENT;
    } else if (rc == -EBADMSG) {
        snprintf(err, errlen,
                 "no valid checkpoint in %s: all %d are unreadable (see the warnings); move them "
                 "away to start from scratch",
                 dir, files);
    }
    entries_free(e, n);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Inspecting                                                          */

static void warn_stderr(const char *line) { fprintf(stderr, "ddp-train: warning: %s\n", line); }

/* The header of d as a JSON object with the fields inspect adds. */
static json_t *describe(const char *path, uint64_t file_bytes, const ckpt_data *d) {
    json_t *hdr = json_loads(d->header, 0, NULL), *o = json_object(), *ts = json_array();
    if (!hdr || !o || !ts) goto fail;
    json_object_set_new(o, "path", json_string(path));
    json_object_set_new(o, "file_bytes", json_integer((json_int_t)file_bytes));
    json_object_set_new(o, "format_version", json_integer(CKPT_VERSION));
    json_object_update_missing(o, hdr);
    uint64_t h = HASH_FNV1A64_INIT;
    for (int i = 0; i < d->n; i++) {
        char crc[16];
        unsigned char len[8];
        snprintf(crc, sizeof crc, "%08" PRIx32, ckpt_crc32(0, d->t[i].data, (size_t)d->t[i].nbytes));
        json_array_append_new(ts, json_pack("{s:s, s:s, s:I, s:s}", "name", d->t[i].name, "dtype",
                                            dtype_name(d->t[i].dtype), "bytes",
                                            (json_int_t)d->t[i].nbytes, "crc32", crc));
        put_u64(len, d->t[i].nbytes);
        h = hash_fnv1a64(h, d->t[i].name, strlen(d->t[i].name) + 1); /* with its NUL */
        h = hash_fnv1a64(h, len, 8);
        h = hash_fnv1a64(h, d->t[i].data, d->t[i].nbytes);
    }
    char digest[32];
    snprintf(digest, sizeof digest, "fnv1a64:%016" PRIx64, h);
    json_object_set_new(o, "tensors", ts);
    json_object_set_new(o, "weights_digest", json_string(digest));
    json_decref(hdr);
    return o;
fail:
    json_decref(hdr);
    json_decref(o);
    json_decref(ts);
    return NULL;
}

int ckpt_inspect(const char *path, FILE *out, char *err, size_t errlen) {
    char file[PATH_MAX];
    ckpt_data d = {0};
    json_t *o = NULL;
    struct stat st;
    int rc;
    if (stat(path, &st) != 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot inspect %s: %s", path, strerror(-rc));
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        if ((rc = ckpt_latest(path, file, sizeof file, &d, warn_stderr, err, errlen)) < 0)
            return rc;
        if (stat(file, &st) != 0) st.st_size = 0; /* deleted since: report what we read */
    } else {
        if (fmt_path(file, sizeof file, "%s", path) < 0) {
            snprintf(err, errlen, "checkpoint path %s is too long", path);
            return -ENAMETOOLONG;
        }
        if ((rc = ckpt_read(file, &d, err, errlen)) < 0) return rc;
    }
    o = describe(file, (uint64_t)st.st_size, &d);
    if (!o) {
        snprintf(err, errlen, "cannot describe checkpoint %s (out of memory)", file);
        rc = -ENOMEM;
        goto out;
    }
    if (json_dumpf(o, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 || fputc('\n', out) == EOF ||
        fflush(out) != 0) {
        rc = -EIO;
        snprintf(err, errlen, "cannot print the description of checkpoint %s", file);
        goto out;
    }
    rc = 0;
out:
    json_decref(o);
    ckpt_data_free(&d);
    return rc;
}
