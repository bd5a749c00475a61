/* See tf_config.h. */
#include "agent/tf_config.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/err.h"

/* The ports are drawn at random below the kernel's ephemeral range (32768
 * and up by default), each one free when drawn. Not bind(0)'s port: the
 * kernel hands a port just closed to the next process that asks, and two
 * agents on one machine then publish the same one. */
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

int tf_config_ports(int n, char *out, size_t len, char *err, size_t errlen) {
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
            rc = err_set(err, errlen, -errno, "cannot pick a free port for TF_CONFIG: %s",
                         strerror(errno));
            break;
        }
        int k = snprintf(out + at, len - at, "%s%d", i ? "," : "", port);
        if (k < 0 || (size_t)k >= len - at)
            rc = err_set(err, errlen, -E2BIG, "--tf-config: %d ports do not fit", n);
        else
            at += (size_t)k;
    }
    for (int i = 0; i < n; i++)
        if (fds[i] > 0) close(fds[i]);
    free(fds);
    return rc;
}

char *tf_config_cluster(const rdzv_result *round, char *err, size_t errlen) {
    json_t *list = json_array();
    for (int i = 0; list && i < round->group_world_size; i++) {
        const rdzv_node *nd = &round->nodes[i];
        const char *p = nd->worker_ports;
        for (int k = 0; k < nd->nproc; k++) {
            char *end;
            long port = strtol(p, &end, 10);
            if (end == p || port <= 0 || port > 65535 || (*end && *end != ',')) {
                err_set(err, errlen, -EPROTO,
                        "--tf-config: the agent on %s published %s for its %d workers' ports "
                        "(is it running ddprun with --tf-config too?)",
                        nd->host, nd->worker_ports, nd->nproc);
                json_decref(list);
                return NULL;
            }
            char hp[200];
            snprintf(hp, sizeof hp, "%s:%ld", nd->host, port);
            json_array_append_new(list, json_string(hp));
            p = *end ? end + 1 : end;
        }
    }
    char *s = list ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    if (!s) err_set(err, errlen, -ENOMEM, "out of memory");
    return s;
}

char *tf_config_var(const char *cluster, int index) {
    char *s = NULL;
    if (asprintf(&s, "TF_CONFIG={\"cluster\":{\"worker\":%s},\"task\":{\"type\":\"worker\","
                     "\"index\":%d}}",
                 cluster, index) < 0)
        return NULL;
    return s;
}
