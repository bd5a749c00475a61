/* agent/http_server.c: requests answered through the handler (GET, HEAD,
 * HTTP/1.0, errors), bad and oversized request heads, the whole-request
 * deadline that trickled bytes do not extend, the oldest connection
 * evicted when the table is full, and a stop with connections open. The
 * server runs on a thread of the test's process, on 127.0.0.1 port 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/http_server.h"
#include "common/clock.h"
#include "tests/unit/test.h"

/* The handler: /hello answers "hello METHOD PATH", /fail fails, POST is
 * 405, anything else 404. */
static int handler(void *ctx, const char *method, const char *path, http_reply *r) {
    (void)ctx;
    char body[256];
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        r->status = 405;
        r->allow = "GET, HEAD";
        return buf_append(&r->body, "no\n", 3);
    }
    if (strcmp(path, "/fail") == 0) return -EIO;
    r->status = strcmp(path, "/hello") == 0 ? 200 : 404;
    r->type = "text/x-test";
    snprintf(body, sizeof body, "hello %s %s\n", method, path);
    return buf_append(&r->body, body, strlen(body));
}

/* A server on 127.0.0.1 with o's limits; *port gets its port. */
static http_server *start(http_server_opts o, int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    CHECK(fd >= 0);
    CHECK_EQ(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    CHECK_EQ(listen(fd, 64), 0);
    CHECK_EQ(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    o.fd = fd, o.handler = handler;
    http_server *s = NULL;
    char err[256] = "";
    if (http_server_start(&o, &s, err, sizeof err) != 0) test_fail(__FILE__, __LINE__, "%s", err);
    return s;
}

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(fd >= 0);
    CHECK_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    return fd;
}

static void send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        CHECK(w > 0);
        p += w, n -= (size_t)w;
    }
}

/* Reads until the server closes (a reset counts), within ms; the bytes
 * read, NUL-terminated, or -1 if it is still open then. */
static long read_to_close(int fd, char *out, size_t cap, int ms) {
    size_t n = 0;
    int64_t end = clock_now_ms() + ms;
    for (;;) {
        int left = (int)(end - clock_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left) == 0) return -1;
        ssize_t r = recv(fd, out + n, cap - 1 - n, 0);
        if (r <= 0) break;
        n += (size_t)r;
        CHECK(n < cap - 1);
    }
    out[n] = '\0';
    return (long)n;
}

/* One request on a new connection; the whole response. */
static char *exchange(int port, const char *req) {
    static char out[16384];
    int fd = dial(port);
    send_all(fd, req, strlen(req));
    long n = read_to_close(fd, out, sizeof out, 3000);
    close(fd);
    if (n < 0) test_fail(__FILE__, __LINE__, "no response to '%s' within 3 s", req);
    return out;
}

#define CHECK_HAS(text, part)                                                         \
    do {                                                                              \
        if (!strstr((text), (part)))                                                  \
            test_fail(__FILE__, __LINE__, "no '%s' in:\n%s", (part), (text));         \
    } while (0)

TEST(http_server_get_head_and_errors) {
    int port;
    http_server *s = start((http_server_opts){0}, &port);
    char *r = exchange(port, "GET /hello?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
    CHECK_HAS(r, "HTTP/1.1 200 OK\r\n");
    CHECK_HAS(r, "\r\nContent-Type: text/x-test\r\n");
    CHECK_HAS(r, "\r\nContent-Length: 17\r\n");
    CHECK_HAS(r, "\r\nConnection: close\r\n");
    CHECK_HAS(r, "\r\n\r\nhello GET /hello\n");
    r = exchange(port, "HEAD /hello HTTP/1.1\r\n\r\n");
    CHECK_HAS(r, "HTTP/1.1 200 OK\r\n");
    CHECK_HAS(r, "\r\nContent-Length: 18\r\n"); /* "hello HEAD /hello\n" */
    CHECK_EQ(strstr(r, "\r\n\r\n") + 4 - r, (long)strlen(r)); /* nothing after the head */
    r = exchange(port, "GET /hello HTTP/1.0\n\n"); /* bare line feeds too */
    CHECK_HAS(r, "HTTP/1.1 200 OK\r\n");
    CHECK_HAS(r, "hello GET /hello\n");
    r = exchange(port, "POST /hello HTTP/1.1\r\nContent-Length: 5\r\n\r\nabcde");
    CHECK_HAS(r, "HTTP/1.1 405 Method Not Allowed\r\n");
    CHECK_HAS(r, "\r\nAllow: GET, HEAD\r\n");
    CHECK_HAS(exchange(port, "GET /nope HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found\r\n");
    CHECK_HAS(exchange(port, "GET /fail HTTP/1.1\r\n\r\n"),
              "HTTP/1.1 500 Internal Server Error\r\n");
    CHECK_HAS(exchange(port, "GARBAGE\r\n\r\n"), "HTTP/1.1 400 Bad Request\r\n");
    CHECK_HAS(exchange(port, "GET / HTTP/2.0\r\n\r\n"), "HTTP/1.1 505 ");
    http_server_stop(s);
}

/* A head past max_head gets 431 and the connection is closed, with the
 * rest of what the client sent read and dropped (no reset that could lose
 * the 431). */
TEST(http_server_refuses_a_head_too_large) {
    int port;
    http_server *s = start((http_server_opts){.max_head = 1024}, &port);
    char req[4096];
    int n = snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nX-Pad: ");
    memset(req + n, 'a', sizeof req - (size_t)n - 1);
    req[sizeof req - 1] = '\0';
    CHECK_HAS(exchange(port, req), "HTTP/1.1 431 Request Header Fields Too Large\r\n");
    /* Just under the limit is served. */
    n = snprintf(req, sizeof req, "GET /hello HTTP/1.1\r\nX-Pad: ");
    memset(req + n, 'a', 1024 - (size_t)n - 4);
    memcpy(req + 1020, "\r\n\r\n", 5);
    CHECK_HAS(exchange(port, req), "HTTP/1.1 200 OK\r\n");
    http_server_stop(s);
}

/* The deadline counts from the accept: a client sending a byte every 50 ms
 * is closed at 200 ms all the same (told 408), and so is a silent one. */
TEST(http_server_drops_a_slow_client_at_the_deadline) {
    int port;
    http_server *s = start((http_server_opts){.deadline_ms = 200}, &port);
    int64_t t0 = clock_now_ms();
    int slow = dial(port), silent = dial(port);
    const char *req = "GET /hello HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    int64_t closed_at = -1;
    for (size_t i = 0; req[i] && closed_at < 0; i++) {
        if (send(slow, req + i, 1, MSG_NOSIGNAL) != 1) break;
        struct pollfd p = {.fd = slow, .events = POLLIN};
        if (poll(&p, 1, 50) == 1) closed_at = clock_now_ms() - t0;
    }
    if (closed_at < 0) closed_at = clock_now_ms() - t0;
    char out[1024];
    CHECK(read_to_close(slow, out, sizeof out, 1000) >= 0);
    CHECK_HAS(out, "HTTP/1.1 408 Request Timeout\r\n");
    CHECK(closed_at >= 150);
    if (closed_at > 1000) test_fail(__FILE__, __LINE__, "closed after %lld ms", (long long)closed_at);
    CHECK(read_to_close(silent, out, sizeof out, 1000) >= 0);
    CHECK(clock_now_ms() - t0 < 1500);
    close(slow);
    close(silent);
    http_server_stop(s);
}

/* Past max_conns, a new connection evicts the oldest one still reading:
 * clients that hold connections cannot keep a fresh request out. */
TEST(http_server_full_table_evicts_the_oldest) {
    int port;
    http_server *s = start((http_server_opts){.max_conns = 4, .deadline_ms = 10000}, &port);
    int held[4];
    for (int i = 0; i < 4; i++) {
        held[i] = dial(port);
        send_all(held[i], "GET /hel", 8);
    }
    CHECK_HAS(exchange(port, "GET /hello HTTP/1.1\r\n\r\n"), "HTTP/1.1 200 OK\r\n");
    char out[256];
    CHECK(read_to_close(held[0], out, sizeof out, 1000) >= 0); /* the oldest: evicted */
    for (int i = 1; i < 4; i++) CHECK_EQ(read_to_close(held[i], out, sizeof out, 100), -1);
    for (int i = 0; i < 4; i++) close(held[i]);
    http_server_stop(s);
}

/* Stopping with connections open closes them all and frees everything
 * (AddressSanitizer's leak check runs this too). */
TEST(http_server_stops_with_connections_open) {
    int port;
    http_server *s = start((http_server_opts){0}, &port);
    int fds[8];
    for (int i = 0; i < 8; i++) {
        fds[i] = dial(port);
        if (i % 2) send_all(fds[i], "GET /hello HTTP/1.1\r\n", 21);
    }
    CHECK_HAS(exchange(port, "GET /hello HTTP/1.1\r\n\r\n"), "HTTP/1.1 200 OK\r\n");
    int64_t t0 = clock_now_ms();
    http_server_stop(s);
    CHECK(clock_now_ms() - t0 < 1000);
    char out[256];
    for (int i = 0; i < 8; i++) {
        CHECK(read_to_close(fds[i], out, sizeof out, 1000) >= 0);
        close(fds[i]);
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0); /* nothing listens */
    close(fd);
}
