/* See proc_stat.h. open and read, no stdio: the communicator calls it
 * from its wait loops. */
#include "common/proc_stat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int proc_stat_read(pid_t pid, proc_stat *out) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = pid > 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) return pid > 0 ? -errno : -ENOENT;
    ssize_t n = read(fd, line, sizeof line - 1);
    close(fd);
    if (n <= 0) return -EIO;
    line[n] = '\0';
    const char *close_paren = strrchr(line, ')');
    int ppid, pgid;
    /* state ppid pgrp session tty_nr tpgid flags */
    if (!close_paren || sscanf(close_paren + 1, " %c %d %d %*d %*d %*d %u", &out->state, &ppid,
                               &pgid, &out->flags) != 4)
        return -EIO;
    out->ppid = (pid_t)ppid, out->pgid = (pid_t)pgid;
    return 0;
}
