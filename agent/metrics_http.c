/* See metrics_http.h. Every request is answered at once from the
 * registry: a render is a few kilobytes built under the registry's mutex
 * plus a read of the ranks' files, so there is no caching. */
#include "agent/metrics_http.h"

#include <assert.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/http_server.h"
#include "common/clock.h"

#define TEXT "text/plain; charset=utf-8"
#define LISTEN_BACKLOG 511 /* connections the kernel holds for accept */

struct metrics_http {
    http_server *srv;
    agent_metrics *m;
    int metrics, health;
};

static int text(http_reply *r, int status, const char *s) {
    r->status = status;
    r->type = TEXT;
    return buf_append(&r->body, s, strlen(s));
}

static int serve_metrics(metrics_http *h, http_reply *r) {
    if (metrics_render(h->m, clock_now_s(), &r->body) != 0) {
        buf_clear(&r->body);
        return text(r, 500, "out of memory rendering the metrics\n");
    }
    r->status = 200;
    r->type = "text/plain; version=0.0.4; charset=utf-8";
    return 0;
}

static int serve_health(metrics_http *h, http_reply *r) {
    char body[512];
    r->status = metrics_health(h->m, clock_now_s(), body, sizeof body);
    r->type = "application/json";
    return buf_append(&r->body, body, strlen(body));
}

/* The routes (http_handler_fn): GET and HEAD only; the server leaves out
 * HEAD's body. */
static int on_request(void *ctx, const char *method, const char *path, http_reply *r) {
    metrics_http *h = ctx;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        r->allow = "GET, HEAD";
        return text(r, 405, "only GET and HEAD are served\n");
    }
    if (h->metrics && strcmp(path, "/metrics") == 0) return serve_metrics(h, r);
    if (strcmp(path, "/health") == 0) return serve_health(h, r);
    if (h->health && strcmp(path, "/") == 0) return serve_health(h, r);
    char msg[160];
    snprintf(msg, sizeof msg, "not found; this port serves %s\n",
             h->metrics && h->health ? "/metrics, /health and /"
             : h->metrics           ? "/metrics and /health"
                                    : "/health and /");
    return text(r, 404, msg);
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
        if (ai->ai_family == AF_INET6) /* "::" is every interface, IPv4's too */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, LISTEN_BACKLOG) == 0)
            break;
        rc = -errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0 && rc == -EADDRINUSE)
        snprintf(err, errlen,
                 "%s: port %d on %s is in use by another program; choose another port (0 for "
                 "a free one)",
                 o->setting, o->port, o->host);
    else if (fd < 0 && rc == -EACCES)
        snprintf(err, errlen, "%s: not allowed to listen on port %d (ports below 1024 need "
                 "root); choose another port", o->setting, o->port);
    else if (fd < 0)
        snprintf(err, errlen, "%s: cannot listen on port %d of %s: %s", o->setting, o->port,
                 o->host, strerror(-rc));
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
    assert(o->host); /* the caller chooses the default (agent.c: 127.0.0.1) */
    metrics_http *h = calloc(1, sizeof *h);
    if (!h) return -ENOMEM;
    h->m = m, h->metrics = o->metrics, h->health = o->health;
    int fd = listen_on(o, bound, err, errlen);
    if (fd < 0) {
        free(h);
        return fd;
    }
    char why[256];
    http_server_opts so = {.fd = fd, .handler = on_request, .ctx = h};
    int rc = http_server_start(&so, &h->srv, why, sizeof why); /* closes fd if it fails */
    if (rc) {
        snprintf(err, errlen, "%s: port %d: %s", o->setting, *bound, why);
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

void metrics_http_stop(metrics_http *h) {
    if (!h) return;
    http_server_stop(h->srv); /* joins its thread, closes the listening socket too */
    free(h);
}
