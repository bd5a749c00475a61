/* See metrics_http.h. Every request is answered at once from the
 * registry: a render is a few kilobytes built under the registry's mutex
 * plus a read of the ranks' files, so there is no caching. */
#include "agent/metrics_http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"

struct metrics_http {
    struct MHD_Daemon *d;
    agent_metrics *m;
    int metrics, health;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
                             void *data, size_t len, enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, data, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE) free(data);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED) MHD_add_response_header(r, "Allow", "GET, HEAD");
    enum MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result text(struct MHD_Connection *c, unsigned code, const char *s) {
    return reply(c, code, "text/plain; charset=utf-8", (void *)s, strlen(s),
                 MHD_RESPMEM_MUST_COPY);
}

static enum MHD_Result serve_metrics(metrics_http *h, struct MHD_Connection *c) {
    buf_t b = BUF_INIT;
    if (metrics_render(h->m, clock_now_s(), &b) != 0) {
        buf_free(&b);
        return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory rendering the metrics\n");
    }
    return reply(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len,
                 MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result serve_health(metrics_http *h, struct MHD_Connection *c) {
    char body[512];
    int code = metrics_health(h->m, clock_now_s(), body, sizeof body);
    return reply(c, (unsigned)code, "application/json", body, strlen(body),
                 MHD_RESPMEM_MUST_COPY);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **req) {
    (void)version, (void)upload, (void)req;
    metrics_http *h = cls;
    if (*upload_size) { /* a body nobody asked for: read and dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are served\n");
    if (h->metrics && strcmp(url, "/metrics") == 0) return serve_metrics(h, c);
    if (strcmp(url, "/health") == 0) return serve_health(h, c);
    if (h->health && strcmp(url, "/") == 0) return serve_health(h, c);
    char msg[160];
    snprintf(msg, sizeof msg, "not found; this port serves %s\n",
             h->metrics && h->health ? "/metrics, /health and /"
             : h->metrics           ? "/metrics and /health"
                                    : "/health and /");
    return text(c, MHD_HTTP_NOT_FOUND, msg);
}

/* The listening socket, bound and listening; -errno with err written. */
static int listen_on(const metrics_http_opts *o, int *bound, char *err, size_t errlen) {
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *res = NULL;
    int g = getaddrinfo(o->host, port, &hints, &res);
    if (g) {
        snprintf(err, errlen, "%s: cannot listen on '%s': %s", o->setting, o->host,
                 gai_strerror(g));
        return -EINVAL;
    }
    int fd = -1, rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) /* every interface, IPv4 too */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) break;
        rc = -errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    const char *where = o->host ? o->host : "this host";
    if (fd < 0 && rc == -EADDRINUSE)
        snprintf(err, errlen,
                 "%s: port %d on %s is in use by another program; choose another port (0 for "
                 "a free one)",
                 o->setting, o->port, where);
    else if (fd < 0 && rc == -EACCES)
        snprintf(err, errlen, "%s: not allowed to listen on port %d (ports below 1024 need "
                 "root); choose another port", o->setting, o->port);
    else if (fd < 0)
        snprintf(err, errlen, "%s: cannot listen on port %d of %s: %s", o->setting, o->port,
                 where, strerror(-rc));
    if (fd < 0) return rc;
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *bound = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                            : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

int metrics_http_start(const metrics_http_opts *o, agent_metrics *m, metrics_http **out,
                       int *bound, char *err, size_t errlen) {
    *out = NULL;
    metrics_http *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->m = m, h->metrics = o->metrics, h->health = o->health;
    int fd = listen_on(o, bound, err, errlen);
    if (fd < 0) {
        free(h);
        return fd;
    }
    /* Its own thread polls the socket; a scrape that hangs times out. */
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                            on_request, h, MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)64, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, errlen, "%s: cannot start the HTTP server on port %d", o->setting,
                 *bound);
        close(fd);
        free(h);
        return -EIO;
    }
    *out = h;
    return 0;
}

void metrics_http_stop(metrics_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d); /* closes the listening socket too */
    free(h);
}
