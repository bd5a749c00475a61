/* Collectives over a ring of TCP connections; see comm_ring.h.
 *
 * Every collective here is one transfer: a list of blocks to send to the
 * next member and a list of blocks to receive from the previous one, where
 * send block b may only go out as far as receive block b - lag has been
 * completed (lag 1 for the ring steps: what a member forwards is what it
 * has just received and added; lag 0 for a broadcast's relay). One loop of
 * non-blocking send and recv calls drives both directions at once, so the
 * sockets' buffers never deadlock and received data is added and forwarded
 * while the rest is still arriving. */
#include "worker/comm/comm_ring.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define RING_MAGIC 0x52504444u /* "DDPR" */
/* Socket buffers: a few round trips of loopback or LAN bandwidth, the most
 * the kernel allows by default (net.core.[rw]mem_max). */
#define RING_SOCKBUF (4 << 20)
#define RING_POLL_MS 100

typedef struct {
    uint8_t *ptr;
    size_t len;
    int add; /* receive only: add the floats into ptr instead of storing them */
} ring_blk;

void comm_ring_clear(comm_ring *r) {
    memset(r, 0, sizeof *r);
    r->send_fd = r->recv_fd = -1;
}

void comm_ring_close(comm_ring *r) {
    if (r->send_fd >= 0) close(r->send_fd);
    if (r->recv_fd >= 0) close(r->recv_fd);
    free(r->stage);
    comm_ring_clear(r);
}

void comm_ring_shutdown(comm_ring *r) {
    if (r->send_fd >= 0) shutdown(r->send_fd, SHUT_RDWR);
    if (r->recv_fd >= 0) shutdown(r->recv_fd, SHUT_RDWR);
}

static void tune_socket(int fd) {
    int one = 1, size = RING_SOCKBUF;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* --- the transfer loop --------------------------------------------------- */

static int link_error(comm_ring *r, comm_call *k, int to_next, int err) {
    int rank = to_next ? r->next_rank : r->prev_rank;
    const char *who = to_next ? "next" : "previous";
    if (err == 0 || err == ECONNRESET || err == EPIPE || err == ENOTCONN)
        return comm_call_fail(k, -ECONNRESET,
                              "%s failed: rank %d (%s in the ring) closed its connection "
                              "(it exited or failed)",
                              k->op, rank, who);
    return comm_call_fail(k, -err, "%s failed: connection to rank %d (%s in the ring): %s", k->op,
                          rank, who, strerror(err));
}

/* Nothing ever comes back on the connection to the next member, so when it
 * turns readable while it still expects data from us, it has gone. */
static int check_next(comm_ring *r, comm_call *k) {
    char c;
    ssize_t n = recv(r->send_fd, &c, 1, MSG_DONTWAIT);
    if (n == 0) return link_error(r, k, 1, 0);
    if (n > 0)
        return comm_call_fail(k, -EPROTO, "%s failed: rank %d sent unexpected bytes", k->op,
                              r->next_rank);
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
    return link_error(r, k, 1, errno);
}

static void add_floats(float *restrict dst, const float *restrict src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static int skip_empty(const ring_blk *b, int n, int i) {
    while (i < n && b[i].len == 0) i++;
    return i;
}

static int xfer(comm_ring *r, const ring_blk *snd, int nsnd, const ring_blk *rcv, int nrcv, int lag,
                comm_call *k) {
    int sb = skip_empty(snd, nsnd, 0), rb = skip_empty(rcv, nrcv, 0);
    size_t soff = 0, roff = 0, rdone = 0;
    while (sb < nsnd || rb < nrcv) {
        int progress = 0, want_out = 0, rc = comm_call_check(k);
        if (rc) return rc;
        if (sb < nsnd) {
            size_t limit = snd[sb].len;
            int g = sb - lag;
            if (nrcv > 0 && g >= 0 && g >= rb) limit = g == rb ? rdone : 0;
            if (limit > soff) {
                ssize_t w = send(r->send_fd, snd[sb].ptr + soff, limit - soff,
                                 MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0) {
                    soff += (size_t)w;
                    progress = 1;
                    if (soff == snd[sb].len) sb = skip_empty(snd, nsnd, sb + 1), soff = 0;
                } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
                    want_out = 1;
                } else if (errno != EINTR) {
                    return link_error(r, k, 1, errno);
                }
            }
        }
        if (rb < nrcv) {
            const ring_blk *b = &rcv[rb];
            uint8_t *dst = b->add ? (uint8_t *)r->stage + roff : b->ptr + roff;
            ssize_t got = recv(r->recv_fd, dst, b->len - roff, MSG_DONTWAIT);
            if (got > 0) {
                roff += (size_t)got;
                progress = 1;
                if (b->add) {
                    size_t end = roff & ~(size_t)3;
                    add_floats((float *)(b->ptr + rdone), r->stage + rdone / 4, (end - rdone) / 4);
                    rdone = end;
                } else {
                    rdone = roff;
                }
                if (rdone == b->len) rb = skip_empty(rcv, nrcv, rb + 1), roff = rdone = 0;
            } else if (got == 0) {
                return link_error(r, k, 0, 0);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return link_error(r, k, 0, errno);
            }
        }
        if (progress) continue;
        /* Watch the next member for hanging up only while it still has
         * something to get from us: once this member has sent everything,
         * the next one may finish and leave before we have received all. */
        short next_ev = sb < nsnd ? (short)(POLLIN | (want_out ? POLLOUT : 0)) : 0;
        struct pollfd p[2] = {{sb < nsnd ? r->send_fd : -1, next_ev, 0},
                              {r->recv_fd, (short)(rb < nrcv ? POLLIN : 0), 0}};
        int64_t left_ms = (comm_call_left_ns(k) + 999999) / 1000000;
        int ms = left_ms < RING_POLL_MS ? (int)left_ms : RING_POLL_MS;
        if (poll(p, 2, ms) < 0 && errno != EINTR)
            return comm_call_fail(k, -errno, "%s failed: poll: %s", k->op, strerror(errno));
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            int err = 0;
            socklen_t len = sizeof err;
            if ((p[0].revents & POLLERR) &&
                getsockopt(r->send_fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err)
                return link_error(r, k, 1, err);
            if ((rc = check_next(r, k))) return rc;
        }
    }
    return 0;
}

static int ensure_stage(comm_ring *r, size_t bytes, comm_call *k) {
    if (bytes <= r->stage_bytes) return 0;
    float *p = realloc(r->stage, bytes);
    if (!p) return comm_call_fail(k, -ENOMEM, "%s: out of memory (%zu bytes)", k->op, bytes);
    r->stage = p;
    r->stage_bytes = bytes;
    return 0;
}

/* --- collectives --------------------------------------------------------- */

static int modn(int a, int n) { return ((a % n) + n) % n; }

int comm_ring_allreduce(comm_ring *r, float *buf, size_t count, comm_call *k) {
    int n = r->n, nb = 2 * (n - 1);
    if (n < 2 || count == 0) return 0;
    ring_blk *snd = calloc((size_t)nb, sizeof *snd), *rcv = calloc((size_t)nb, sizeof *rcv);
    int rc = (snd && rcv) ? 0 : comm_call_fail(k, -ENOMEM, "%s: out of memory", k->op);
    size_t most = (count + (size_t)n - 1) / (size_t)n;
    if (!rc) rc = ensure_stage(r, most * sizeof(float), k);
    if (rc) goto out;
    /* Segment i is [i*count/n, (i+1)*count/n). Step b sends segment pos-b
     * and receives segment pos-b-1: added in the first n-1 steps (the
     * reduce-scatter), stored in the last n-1 (the all-gather). */
    for (int b = 0; b < nb; b++) {
        int si = modn(r->pos - b, n), ri = modn(r->pos - b - 1, n);
        size_t s0 = count * (size_t)si / (size_t)n, s1 = count * (size_t)(si + 1) / (size_t)n;
        size_t r0 = count * (size_t)ri / (size_t)n, r1 = count * (size_t)(ri + 1) / (size_t)n;
        snd[b] = (ring_blk){(uint8_t *)(buf + s0), (s1 - s0) * sizeof(float), 0};
        rcv[b] = (ring_blk){(uint8_t *)(buf + r0), (r1 - r0) * sizeof(float), b < n - 1};
    }
    rc = xfer(r, snd, nb, rcv, nb, 1, k);
out:
    free(snd);
    free(rcv);
    return rc;
}

int comm_ring_broadcast(comm_ring *r, void *buf, size_t bytes, int root_pos, comm_call *k) {
    if (r->n < 2 || bytes == 0) return 0;
    ring_blk b = {buf, bytes, 0};
    int last = modn(r->pos + 1, r->n) == root_pos; /* the next member is the root */
    if (r->pos == root_pos) return xfer(r, &b, 1, NULL, 0, 0, k);
    return xfer(r, &b, last ? 0 : 1, &b, 1, 0, k);
}

int comm_ring_allgatherv(comm_ring *r, void *buf, const size_t *offs, const size_t *lens,
                         comm_call *k) {
    int n = r->n, nb = n - 1;
    if (n < 2) return 0;
    ring_blk *snd = calloc((size_t)nb, sizeof *snd), *rcv = calloc((size_t)nb, sizeof *rcv);
    int rc = (snd && rcv) ? 0 : comm_call_fail(k, -ENOMEM, "%s: out of memory", k->op);
    for (int b = 0; !rc && b < nb; b++) {
        int si = modn(r->pos - b, n), ri = modn(r->pos - b - 1, n);
        snd[b] = (ring_blk){(uint8_t *)buf + offs[si], lens[si], 0};
        rcv[b] = (ring_blk){(uint8_t *)buf + offs[ri], lens[ri], 0};
    }
    if (!rc) rc = xfer(r, snd, nb, rcv, nb, 1, k);
    free(snd);
    free(rcv);
    return rc;
}

int comm_ring_barrier(comm_ring *r, comm_call *k) {
    /* Everyone has arrived once everyone has heard from everyone: an
     * all-gather of one byte each. */
    int n = r->n;
    if (n < 2) return 0;
    uint8_t *b = calloc((size_t)n, 1);
    size_t *offs = calloc((size_t)n, sizeof *offs), *lens = calloc((size_t)n, sizeof *lens);
    int rc = (b && offs && lens) ? 0 : comm_call_fail(k, -ENOMEM, "%s: out of memory", k->op);
    for (int i = 0; !rc && i < n; i++) offs[i] = (size_t)i, lens[i] = 1;
    if (!rc) rc = comm_ring_allgatherv(r, b, offs, lens, k);
    free(b);
    free(offs);
    free(lens);
    return rc;
}

/* --- connecting ---------------------------------------------------------- */

int comm_ring_listen(int *fd_out, int *port_out, comm_call *k) {
    *fd_out = -1;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), zero = 0, size = RING_SOCKBUF;
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_addr = in6addr_any;
        len = sizeof *a6;
    } else {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        a4->sin_family = AF_INET;
        a4->sin_addr.s_addr = htonl(INADDR_ANY);
        len = sizeof *a4;
    }
    if (fd < 0) return comm_call_fail(k, -errno, "cannot make a socket: %s", strerror(errno));
    /* Accepted sockets inherit the buffer sizes, which must be set before
     * the connection's window is negotiated. */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        int err = errno;
        close(fd);
        return comm_call_fail(k, -err, "cannot listen for peers on a free port: %s",
                              strerror(err));
    }
    *port_out = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                               : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_out = fd;
    return 0;
}

/* Waits for fd to be ready for events, up to the call's deadline. */
static int wait_fd(int fd, short events, comm_call *k) {
    for (;;) {
        int rc = comm_call_check(k);
        if (rc) return rc;
        struct pollfd p = {fd, events, 0};
        int64_t left_ms = (comm_call_left_ns(k) + 999999) / 1000000;
        int n = poll(&p, 1, left_ms < RING_POLL_MS ? (int)left_ms : RING_POLL_MS);
        if (n > 0) return 0;
        if (n < 0 && errno != EINTR) return -errno;
    }
}

static int io_full(int fd, void *p, size_t n, int out, comm_call *k) {
    size_t done = 0;
    while (done < n) {
        ssize_t m = out ? send(fd, (uint8_t *)p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, (uint8_t *)p + done, n - done, MSG_DONTWAIT);
        if (m > 0) {
            done += (size_t)m;
        } else if (m == 0) {
            return -ECONNRESET;
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, out ? POLLOUT : POLLIN, k);
            if (rc) return rc;
        } else if (errno != EINTR) {
            return -errno;
        }
    }
    return 0;
}

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int parse_addr(const char *addr, char *host, size_t hostlen, char *port) {
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || strlen(colon + 1) > 5) return -EINVAL;
    const char *h = addr;
    size_t hl = (size_t)(colon - addr);
    if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') h++, hl -= 2;
    if (hl >= hostlen) return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    strcpy(port, colon + 1);
    return 0;
}

/* One non-blocking connect to a resolved address, up to the deadline. */
static int connect_one(const struct addrinfo *ai, int *out, comm_call *k) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    tune_socket(fd);
    int rc = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        rc = errno == EINPROGRESS ? 0 : -errno;
        if (!rc) rc = wait_fd(fd, POLLOUT, k);
        int err = 0;
        socklen_t len = sizeof err;
        if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err) rc = -err;
    }
    if (rc) {
        close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

static int connect_next(comm_ring *r, const char *next_addr, int my_rank, uint64_t job,
                        comm_call *k) {
    char host[256], port[8];
    if (parse_addr(next_addr, host, sizeof host, port) != 0)
        return comm_call_fail(k, -EPROTO, "rank %d published a bad address '%s'", r->next_rank,
                              next_addr);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV}, *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return comm_call_fail(k, -EHOSTUNREACH, "cannot resolve rank %d's address %s: %s",
                              r->next_rank, next_addr, gai_strerror(gai));
    int rc = -ECONNREFUSED;
    /* The peer listens before it publishes its address, so a refusal is
     * unexpected; still, retry until the deadline rather than fail on one. */
    while (rc && !comm_call_check(k)) {
        for (struct addrinfo *ai = res; ai && rc; ai = ai->ai_next)
            rc = connect_one(ai, &r->send_fd, k);
        if (rc == -ETIMEDOUT || rc == -ECANCELED) break;
        if (rc) usleep(20000);
    }
    freeaddrinfo(res);
    if (rc)
        return comm_call_fail(k, rc, "cannot connect to rank %d at %s: %s", r->next_rank,
                              next_addr, strerror(-rc == ETIMEDOUT ? ECONNREFUSED : -rc));
    uint8_t hello[16];
    put32(hello, RING_MAGIC);
    put32(hello + 4, (uint32_t)my_rank);
    put32(hello + 8, (uint32_t)job);
    put32(hello + 12, (uint32_t)(job >> 32));
    rc = io_full(r->send_fd, hello, sizeof hello, 1, k);
    if (rc)
        return comm_call_fail(k, rc, "cannot greet rank %d at %s: %s", r->next_rank, next_addr,
                              strerror(-rc));
    return 0;
}

/* Accepts connections until the previous member's arrives; others (port
 * scanners, a previous attempt's stragglers) are dropped. */
static int accept_prev(comm_ring *r, int listen_fd, uint64_t job, comm_call *k) {
    for (;;) {
        int rc = wait_fd(listen_fd, POLLIN, k);
        if (rc)
            return comm_call_fail(k, rc, "rank %d (previous in the ring) did not connect: %s",
                                  r->prev_rank, strerror(-rc));
        int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        tune_socket(fd);
        /* A stranger gets a second to greet, not the whole deadline. */
        comm_call greet = *k;
        if (greet.deadline_ns > clock_now_ns() + 1000000000)
            greet.deadline_ns = clock_now_ns() + 1000000000;
        uint8_t hello[16];
        rc = io_full(fd, hello, sizeof hello, 0, &greet);
        if (rc == 0 && get_le(hello, 4) == RING_MAGIC && get_le(hello + 8, 8) == job &&
            (int)get_le(hello + 4, 4) == r->prev_rank) {
            r->recv_fd = fd;
            return 0;
        }
        close(fd);
        if (rc == -ECANCELED || (rc = comm_call_check(k)))
            return comm_call_fail(k, rc, "rank %d (previous in the ring) did not connect: %s",
                                  r->prev_rank, strerror(-rc));
    }
}

int comm_ring_connect(comm_ring *r, int listen_fd, const char *next_addr, int my_rank,
                      uint64_t job, comm_call *k) {
    /* Connecting first cannot deadlock: the kernel completes a connection
     * before it is accepted. */
    int rc = connect_next(r, next_addr, my_rank, job, k);
    if (!rc) rc = accept_prev(r, listen_fd, job, k);
    return rc;
}
