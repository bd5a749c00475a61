/* See http_server.h. One thread polls a wake pipe, the listening socket
 * and every connection; the connection table is a fixed array of
 * max_conns slots, and each connection walks READ (the request head) ->
 * WRITE (the response) -> DRAIN (our side closed, the client's unread
 * bytes read and dropped until it closes) under its one deadline. */
#include "agent/http_server.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"

#define DEFAULT_DEADLINE_MS 5000
#define DEFAULT_MAX_CONNS 256
#define DEFAULT_MAX_HEAD 8192
#define ACCEPT_BATCH 64       /* accepts between two looks at the connections */
#define ACCEPT_PAUSE_MS 100   /* out of descriptors: the pause before accepting again */
#define DRAIN_READS 16        /* reads of 4 KiB a wakeup for a connection being drained */
#define TEXT "text/plain; charset=utf-8"

typedef enum { C_FREE, C_READ, C_WRITE, C_DRAIN } conn_state;

typedef struct {
    int fd;
    conn_state state;
    uint64_t seq;        /* accept order: the smallest is the oldest */
    int64_t deadline_ns; /* when it is closed, whatever it is doing */
    char *head;          /* the request head so far (max_head + 1 bytes) */
    size_t nhead;
    buf_t out;           /* the response */
    size_t sent;
} conn;

struct http_server {
    http_server_opts o;
    int wake[2];              /* http_server_stop writes, the thread wakes */
    pthread_t thread;
    conn *conns;              /* max_conns slots */
    struct pollfd *pfd;       /* the wake pipe, the listening socket, the connections */
    int *slot;                /* pfd[2 + i] polls conns[slot[i]] */
    uint64_t seq;
    int64_t accept_after_ns;  /* out of descriptors: the listening socket rests until then */
};

static void conn_close(conn *c) {
    if (c->fd >= 0) close(c->fd);
    free(c->head);
    buf_free(&c->out);
    *c = (conn){.fd = -1, .state = C_FREE};
}

static const char *reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default:
        return status < 300 ? "OK" : status < 400 ? "Redirection" : status < 500 ? "Client Error"
                                                                               : "Server Error";
    }
}

/* ---- writing ---- */

/* Reads and drops what the client still sends, until it closes: closing
 * with unread bytes would send a reset, which can destroy the response
 * before the client has read it. A few reads a wakeup, so that a client
 * sending without end cannot keep the thread to itself. */
static void on_drain(conn *c) {
    char scratch[4096];
    for (int k = 0; k < DRAIN_READS; k++) {
        ssize_t n = recv(c->fd, scratch, sizeof scratch, 0);
        if (n > 0 || (n < 0 && errno == EINTR)) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        conn_close(c);
        return;
    }
}

static void on_write(conn *c) {
    while (c->sent < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n < 0) {
            conn_close(c);
            return;
        }
        c->sent += (size_t)n;
    }
    shutdown(c->fd, SHUT_WR); /* the response ends here; Connection: close */
    free(c->head);
    c->head = NULL;
    buf_free(&c->out);
    c->state = C_DRAIN;
    on_drain(c);
}

/* Queues r (the body only counted when head_only) and starts writing. */
static void respond(conn *c, const http_reply *r, int head_only) {
    char h[512];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s%s"
                     "Connection: close\r\n\r\n",
                     r->status, reason(r->status), r->type ? r->type : TEXT, r->body.len,
                     r->allow ? "Allow: " : "", r->allow ? r->allow : "", r->allow ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof h || buf_append(&c->out, h, (size_t)n) ||
        (!head_only && r->body.len && buf_append(&c->out, r->body.data, r->body.len))) {
        conn_close(c);
        return;
    }
    c->state = C_WRITE;
    on_write(c);
}

static void respond_text(conn *c, int status, const char *msg) {
    http_reply r = {.status = status};
    if (buf_append(&r.body, msg, strlen(msg)) == 0) respond(c, &r, 0);
    else conn_close(c);
    buf_free(&r.body);
}

/* ---- reading ---- */

/* Where the head ends (just past its empty line) in head[0, n), looking
 * from `from` on; 0 while it has not. A bare LF ends lines too. */
static size_t head_end(const char *head, size_t from, size_t n) {
    for (size_t i = from; i < n; i++) {
        if (head[i] != '\n') continue;
        if (i + 1 < n && head[i + 1] == '\n') return i + 2;
        if (i + 2 < n && head[i + 1] == '\r' && head[i + 2] == '\n') return i + 3;
    }
    return 0;
}

/* The request line "METHOD TARGET HTTP/1.x", cut in place into method and
 * path (without its query). 0, or the status to answer: 400 or 505. */
static int parse_request_line(char *head, char **method, char **path) {
    char *eol = strchr(head, '\n'); /* NULL when a NUL byte comes first */
    if (!eol) return 400;
    *eol = '\0';
    if (eol > head && eol[-1] == '\r') eol[-1] = '\0';
    char *target = strchr(head, ' '), *version = target ? strchr(target + 1, ' ') : NULL;
    if (!version || target == head) return 400;
    *target++ = '\0', *version++ = '\0';
    if (!*target || strchr(version, ' ')) return 400;
    if (strncmp(version, "HTTP/", 5) != 0) return 400;
    if (strncmp(version + 5, "1.", 2) != 0 || version[7] < '0' || version[7] > '9' || version[8])
        return 505;
    target[strcspn(target, "?#")] = '\0';
    *method = head, *path = target;
    return 0;
}

static void answer(http_server *s, conn *c, size_t end) {
    c->head[end] = '\0';
    char *method = NULL, *path = NULL;
    int bad = parse_request_line(c->head, &method, &path);
    if (bad) {
        respond_text(c, bad, bad == 505 ? "only HTTP/1.0 and HTTP/1.1 are served\n"
                                        : "the request line is not METHOD PATH HTTP/1.x\n");
        return;
    }
    http_reply r = {0};
    if (s->o.handler(s->o.ctx, method, path, &r) != 0 || r.status < 100 || r.status > 599) {
        buf_free(&r.body);
        respond_text(c, 500, "the server could not answer this request\n");
        return;
    }
    respond(c, &r, strcmp(method, "HEAD") == 0);
    buf_free(&r.body);
}

static void on_read(http_server *s, conn *c) {
    for (;;) {
        size_t room = s->o.max_head - c->nhead;
        if (room == 0) {
            respond_text(c, 431, "the request head is too large\n");
            return;
        }
        ssize_t n = recv(c->fd, c->head + c->nhead, room, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) {
            conn_close(c);
            return;
        }
        size_t from = c->nhead > 3 ? c->nhead - 3 : 0;
        c->nhead += (size_t)n;
        size_t end = head_end(c->head, from, c->nhead);
        if (end) {
            answer(s, c, end);
            return;
        }
    }
}

/* ---- the connection table ---- */

/* A free slot; with none, the oldest connection still reading its request
 * is evicted for it (the oldest of all when every one is answered). */
static conn *free_slot(http_server *s) {
    conn *oldest = NULL, *oldest_reading = NULL;
    for (int i = 0; i < s->o.max_conns; i++) {
        conn *c = &s->conns[i];
        if (c->state == C_FREE) return c;
        if (!oldest || c->seq < oldest->seq) oldest = c;
        if (c->state == C_READ && (!oldest_reading || c->seq < oldest_reading->seq))
            oldest_reading = c;
    }
    conn *victim = oldest_reading ? oldest_reading : oldest;
    conn_close(victim);
    return victim;
}

static void accept_some(http_server *s, int64_t now) {
    for (int k = 0; k < ACCEPT_BATCH; k++) {
        int fd = accept4(s->o.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED)) continue;
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                s->accept_after_ns = now + (int64_t)ACCEPT_PAUSE_MS * 1000000;
            return; /* EAGAIN: none left */
        }
        conn *c = free_slot(s);
        if (!(c->head = malloc(s->o.max_head + 1))) {
            close(fd);
            return;
        }
        c->fd = fd, c->state = C_READ, c->seq = ++s->seq;
        c->deadline_ns = now + (int64_t)s->o.deadline_ms * 1000000;
        on_read(s, c); /* a request sent whole is usually here already */
    }
}

/* Closes every connection past its deadline; one still reading is told
 * 408 first, if its socket takes it at once. */
static void expire(http_server *s, int64_t now) {
    static const char timeout[] = "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n"
                                  "Connection: close\r\n\r\n";
    for (int i = 0; i < s->o.max_conns; i++) {
        conn *c = &s->conns[i];
        if (c->state == C_FREE || now < c->deadline_ns) continue;
        if (c->state == C_READ) {
            ssize_t n = send(c->fd, timeout, sizeof timeout - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)n;
        }
        conn_close(c);
    }
}

/* ---- the thread ---- */

/* Fills s->pfd; the number of entries. */
static int fill_pollfds(http_server *s, int64_t now) {
    s->pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    s->pfd[1] = (struct pollfd){.fd = now >= s->accept_after_ns ? s->o.fd : -1, .events = POLLIN};
    int n = 2;
    for (int i = 0; i < s->o.max_conns; i++) {
        const conn *c = &s->conns[i];
        if (c->state == C_FREE) continue;
        s->pfd[n] = (struct pollfd){.fd = c->fd, .events = c->state == C_WRITE ? POLLOUT : POLLIN};
        s->slot[n - 2] = i;
        n++;
    }
    return n;
}

/* Milliseconds until the next deadline (or the end of an accept pause),
 * rounded up; -1: none. */
static int next_timeout_ms(const http_server *s, int64_t now) {
    int64_t next = s->accept_after_ns > now ? s->accept_after_ns : INT64_MAX;
    for (int i = 0; i < s->o.max_conns; i++)
        if (s->conns[i].state != C_FREE && s->conns[i].deadline_ns < next)
            next = s->conns[i].deadline_ns;
    if (next == INT64_MAX) return -1;
    int64_t ms = (next - now + 999999) / 1000000;
    return ms < 0 ? 0 : ms > INT_MAX ? INT_MAX : (int)ms;
}

static void on_event(http_server *s, conn *c) {
    switch (c->state) {
    case C_READ: on_read(s, c); break;
    case C_WRITE: on_write(c); break;
    case C_DRAIN: on_drain(c); break;
    case C_FREE: break;
    }
}

static void *serve(void *arg) {
    http_server *s = arg;
    for (;;) {
        int64_t now = clock_now_ns();
        int n = fill_pollfds(s, now);
        if (poll(s->pfd, (nfds_t)n, next_timeout_ms(s, now)) < 0) {
            if (errno != EINTR) poll(NULL, 0, 10); /* ENOMEM: a moment, then again */
            continue;
        }
        if (s->pfd[0].revents) break;
        for (int i = 2; i < n; i++)
            if (s->pfd[i].revents) on_event(s, &s->conns[s->slot[i - 2]]);
        now = clock_now_ns();
        if (s->pfd[1].revents) accept_some(s, now);
        expire(s, now);
    }
    return NULL;
}

/* ---- start and stop ---- */

static void server_free(http_server *s) {
    for (int i = 0; s->conns && i < s->o.max_conns; i++)
        if (s->conns[i].state != C_FREE) conn_close(&s->conns[i]);
    for (int i = 0; i < 2; i++)
        if (s->wake[i] >= 0) close(s->wake[i]);
    close(s->o.fd);
    free(s->conns);
    free(s->pfd);
    free(s->slot);
    free(s);
}

/* The thread, with every signal blocked so that they go to the program's
 * own threads. 0 or -errno. */
static int start_thread(http_server *s) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, serve, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return -rc;
}

int http_server_start(const http_server_opts *o, http_server **out, char *err, size_t errlen) {
    *out = NULL;
    http_server *s = calloc(1, sizeof *s);
    if (!s) {
        close(o->fd);
        snprintf(err, errlen, "cannot start the HTTP server: out of memory");
        return -ENOMEM;
    }
    s->o = *o;
    if (s->o.deadline_ms <= 0) s->o.deadline_ms = DEFAULT_DEADLINE_MS;
    if (s->o.max_conns <= 0) s->o.max_conns = DEFAULT_MAX_CONNS;
    if (s->o.max_head == 0) s->o.max_head = DEFAULT_MAX_HEAD;
    s->wake[0] = s->wake[1] = -1;
    int rc = -ENOMEM;
    s->conns = calloc((size_t)s->o.max_conns, sizeof *s->conns);
    s->pfd = calloc((size_t)s->o.max_conns + 2, sizeof *s->pfd);
    s->slot = calloc((size_t)s->o.max_conns, sizeof *s->slot);
    if (!s->conns || !s->pfd || !s->slot) goto fail;
    for (int i = 0; i < s->o.max_conns; i++) s->conns[i] = (conn){.fd = -1, .state = C_FREE};
    int flags = fcntl(o->fd, F_GETFL);
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) || flags < 0 ||
        fcntl(o->fd, F_SETFL, flags | O_NONBLOCK)) {
        rc = -errno;
        goto fail;
    }
    if ((rc = start_thread(s))) goto fail;
    *out = s;
    return 0;
fail:
    snprintf(err, errlen, "cannot start the HTTP server: %s", strerror(-rc));
    server_free(s);
    return rc;
}

void http_server_stop(http_server *s) {
    if (!s) return;
    ssize_t n = write(s->wake[1], "x", 1);
    (void)n;
    pthread_join(s->thread, NULL);
    server_free(s);
}
