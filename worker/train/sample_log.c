#include "worker/train/sample_log.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int sample_log_open(sample_log *s, const char *dir, int rank, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    if (!dir || !dir[0]) return 0;
    char path[1200];
    snprintf(path, sizeof path, "%s/samples.%d.%ld.log", dir, rank, (long)getpid());
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "--sample-log %s: cannot make it: %s", dir, strerror(errno));
        return -errno;
    }
    s->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
    if (s->fd < 0) {
        int e = errno;
        snprintf(err, errlen, "--sample-log: cannot open %s: %s", path, strerror(e));
        return -e;
    }
    return 0;
}

int sample_log_step(sample_log *s, int epoch, int64_t pos, int64_t global_step, int world,
                    int rank, const int64_t *idx, int n) {
    if (s->fd < 0) return 0;
    size_t need = 128 + (size_t)n * 21;
    if (need > s->cap) {
        char *p = realloc(s->line, need);
        if (!p) return -ENOMEM;
        s->line = p, s->cap = need;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    size_t len = (size_t)snprintf(s->line, s->cap, "%lld %d %" PRId64 " %" PRId64 " %d %d ",
                                  (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec, epoch, pos,
                                  global_step, world, rank);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s->line + len, s->cap - len, "%s%" PRId64, i ? "," : "", idx[i]);
    s->line[len++] = '\n';
    ssize_t w = write(s->fd, s->line, len);
    return w == (ssize_t)len ? 0 : w < 0 ? -errno : -ENOSPC;
}

void sample_log_close(sample_log *s) {
    if (s->fd >= 0) close(s->fd);
    free(s->line);
    s->fd = -1, s->line = NULL, s->cap = 0;
}
