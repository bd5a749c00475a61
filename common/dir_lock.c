/* See dir_lock.h. The lock file holds four lines, "pid P", "host H",
 * "run_id R" and "since T", rewritten by each new holder; nothing but the
 * flock itself says whether anyone holds the directory now. */
#include "common/dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "common/fs.h"

/* A refused process reads the holder's lines; a holder that has only just
 * taken the lock may not have written them yet, so an empty file is read
 * again a few times before it counts as saying nothing. */
#define READ_TRIES 10
#define READ_PAUSE_NS 20000000L

/* src into dst (of len bytes), control characters as '?', so that one
 * value stays one line of the file. */
static void copy_line(char *dst, size_t len, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < len; i++)
        dst[i] = (unsigned char)src[i] < 0x20 || src[i] == 0x7f ? '?' : src[i];
    dst[i] = 0;
}

static int write_all_at(int fd, const char *p, size_t n) {
    off_t off = 0;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? -errno : -EIO;
        p += w, n -= (size_t)w, off += w;
    }
    return 0;
}

/* This process as the holder, into the (locked) file. */
static int write_holder(int fd, const char *run_id) {
    char host[256] = "", id[256], since[32], text[1024];
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    copy_line(id, sizeof id, run_id);
    copy_line(host, sizeof host, host);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(text, sizeof text, "pid %ld\nhost %s\nrun_id %s\nsince %s\n", (long)getpid(),
                     host, id, since);
    if (ftruncate(fd, 0) != 0) return -errno;
    return write_all_at(fd, text, (size_t)n);
}

/* The value of line "KEY value" into out, if the line is that key's. */
static void take_field(const char *line, size_t len, const char *key, char *out, size_t outlen) {
    size_t k = strlen(key);
    if (len <= k || strncmp(line, key, k) != 0 || line[k] != ' ') return;
    size_t n = len - k - 1 < outlen - 1 ? len - k - 1 : outlen - 1;
    memcpy(out, line + k + 1, n);
    out[n] = 0;
}

static void parse_holder(const char *text, dir_lock_holder *h) {
    char pid[32] = "";
    memset(h, 0, sizeof *h);
    for (const char *line = text; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        take_field(line, len, "pid", pid, sizeof pid);
        take_field(line, len, "host", h->host, sizeof h->host);
        take_field(line, len, "run_id", h->run_id, sizeof h->run_id);
        take_field(line, len, "since", h->since, sizeof h->since);
        line += len + (nl ? 1 : 0);
    }
    char *end;
    long v = strtol(pid, &end, 10);
    h->pid = end != pid && *end == 0 && v > 0 ? v : 0;
}

/* The other holder's lines, from the file it keeps locked. */
static void read_holder(int fd, dir_lock_holder *h) {
    char text[2048];
    for (int i = 0; i < READ_TRIES; i++) {
        ssize_t n = pread(fd, text, sizeof text - 1, 0);
        text[n > 0 ? n : 0] = 0;
        parse_holder(text, h);
        if (h->pid) return;
        nanosleep(&(struct timespec){.tv_nsec = READ_PAUSE_NS}, NULL);
    }
}

int dir_lock_take(dir_lock *l, const char *dir, const char *run_id, dir_lock_holder *holder,
                  char *err, size_t errlen) {
    char path[PATH_MAX];
    const char *kind;
    int rc, fd = -1;
    if (snprintf(path, sizeof path, "%s/%s", dir, DIR_LOCK_FILE) >= (int)sizeof path) {
        snprintf(err, errlen, "cannot lock %s: the path is too long", dir);
        return -ENAMETOOLONG;
    }
    if ((rc = fs_mkdir_p(dir)) < 0) {
        snprintf(err, errlen, "cannot create %s: %s", dir, strerror(-rc));
        return rc;
    }
    /* O_NOFOLLOW: a link planted in the directory cannot make us create or
     * truncate a file elsewhere. */
    fd = fs_open_regular(path, O_RDWR | O_CREAT | O_NOFOLLOW, &kind);
    if (fd < 0) {
        if (kind)
            snprintf(err, errlen, "cannot lock %s: %s is %s, not a lock file; remove it", dir,
                     path, kind);
        else
            snprintf(err, errlen, "cannot lock %s: cannot open %s: %s", dir, path, strerror(-fd));
        return fd;
    }
    while ((rc = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : -errno) == -EINTR) {
    }
    if (rc == -EWOULDBLOCK) {
        if (holder) read_holder(fd, holder);
        snprintf(err, errlen, "%s is locked by another process", dir);
    } else if (rc < 0) {
        snprintf(err, errlen, "cannot lock %s (flock on %s): %s", dir, path, strerror(-rc));
    } else if ((rc = write_holder(fd, run_id)) < 0) {
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(-rc));
    }
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *l = (dir_lock){.held = 1, .fd = fd};
    return 0;
}

void dir_lock_release(dir_lock *l) {
    if (!l->held) return;
    close(l->fd);
    *l = (dir_lock){0};
}

void dir_lock_holder_text(const dir_lock_holder *h, char *buf, size_t len) {
    if (!h->pid && !h->host[0]) {
        snprintf(buf, len, "a process whose lock file does not say who it is");
        return;
    }
    int n = snprintf(buf, len, "pid %ld", h->pid);
    if (h->host[0] && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, " on host %s", h->host);
    if (h->run_id[0] && n >= 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ", run id %s", h->run_id);
    if (h->since[0] && n >= 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", since %s", h->since);
}
