/* See worker_output.h. */
#include "agent/worker_output.h"

#include <errno.h>
#include <fcntl.h>
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

/* One whole line (ending in '\n') to its destinations. */
static void emit(worker_output *o, const char *line, size_t n) {
    if (o->file_fd >= 0) write_all(o->file_fd, line, n);
    if (o->console_fd < 0) return;
    size_t plen = strlen(o->prefix);
    if (plen == 0) {
        write_all(o->console_fd, line, n);
        return;
    }
    char stackbuf[4096];
    char *b = plen + n <= sizeof stackbuf ? stackbuf : malloc(plen + n);
    if (!b) return;
    memcpy(b, o->prefix, plen);
    memcpy(b + plen, line, n);
    write_all(o->console_fd, b, plen + n);
    if (b != stackbuf) free(b);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    (void)h;
    b->base = malloc(suggested);
    b->len = b->base ? suggested : 0;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    worker_output *o = s->data;
    if (nread > 0) {
        const char *p = b->base, *end = b->base + nread, *nl;
        while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            size_t n = (size_t)(nl + 1 - p);
            if (o->partial.len) {
                buf_append(&o->partial, p, n);
                emit(o, (char *)o->partial.data, o->partial.len);
                buf_clear(&o->partial);
            } else {
                emit(o, p, n);
            }
            p = nl + 1;
        }
        buf_append(&o->partial, p, (size_t)(end - p));
    } else if (nread < 0) {
        /* EOF (or an error): a last line without '\n' still gets one. */
        if (o->partial.len) {
            buf_append(&o->partial, "\n", 1);
            emit(o, (char *)o->partial.data, o->partial.len);
            buf_clear(&o->partial);
        }
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
    o->file_fd = -1;
    o->console_fd = opts->console_fd;
    if (opts->prefix) snprintf(o->prefix, sizeof o->prefix, "%s", opts->prefix);
    if (opts->file) {
        o->file_fd = open(opts->file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (o->file_fd < 0) return -errno;
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
    o->file_fd = -1;
    buf_free(&o->partial);
    if (!o->open || uv_is_closing((uv_handle_t *)&o->pipe)) return 0;
    uv_read_stop((uv_stream_t *)&o->pipe);
    uv_close((uv_handle_t *)&o->pipe, on_closed);
    return 1;
}
