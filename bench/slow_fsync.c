/* A slow disk for bench/ckpt_stall.sh, loaded with LD_PRELOAD: every
 * fsync and fdatasync sleeps SLOW_FSYNC_MS milliseconds (default 100)
 * before doing its work, as a busy network file system or a cloud disk
 * may take. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void nap(void) {
    const char *s = getenv("SLOW_FSYNC_MS");
    long ms = s ? atol(s) : 100;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    nap();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    nap();
    return real(fd);
}
