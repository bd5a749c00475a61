/* See worker_output.h. */
#include "agent/worker_output.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* a closed console is not the worker's problem */
        p += w;
        n -= (size_t)w;
    }
}

/* Whether line[0..n) holds any of the filters. */
static int matches(char *const *filters, const char *line, size_t n) {
    for (; *filters; filters++)
        if (memmem(line, n, *filters, strlen(*filters))) return 1;
    return 0;
}

/* One line to its destinations, with a '\n' added when `add_nl` (a line
 * cut at the limit, or the last one at EOF). */
static void keep_captured(worker_output *o, const char *line, size_t n, int add_nl) {
    static const char cut[] = "[... cut at 32 KiB]\n";
    if (!o->capturing) return;
    if (o->capture.len + n + 1 + sizeof cut > WORKER_CAPTURE_MAX) {
        buf_append(&o->capture, cut, sizeof cut - 1);
        o->capturing = 0;
        return;
    }
    buf_append(&o->capture, line, n);
    if (add_nl) buf_append(&o->capture, "\n", 1);
}

void worker_output_capture(worker_output *o) {
    buf_clear(&o->capture);
    o->capturing = 1;
}

char *worker_output_captured(worker_output *o) {
    o->capturing = 0;
    if (!o->capture.len) return NULL;
    char *s = malloc(o->capture.len + 1);
    if (s) {
        memcpy(s, o->capture.data, o->capture.len);
        s[o->capture.len] = 0;
    }
    buf_clear(&o->capture);
    return s;
}

/* The line at the end of the tail; the tail kept to its last
 * WORKER_TAIL_MAX bytes (cut after a line's end) once it is twice that. */
static void keep_tail(worker_output *o, const char *line, size_t n, int add_nl) {
    buf_t *t = &o->tail;
    if (n > WORKER_TAIL_MAX) line += n - WORKER_TAIL_MAX, n = WORKER_TAIL_MAX;
    if (buf_append(t, line, n) != 0 || (add_nl && buf_append(t, "\n", 1) != 0)) return;
    if (t->len <= 2 * WORKER_TAIL_MAX) return;
    size_t from = t->len - WORKER_TAIL_MAX;
    const char *nl = memchr(t->data + from, '\n', t->len - from);
    if (nl && (size_t)(nl + 1 - (char *)t->data) < t->len) from = (size_t)(nl + 1 - (char *)t->data);
    memmove(t->data, t->data + from, t->len - from);
    t->len -= from;
}

char *worker_output_tail(const worker_output *o, int lines) {
    const buf_t *t = &o->tail;
    if (!t->len) return NULL;
    size_t from = t->len > WORKER_TAIL_MAX ? t->len - WORKER_TAIL_MAX : 0, end = t->len;
    /* back over `lines` line ends (the last one ends the text) */
    size_t i = end - 1;
    for (int seen = 0; i > from; i--)
        if (t->data[i - 1] == '\n' && ++seen == lines) break;
    if (i <= from && from > 0 && t->data[from - 1] != '\n') { /* whole lines only */
        const char *nl = memchr(t->data + from, '\n', end - from);
        i = nl && (size_t)(nl + 1 - (char *)t->data) < end ? (size_t)(nl + 1 - (char *)t->data)
                                                            : from;
    }
    char *s = malloc(end - i + 1);
    if (!s) return NULL;
    memcpy(s, t->data + i, end - i);
    s[end - i] = 0;
    return s;
}

void worker_output_drain(worker_output *o) {
    uv_os_fd_t fd;
    if (!o->open || o->eof || uv_fileno((uv_handle_t *)&o->pipe, &fd) != 0) return;
    char b[16384];
    for (size_t total = 0; total < (1u << 20);) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) != 1 || !(p.revents & POLLIN)) break;
        ssize_t n = read(fd, b, sizeof b);
        if (n <= 0) break; /* (the end, or an error: the loop's read sees it) */
        worker_output_feed(o, b, (size_t)n);
        total += (size_t)n;
    }
}

static void emit(worker_output *o, const char *line, size_t n, int add_nl) {
    keep_captured(o, line, n, add_nl);
    keep_tail(o, line, n, add_nl);
    size_t plen = strlen(o->prefix), total = plen + n + (size_t)add_nl;
    char stackbuf[4096];
    /* A whole line with nothing to add goes out as it is: no copy. */
    int as_is = plen == 0 && !add_nl;
    char *b = as_is ? (char *)line : total <= sizeof stackbuf ? stackbuf : malloc(total);
    if (!b) { /* no memory for one line: write it in pieces, unprefixed */
        if (o->file_fd >= 0) write_all(o->file_fd, line, n);
        if (o->console_fd >= 0) write_all(o->console_fd, line, n);
        return;
    }
    if (!as_is) {
        memcpy(b, o->prefix, plen);
        memcpy(b + plen, line, n);
        if (add_nl) b[plen + n] = '\n';
    }
    if (o->file_fd >= 0) write_all(o->file_fd, b + plen, n + (size_t)add_nl);
    if (o->console_fd >= 0) {
        write_all(o->console_fd, b, total);
        if (o->dup_fd >= 0 && matches(o->dup_filters, line, n)) write_all(o->dup_fd, b, total);
    }
    if (b != stackbuf && b != line) free(b);
}

/* A template name: a letter or '_', then letters, digits or '_'. */
static size_t ident_len(const char *p) {
    size_t n = 0;
    if (!isalpha((unsigned char)p[0]) && p[0] != '_') return 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
    return n;
}

/* The value of a macro name[0..n) into val; 0 if there is no such macro. */
static int macro(const worker_prefix_vars *v, const char *name, size_t n, char *val, size_t len) {
#define IS(s) (n == sizeof s - 1 && memcmp(name, s, n) == 0)
    if (IS("role_name")) snprintf(val, len, "%s", v->role_name ? v->role_name : "");
    else if (IS("local_rank")) snprintf(val, len, "%d", v->local_rank);
    else if (IS("rank")) snprintf(val, len, "%d", v->rank);
    else if (IS("hostname")) snprintf(val, len, "%s", v->hostname ? v->hostname : "");
    else return 0;
#undef IS
    return 1;
}

/* Appends s[0..n) to out at *k, as much as fits before the terminator. */
static void put(char *out, size_t outlen, size_t *k, const char *s, size_t n) {
    size_t room = outlen - 1 - *k;
    if (n > room) n = room;
    memcpy(out + *k, s, n);
    *k += n;
}

int worker_output_prefix(const char *tmpl, const worker_prefix_vars *v, char *out, size_t outlen,
                         char *unknown, size_t unknownlen) {
    size_t k = 0;
    int nunknown = 0;
    char val[256];
    if (outlen == 0) return 0;
    for (const char *p = tmpl; *p;) {
        if (*p != '$') {
            put(out, outlen, &k, p, 1), p++;
            continue;
        }
        if (p[1] == '$') {
            put(out, outlen, &k, "$", 1), p += 2;
            continue;
        }
        int braced = p[1] == '{';
        const char *name = p + 1 + braced;
        size_t n = ident_len(name);
        size_t whole = 1 + braced + n + (size_t)braced; /* "$", "{", name, "}" */
        if (n > 0 && (!braced || name[n] == '}') && macro(v, name, n, val, sizeof val)) {
            put(out, outlen, &k, val, strlen(val));
            p += whole;
            continue;
        }
        if (nunknown++ == 0 && unknown && unknownlen) {
            size_t show = braced && name[n] != '}' ? 1 + braced + n : n ? whole : 1;
            snprintf(unknown, unknownlen, "%.*s", (int)show, p);
        }
        put(out, outlen, &k, "$", 1), p++; /* left as written */
    }
    out[k] = '\0';
    return nunknown;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    (void)h;
    b->base = malloc(suggested);
    b->len = b->base ? suggested : 0;
}

/* The line kept so far goes out (cut: with a '\n' added). A lone '\r' is
 * nothing to show. */
static void emit_partial(worker_output *o, int cut) {
    buf_t *l = &o->partial;
    if (l->len && !(l->len == 1 && l->data[0] == '\r')) emit(o, (char *)l->data, l->len, cut);
    buf_clear(l);
}

/* Adds p[0..n) to the line kept so far, cutting it at WORKER_LINE_MAX. */
static void keep(worker_output *o, const char *p, size_t n) {
    buf_t *l = &o->partial;
    while (n > 0) {
        size_t room = WORKER_LINE_MAX - l->len, k = n < room ? n : room;
        if (buf_append(l, p, k) != 0) { /* out of memory: what there is goes out now */
            emit_partial(o, 1);
            emit(o, p, n, 1);
            return;
        }
        p += k, n -= k;
        if (l->len == WORKER_LINE_MAX) emit_partial(o, 1);
    }
}

/* The first '\n' or '\r' in [p, end), or NULL. */
static const char *line_end(const char *p, const char *end) {
    for (; p < end; p++)
        if (*p == '\n' || *p == '\r') return p;
    return NULL;
}

void worker_output_feed(worker_output *o, const char *p, size_t n) {
    const char *end = p + n;
    while (p < end) {
        buf_t *l = &o->partial;
        if (l->len && l->data[l->len - 1] == '\r') { /* "\r\n" ends a line; else progress */
            if (*p == '\n') keep(o, p++, 1);
            emit_partial(o, 0);
            continue;
        }
        const char *t = line_end(p, end);
        if (!t) {
            keep(o, p, (size_t)(end - p));
            return;
        }
        size_t k = (size_t)(t + 1 - p);
        if (*t == '\n' && l->len == 0 && k <= WORKER_LINE_MAX) {
            emit(o, p, k, 0); /* a whole line in the read: no copy */
        } else {
            keep(o, p, k);
            if (*t == '\n') emit_partial(o, 0); /* a '\r' waits for what follows it */
        }
        p = t + 1;
    }
}

void worker_output_flush(worker_output *o) {
    buf_t *l = &o->partial;
    emit_partial(o, l->len > 0 && l->data[l->len - 1] != '\r');
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    worker_output *o = s->data;
    if (nread > 0) {
        worker_output_feed(o, b->base, (size_t)nread);
    } else if (nread < 0) {
        worker_output_flush(o); /* EOF (or an error) */
        uv_read_stop(s);
        if (!o->eof) {
            o->eof = 1;
            if (o->on_eof) o->on_eof(o);
        }
    }
    free(b->base);
}

int worker_output_init(worker_output *o, uv_loop_t *loop, const worker_output_opts *opts) {
    memset(o, 0, sizeof *o);
    o->file_fd = o->dup_fd = -1;
    o->console_fd = opts->console_fd;
    if (opts->prefix) snprintf(o->prefix, sizeof o->prefix, "%s", opts->prefix);
    if (opts->file) {
        o->file_fd = open(opts->file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (o->file_fd < 0) return -errno;
    }
    if (opts->dup_file && opts->dup_filters && opts->dup_filters[0] && o->console_fd >= 0) {
        o->dup_fd = open(opts->dup_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (o->dup_fd < 0) return -errno;
        o->dup_filters = opts->dup_filters;
    }
    int rc = uv_pipe_init(loop, &o->pipe, 0);
    if (rc) return rc;
    o->pipe.data = o;
    o->open = 1;
    return 0;
}

int worker_output_start(worker_output *o) {
    return uv_read_start((uv_stream_t *)&o->pipe, on_alloc, on_read);
}

int worker_output_close(worker_output *o, uv_close_cb on_closed) {
    if (o->file_fd >= 0) close(o->file_fd);
    if (o->dup_fd >= 0) close(o->dup_fd);
    o->file_fd = o->dup_fd = -1;
    buf_free(&o->partial);
    buf_free(&o->capture);
    buf_free(&o->tail);
    o->capturing = 0;
    if (!o->open || uv_is_closing((uv_handle_t *)&o->pipe)) return 0;
    uv_read_stop((uv_stream_t *)&o->pipe);
    uv_close((uv_handle_t *)&o->pipe, on_closed);
    return 1;
}
