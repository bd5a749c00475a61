/* See free_ports.h. */
#include "agent/free_ports.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"

#define PORT_LO 20000
#define PORT_HI 32768
#define PORT_TRIES 200

/* A socket bound to a free port drawn with r: its fd, -1 with errno. */
static int bind_random(uint64_t *r, int *port) {
    for (int t = 0; t < PORT_TRIES; t++) {
        *r = *r * 6364136223846793005ULL + 1442695040888963407ULL;
        *port = PORT_LO + (int)((*r >> 33) % (PORT_HI - PORT_LO));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)*port),
                                 .sin_addr.s_addr = htonl(INADDR_ANY)};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return -1;
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
        int e = errno;
        close(fd);
        if (e != EADDRINUSE && e != EACCES) return errno = e, -1;
    }
    return errno = EADDRINUSE, -1;
}

int free_ports(int n, const char *what, char *out, size_t len, char *err, size_t errlen) {
    size_t at = 0;
    out[0] = '\0';
    int *fds = calloc((size_t)n, sizeof *fds), rc = 0;
    if (!fds) return err_set(err, errlen, -ENOMEM, "out of memory");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t r = (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_sec;
    /* all held open until all are chosen: n different ports */
    for (int i = 0; i < n && rc == 0; i++) {
        int port = 0;
        fds[i] = bind_random(&r, &port);
        if (fds[i] < 0) {
            rc = err_set(err, errlen, -errno, "cannot pick a free port for %s: %s", what,
                         strerror(errno));
            break;
        }
        int k = snprintf(out + at, len - at, "%s%d", i ? "," : "", port);
        if (k < 0 || (size_t)k >= len - at)
            rc = err_set(err, errlen, -E2BIG, "%s: %d ports do not fit", what, n);
        else
            at += (size_t)k;
    }
    for (int i = 0; i < n; i++)
        if (fds[i] > 0) close(fds[i]);
    free(fds);
    return rc;
}
