/* A small HTTP/1.x server for the agent's own endpoints (agent/metrics_http.c):
 * GET and HEAD of short answers that a handler builds at once, on a thread
 * of its own, one request per connection.
 *
 * It is written to stay open to everyone while some clients misbehave.
 * Each connection has one deadline, counted from its accept to the last
 * byte of its response and never extended by the bytes it sends, so a
 * client that trickles its request is dropped as surely as a silent one.
 * The request head is bounded (a larger one gets 431 and is closed). The
 * connection table is bounded, and when it is full a new connection
 * evicts the oldest one still reading its request, so clients that hold
 * connections open can never keep a fresh request out (a connection is
 * read as soon as it is accepted). Every response says Connection: close;
 * HEAD gets the headers (Content-Length included) without the body.
 * Nothing is logged per connection.
 *
 * The handler runs on the server's thread, one request at a time. */
#ifndef DDPRUN_AGENT_HTTP_SERVER_H
#define DDPRUN_AGENT_HTTP_SERVER_H

#include <stddef.h>

#include "common/buf.h"

typedef struct http_server http_server;

/* What the handler answers. The server zeroes it before each call and
 * frees body afterwards; type and allow must stay valid until the handler's
 * next call (string literals are the usual). */
typedef struct {
    int status;        /* 200, 404, ... */
    const char *type;  /* the Content-Type; NULL: text/plain; charset=utf-8 */
    const char *allow; /* an Allow header's value (with 405), or NULL */
    buf_t body;        /* the handler appends; sent whole, or only counted for HEAD */
} http_reply;

/* Answers one request: method as sent ("GET", "HEAD", ...), path without
 * its query string. 0, or -errno: the client gets 500. */
typedef int (*http_handler_fn)(void *ctx, const char *method, const char *path,
                               http_reply *r);

typedef struct {
    int fd;                  /* a bound, listening socket: the server's from the call on */
    http_handler_fn handler;
    void *ctx;               /* the handler's first argument */
    int deadline_ms;         /* from accept to the response's last byte; 0: 5000 */
    int max_conns;           /* connections at once, the oldest evicted past it; 0: 256 */
    size_t max_head;         /* bytes of request line and headers; 0: 8192 */
} http_server_opts;

/* Serves o->fd on a new thread until http_server_stop. The socket is the
 * server's even when this fails (it is closed then). 0, or -errno with a
 * message in err. */
int http_server_start(const http_server_opts *o, http_server **out, char *err, size_t errlen);
/* Stops the thread, closes the listening socket and every connection, and
 * frees the server (NULL: nothing). */
void http_server_stop(http_server *s);

#endif
