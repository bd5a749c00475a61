/* A slow disk for bench/ckpt_stall.sh (and a wide moment to strike in
 * tests/integration/train_final_save.sh), loaded with LD_PRELOAD: every
 * fsync and fdatasync sleeps SLOW_FSYNC_MS milliseconds (default 100)
 * before doing its work, as a busy network file system or a cloud disk
 * may take; with SLOW_FSYNC_PATH set, only for files whose path begins
 * with it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void nap(int fd) {
    const char *only = getenv("SLOW_FSYNC_PATH");
    if (only && *only) {
        char link[64], path[4096];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, sizeof path - 1);
        if (n <= 0) return;
        path[n] = 0;
        if (strncmp(path, only, strlen(only)) != 0) return;
    }
    const char *s = getenv("SLOW_FSYNC_MS");
    long ms = s ? atol(s) : 100;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    nap(fd);
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    nap(fd);
    return real(fd);
}
