/* File-system helpers (see fs.h). */
#include "common/fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>

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
