/* The store server (see store_server.h): connections, the request loop and
 * the write path. The key table, waiters, queues and ownership live in
 * store_table.c; this file turns bytes into table operations and replies.
 *
 * Reads land in one shared 64 KiB buffer while a connection has no partial
 * request pending, so thousands of idle connections cost no buffer memory;
 * only the tail of an incomplete request is copied into the connection's
 * own buffer. Replies are appended to the connection's output buffer and
 * flushed once per read (with uv_try_write first), so a pipelining client
 * gets one write for many replies. */
#include "store/store_server.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ddprun_env.h"
#include "common/log.h"
#include "common/sock_owner.h"
#include "store/store_internal.h"

#define RBUF_SIZE (64 * 1024)

static void conn_process(store_conn *c);
static void store_conn_flush(store_conn *c);
static void store_conn_close(store_conn *c);
static void store_conn_drop(store_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void store_conn_mark_pending(store_conn *c);
static void store_conn_unmark_pending(store_conn *c);
static void store_server_maybe_closed(store_server *srv);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_pending(uv_idle_t *idle);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b);
static long conn_consume(store_conn *c, const uint8_t *p, size_t n);
static void chan_flush(store_conn *c);
static void chan_closed(store_conn *c);
static void mux_close_all(store_conn *c);
static void free_dead_chans(store_server *srv);
static void conn_register(store_conn *c);

/* ---- write path ------------------------------------------------------- */

typedef struct {
    uv_write_t req;
    buf_t data;
    store_conn *conn;
} write_req;

static void on_write(uv_write_t *req, int status) {
    write_req *w = (write_req *)req;
    store_conn *c = w->conn;
    buf_free(&w->data);
    free(w);
    c->writing = 0;
    c->inflight = 0;
    if (status < 0) {
        if (status != UV_ECANCELED && !c->closing)
            log_debug("client %s: write failed: %s", c->peer, uv_strerror(status));
        store_conn_close(c);
        return;
    }
    store_conn_flush(c);
}

/* Reads a throttled connection's requests again once half the soft limit
 * has gone out, starting with those it had sent already. The request it
 * had half sent waited on us, not on it: its time starts again now (else
 * the request timeout could drop it before the next read brings the rest,
 * a multiplexed connection with a frame half read above all). */
static void conn_maybe_resume(store_conn *c) {
    if (!c->throttled || c->closing || store_conn_unsent(c) >= store_out_soft(c->srv) / 2) return;
    c->throttled = 0;
    c->progress_ms = uv_now(c->srv->loop);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (c->in.len > 0) store_conn_mark_pending(c);
}

static void store_conn_flush(store_conn *c) {
    if (c->closing) return;
    if (c->mux) {
        chan_flush(c);
        return;
    }
    if (store_conn_unsent(c) > store_out_hard(c->srv)) {
        store_conn_drop(c, "it does not read its replies (%zu MiB unsent)",
                        store_conn_unsent(c) >> 20);
        return;
    }
    if (c->writing || c->out.len == 0) {
        conn_maybe_resume(c);
        return;
    }
    uv_buf_t b = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n == (int)c->out.len) {
        buf_clear(&c->out);
        conn_maybe_resume(c);
        return;
    }
    if (n < 0 && n != UV_EAGAIN) {
        log_debug("client %s: write failed: %s", c->peer, uv_strerror(n));
        store_conn_close(c);
        return;
    }
    if (n > 0) buf_consume(&c->out, (size_t)n);
    /* The rest goes through a queued write that owns its bytes. */
    write_req *w = calloc(1, sizeof *w);
    if (!w) {
        store_conn_close(c);
        return;
    }
    w->conn = c;
    w->data = c->out;
    c->out = (buf_t)BUF_INIT;
    b = uv_buf_init((char *)w->data.data, (unsigned)w->data.len);
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc < 0) {
        buf_free(&w->data);
        free(w);
        store_conn_close(c);
        return;
    }
    c->writing = 1;
    c->inflight = w->data.len;
}

/* ---- connection lifetime ---------------------------------------------- */

static void on_conn_closed(uv_handle_t *h) {
    store_conn *c = h->data;
    store_server *srv = c->srv;
    free_dead_chans(srv); /* a multiplexed connection's channels, say */
    buf_free(&c->in);
    buf_free(&c->out);
    free(c);
    srv->handles_open--;
    store_server_maybe_closed(srv);
}

static void store_conn_close(store_conn *c) {
    if (c->closing) return;
    c->closing = 1;
    store_server *srv = c->srv;
    store_conn_unmark_pending(c);
    store_table_conn_gone(srv, c); /* cancels its wait, drops its keys and watches */
    if (c->prev) c->prev->next = c->next;
    else srv->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    srv->stats.conns_open--;
    if (c->mux) srv->stats.chans_open--;
    if (c->chans) mux_close_all(c);
    if (c->mux) {
        chan_closed(c);
        return;
    }
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static void store_conn_drop(store_conn *c, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    log_rated(&c->srv->conn_log, LOG_WARN, "client %s: %s; dropping the connection", c->peer,
              why);
    c->srv->stats.conns_dropped++;
    store_conn_close(c);
}

static void format_peer(uv_tcp_t *tcp, char *out, size_t n, int *port) {
    struct sockaddr_storage ss;
    int len = sizeof ss;
    snprintf(out, n, "unknown");
    if (uv_tcp_getpeername(tcp, (struct sockaddr *)&ss, &len) != 0) return;
    char host[INET6_ADDRSTRLEN] = "?";
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        uv_ip6_name(a, host, sizeof host);
        snprintf(out, n, "[%s]:%d", host, ntohs(a->sin6_port));
        *port = ntohs(a->sin6_port);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        uv_ip4_name(a, host, sizeof host);
        snprintf(out, n, "%s:%d", host, ntohs(a->sin_port));
        *port = ntohs(a->sin_port);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    store_conn *c = h->data;
    (void)suggested;
    if (c->in.len == 0 && !c->srv->rbuf_busy) {
        c->srv->rbuf_busy = 1;
        *b = uv_buf_init((char *)c->srv->rbuf, RBUF_SIZE);
        return;
    }
    if (buf_reserve(&c->in, RBUF_SIZE) != 0) {
        *b = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS */
        return;
    }
    *b = uv_buf_init((char *)c->in.data + c->in.len, RBUF_SIZE);
}

static void on_connection(uv_stream_t *listener, int status) {
    store_server *srv = listener->data;
    if (status < 0) {
        log_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    store_conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->srv = srv;
    uv_tcp_init(srv->loop, &c->tcp);
    c->tcp.data = c;
    srv->handles_open++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        c->closing = 1;
        uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
        return;
    }
    format_peer(&c->tcp, c->peer, sizeof c->peer, &c->peer_port);
    conn_register(c);
    /* (the limit is on descriptors: a proxy's channels hold none) */
    if ((int)(srv->stats.conns_open - srv->stats.chans_open) > srv->max_conns) {
        store_conn_drop(c, "%d connections are open, the limit (--max-conns) is %d",
                  (int)(srv->stats.conns_open - srv->stats.chans_open) - 1, srv->max_conns);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    log_debug("client %s connected", c->peer);
}

/* A new connection (a socket's or a channel's) joins the server's list,
 * its own generation and token still to come. */
static void conn_register(store_conn *c) {
    store_server *srv = c->srv;
    c->id = ++srv->next_conn_id;
    c->progress_ms = uv_now(srv->loop);
    c->authed = srv->token == NULL;
    c->next = srv->conns;
    if (srv->conns) srv->conns->prev = c;
    srv->conns = c;
    srv->stats.conns_open++;
    srv->stats.conns_accepted++;
}

/* ---- multiplexed connections ------------------------------------------ */

/* A per-node proxy's connection carries many clients (STORE_OP_MUX,
 * proto/store_proto.h): each channel is a store_conn of its own, served
 * exactly as a connection (generation, token, waits, owned keys), whose
 * bytes come in frames on the multiplexed connection and whose replies go
 * back in frames on it, coalesced into one write per turn of the loop. */

enum { CHAN_FREE = 0, CHAN_OPEN, CHAN_CLOSING /* we sent the close, the peer has not */ };

struct store_mux {
    store_conn **conn; /* by channel number */
    uint8_t *state;
    uint32_t cap;
};

static void free_dead_chans(store_server *srv) {
    while (srv->dead) {
        store_conn *c = srv->dead;
        srv->dead = c->dead_next;
        buf_free(&c->in);
        buf_free(&c->out);
        free(c);
    }
}

/* Appends one frame to the multiplexed connection's output; it is written
 * from the loop's idle phase, with every other frame of this turn. */
static void mux_frame(store_conn *m, uint32_t chan, const uint8_t *p, size_t n) {
    uint8_t h[STORE_MUX_HDR];
    store_mux_hdr(h, chan, (uint32_t)n);
    if (buf_append(&m->out, h, sizeof h) != 0 || (n && buf_append(&m->out, p, n) != 0)) {
        m->oom = 1;
        return;
    }
    store_conn_mark_pending(m);
}

static void chan_flush(store_conn *c) {
    store_conn *m = c->mux;
    for (size_t at = 0; at < c->out.len && !m->closing && !m->oom;) {
        size_t n = c->out.len - at;
        if (n > STORE_MUX_MAX_FRAME) n = STORE_MUX_MAX_FRAME;
        mux_frame(m, c->chan, c->out.data + at, n);
        at += n;
    }
    buf_clear(&c->out);
    if (m->oom && !m->closing) store_conn_drop(m, "out of memory queueing a reply");
}

/* A channel's connection closed: the peer is told (once), unless the
 * whole multiplexed connection is going; freed once nothing on the stack
 * can still hold it. */
static void chan_closed(store_conn *c) {
    store_conn *m = c->mux;
    store_server *srv = c->srv;
    if (!m->closing) {
        store_mux *x = m->chans;
        if (x->conn[c->chan] == c) { /* we close it: the peer has yet to */
            x->conn[c->chan] = NULL;
            x->state[c->chan] = CHAN_CLOSING;
        }
        mux_frame(m, c->chan, NULL, 0);
    }
    c->dead_next = srv->dead;
    srv->dead = c;
    store_conn_mark_pending(m); /* runs the idle phase, which frees it */
}

static void mux_close_all(store_conn *m) {
    store_mux *x = m->chans;
    for (uint32_t i = 0; i < x->cap; i++)
        if (x->conn[i]) store_conn_close(x->conn[i]);
    free(x->conn);
    free(x->state);
    free(x);
    m->chans = NULL;
}

/* STORE_OP_MUX: the connection becomes a multiplexed one. 0, or -1 once
 * it was dropped. */
static int mux_begin(store_conn *c) {
    if (c->mux || c->gen != STORE_GEN_UNKNOWN) {
        store_conn_drop(c, "asked to multiplex %s", c->mux ? "a channel of a multiplexed connection"
                                                          : "after its first requests");
        return -1;
    }
    if (!(c->chans = calloc(1, sizeof *c->chans))) {
        store_conn_drop(c, "out of memory");
        return -1;
    }
    uint8_t ok = 0;
    if (buf_append(&c->out, &ok, 1) != 0) {
        store_conn_drop(c, "out of memory queueing a reply");
        return -1;
    }
    log_debug("client %s: multiplexed (a store proxy)", c->peer);
    return 0;
}

static store_conn *chan_open(store_conn *m, uint32_t chan) {
    store_server *srv = m->srv;
    store_mux *x = m->chans;
    if (chan >= x->cap) {
        uint32_t cap = x->cap ? x->cap : 64;
        while (cap <= chan) cap *= 2;
        store_conn **conn = realloc(x->conn, cap * sizeof *conn);
        if (conn) x->conn = conn;
        uint8_t *state = conn ? realloc(x->state, cap) : NULL;
        if (!state) return NULL;
        x->state = state;
        memset(x->conn + x->cap, 0, (cap - x->cap) * sizeof *conn);
        memset(x->state + x->cap, 0, cap - x->cap);
        x->cap = cap;
    }
    store_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->srv = srv;
    c->mux = m;
    c->chan = chan;
    snprintf(c->peer, sizeof c->peer, "%.52s#%u", m->peer, chan);
    conn_register(c);
    srv->stats.chans_open++;
    x->conn[chan] = c;
    x->state[chan] = CHAN_OPEN;
    return c;
}

/* One frame's bytes for channel c: served straight from the frame when
 * nothing of c's is buffered, the rest kept for the next frame. */
static void chan_feed(store_conn *c, const uint8_t *p, size_t n) {
    if (c->in.len == 0) {
        long used = conn_consume(c, p, n);
        if (used < 0) return;
        p += used, n -= (size_t)used;
        if (n && buf_append(&c->in, p, n) != 0) {
            store_conn_drop(c, "out of memory buffering a request");
            return;
        }
        store_conn_flush(c);
        return;
    }
    if (buf_append(&c->in, p, n) != 0) {
        store_conn_drop(c, "out of memory buffering a request");
        return;
    }
    conn_process(c);
}

/* Frames from p[0..n): the bytes taken (whole frames), or -1 once m was
 * dropped. */
static long mux_consume(store_conn *m, const uint8_t *p, size_t n) {
    size_t off = 0;
    while (n - off >= STORE_MUX_HDR && !m->closing) {
        if (store_conn_unsent(m) >= store_out_soft(m->srv)) {
            if (!m->throttled) uv_read_stop((uv_stream_t *)&m->tcp);
            m->throttled = 1;
            break;
        }
        uint32_t chan, len;
        store_mux_parse_hdr(p + off, &chan, &len);
        if (chan >= STORE_MUX_MAX_CHANS || len > STORE_MUX_MAX_FRAME) {
            store_conn_drop(m, "sent a frame for channel %u of %u bytes (at most %u channels "
                            "of frames up to %u bytes)", chan, len, STORE_MUX_MAX_CHANS,
                            STORE_MUX_MAX_FRAME);
            return -1;
        }
        if (n - off < STORE_MUX_HDR + len) break;
        const uint8_t *data = p + off + STORE_MUX_HDR;
        off += STORE_MUX_HDR + len;
        m->progress_ms = uv_now(m->srv->loop);
        store_mux *x = m->chans;
        int state = chan < x->cap ? x->state[chan] : CHAN_FREE;
        if (len == 0) { /* the peer closes the channel */
            if (state == CHAN_FREE) {
                store_conn_drop(m, "closed channel %u, which was not open", chan);
                return -1;
            }
            x->state[chan] = CHAN_FREE;
            if (state == CHAN_OPEN) {
                store_conn *c = x->conn[chan];
                x->conn[chan] = NULL;
                store_conn_close(c); /* and says so back */
            }
            continue;
        }
        if (state == CHAN_CLOSING) continue; /* sent before it heard of our close */
        store_conn *c = state == CHAN_OPEN ? x->conn[chan] : chan_open(m, chan);
        if (!c) {
            store_conn_drop(m, "out of memory opening channel %u", chan);
            return -1;
        }
        if (!c->closing) chan_feed(c, data, len);
    }
    return m->closing ? -1 : (long)off;
}

/* ---- the request loop ------------------------------------------------- */

/* Decides the generation from the first bytes. Returns 1 when known (or a
 * HELLO is next), 0 when more bytes are needed, -1 if the client was
 * dropped. */
static int conn_detect(store_conn *c, const uint8_t *p, size_t n) {
    if (c->gen != STORE_GEN_UNKNOWN ||
        (n > 0 && (p[0] == STORE_WIRE_HELLO || p[0] == STORE_WIRE_MUX)))
        return 1;
    if (!c->authed) {
        if (n == 0) return 0;
        store_conn_drop(c, "the server requires a token (" DDPRUN_ENV_STORE_TOKEN
                           ") and the client sent none");
        return -1;
    }
    c->gen = store_detect_gen(p, n);
    return c->gen != STORE_GEN_UNKNOWN;
}

/* torch 2.1's client sends no handshake, like torch 1.13's, but numbers
 * DELETE_KEY..CANCEL_WAIT 7..11 where torch 1.13 has WATCH_KEY 7 and
 * DELETE_KEY 8; nothing in its bytes tells the two apart before 7 or 8
 * means different things (docs/protocol.md), so that layout is not served.
 * Its MULTI_GET, MULTI_SET and CANCEL_WAIT (9..11) are unknown to torch
 * 1.13, so they at least let the log say what is probably connecting. */
static const char *torch21_hint(store_gen gen, int rc, uint8_t code) {
    if (gen != STORE_GEN_V1 || rc != STORE_PARSE_EUNKNOWN || code < 9 || code > 11) return "";
    return "; a torch 2.1 client? its store protocol is not served (use torch 1.13, 2.0 or "
           "2.2 and later)";
}

/* Handles as many whole requests from p[0..n) as allowed; returns the
 * number of bytes consumed, or -1 if the connection was closed. */
static long conn_consume(store_conn *c, const uint8_t *p, size_t n) {
    size_t off = 0;
    while (off < n && !c->closing) {
        if (c->chans) { /* the rest is frames */
            long k = mux_consume(c, p + off, n - off);
            return k < 0 ? -1 : (long)off + k;
        }
        if (!c->mux && store_conn_unsent(c) >= store_out_soft(c->srv)) {
            /* Replies pile up unread: read no more requests for now. */
            if (!c->throttled) uv_read_stop((uv_stream_t *)&c->tcp);
            c->throttled = 1;
            break;
        }
        if (c->wait && c->gen == STORE_GEN_V1) {
            /* torch 1.13 clients have no CANCEL_WAIT: they are synchronous,
             * so a new request means the wait timed out and was abandoned.
             * Forget it, so that no stale reply lands in a later one. */
            store_table_cancel_wait(c);
        }
        if (c->wait && !store_table_is_cancel(c, p[off])) {
            /* Hold later requests until the wait ends, so replies stay in
             * order; a client that keeps sending meanwhile is cut off. */
            if (n - off > (size_t)c->srv->limits.max_value + c->srv->limits.max_key + 65536) {
                store_conn_drop(c, "sent more than a request's worth of data while waiting");
                return -1;
            }
            break;
        }
        int k = conn_detect(c, p + off, n - off);
        if (k < 0) return -1;
        if (k == 0) break;
        store_req req;
        size_t used = 0;
        int rc = store_parse(c->gen, p + off, n - off, &c->srv->limits, &req, &used);
        if (rc == STORE_PARSE_MORE) break;
        if (rc < 0) {
            store_conn_drop(c, "%s (query type 0x%02x, %s protocol)%s", store_parse_strerror(rc),
                      p[off], c->gen == STORE_GEN_V1 ? "torch 1.13" : "current",
                      torch21_hint(c->gen, rc, p[off]));
            return -1;
        }
        if (!c->authed && req.op != STORE_OP_HELLO) {
            store_conn_drop(c, "sent %s before presenting the token", store_op_name(req.op));
            return -1;
        }
        if (req.op == STORE_OP_MUX) {
            if (mux_begin(c) < 0) return -1;
            off += used;
            continue;
        }
        c->srv->stats.requests++;
        store_table_handle(c, &req);
        if (c->closing) return -1;
        if (c->refused) {
            store_conn_drop(c, "%s", c->refused);
            return -1;
        }
        c->progress_ms = uv_now(c->srv->loop);
        if (c->oom) {
            store_conn_drop(c, "out of memory queueing a reply");
            return -1;
        }
        off += used;
    }
    return (long)off;
}

static void conn_process(store_conn *c) {
    long used = conn_consume(c, c->in.data, c->in.len);
    if (used < 0) return;
    buf_consume(&c->in, (size_t)used);
    store_conn_flush(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    store_conn *c = s->data;
    store_server *srv = c->srv;
    int shared = b->base == (char *)srv->rbuf;
    if (shared) srv->rbuf_busy = 0;
    if (nread < 0) {
        if (nread == UV_EOF || nread == UV_ECONNRESET) {
            if (c->in.len > 0 && !c->wait)
                log_rated(&srv->conn_log, LOG_WARN, "client %s: disconnected in the middle of "
                          "a request (%zu bytes unparsed)", c->peer, c->in.len);
            else
                log_debug("client %s disconnected", c->peer);
        } else {
            log_rated(&srv->conn_log, LOG_WARN, "client %s: read failed: %s", c->peer,
                      uv_strerror((int)nread));
        }
        store_conn_close(c);
        return;
    }
    if (nread == 0) return;
    if (!shared) {
        c->in.len += (size_t)nread;
        conn_process(c);
        return;
    }
    long used = conn_consume(c, srv->rbuf, (size_t)nread);
    if (used < 0) return;
    if ((size_t)used < (size_t)nread &&
        buf_append(&c->in, srv->rbuf + used, (size_t)nread - (size_t)used) != 0) {
        store_conn_drop(c, "out of memory buffering a request");
        return;
    }
    store_conn_flush(c);
}

static void store_conn_mark_pending(store_conn *c) {
    store_server *srv = c->srv;
    if (c->pending || c->closing) return;
    c->pending = 1;
    c->pend_prev = NULL;
    c->pend_next = srv->pending;
    if (srv->pending) srv->pending->pend_prev = c;
    srv->pending = c;
    if (!uv_is_active((uv_handle_t *)&srv->pending_idle))
        uv_idle_start(&srv->pending_idle, on_pending);
}

static void store_conn_unmark_pending(store_conn *c) {
    if (!c->pending) return;
    c->pending = 0;
    if (c->pend_prev) c->pend_prev->pend_next = c->pend_next;
    else c->srv->pending = c->pend_next;
    if (c->pend_next) c->pend_next->pend_prev = c->pend_prev;
}

/* Flushes connections that other operations woke, and runs requests that
 * were held behind a wait that has now ended. */
static void on_pending(uv_idle_t *idle) {
    store_server *srv = idle->data;
    free_dead_chans(srv);
    while (srv->pending) {
        store_conn *c = srv->pending;
        store_conn_unmark_pending(c);
        if (c->in.len > 0 && !c->wait) conn_process(c);
        else store_conn_flush(c);
    }
    uv_idle_stop(idle);
}

/* A client named for the stall report: its address, and where it is a
 * process of this host, its pid and rank. */
static void name_client(const store_server *srv, const store_conn *c, char *out, size_t len) {
    sock_owner_name(srv->port, c->peer_port, c->peer, out, len);
}

/* Waits on keys nobody has set, older than stall_report_ms: one warning
 * naming each waiting client and the keys it waits for, once per wait. */
static void report_stalls(store_server *srv, uint64_t now) {
    store_stall s[32];
    size_t n = store_table_stalls(srv, now, (uint64_t)srv->stall_report_ms, s,
                                  sizeof s / sizeof *s);
    if (n == 0) return;
    char msg[4096];
    size_t at = 0;
    for (size_t i = 0; i < n && at < sizeof msg - 1; i++) {
        char who[160];
        if (i == 0 || s[i].conn != s[i - 1].conn) {
            name_client(srv, s[i].conn, who, sizeof who);
            at += (size_t)snprintf(msg + at, sizeof msg - at, "%s%s waits for '%s'", i ? "; " : "",
                                   who, s[i].key);
        } else {
            at += (size_t)snprintf(msg + at, sizeof msg - at, ", '%s'", s[i].key);
        }
    }
    log_warn("store: clients have waited over %.0f s for keys that nobody has set (a worker "
             "that never got there, or a set-up stuck): %s",
             srv->stall_report_ms / 1000.0, msg);
}

/* A client that began a request and has not finished it in the timeout
 * holds a buffer for nothing (thousands of half-sent 8 MiB values held
 * 165 MB): it is dropped. Requests held behind a wait, and those of a
 * throttled connection, are whole and only waiting: not stuck; so is the
 * rest of a channel's request while its multiplexed connection is not
 * read (throttled: the store's replies to its proxy pile up) or brings
 * other channels' bytes (the rest may be behind them). The same
 * sweep reports the waits on keys nobody has set (stall_report_ms). */
static void on_sweep(uv_timer_t *t) {
    store_server *srv = t->data;
    uint64_t now = uv_now(srv->loop);
    if (srv->stall_report_ms > 0) report_stalls(srv, now);
    for (store_conn *c = srv->conns, *next; c; c = next) {
        next = c->next;
        if (c->mux && c->mux->throttled) {
            /* its bytes wait behind the multiplexed connection, which we
             * do not read now: its time starts once we read again */
            c->progress_ms = now;
            continue;
        }
        if (c->closing || c->in.len == 0 || c->wait || c->throttled) continue;
        /* a channel's rest may be behind other channels' bytes in its
         * multiplexed connection: it is stuck only once that stalls too */
        uint64_t since = c->progress_ms;
        if (c->mux && c->mux->progress_ms > since) since = c->mux->progress_ms;
        if (now - since > (uint64_t)srv->request_timeout_ms)
            store_conn_drop(c, "sent %zu bytes of a request and did not finish it in %d s",
                            c->in.len, srv->request_timeout_ms / 1000);
    }
}

/* ---- server lifetime -------------------------------------------------- */

/* Runs after each poll of the sockets, which libuv ends by reading its
 * clock: whatever clients sent before then is read. The leases are judged
 * by it (store_table.c). */
static void on_polled(uv_check_t *h) {
    store_server *srv = h->data;
    srv->polled_ms = uv_now(srv->loop);
}

static int bind_host(store_server *srv, const char *host, int port) {
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        log_error("cannot resolve listen address '%s': %s", host, gai_strerror(rc));
        return -EADDRNOTAVAIL;
    }
    rc = -EADDRNOTAVAIL;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        rc = uv_tcp_bind(&srv->listener, ai->ai_addr, 0);
        if (rc == 0) break;
    }
    freeaddrinfo(res);
    return rc;
}

static int bind_listener(store_server *srv, const store_server_opts *o) {
    if (o->listen_fd > 0) return uv_tcp_open(&srv->listener, o->listen_fd);
    if (o->host && *o->host) return bind_host(srv, o->host, o->port);
    /* No host: both stacks through "::", or IPv4 alone where IPv6 is off. */
    struct sockaddr_in6 a6;
    uv_ip6_addr("::", o->port, &a6);
    if (uv_tcp_bind(&srv->listener, (struct sockaddr *)&a6, 0) == 0) return 0;
    struct sockaddr_in a4;
    uv_ip4_addr("0.0.0.0", o->port, &a4);
    return uv_tcp_bind(&srv->listener, (struct sockaddr *)&a4, 0);
}

static void read_bound_port(store_server *srv) {
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &len) != 0) return;
    srv->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* What the table may ask of this side (store_internal.h). */
static void net_drop(store_conn *c, const char *why) { store_conn_drop(c, "%s", why); }
static const store_net NET = {.drop = net_drop, .wake = store_conn_mark_pending};

int store_server_init(uv_loop_t *loop, store_server *srv, const store_server_opts *o) {
    memset(srv, 0, sizeof *srv);
    srv->loop = loop;
    srv->net = &NET;
    srv->limits.max_key = o->max_key ? o->max_key : STORE_DEFAULT_MAX_KEY;
    srv->limits.max_value = o->max_value ? o->max_value : STORE_DEFAULT_MAX_VALUE;
    srv->max_conns = o->max_conns > 0 ? o->max_conns : 65536;
    srv->request_timeout_ms = o->request_timeout_ms > 0 ? o->request_timeout_ms : 60000;
    srv->stall_report_ms = o->stall_report_ms > 0 ? o->stall_report_ms : 0;
    srv->rbuf = malloc(RBUF_SIZE);
    if (!srv->rbuf) return -ENOMEM;
    if (o->token && *o->token && !(srv->token = strdup(o->token))) return -ENOMEM;
    int rc = store_table_init(srv);
    if (rc) goto fail;
    uv_tcp_init(loop, &srv->listener);
    srv->listener.data = srv;
    srv->handles_open++;
    rc = bind_listener(srv, o);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&srv->listener, 8192, on_connection);
    if (rc) {
        /* The caller says what a busy port means in its setting. */
        store_server_close(srv, NULL);
        uv_run(loop, UV_RUN_NOWAIT); /* let the close callbacks run */
        return rc;
    }
    read_bound_port(srv);
    uv_timer_init(loop, &srv->lease_timer);
    srv->lease_timer.data = srv;
    uv_idle_init(loop, &srv->pending_idle);
    srv->pending_idle.data = srv;
    uv_check_init(loop, &srv->poll_check);
    srv->poll_check.data = srv;
    srv->polled_ms = uv_now(loop);
    uv_check_start(&srv->poll_check, on_polled);
    uv_unref((uv_handle_t *)&srv->poll_check);
    uv_timer_init(loop, &srv->sweep_timer);
    srv->sweep_timer.data = srv;
    uint64_t every = (uint64_t)srv->request_timeout_ms / 4 + 1;
    if (srv->stall_report_ms > 0 && (uint64_t)srv->stall_report_ms / 4 + 1 < every)
        every = (uint64_t)srv->stall_report_ms / 4 + 1;
    uv_timer_start(&srv->sweep_timer, on_sweep, every, every);
    uv_unref((uv_handle_t *)&srv->sweep_timer); /* it alone does not keep a loop alive */
    srv->handles_open += 4;
    return 0;
fail:
    free(srv->rbuf);
    free(srv->token);
    return rc;
}

int store_server_port(const store_server *srv) { return srv->port; }

void store_server_stats(const store_server *srv, store_stats *out) { *out = srv->stats; }

static void store_server_maybe_closed(store_server *srv) {
    if (!srv->closing || srv->handles_open > 0) return;
    free_dead_chans(srv);
    store_table_free(srv);
    free(srv->rbuf);
    free(srv->token);
    srv->rbuf = NULL;
    srv->token = NULL;
    if (srv->close_cb) srv->close_cb(srv);
}

static void on_server_handle_closed(uv_handle_t *h) {
    store_server *srv = h->data;
    srv->handles_open--;
    store_server_maybe_closed(srv);
}

void store_server_close(store_server *srv, void (*cb)(store_server *)) {
    if (srv->closing) return;
    srv->closing = 1;
    srv->close_cb = cb;
    while (srv->conns) store_conn_close(srv->conns);
    if (!uv_is_closing((uv_handle_t *)&srv->listener))
        uv_close((uv_handle_t *)&srv->listener, on_server_handle_closed);
    if (srv->lease_timer.loop) {
        uv_close((uv_handle_t *)&srv->lease_timer, on_server_handle_closed);
        uv_close((uv_handle_t *)&srv->pending_idle, on_server_handle_closed);
        uv_close((uv_handle_t *)&srv->poll_check, on_server_handle_closed);
        uv_close((uv_handle_t *)&srv->sweep_timer, on_server_handle_closed);
    }
}
