/* File-system helpers (see fs.h). */
#include "common/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_mkdir_p(const char *dir) {
    char p[PATH_MAX];
    int n = snprintf(p, sizeof p, "%s", dir);
    if (n < 0 || (size_t)n >= sizeof p) return -ENAMETOOLONG;
    if (n == 0) return -ENOENT;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != 0) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -errno;
        *s = c;
        if (c == 0) break;
    }
    /* EEXIST also covers a file of that name: say so rather than succeed. */
    struct stat st;
    if (stat(dir, &st) != 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

const char *fs_kind(mode_t mode) {
    return S_ISREG(mode)    ? "a regular file"
           : S_ISDIR(mode)  ? "a directory"
           : S_ISFIFO(mode) ? "a FIFO"
           : S_ISSOCK(mode) ? "a socket"
           : S_ISCHR(mode)  ? "a character device"
           : S_ISBLK(mode)  ? "a block device"
           : S_ISLNK(mode)  ? "a symbolic link"
                            : "not a regular file";
}

int fs_open_regular(const char *path, int flags, const char **kind) {
    const char *k = NULL;
    int rc, fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
    struct stat st;
    if (fd < 0) {
        rc = -errno;
        if (rc == -EISDIR) k = fs_kind(S_IFDIR); /* O_RDWR or O_CREAT on one */
        goto fail;
    }
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        k = fs_kind(st.st_mode);
        rc = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
        goto fail;
    }
    /* Reads of a regular file never wait anyway; cleared so that the
     * descriptor behaves as an ordinary one wherever it goes. */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        rc = -errno;
        goto fail;
    }
    if (kind) *kind = NULL;
    return fd;
fail:
    if (fd >= 0) close(fd);
    if (kind) *kind = k;
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void fs_remove_tree(const char *path) {
    nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}
