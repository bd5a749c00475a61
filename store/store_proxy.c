/* The per-node store proxy (store_proxy.h): local clients in, one
 * multiplexed connection to the job's store out.
 *
 * Each local client is a channel. Its bytes go up as frames, appended to
 * one output buffer that is written once per turn of the loop (the idle
 * phase), so a turn that read a hundred clients' requests makes one write
 * to the store. Frames coming down are written to their client at once. A
 * channel's number is reused only once both sides have said it is closed
 * (proto/store_proto.h), so no late reply of a gone client reaches a new
 * one.
 *
 * Requests shared. A node's ranks often ask the store the same thing at
 * once: every rank WAITs for and MULTI_GETs the NCCL unique ids (782 keys
 * each at 100,000 ranks under torch 2.x), GETs the same peer's address.
 * The proxy sends such a request once for all of them (a group) and gives
 * each the reply. That keeps each request's meaning: a request joins only
 * a group not yet sent, so the store serves the group after every member
 * asked; a member has no earlier request unanswered (the proxy follows
 * each channel's replies, proto/store_reply.h), and its later requests
 * wait at the proxy until its reply came. While a group is at the store,
 * the next one for the same request gathers, and goes once it returns. A
 * group travels on a channel of the proxy's own, closed once answered, or
 * once every member has gone or cancelled its wait. A channel whose
 * replies cannot be followed (torch 1.13's WATCH_KEY events, a wait given
 * up by a torch 1.13 client, a request the proxy cannot parse) is relayed
 * as bytes from then on, and shares nothing. */
#include "store/store_proxy.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/sock_owner.h"
#include "proto/store_proto.h"
#include "proto/store_reply.h"

#define RBUF (64 * 1024)
/* Past this many bytes unsent to the store, the clients' reads pause; they
 * resume below half of it. */
#define UP_SOFT ((size_t)16 << 20)
/* A client that leaves this many reply bytes unread is dropped. */
#define CLIENT_HARD ((size_t)64 << 20)
/* A request still incomplete at this size is not held whole: its channel
 * is relayed as bytes from then on. */
#define IN_MAX ((size_t)1 << 20)

enum { CHAN_FREE = 0, CHAN_OPEN, CHAN_CLOSING /* we sent the close, the store has not */ };
enum { UP_DOWN = 0, UP_CONNECTING, UP_CONNECTED, UP_CLOSING };

struct group;

typedef struct client {
    uv_tcp_t tcp;
    store_proxy *p;
    uint32_t chan;
    int closing;
    int paused;      /* reading stopped: the store's side is backed up */
    int spoke;       /* sent a byte: the store knows its channel */
    size_t inflight; /* reply bytes handed to libuv, not yet written */
    /* its requests and replies, followed */
    buf_t in;              /* request bytes not yet whole, or held behind a shared one */
    store_gen gen;
    int untracked;         /* relayed as bytes from here on */
    int answered;          /* the store has answered it: it was let in */
    store_reply *fifo;     /* replies awaited, oldest first (a ring) */
    uint32_t fhead, flen, fcap;
    struct group *joined;  /* its request is this group's */
    struct client *next_member;
    /* its WAIT, for the stall report */
    int peer_port;
    uint64_t wait_since;   /* when it was made (the loop's clock); 0: none */
    uint8_t *wait_args;    /* its key list as sent, unless it is its group's */
    size_t wait_nargs;
    int wait_told;
} client;

/* One request sent for several clients. */
typedef struct group {
    struct group *next;
    store_op op;
    uint64_t nitems;
    uint8_t *args; /* the request after its query type: identity and re-encoding */
    size_t nargs;
    int sent;
    uint32_t chan;     /* its channel, once sent */
    size_t skip;       /* reply bytes of its channel's HELLO still to come */
    store_reply reply; /* followed on its channel */
    buf_t out;         /* the reply so far */
    client *members;
    uint32_t nmembers;
} group;

/* Bytes that several writes send (a group's reply, to each member): freed
 * with the last reference. */
typedef struct {
    size_t refs;
    size_t len;
    uint8_t data[];
} shared_bytes;

typedef struct {
    uv_write_t req;
    buf_t data;           /* the bytes it owns, or */
    shared_bytes *shared; /* the shared ones it refers to */
    size_t len;           /* its bytes */
    client *c;            /* NULL: the upstream connection's */
} wreq;

struct store_proxy {
    uv_loop_t *loop;
    uv_tcp_t listener;
    uv_idle_t flush;
    uv_tcp_t up;
    uv_connect_t connect_req;
    int up_state;
    int reconnect;    /* a client came while the old upstream handle was closing */
    size_t handshake; /* reply bytes of HELLO/MUX still to read */
    buf_t up_in, up_out;
    buf_t up_spare; /* a written upstream buffer, kept for the next */
    size_t up_inflight;
    int npaused;   /* clients whose reading is paused (UP_SOFT) */
    client **conn; /* by channel */
    group **gchan; /* by channel: a group's own */
    group *groups;
    uint8_t *state;
    uint32_t cap;
    char *host, *token, *listen_host;
    int port, listen_port;
    store_proxy_stats st;
    int closing, handles;
    uv_timer_t stall_timer;
    int stall_ms;
    void (*close_cb)(void *);
    void *close_arg;
    log_rate log;
    char rbuf[RBUF];
    int rbuf_busy;
};

static void up_reset(store_proxy *p, const char *why);
static void client_close(client *c);
static void client_resume(client *c);
static void maybe_closed(store_proxy *p);
static void drop_clients(store_proxy *p);
static void client_take(client *c, const uint8_t *data, size_t n);
static void groups_send(store_proxy *p);

/* ---- channels ------------------------------------------------------------ */

static int chan_alloc(store_proxy *p, uint32_t *out) {
    for (uint32_t i = 0; i < p->cap; i++)
        if (p->state[i] == CHAN_FREE) return (int)(*out = i), 0;
    if (p->cap >= STORE_MUX_MAX_CHANS) return -EMFILE;
    uint32_t cap = p->cap ? p->cap * 2 : 64;
    client **conn = realloc(p->conn, cap * sizeof *conn);
    if (!conn) return -ENOMEM;
    p->conn = conn;
    group **gchan = realloc(p->gchan, cap * sizeof *gchan);
    if (!gchan) return -ENOMEM;
    p->gchan = gchan;
    uint8_t *state = realloc(p->state, cap);
    if (!state) return -ENOMEM;
    p->state = state;
    memset(p->conn + p->cap, 0, (cap - p->cap) * sizeof *conn);
    memset(p->gchan + p->cap, 0, (cap - p->cap) * sizeof *gchan);
    memset(p->state + p->cap, 0, cap - p->cap);
    *out = p->cap;
    p->cap = cap;
    return 0;
}

/* ---- the upstream connection --------------------------------------------- */

static void on_idle_flush(uv_idle_t *h);

static void want_flush(store_proxy *p) {
    if (!uv_is_active((uv_handle_t *)&p->flush)) uv_idle_start(&p->flush, on_idle_flush);
}

static void frame_up(store_proxy *p, uint32_t chan, const void *data, size_t n) {
    uint8_t h[STORE_MUX_HDR];
    store_mux_hdr(h, chan, (uint32_t)n);
    if (buf_append(&p->up_out, h, sizeof h) != 0 || (n && buf_append(&p->up_out, data, n) != 0)) {
        up_reset(p, "out of memory");
        return;
    }
    p->st.bytes_up += n;
    want_flush(p);
}

/* A channel's bytes, in frames of at most STORE_MUX_MAX_FRAME (none for
 * no bytes: an empty frame closes the channel). */
static void frames_up(store_proxy *p, uint32_t chan, const uint8_t *data, size_t n) {
    while (n > 0 && p->up_state != UP_DOWN && p->up_state != UP_CLOSING) {
        size_t k = n < STORE_MUX_MAX_FRAME ? n : STORE_MUX_MAX_FRAME;
        frame_up(p, chan, data, k);
        data += k, n -= k;
    }
}

/* Once the bytes not yet written to the store are under half of UP_SOFT
 * (by a queued write's end or by a write made at once), the paused
 * clients are read again. */
static void maybe_resume_clients(store_proxy *p) {
    if (p->npaused == 0 || p->up_inflight + p->up_out.len >= UP_SOFT / 2) return;
    for (uint32_t i = 0; i < p->cap; i++) {
        client *c = p->conn[i];
        if (c && c->paused && !c->closing) {
            c->paused = 0;
            client_resume(c);
        }
    }
    p->npaused = 0; /* (a paused client that closed is not counted either) */
}

static void on_up_write(uv_write_t *req, int status) {
    wreq *w = (wreq *)req;
    store_proxy *p = req->data;
    size_t n = w->data.len;
    if (!p->up_spare.data) {
        p->up_spare = w->data;
        buf_clear(&p->up_spare);
    } else {
        buf_free(&w->data);
    }
    free(w);
    p->up_inflight -= n;
    if (status < 0) {
        if (status != UV_ECANCELED) up_reset(p, uv_strerror(status));
        return;
    }
    maybe_resume_clients(p);
}

static void up_flush(store_proxy *p) {
    if (p->up_state != UP_CONNECTED || p->up_out.len == 0) return;
    if (p->up_inflight == 0) {
        uv_buf_t b = uv_buf_init((char *)p->up_out.data, (unsigned)p->up_out.len);
        int n = uv_try_write((uv_stream_t *)&p->up, &b, 1);
        if (n == (int)p->up_out.len) {
            buf_clear(&p->up_out);
            maybe_resume_clients(p);
            return;
        }
        if (n < 0 && n != UV_EAGAIN) {
            up_reset(p, uv_strerror(n));
            return;
        }
        if (n > 0) buf_consume(&p->up_out, (size_t)n);
    }
    wreq *w = calloc(1, sizeof *w);
    if (!w) {
        up_reset(p, "out of memory");
        return;
    }
    w->data = p->up_out;
    p->up_out = p->up_spare; /* (its allocation's pages are the process's already) */
    p->up_spare = (buf_t)BUF_INIT;
    w->req.data = p;
    uv_buf_t b = uv_buf_init((char *)w->data.data, (unsigned)w->data.len);
    p->up_inflight += w->data.len;
    int rc = uv_write(&w->req, (uv_stream_t *)&p->up, &b, 1, on_up_write);
    if (rc < 0) {
        p->up_inflight -= w->data.len;
        buf_free(&w->data);
        free(w);
        up_reset(p, uv_strerror(rc));
    }
}

static void on_idle_flush(uv_idle_t *h) {
    store_proxy *p = h->data;
    uv_idle_stop(h);
    groups_send(p);
    up_flush(p);
}

static void shared_release(shared_bytes *sh) {
    if (sh && --sh->refs == 0) free(sh);
}

static void on_client_write(uv_write_t *req, int status) {
    wreq *w = (wreq *)req;
    client *c = w->c;
    c->inflight -= w->len;
    buf_free(&w->data);
    shared_release(w->shared);
    free(w);
    if (status < 0) client_close(c);
}

/* Bytes for a local client: written to it now; what the kernel does not
 * take goes in a queued write, which refers to them where they are
 * shared (sh; data lies in sh->data) and owns a copy otherwise. */
static void client_send(client *c, const uint8_t *data, size_t n, shared_bytes *sh) {
    if (c->closing) return;
    c->p->st.bytes_down += n;
    size_t at = 0;
    if (c->inflight == 0) {
        uv_buf_t b = uv_buf_init((char *)data, (unsigned)n);
        int k = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (k == (int)n) return;
        if (k < 0 && k != UV_EAGAIN) {
            client_close(c);
            return;
        }
        if (k > 0) at = (size_t)k;
    }
    if (c->inflight + n - at > CLIENT_HARD) {
        log_rated(&c->p->log, LOG_WARN, "store proxy: client #%u does not read its replies "
                  "(%zu MiB unsent); dropping it", c->chan, c->inflight >> 20);
        client_close(c);
        return;
    }
    wreq *w = calloc(1, sizeof *w);
    if (!w || (!sh && buf_append(&w->data, data + at, n - at) != 0)) {
        free(w);
        client_close(c);
        return;
    }
    if (sh) sh->refs++;
    w->shared = sh;
    w->len = n - at;
    w->c = c;
    w->req.data = c;
    c->inflight += w->len;
    uv_buf_t b = uv_buf_init(sh ? (char *)data + at : (char *)w->data.data, (unsigned)w->len);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_client_write) < 0) {
        c->inflight -= w->len;
        buf_free(&w->data);
        shared_release(sh);
        free(w);
        client_close(c);
    }
}

static void client_write(client *c, const uint8_t *data, size_t n) {
    client_send(c, data, n, NULL);
}

/* ---- a channel's requests and replies, followed ---------------------------- */

/* Limits for parsing only: the store applies its own. */
static const store_limits any_size = {UINT32_MAX, UINT32_MAX};

static store_reply *fifo_at(client *c, uint32_t i) { return &c->fifo[(c->fhead + i) % c->fcap]; }

static void fifo_pop(client *c) {
    c->fhead = (c->fhead + 1) % c->fcap;
    c->flen--;
}

static void wait_done(client *c);

/* Relays the channel as bytes from here on (what it holds goes up with
 * its next bytes, client_take); when its wait ends can no longer be told,
 * so the stall report forgets it. */
static void untrack(client *c) {
    c->untracked = 1;
    if (!c->joined) wait_done(c);
    free(c->fifo);
    c->fifo = NULL;
    c->flen = c->fcap = c->fhead = 0;
}

/* The stall report's record of a client's WAIT: when, and its keys (a
 * copy where they are not its group's). Nothing without the report. */
static void wait_note(client *c, const uint8_t *args, size_t nargs) {
    if (!c->p->stall_ms) return;
    free(c->wait_args);
    c->wait_args = NULL;
    c->wait_nargs = 0;
    if (!c->joined && (c->wait_args = malloc(nargs ? nargs : 1))) {
        memcpy(c->wait_args, args, nargs);
        c->wait_nargs = nargs;
    }
    c->wait_since = c->joined || c->wait_args ? uv_now(c->p->loop) + 1 : 0;
    c->wait_told = 0;
}

static void wait_done(client *c) {
    free(c->wait_args);
    c->wait_args = NULL;
    c->wait_since = 0;
}

/* Notes the reply that a request passed to the store will get. */
static void expect_reply(client *c, const store_req *req) {
    store_reply r;
    store_reply_expect(&r, req);
    if (r.kind == STORE_REPLY_UNTRACKED) {
        untrack(c);
        return;
    }
    int done = 0;
    store_reply_scan(&r, NULL, 0, &done);
    if (done) return; /* no reply, or an empty one */
    if (c->flen == c->fcap) {
        uint32_t cap = c->fcap ? 2 * c->fcap : 4;
        store_reply *f = malloc(cap * sizeof *f);
        if (!f) {
            untrack(c);
            return;
        }
        for (uint32_t i = 0; i < c->flen; i++) f[i] = *fifo_at(c, i);
        free(c->fifo);
        c->fifo = f, c->fcap = cap, c->fhead = 0;
    }
    *fifo_at(c, c->flen++) = r;
}

/* Bytes the store sent the client: which replies they end. */
static void follow_replies(client *c, const uint8_t *d, size_t n) {
    c->answered = 1;
    size_t at = 0;
    while (at < n && !c->untracked) {
        if (c->flen == 0) { /* nothing asked for them */
            untrack(c);
            break;
        }
        store_reply *r = fifo_at(c, 0);
        /* a wait cancelled before it ended gets no reply: its cancel's
         * WAIT_CANCELED comes alone */
        if (r->wait && store_reply_untouched(r) && c->flen > 1 && fifo_at(c, 1)->cancel &&
            d[at] == STORE_WAIT_CANCELED) {
            wait_done(c);
            fifo_pop(c);
            continue;
        }
        int done = 0;
        at += store_reply_scan(r, d + at, n - at, &done);
        if (done) {
            if (r->wait) wait_done(c);
            fifo_pop(c);
        }
    }
}

static void group_join(client *c, group *twin, store_op op, uint64_t nitems,
                       const uint8_t *args, size_t nargs);
static void group_leave(client *c);

/* Whether c may share a request now. */
static int may_share(const client *c) {
    return c->answered && c->flen == 0 && c->p->up_state == UP_CONNECTED;
}

static int shareable_op(store_op op) {
    return op == STORE_OP_WAIT || op == STORE_OP_GET || op == STORE_OP_MULTI_GET;
}

/* A group whose request d[0..n) begins with, byte for byte: that is then
 * the request (a request's bytes say where it ends), found without parsing
 * its 782 keys again for each of a node's ranks. */
static group *twin_of(const client *c, const uint8_t *d, size_t n) {
    for (group *g = c->p->groups; g; g = g->next)
        if (n > g->nargs && d[0] == store_wire_code(c->gen, g->op) &&
            memcmp(d + 1, g->args, g->nargs) == 0)
            return g;
    return NULL;
}

/* The whole requests at the start of d[0..n): passed to the store, or
 * joined to a group. Returns the bytes taken. */
static size_t take_requests(client *c, const uint8_t *d, size_t n) {
    store_proxy *p = c->p;
    size_t off = 0, pass = 0; /* d[pass..off) goes to the store as it is */
    while (off < n && !c->untracked && !c->closing) {
        if (c->joined) {
            if (c->joined->op != STORE_OP_WAIT) break; /* held until the reply */
            if (c->gen == STORE_GEN_V1) {
                /* torch 1.13 has no CANCEL_WAIT: a new request means the
                 * wait was given up, and the store would answer it no more */
                group_leave(c);
                continue;
            }
            if (d[off] != store_wire_code(c->gen, STORE_OP_CANCEL_WAIT)) break;
            group_leave(c);
            const uint8_t cancelled = STORE_WAIT_CANCELED;
            client_write(c, &cancelled, 1);
            pass = ++off;
            continue;
        }
        if (c->gen == STORE_GEN_UNKNOWN && d[off] != STORE_WIRE_HELLO && d[off] != STORE_WIRE_MUX) {
            c->gen = store_detect_gen(d + off, n - off);
            if (c->gen == STORE_GEN_UNKNOWN) break;
        }
        group *twin = may_share(c) && c->gen != STORE_GEN_UNKNOWN ? twin_of(c, d + off, n - off)
                                                                 : NULL;
        if (twin) {
            frames_up(p, c->chan, d + pass, off - pass);
            group_join(c, twin, twin->op, twin->nitems, d + off + 1, twin->nargs);
            pass = off += 1 + twin->nargs;
            continue;
        }
        store_req req;
        size_t used = 0;
        int rc = store_parse(c->gen, d + off, n - off, &any_size, &req, &used);
        if (rc == STORE_PARSE_MORE) break;
        if (rc < 0) { /* the store says what is wrong */
            untrack(c);
            break;
        }
        if (may_share(c) && shareable_op(req.op)) {
            frames_up(p, c->chan, d + pass, off - pass);
            group_join(c, NULL, req.op, req.nitems, d + off + 1, used - 1);
            pass = off += used;
            continue;
        }
        if (c->gen == STORE_GEN_V1 && c->flen > 0 && fifo_at(c, c->flen - 1)->wait) {
            /* a torch 1.13 wait given up: whether the store answered it
             * first cannot be told from the bytes */
            off += used;
            untrack(c);
            break;
        }
        if (req.op == STORE_OP_WAIT) wait_note(c, d + off + 1, used - 1);
        off += used;
        expect_reply(c, &req);
    }
    frames_up(p, c->chan, d + pass, off - pass);
    return off;
}

/* Bytes from the client (none: go on with what it holds). */
static void client_take(client *c, const uint8_t *data, size_t n) {
    if (c->closing) return;
    if (c->untracked && !c->joined) {
        if (c->in.len) {
            frames_up(c->p, c->chan, c->in.data, c->in.len);
            buf_clear(&c->in);
        }
        frames_up(c->p, c->chan, data, n);
        return;
    }
    if (c->in.len || c->joined) {
        if (n && buf_append(&c->in, data, n) != 0) {
            client_close(c);
            return;
        }
        data = c->in.data, n = c->in.len;
    }
    size_t used = c->untracked ? 0 : take_requests(c, data, n);
    if (data == c->in.data) buf_consume(&c->in, used);
    else if (used < n && buf_append(&c->in, data + used, n - used) != 0) {
        client_close(c);
        return;
    }
    if (c->joined && c->in.len > CLIENT_HARD) {
        log_rated(&c->p->log, LOG_WARN, "store proxy: client #%u sent %zu MiB while waiting "
                  "for a reply; dropping it", c->chan, c->in.len >> 20);
        client_close(c);
        return;
    }
    if (!c->joined && c->in.len > IN_MAX) untrack(c);
    if (c->untracked && !c->joined && c->in.len) {
        frames_up(c->p, c->chan, c->in.data, c->in.len);
        buf_clear(&c->in);
    }
}

/* ---- groups: one request for several clients -------------------------------- */

/* (A node has few groups at a time; memcmp is faster than hashing the
 * 34 KB of a 782-key request byte by byte, which took a third of the
 * proxies' time.) */
static int same_request(const group *g, store_op op, const uint8_t *a, size_t n) {
    return g->op == op && g->nargs == n && memcmp(g->args, a, n) == 0;
}

static void group_unlink(store_proxy *p, group *g) {
    for (group **at = &p->groups; *at; at = &(*at)->next)
        if (*at == g) {
            *at = g->next;
            break;
        }
}

/* Ends a group: its channel closed, if sent. Its members are no longer
 * its (the caller saw to them). */
static void group_free(store_proxy *p, group *g) {
    group_unlink(p, g);
    if (g->sent && p->gchan[g->chan] == g) {
        p->gchan[g->chan] = NULL;
        if (p->up_state == UP_CONNECTED || p->up_state == UP_CONNECTING) {
            frame_up(p, g->chan, NULL, 0);
            p->state[g->chan] = CHAN_CLOSING;
        } else {
            p->state[g->chan] = CHAN_FREE;
        }
    }
    free(g->args);
    buf_free(&g->out);
    free(g);
    want_flush(p); /* the next group for the same request may go now */
}

/* c's request op with args (what follows its query type, the same in both
 * generations) joins the group of that request not yet sent, or a new one.
 * twin: a group known to make the same request, or NULL (when it is not
 * sent yet, it is the one: no 34 KB compared again). */
static void group_join(client *c, group *twin, store_op op, uint64_t nitems, const uint8_t *a,
                       size_t n) {
    store_proxy *p = c->p;
    group *g = twin && !twin->sent ? twin : NULL;
    if (!g)
        for (g = p->groups; g && (g->sent || !same_request(g, op, a, n)); g = g->next) continue;
    if (!g) {
        g = calloc(1, sizeof *g);
        if (!g || !(g->args = malloc(n ? n : 1))) {
            free(g);
            client_close(c);
            return;
        }
        memcpy(g->args, a, n);
        g->nargs = n, g->op = op, g->nitems = nitems;
        g->next = p->groups;
        p->groups = g;
    }
    c->joined = g;
    if (op == STORE_OP_WAIT) wait_note(c, a, n);
    c->next_member = g->members;
    g->members = c;
    g->nmembers++;
    p->st.requests_shared++;
    want_flush(p);
}

static void group_leave(client *c) {
    group *g = c->joined;
    c->joined = NULL;
    wait_done(c);
    for (client **at = &g->members; *at; at = &(*at)->next_member)
        if (*at == c) {
            *at = c->next_member;
            break;
        }
    if (--g->nmembers == 0) group_free(c->p, g);
}

/* Sends a group on a channel of its own: HELLO where the store wants a
 * token, VALIDATE, the request. */
static void group_send(store_proxy *p, group *g) {
    uint32_t ch;
    if (chan_alloc(p, &ch) != 0) { /* every channel taken: sent by each member then */
        for (client *m = g->members; m; m = m->next_member) {
            m->joined = NULL;
            untrack(m);
            client_close(m);
        }
        g->members = NULL;
        group_free(p, g);
        return;
    }
    buf_t b = BUF_INIT;
    if (p->token) {
        store_enc_u8(&b, STORE_WIRE_HELLO);
        store_enc_u32(&b, STORE_EXT_MAGIC);
        store_enc_u32(&b, STORE_EXT_VERSION);
        store_enc_bytes(&b, p->token, strlen(p->token));
        g->skip = 5;
    }
    store_enc_op(&b, STORE_GEN_V2, STORE_OP_VALIDATE);
    store_enc_u32(&b, STORE_VALIDATE_MAGIC);
    store_enc_op(&b, STORE_GEN_V2, g->op);
    if (buf_append(&b, g->args, g->nargs) != 0) {
        buf_free(&b);
        up_reset(p, "out of memory");
        return;
    }
    store_req req = {.op = g->op, .nitems = g->nitems};
    store_reply_expect(&g->reply, &req);
    g->sent = 1;
    g->chan = ch;
    p->state[ch] = CHAN_OPEN;
    p->gchan[ch] = g;
    p->st.shared_sent++;
    frames_up(p, ch, b.data, b.len);
    buf_free(&b);
}

/* Sends the groups gathered, each unless the same request is at the store. */
static void groups_send(store_proxy *p) {
    for (group *g = p->groups, *next; g && p->up_state == UP_CONNECTED; g = next) {
        next = g->next;
        if (g->sent) continue;
        int busy = 0;
        for (group *o = p->groups; o && !busy; o = o->next)
            busy = o->sent && same_request(o, g->op, g->args, g->nargs);
        if (!busy) group_send(p, g);
    }
}

/* Bytes on a group's channel: once its reply is whole, every member gets
 * it and goes on with what it held. */
static void group_reply(store_proxy *p, group *g, const uint8_t *d, size_t n) {
    size_t at = 0;
    for (; g->skip > 0 && at < n; at++) g->skip--; /* HELLO's status and version */
    int done = 0;
    size_t k = store_reply_scan(&g->reply, d + at, n - at, &done);
    if (k && buf_append(&g->out, d + at, k) != 0) {
        up_reset(p, "out of memory");
        return;
    }
    if (!done) return;
    shared_bytes *sh = malloc(sizeof *sh + g->out.len);
    if (!sh) {
        up_reset(p, "out of memory");
        return;
    }
    sh->refs = 1, sh->len = g->out.len;
    memcpy(sh->data, g->out.data, g->out.len);
    client *members = g->members;
    g->members = NULL;
    for (client *m = members; m; m = m->next_member) {
        m->joined = NULL;
        wait_done(m);
        client_send(m, sh->data, sh->len, sh);
    }
    shared_release(sh);
    group_free(p, g);
    for (client *m = members, *next; m && p->up_state == UP_CONNECTED; m = next) {
        next = m->next_member; /* (it may join another group) */
        if (m->in.len) client_take(m, NULL, 0);
    }
}

/* Every group ends with the connection to the store; their members are
 * disconnected with the other clients. */
static void groups_drop(store_proxy *p) {
    while (p->groups) {
        group *g = p->groups;
        for (client *m = g->members; m; m = m->next_member) m->joined = NULL;
        g->members = NULL;
        if (g->sent) p->gchan[g->chan] = NULL, p->state[g->chan] = CHAN_FREE;
        g->sent = 0;
        group_free(p, g);
    }
}

/* The handshake's replies, then frames. 0, or -1 once the upstream was
 * reset. */
static int up_consume(store_proxy *p) {
    size_t off = 0;
    const uint8_t *d = p->up_in.data;
    size_t n = p->up_in.len;
    while (p->handshake > 0 && off < n) {
        /* HELLO's reply is a status byte and a version (5 bytes), MUX's a
         * status byte: every status byte must be 0 */
        int status_byte = p->handshake == 6 || p->handshake == 1;
        if (status_byte && d[off] != 0) {
            up_reset(p, "the store refused to carry this node's clients");
            return -1;
        }
        off++, p->handshake--;
    }
    while (p->handshake == 0 && n - off >= STORE_MUX_HDR) {
        uint32_t chan, len;
        store_mux_parse_hdr(d + off, &chan, &len);
        if (len > STORE_MUX_MAX_FRAME || chan >= p->cap || p->state[chan] == CHAN_FREE) {
            up_reset(p, "the store sent a frame this proxy cannot place");
            return -1;
        }
        if (n - off < STORE_MUX_HDR + len) break;
        const uint8_t *data = d + off + STORE_MUX_HDR;
        off += STORE_MUX_HDR + len;
        client *c = p->conn[chan];
        group *g = p->gchan[chan];
        if (len > 0) {
            if (p->state[chan] == CHAN_OPEN && c) {
                if (!c->untracked) follow_replies(c, data, len);
                client_write(c, data, len);
            } else if (p->state[chan] == CHAN_OPEN && g) {
                group_reply(p, g, data, len);
            }
            if (p->up_state != UP_CONNECTED) return -1; /* reset meanwhile (out of memory) */
            continue;
        }
        if (p->state[chan] == CHAN_OPEN) {
            /* the store closed it (dropped the client): we say so back */
            frame_up(p, chan, NULL, 0);
            p->conn[chan] = NULL;
            if (c) {
                c->chan = UINT32_MAX;
                client_close(c);
            }
            if (g) { /* its members are dropped as the store dropped it */
                p->gchan[chan] = NULL;
                client *members = g->members;
                g->members = NULL;
                g->sent = 0;
                for (client *m = members; m; m = m->next_member) m->joined = NULL;
                for (client *m = members; m; m = m->next_member) client_close(m);
                group_free(p, g);
            }
            if (p->up_state != UP_CONNECTED) return -1;
        }
        p->state[chan] = CHAN_FREE;
    }
    buf_consume(&p->up_in, off);
    return 0;
}

static void up_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    store_proxy *p = h->data;
    (void)suggested;
    if (buf_reserve(&p->up_in, RBUF) != 0) {
        *b = uv_buf_init(NULL, 0);
        return;
    }
    *b = uv_buf_init((char *)p->up_in.data + p->up_in.len, RBUF);
}

static void on_up_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    store_proxy *p = s->data;
    (void)b;
    if (nread < 0) {
        up_reset(p, p->handshake > 0 ? "the store closed the connection before it agreed to "
                                       "multiplex (not ddprun's store? PyTorch's TCPStore "
                                       "cannot carry a node's clients on one connection)"
                                     : nread == UV_EOF ? "the store closed the connection"
                                                       : uv_strerror((int)nread));
        return;
    }
    p->up_in.len += (size_t)nread;
    up_consume(p);
}

static void on_up_connect(uv_connect_t *req, int status) {
    store_proxy *p = req->data;
    if (p->up_state != UP_CONNECTING) return;
    if (status < 0) {
        up_reset(p, uv_strerror(status));
        return;
    }
    p->up_state = UP_CONNECTED;
    p->st.upstream_connects++;
    uv_tcp_nodelay(&p->up, 1);
    uv_read_start((uv_stream_t *)&p->up, up_alloc, on_up_read);
    up_flush(p);
}

static void up_connect(store_proxy *p) {
    if (p->up_state == UP_CLOSING) {
        p->reconnect = 1;
        return;
    }
    if (p->up_state != UP_DOWN) return;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *ai = NULL;
    int rc = getaddrinfo(p->host, port, &hints, &ai);
    if (rc != 0) {
        log_rated(&p->log, LOG_WARN, "store proxy: cannot resolve the store's host '%s': %s; "
                  "its clients on this node are disconnected", p->host, gai_strerror(rc));
        drop_clients(p);
        return;
    }
    uv_tcp_init(p->loop, &p->up);
    p->up.data = p;
    p->handles++;
    p->up_state = UP_CONNECTING;
    p->connect_req.data = p;
    /* The handshake goes first; clients' frames queue behind it meanwhile. */
    buf_t hs = BUF_INIT;
    p->handshake = 1;
    if (p->token) {
        store_enc_u8(&hs, STORE_WIRE_HELLO);
        store_enc_u32(&hs, STORE_EXT_MAGIC);
        store_enc_u32(&hs, STORE_EXT_VERSION);
        store_enc_bytes(&hs, p->token, strlen(p->token));
        p->handshake += 5;
    }
    store_enc_u8(&hs, STORE_WIRE_MUX);
    store_enc_u32(&hs, STORE_MUX_VERSION);
    if (hs.len == 0 || buf_append(&hs, p->up_out.data, p->up_out.len) != 0) {
        buf_free(&hs);
        freeaddrinfo(ai);
        up_reset(p, "out of memory");
        return;
    }
    buf_free(&p->up_out);
    p->up_out = hs;
    rc = uv_tcp_connect(&p->connect_req, &p->up, ai->ai_addr, on_up_connect);
    freeaddrinfo(ai);
    if (rc < 0) up_reset(p, uv_strerror(rc));
}

static void on_up_closed(uv_handle_t *h) {
    store_proxy *p = h->data;
    p->handles--;
    p->up_state = UP_DOWN;
    if (p->reconnect && !p->closing) {
        p->reconnect = 0;
        up_connect(p);
    }
    maybe_closed(p);
}

/* Disconnects every client; every channel is free again. */
static void drop_clients(store_proxy *p) {
    groups_drop(p);
    p->npaused = 0;
    for (uint32_t i = 0; i < p->cap; i++) {
        client *c = p->conn[i];
        p->conn[i] = NULL;
        p->state[i] = CHAN_FREE;
        if (c) {
            c->chan = UINT32_MAX;
            client_close(c);
        }
    }
}

/* The store is gone (or refused us, or is being left for another): every
 * client is disconnected, as from the store itself, and every channel is
 * free again. */
static void up_reset(store_proxy *p, const char *why) {
    if (p->up_state == UP_DOWN || p->up_state == UP_CLOSING) return;
    if (why)
        log_rated(&p->log, LOG_WARN, "store proxy: the connection to the store at %s:%d: %s; "
                  "its %u clients on this node are disconnected",
                  p->host, p->port, why, (unsigned)p->st.clients_open);
    drop_clients(p);
    buf_clear(&p->up_in);
    buf_clear(&p->up_out);
    p->handshake = 0;
    p->up_state = UP_CLOSING;
    uv_close((uv_handle_t *)&p->up, on_up_closed);
}

/* ---- local clients -------------------------------------------------------- */

static void on_client_closed(uv_handle_t *h) {
    client *c = h->data;
    store_proxy *p = c->p;
    buf_free(&c->in);
    free(c->fifo);
    free(c->wait_args);
    free(c);
    p->handles--;
    maybe_closed(p);
}

static void client_close(client *c) {
    if (c->closing) return;
    c->closing = 1;
    store_proxy *p = c->p;
    p->st.clients_open--;
    if (c->joined) group_leave(c);
    if (c->chan != UINT32_MAX && p->conn[c->chan] == c) {
        p->conn[c->chan] = NULL;
        /* a channel that never carried a byte does not exist for the store */
        if (c->spoke && (p->up_state == UP_CONNECTING || p->up_state == UP_CONNECTED)) {
            frame_up(p, c->chan, NULL, 0);
            p->state[c->chan] = CHAN_CLOSING;
        } else {
            p->state[c->chan] = CHAN_FREE;
        }
    }
    uv_close((uv_handle_t *)&c->tcp, on_client_closed);
}

static void client_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    client *c = h->data;
    (void)suggested;
    if (c->p->rbuf_busy) {
        *b = uv_buf_init(NULL, 0);
        return;
    }
    c->p->rbuf_busy = 1;
    *b = uv_buf_init(c->p->rbuf, RBUF);
}

static void on_client_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b) {
    client *c = s->data;
    store_proxy *p = c->p;
    if (b->base == p->rbuf) p->rbuf_busy = 0;
    if (nread < 0) {
        client_close(c);
        return;
    }
    if (nread == 0 || c->closing) return;
    c->spoke = 1;
    client_take(c, (const uint8_t *)b->base, (size_t)nread);
    if (p->up_inflight + p->up_out.len >= UP_SOFT) { /* the store's side is backed up */
        uv_read_stop(s);
        c->paused = 1;
        p->npaused++;
    }
}

static void on_accept(uv_stream_t *listener, int status) {
    store_proxy *p = listener->data;
    if (status < 0) return;
    client *c = calloc(1, sizeof *c);
    if (!c) return;
    c->p = p;
    uv_tcp_init(p->loop, &c->tcp);
    c->tcp.data = c;
    p->handles++;
    p->st.clients_open++;
    c->chan = UINT32_MAX;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0) {
        client_close(c);
        return;
    }
    p->st.clients_accepted++;
    int rc = chan_alloc(p, &c->chan);
    if (rc) {
        log_rated(&p->log, LOG_WARN, "store proxy: cannot take another client: %s",
                  strerror(-rc));
        c->chan = UINT32_MAX;
        client_close(c);
        return;
    }
    p->conn[c->chan] = c;
    p->state[c->chan] = CHAN_OPEN;
    struct sockaddr_storage peer;
    int plen = sizeof peer;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&peer, &plen) == 0)
        c->peer_port = peer.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&peer)->sin6_port)
                                                  : ntohs(((struct sockaddr_in *)&peer)->sin_port);
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, client_alloc, on_client_read);
    up_connect(p);
}

static void client_resume(client *c) {
    uv_read_start((uv_stream_t *)&c->tcp, client_alloc, on_client_read);
}

/* ---- the stall report ----------------------------------------------------- */

/* A WAIT's keys, quoted and comma-separated, into out. */
static void wait_keys(const client *c, char *out, size_t cap) {
    const uint8_t *a = c->joined ? c->joined->args : c->wait_args;
    size_t nargs = c->joined ? c->joined->nargs : c->wait_nargs, at = 0;
    const uint8_t *end = a + nargs;
    out[0] = '\0';
    if (nargs < 8) return;
    uint64_t n = store_load_u64(a);
    a += 8;
    for (uint64_t i = 0; i < n && end - a >= 8 && at < cap; i++) {
        uint64_t len = store_load_u64(a);
        a += 8;
        if ((uint64_t)(end - a) < len) break;
        at += (size_t)snprintf(out + at, cap - at, "%s'%.*s'", i ? ", " : "",
                               (int)(len < 120 ? len : 120), (const char *)a);
        a += len;
    }
}

/* Clients that have waited stall_ms for keys: named in one warning, with
 * the rank and pid of each (the store's own report names this node's
 * proxy, not its workers), once per wait. */
static void on_stall_timer(uv_timer_t *t) {
    store_proxy *p = t->data;
    uint64_t now = uv_now(p->loop);
    char msg[4096];
    size_t at = 0;
    for (uint32_t i = 0; i < p->cap && at < sizeof msg - 1; i++) {
        client *c = p->conn[i];
        if (!c || c->closing || !c->wait_since || c->wait_told ||
            now + 1 - c->wait_since < (uint64_t)p->stall_ms)
            continue;
        c->wait_told = 1;
        char keys[1024], who[96];
        wait_keys(c, keys, sizeof keys);
        if (strncmp(keys, "'/ddprun/", 9) == 0) continue; /* ddprun's own */
        sock_owner_name(p->listen_port, c->peer_port, NULL, who, sizeof who);
        if (!who[0]) snprintf(who, sizeof who, "client #%u", c->chan);
        at += (size_t)snprintf(msg + at, sizeof msg - at, "%s%s waits for %s", at ? "; " : "",
                               who, keys);
    }
    if (at)
        log_warn("store proxy: workers of this node have waited over %.0f s for keys that "
                 "nobody has set (a worker that never got there, or a set-up stuck): %s",
                 p->stall_ms / 1000.0, msg);
}

/* ---- lifetime --------------------------------------------------------------- */

static int set_target(store_proxy *p, const char *host, int port) {
    char *h = strdup(host && *host ? host : "127.0.0.1");
    if (!h) return -ENOMEM;
    free(p->host);
    p->host = h;
    p->port = port;
    return 0;
}

int store_proxy_start(uv_loop_t *loop, const store_proxy_opts *o, store_proxy **out) {
    *out = NULL;
    store_proxy *p = calloc(1, sizeof *p);
    if (!p) return -ENOMEM;
    p->loop = loop;
    int rc = set_target(p, o->upstream_host, o->upstream_port);
    if (rc == 0 && o->token && *o->token && !(p->token = strdup(o->token))) rc = -ENOMEM;
    if (rc) {
        free(p->host);
        free(p);
        return rc;
    }
    uv_tcp_init(loop, &p->listener);
    p->listener.data = p;
    uv_idle_init(loop, &p->flush);
    p->flush.data = p;
    uv_timer_init(loop, &p->stall_timer);
    p->stall_timer.data = p;
    p->handles = 3;
    p->stall_ms = o->stall_report_ms > 0 ? o->stall_report_ms : 0;
    if (p->stall_ms) {
        uint64_t every = (uint64_t)p->stall_ms / 4 + 1;
        uv_timer_start(&p->stall_timer, on_stall_timer, every, every);
        uv_unref((uv_handle_t *)&p->stall_timer);
    }
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *ai = NULL;
    rc = getaddrinfo(o->host && *o->host ? o->host : "127.0.0.1", port, &hints, &ai);
    if (rc != 0) rc = -EADDRNOTAVAIL;
    else rc = uv_tcp_bind(&p->listener, ai->ai_addr, 0);
    if (ai) freeaddrinfo(ai);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&p->listener, 4096, on_accept);
    if (rc) {
        store_proxy_close(p, NULL, NULL);
        return rc;
    }
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_tcp_getsockname(&p->listener, (struct sockaddr *)&ss, &len);
    p->listen_port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                               : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    *out = p;
    return 0;
}

int store_proxy_port(const store_proxy *p) { return p->listen_port; }

int store_proxy_retarget(store_proxy *p, const char *host, int port) {
    if (p->host && host && strcmp(p->host, host) == 0 && p->port == port) return 0;
    up_reset(p, NULL);
    return set_target(p, host, port);
}

void store_proxy_stats_get(const store_proxy *p, store_proxy_stats *out) { *out = p->st; }

static void maybe_closed(store_proxy *p) {
    if (!p->closing || p->handles > 0) return;
    void (*cb)(void *) = p->close_cb;
    void *arg = p->close_arg;
    buf_free(&p->up_in);
    buf_free(&p->up_out);
    buf_free(&p->up_spare);
    free(p->conn);
    free(p->gchan);
    free(p->state);
    free(p->host);
    free(p->token);
    free(p);
    if (cb) cb(arg);
}

static void on_handle_closed(uv_handle_t *h) {
    store_proxy *p = h->data;
    p->handles--;
    maybe_closed(p);
}

void store_proxy_close(store_proxy *p, void (*cb)(void *), void *arg) {
    if (!p || p->closing) return;
    p->closing = 1;
    p->close_cb = cb;
    p->close_arg = arg;
    up_reset(p, NULL);
    drop_clients(p);
    uv_close((uv_handle_t *)&p->listener, on_handle_closed);
    uv_close((uv_handle_t *)&p->flush, on_handle_closed);
    uv_close((uv_handle_t *)&p->stall_timer, on_handle_closed);
    maybe_closed(p);
}
