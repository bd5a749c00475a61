/* bootstrap-sim: R simulated ranks doing, against a store, the requests
 * that torch.distributed.init_process_group makes under torchrun, as fast
 * as one machine can issue them; used by bench/bootstrap_bench.sh to time
 * the bootstrap of up to 100,000 ranks against ddprun-store (directly or
 * through per-node proxies) and against PyTorch's own TCPStore server.
 *
 * Each rank is one nonblocking TCP connection driven by an epoll state
 * machine (no thread or process per rank); --procs P forks P processes
 * that share the ranks, because one process may hold only so many
 * descriptors. Requests are built with proto/store_proto.h's encoders;
 * replies are parsed by hand, as docs/protocol.md describes them.
 *
 * ---------------------------------------------------------------------------
 * What one rank sends (torch 2.15.0+cu132, build/torch2-venv; observed with
 * a logging relay between 3 gloo ranks and ddprun-store, and read from the
 * sources named below). Environment as torchrun sets it:
 * TORCHELASTIC_USE_AGENT_STORE=True, MASTER_ADDR/MASTER_PORT = the agent's
 * store, RANK, WORLD_SIZE, LOCAL_RANK; init_method="env://".
 *
 *  1. Connect. torch/distributed/rendezvous.py, _env_rendezvous_handler ->
 *     _create_c10d_store: _agent_store_serves() is true, so every rank
 *     (rank 0 too) is a client: TCPStore(host, port, world_size,
 *     is_master=False, timeout) with wait_for_workers=True (the default).
 *  2. Handshake (TCPStore client, C++): VALIDATE 0x3C85F7CE (no reply) and
 *     PING <u32 nonce>, sent back to back; the server echoes the u32. One
 *     connection per rank; nothing else is opened.
 *  3. ADD "init/" 1 -> i64 (TCPStore::waitForWorkers, because world_size
 *     was given). Note: this key has no "/" prefix; every key the client
 *     sends for the user (through PrefixStore) starts with "/".
 *  4. init_process_group wraps the store in PrefixStore("default_pg")
 *     (distributed_c10d.py line 2719) and _new_process_group_helper in
 *     PrefixStore("0/") (the group name, line 3029) and PrefixStore("cuda/")
 *     for the NCCL backend (line 3059): user key K goes out as
 *     "/default_pg/0//cuda//K".
 *  5. No store-based barrier: _is_barrier_after_init() reads
 *     TORCH_DIST_INIT_BARRIER, default "0" (line 2140); destroy_process_group
 *     sends nothing. (gloo, not simulated, then exchanges addresses all to
 *     all: rank r SETs "/default_pg/0//cpu//0/<r>" (178 bytes) and, for
 *     every rank q, sends WAIT [key q], WAIT [key q], GET key q: 3N requests
 *     per rank, 3N^2 in all.)
 *  6. The NCCL unique-id exchange, at the communicator's creation (the first
 *     collective, or in init_process_group when device_id is given). In
 *     torch 2.15 backend="nccl" is the torchcomms-based "nccl2" engine
 *     unless TORCH_DIST_USE_NCCL2=0 (distributed_c10d.py lines 961-966,
 *     _register_builtin_nccl_backend). nccl2's NCCLBootstrap
 *     (torch/csrc/distributed/c10d/nccl2/NCCLBootstrap.cpp, createNcclComm
 *     and exchangeUniqueIds; the strings in libtorch_cuda.so match) uses
 *     PrefixStore(name_) and key "nccl_storekey_<generation, 0 first>",
 *     name_ being the group name "0" (nccl2/ProcessGroupNCCLBackend.cpp,
 *     the constructor; set from distributed_c10d.py's group_id):
 *       rank 0:  SET  "/default_pg/0//cuda//0/nccl_storekey_0" <128 bytes>
 *       every rank (rank 0 too): store->wait({key}) and store->multiGet({key}),
 *       and TCPStore::multiGet waits itself, so on the wire:
 *                WAIT [key] -> 00;  WAIT [key] -> 00;  MULTI_GET [key] -> 1 vector
 *     (--nccl legacy: the older ProcessGroupNCCL, TORCH_DIST_USE_NCCL2=0,
 *     broadcastUniqueNCCLID: rank 0 SETs "/default_pg/0//cuda//0", the
 *     others get it, which TCPStore sends as WAIT [key] then GET key.)
 *     WORLD SIZES ABOVE 128: both engines then use ncclCommInitRankScalable
 *     with ceil(N / TORCH_NCCL_RANKS_PER_ROOT) roots (default 128 ranks per
 *     root): each root (NCCL's root election, root_index() below) SETs its
 *     own key ("..._<i>" for nccl2, "UniqueNCCLID:<i>" for legacy) and every
 *     rank WAITs for and MULTI_GETs all of them: at 100,000 ranks, 782 keys
 *     in each rank's WAIT and MULTI_GET and 782 x 128 bytes in its reply.
 *     --ranks-per-root 128 simulates that; the default (0) keeps one root,
 *     the classic "rank 0 sets, the others wait and get".
 *  7. --barrier adds _store_based_barrier (TORCH_DIST_INIT_BARRIER=1, line
 *     1743): ADD "/default_pg/store_based_barrier_key:0" 1, ADD ... 0; the
 *     rank that reads the world size SETs "...:last_worker" "1"; every rank
 *     WAITs [...:last_worker].
 * A rank's connection stays open once it is done, as a worker's does, until
 * every rank is done.
 * ---------------------------------------------------------------------------
 *
 * Timing: like a real job, the unique id is set only once every rank has
 * started connecting (so that nearly all of them wait for it, and its SET
 * wakes them all at once). "seconds" runs from the start of the run until
 * the last rank has finished its sequence; connect_* is from the start
 * until a rank's handshake was answered, done_* until it finished.
 * Prints one line on stdout; exits 0 only if every rank finished. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/fdlimit.h"
#include "common/opts.h"
#include "proto/store_proto.h"

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define UID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */
#define MAX_ERRORS_SHOWN 5

enum { NCCL_NCCL2 = 0, NCCL_LEGACY = 1 };

typedef struct {
    int ranks, nodes, procs, nccl, ranks_per_root, barrier, src_per_node, src_port_base;
    int connect_window; /* per process; 0: no limit */
    double timeout_s;
    const char *endpoints;
    const char *prefix;
} sim_opts;

/* --- Program steps ------------------------------------------------------ */
enum {
    P_HS,        /* VALIDATE + PING -> u32 */
    P_INIT_ADD,  /* ADD "init/" 1 -> i64 */
    P_GATE,      /* a root: wait until every rank has started connecting */
    P_SET_UID,   /* a root: SET its key (no reply) */
    P_WAIT_UID,  /* WAIT [the uid keys] -> u8 */
    P_GET_UID,   /* GET key -> vector (legacy, one root) */
    P_MGET_UID,  /* MULTI_GET [the uid keys] -> vectors */
    P_BAR_ADD,   /* ADD barrier 1 -> i64 */
    P_BAR_COUNT, /* ADD barrier 0 -> i64; the last one SETs last_worker */
    P_BAR_WAIT,  /* WAIT [last_worker] -> u8 */
    P_DONE,
    P_COUNT_
};
static const char *const step_names[P_COUNT_] = {
    "handshake", "ADD init/", "gate", "SET uid", "WAIT uid", "GET uid", "MULTI_GET uid",
    "barrier ADD", "barrier count", "barrier WAIT", "done"};

enum { RP_NONE, RP_U32, RP_I64, RP_U8, RP_VECS };
enum { ST_ACTIVE, ST_DONE, ST_FAILED };

/* State of one rank: kept small, 100,000 of them live at once. */
typedef struct {
    int fd;            /* -1 when not connected */
    uint8_t pc;        /* index into the rank's program */
    uint8_t reply;     /* RP_* being parsed */
    uint8_t hdr_have;  /* bytes of hdr filled */
    uint8_t connected; /* the TCP connect completed */
    uint8_t status;    /* ST_* */
    uint8_t hdr[8];
    uint32_t items_left; /* RP_VECS: vectors still to come */
    uint64_t body_left;  /* RP_VECS: bytes of the current vector still to come */
    int root_idx;        /* the uid key this rank sets, or -1 */
    uint32_t nonce;
    buf_t out; /* request bytes the socket did not take yet */
} rank_t;

/* Shared by all processes (MAP_SHARED, set up before fork). */
typedef struct {
    atomic_int_fast64_t started;  /* ranks whose first connect was issued */
    atomic_int_fast64_t finished; /* ranks done or failed */
    int64_t t0_ns;
    /* Then, per rank: int64 t_hs[R], int64 t_done[R], int32 attempts[R]. */
} shared_t;

typedef struct {
    struct sockaddr_storage addr;
    socklen_t len;
    int loopback4; /* 127/8: ranks bind a per-node source address */
    char name[64];
} endpoint_t;

/* One process's view. */
typedef struct {
    const sim_opts *o;
    shared_t *sh;
    int64_t *t_hs, *t_done;
    int32_t *attempts;
    endpoint_t *eps;
    int neps;
    int lo, hi; /* ranks [lo, hi) */
    rank_t *r;
    int ep; /* epoll */
    int next_new;     /* next rank (local index) never connected yet */
    int connecting;   /* connects in flight */
    int remaining;    /* ranks not done */
    int gated;        /* roots waiting at the gate */
    int errors;
    int last_connect_err; /* errno of the latest failed connect, for the summary */
    int nkeys;        /* uid keys */
    int rpn;          /* ranks per node */
    /* Prebuilt requests, the same bytes for every rank. */
    buf_t req_init_add, req_wait_uid, req_get_uid, req_mget_uid;
    buf_t req_bar_add, req_bar_count, req_bar_set, req_bar_wait;
    char **uid_keys;
    char uid_value[UID_BYTES];
    /* Retries: a min-heap on due time. */
    struct retry { int64_t due; int idx; } *heap;
    int nheap;
    const uint8_t *prog_root, *prog_other;
} proc_t;

/* --- Small helpers ------------------------------------------------------ */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("bootstrap-sim: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static void rank_error(proc_t *p, int idx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void rank_error(proc_t *p, int idx, const char *fmt, ...) {
    if (p->errors++ >= MAX_ERRORS_SHOWN) return;
    int rank = p->lo + idx;
    int node = rank / p->rpn < p->o->nodes ? rank / p->rpn : p->o->nodes - 1;
    const rank_t *r = &p->r[idx];
    const uint8_t *prog = r->root_idx >= 0 ? p->prog_root : p->prog_other;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "bootstrap-sim: rank %d (node %d, %s) at '%s': %s\n", rank, node,
            p->eps[node % p->neps].name, step_names[prog[r->pc]], msg);
}

/* NCCL's root election for ncclCommInitRankScalable (the one PyTorch's
 * getRootIndex copies): the ranks split into nids near-equal consecutive
 * blocks, the first rank of each block is its root. Returns the block's
 * index for a root, -1 for any other rank. */
static int root_index(int rank, int nranks, int nids) {
    int rmr = nranks % nids, rpr = nranks / nids, rlim = rmr * (rpr + 1);
    if (rank < rlim) return (rank % (rpr + 1)) ? -1 : rank / (rpr + 1);
    return ((rank - rlim) % rpr) ? -1 : (rank - rlim) / rpr + rmr;
}

static void enc_check(int rc) {
    if (rc < 0) die("out of memory");
}

/* A list-of-keys request (WAIT, MULTI_GET). */
static void build_keys_req(buf_t *b, store_op op, char **keys, int n) {
    enc_check(store_enc_op(b, STORE_GEN_V2, op));
    enc_check(store_enc_u64(b, (uint64_t)n));
    for (int i = 0; i < n; i++) enc_check(store_enc_bytes(b, keys[i], strlen(keys[i])));
}

static void build_add(buf_t *b, const char *key, int64_t delta) {
    enc_check(store_enc_op(b, STORE_GEN_V2, STORE_OP_ADD));
    enc_check(store_enc_bytes(b, key, strlen(key)));
    enc_check(store_enc_i64(b, delta));
}

static void build_set(buf_t *b, const char *key, const void *v, size_t n) {
    enc_check(store_enc_op(b, STORE_GEN_V2, STORE_OP_SET));
    enc_check(store_enc_bytes(b, key, strlen(key)));
    enc_check(store_enc_bytes(b, v, n));
}

/* "/<prefix>/rest" or "/rest" (the PrefixStore keys) */
static char *user_key(const sim_opts *o, const char *rest) {
    char *k = NULL;
    int n = o->prefix && *o->prefix ? asprintf(&k, "/%s/%s", o->prefix, rest)
                                    : asprintf(&k, "/%s", rest);
    if (n < 0) die("out of memory");
    return k;
}

/* --- Retry heap --------------------------------------------------------- */

static void heap_push(proc_t *p, int64_t due, int idx) {
    int i = p->nheap++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (p->heap[up].due <= due) break;
        p->heap[i] = p->heap[up];
        i = up;
    }
    p->heap[i].due = due;
    p->heap[i].idx = idx;
}

static struct retry heap_pop(proc_t *p) {
    struct retry top = p->heap[0], last = p->heap[--p->nheap];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= p->nheap) break;
        if (c + 1 < p->nheap && p->heap[c + 1].due < p->heap[c].due) c++;
        if (last.due <= p->heap[c].due) break;
        p->heap[i] = p->heap[c];
        i = c;
    }
    if (p->nheap > 0) p->heap[i] = last;
    return top;
}

/* --- Connections -------------------------------------------------------- */

static void close_rank(proc_t *p, rank_t *r) {
    if (r->fd >= 0) {
        close(r->fd); /* also removes it from the epoll set */
        if (!r->connected) p->connecting--;
        r->fd = -1;
    }
    r->connected = 0;
    buf_free(&r->out);
    r->reply = RP_NONE;
    r->hdr_have = 0;
}

static void fail_rank(proc_t *p, int idx) {
    rank_t *r = &p->r[idx];
    close_rank(p, r);
    r->status = ST_FAILED;
    p->remaining--;
    atomic_fetch_add(&p->sh->finished, 1);
}

/* Closes the attempt and schedules another one after a backoff: 10 ms
 * doubling to 1 s, with jitter so that retries do not come in waves. */
static void retry_later(proc_t *p, int idx) {
    rank_t *r = &p->r[idx];
    close_rank(p, r);
    r->pc = 0; /* the handshake, again */
    int a = p->attempts[p->lo + idx];
    int64_t ms = 10LL << (a < 7 ? a : 7);
    if (ms > 1000) ms = 1000;
    ms = ms / 2 + rand() % (ms / 2 + 1);
    heap_push(p, clock_now_ns() + ms * 1000000, idx);
}

static void start_connect(proc_t *p, int idx) {
    rank_t *r = &p->r[idx];
    int rank = p->lo + idx;
    int node = rank / p->rpn < p->o->nodes ? rank / p->rpn : p->o->nodes - 1;
    const endpoint_t *e = &p->eps[node % p->neps];
    p->attempts[rank]++;
    int fd = socket(e->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rank_error(p, idx, "socket: %s", strerror(errno));
        fail_rank(p, idx);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (e->loopback4 && p->o->src_per_node) {
        /* Each simulated node gets its own source address in 127/8, so
         * that 100,000 connections to one port do not run out of the
         * ~28,000 ephemeral ports of a single source address. */
        unsigned h = (unsigned)node / 254 * 256 + (unsigned)node % 254 + 1;
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl((127u << 24) | ((10u + (h >> 16)) << 16) | (h & 0xffffu));
        setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
        if (bind(fd, (struct sockaddr *)&src, sizeof src) < 0) {
            rank_error(p, idx, "bind to a 127/8 source address: %s", strerror(errno));
            close(fd);
            fail_rank(p, idx);
            return;
        }
    }
    else if (e->loopback4 && p->o->src_port_base) {
        /* Ports chosen here rather than by the kernel: 127.0.0.1:BASE+rank
         * (then +R, +2R... if taken). */
        struct sockaddr_in src = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int bound = 0;
        for (long port = p->o->src_port_base + rank; port < 65536 && !bound; port += p->o->ranks) {
            src.sin_port = htons((uint16_t)port);
            bound = bind(fd, (struct sockaddr *)&src, sizeof src) == 0;
        }
        if (!bound) {
            rank_error(p, idx, "no free source port from %d", p->o->src_port_base + rank);
            close(fd);
            fail_rank(p, idx);
            return;
        }
    }
    r->fd = fd;
    r->connected = 0;
    p->connecting++;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
                             .data.u64 = (uint64_t)idx};
    if (epoll_ctl(p->ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&e->addr, e->len) < 0 && errno != EINPROGRESS) {
        int err = errno;
        if (err == ECONNREFUSED || err == EAGAIN || err == ETIMEDOUT || err == EADDRNOTAVAIL ||
            err == ECONNRESET || err == EINTR) {
            p->last_connect_err = err;
            retry_later(p, idx);
            return;
        }
        rank_error(p, idx, "connect to %s: %s", e->name, strerror(err));
        fail_rank(p, idx);
    }
}

/* Queues or sends request bytes. 0, or -1 if the connection broke. */
static int send_bytes(proc_t *p, int idx, const void *data, size_t n) {
    rank_t *r = &p->r[idx];
    if (r->out.len > 0) {
        enc_check(buf_append(&r->out, data, n));
        return 0;
    }
    ssize_t w = send(r->fd, data, n, MSG_NOSIGNAL);
    if (w < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        w = 0;
    }
    if ((size_t)w < n) enc_check(buf_append(&r->out, (const uint8_t *)data + w, n - (size_t)w));
    return 0;
}

static int flush_out(proc_t *p, int idx) {
    rank_t *r = &p->r[idx];
    while (r->out.len > 0) {
        ssize_t w = send(r->fd, r->out.data, r->out.len, MSG_NOSIGNAL);
        if (w < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        buf_consume(&r->out, (size_t)w);
    }
    buf_free(&r->out);
    return 0;
}

/* --- The program -------------------------------------------------------- */

static int all_started(proc_t *p) {
    return atomic_load(&p->sh->started) >= p->o->ranks;
}

/* Runs the rank's program from its pc until it must wait for a reply (or
 * for the gate). 0, or -1 if a send failed. */
static int advance(proc_t *p, int idx) {
    rank_t *r = &p->r[idx];
    int rank = p->lo + idx;
    const uint8_t *prog = r->root_idx >= 0 ? p->prog_root : p->prog_other;
    for (;;) {
        uint8_t step = prog[r->pc];
        buf_t tmp = BUF_INIT;
        int rc = 0;
        switch (step) {
        case P_HS:
            enc_check(store_enc_op(&tmp, STORE_GEN_V2, STORE_OP_VALIDATE));
            enc_check(store_enc_u32(&tmp, STORE_VALIDATE_MAGIC));
            enc_check(store_enc_op(&tmp, STORE_GEN_V2, STORE_OP_PING));
            enc_check(store_enc_u32(&tmp, r->nonce));
            rc = send_bytes(p, idx, tmp.data, tmp.len);
            buf_free(&tmp);
            r->reply = RP_U32;
            return rc;
        case P_INIT_ADD:
            r->reply = RP_I64;
            return send_bytes(p, idx, p->req_init_add.data, p->req_init_add.len);
        case P_GATE:
            if (!all_started(p)) {
                p->gated++;
                r->reply = RP_NONE;
                return 0; /* the loop releases it */
            }
            r->pc++;
            continue;
        case P_SET_UID:
            build_set(&tmp, p->uid_keys[r->root_idx], p->uid_value, UID_BYTES);
            rc = send_bytes(p, idx, tmp.data, tmp.len);
            buf_free(&tmp);
            if (rc) return rc;
            r->pc++;
            continue;
        case P_WAIT_UID:
            r->reply = RP_U8;
            return send_bytes(p, idx, p->req_wait_uid.data, p->req_wait_uid.len);
        case P_GET_UID:
            r->reply = RP_VECS;
            r->items_left = 1;
            return send_bytes(p, idx, p->req_get_uid.data, p->req_get_uid.len);
        case P_MGET_UID:
            r->reply = RP_VECS;
            r->items_left = (uint32_t)p->nkeys;
            return send_bytes(p, idx, p->req_mget_uid.data, p->req_mget_uid.len);
        case P_BAR_ADD:
            r->reply = RP_I64;
            return send_bytes(p, idx, p->req_bar_add.data, p->req_bar_add.len);
        case P_BAR_COUNT:
            r->reply = RP_I64;
            return send_bytes(p, idx, p->req_bar_count.data, p->req_bar_count.len);
        case P_BAR_WAIT:
            r->reply = RP_U8;
            return send_bytes(p, idx, p->req_bar_wait.data, p->req_bar_wait.len);
        case P_DONE:
            r->reply = RP_NONE;
            p->t_done[rank] = clock_now_ns() - p->sh->t0_ns;
            p->remaining--;
            atomic_fetch_add(&p->sh->finished, 1);
            r->status = ST_DONE; /* stays connected, as a worker's store does */
            return 0;
        default:
            return -1;
        }
    }
}

/* A reply was completed: check it and move on. 0, or -1 on a bad reply. */
static int on_reply(proc_t *p, int idx) {
    rank_t *r = &p->r[idx];
    const uint8_t *prog = r->root_idx >= 0 ? p->prog_root : p->prog_other;
    uint8_t step = prog[r->pc];
    int rank = p->lo + idx;
    r->reply = RP_NONE;
    r->hdr_have = 0;
    switch (step) {
    case P_HS:
        if (store_load_u32(r->hdr) != r->nonce) {
            rank_error(p, idx, "PING echoed %08x, sent %08x", store_load_u32(r->hdr), r->nonce);
            return -1;
        }
        p->t_hs[rank] = clock_now_ns() - p->sh->t0_ns;
        break;
    case P_WAIT_UID:
    case P_BAR_WAIT:
        if (r->hdr[0] != STORE_WAIT_STOP_WAITING) {
            rank_error(p, idx, "WAIT answered %u", r->hdr[0]);
            return -1;
        }
        break;
    case P_BAR_COUNT:
        if ((int64_t)store_load_u64(r->hdr) == p->o->ranks &&
            send_bytes(p, idx, p->req_bar_set.data, p->req_bar_set.len) < 0)
            return -1;
        break;
    default:
        break;
    }
    r->pc++;
    return advance(p, idx);
}

/* Feeds received bytes to the rank's reply parser. 0, or -1. */
static int feed(proc_t *p, int idx, const uint8_t *d, size_t n) {
    rank_t *r = &p->r[idx];
    while (n > 0) {
        size_t want;
        switch (r->reply) {
        case RP_U32: want = 4; break;
        case RP_I64: want = 8; break;
        case RP_U8: want = 1; break;
        case RP_VECS:
            if (r->body_left > 0) {
                size_t k = r->body_left < n ? (size_t)r->body_left : n;
                r->body_left -= k;
                d += k;
                n -= k;
                if (r->body_left == 0 && --r->items_left == 0 && on_reply(p, idx) < 0) return -1;
                continue;
            }
            want = 8;
            break;
        default:
            rank_error(p, idx, "%zu unexpected bytes from the server", n);
            return -1;
        }
        size_t k = want - r->hdr_have < n ? want - r->hdr_have : n;
        memcpy(r->hdr + r->hdr_have, d, k);
        r->hdr_have = (uint8_t)(r->hdr_have + k);
        d += k;
        n -= k;
        if (r->hdr_have < want) break;
        if (r->reply == RP_VECS) {
            uint64_t len = store_load_u64(r->hdr);
            r->hdr_have = 0;
            if (len != UID_BYTES) {
                rank_error(p, idx, "a unique id of %" PRIu64 " bytes (expected %d)", len,
                           UID_BYTES);
                return -1;
            }
            r->body_left = len;
            continue;
        }
        if (on_reply(p, idx) < 0) return -1;
    }
    return 0;
}

static void on_event(proc_t *p, int idx, uint32_t events, uint8_t *scratch, size_t scratch_len) {
    rank_t *r = &p->r[idx];
    if (r->fd < 0) return;
    if (!r->connected) {
        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err != 0) {
            p->last_connect_err = err;
            retry_later(p, idx); /* refused, timed out, reset: the backlog was full */
            return;
        }
        r->connected = 1;
        p->connecting--;
        if (advance(p, idx) < 0) retry_later(p, idx);
        return;
    }
    if ((events & EPOLLOUT) && r->out.len > 0 && flush_out(p, idx) < 0) goto broken;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
        for (;;) {
            ssize_t got = recv(r->fd, scratch, scratch_len, 0);
            if (got > 0) {
                if (feed(p, idx, scratch, (size_t)got) < 0) {
                    fail_rank(p, idx);
                    return;
                }
                if (r->fd < 0) return;
                continue;
            }
            if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (got < 0 && errno == EINTR) continue;
            goto broken;
        }
    }
    return;
broken:
    if (r->status == ST_DONE) { /* the server went away after we finished */
        close_rank(p, r);
        return;
    }
    /* Accepted, then dropped before the handshake was answered (a server
     * out of descriptors does that): retry like a refused connect. */
    if ((r->root_idx >= 0 ? p->prog_root : p->prog_other)[r->pc] == P_HS) {
        p->last_connect_err = ECONNRESET;
        retry_later(p, idx);
        return;
    }
    rank_error(p, idx, "the server closed the connection");
    fail_rank(p, idx);
}

/* --- One process -------------------------------------------------------- */

static int run_proc(proc_t *p) {
    const sim_opts *o = p->o;
    int n = p->hi - p->lo;
    p->r = calloc((size_t)n, sizeof *p->r);
    p->heap = calloc((size_t)n + 1, sizeof *p->heap);
    if (!p->r || !p->heap) die("out of memory");
    srand((unsigned)getpid());
    for (int i = 0; i < n; i++) {
        int rank = p->lo + i;
        p->r[i].fd = -1;
        p->r[i].nonce = (uint32_t)rank * 2654435761u ^ 0x5eedu;
        p->r[i].root_idx =
            p->nkeys == 1 ? (rank == 0 ? 0 : -1) : root_index(rank, o->ranks, p->nkeys);
    }
    p->remaining = n;
    p->ep = epoll_create1(EPOLL_CLOEXEC);
    if (p->ep < 0) die("epoll_create1: %s", strerror(errno));
    enum { MAXEV = 1024, BATCH = 64 };
    struct epoll_event evs[MAXEV];
    static uint8_t scratch[1 << 17];
    int64_t deadline = p->sh->t0_ns + (int64_t)(o->timeout_s * 1e9);
    int64_t started_here = 0;
    while (p->remaining > 0) {
        int64_t now = clock_now_ns();
        if (now >= deadline) break;
        /* New connects, a batch at a time, so that replies to earlier ones
         * are read while the rest are still being issued. */
        int issued = 0;
        while (p->next_new < n && issued < BATCH &&
               (o->connect_window == 0 || p->connecting < o->connect_window)) {
            start_connect(p, p->next_new++);
            issued++;
        }
        if (issued) {
            atomic_fetch_add(&p->sh->started, issued);
            started_here += issued;
        }
        /* Due retries. */
        while (p->nheap > 0 && p->heap[0].due <= now &&
               (o->connect_window == 0 || p->connecting < o->connect_window)) {
            struct retry t = heap_pop(p);
            start_connect(p, t.idx);
        }
        /* Roots at the gate. */
        if (p->gated > 0 && all_started(p)) {
            p->gated = 0;
            for (int i = 0; i < n; i++) {
                rank_t *r = &p->r[i];
                const uint8_t *prog = r->root_idx >= 0 ? p->prog_root : p->prog_other;
                if (r->status == ST_ACTIVE && r->fd >= 0 && r->connected && prog[r->pc] == P_GATE &&
                    advance(p, i) < 0) {
                    rank_error(p, i, "send failed");
                    fail_rank(p, i);
                }
            }
        }
        int wait_ms = 100;
        if (p->next_new < n) wait_ms = 0;
        else if (p->gated > 0) wait_ms = 1;
        if (p->nheap > 0) {
            int64_t d = (p->heap[0].due - now) / 1000000;
            if (d < wait_ms) wait_ms = d < 0 ? 0 : (int)d;
        }
        int k = epoll_wait(p->ep, evs, MAXEV, wait_ms);
        if (k < 0 && errno != EINTR) die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < k; i++)
            on_event(p, (int)evs[i].data.u64, evs[i].events, scratch, sizeof scratch);
    }
    /* A worker keeps its store connection for the whole job: hold ours
     * until every rank of every process is through (or the time is up), so
     * that a server never gets descriptors back from ranks that are done. */
    while (p->remaining == 0 && atomic_load(&p->sh->finished) < o->ranks &&
           clock_now_ns() < deadline) {
        int k = epoll_wait(p->ep, evs, MAXEV, 20);
        for (int i = 0; i < k; i++)
            on_event(p, (int)evs[i].data.u64, evs[i].events, scratch, sizeof scratch);
    }
    if (p->remaining > 0) {
        /* Where the unfinished ranks stood. */
        int at[P_COUNT_ + 2] = {0}, unstarted = n - p->next_new;
        for (int i = 0; i < p->next_new; i++) {
            const rank_t *r = &p->r[i];
            const uint8_t *prog = r->root_idx >= 0 ? p->prog_root : p->prog_other;
            if (r->status != ST_ACTIVE) {
                if (r->status == ST_FAILED) at[P_COUNT_]++;
                continue;
            }
            if (prog[r->pc] == P_HS && !r->connected) at[P_COUNT_ + 1]++;
            else at[prog[r->pc]]++;
        }
        fprintf(stderr, "bootstrap-sim: process %d (ranks %d-%d): %d ranks unfinished:", getpid(),
                p->lo, p->hi - 1, p->remaining);
        if (at[P_COUNT_ + 1])
            fprintf(stderr, " %d connecting (the last failed connect: %s);", at[P_COUNT_ + 1],
                    p->last_connect_err ? strerror(p->last_connect_err) : "none");
        for (int s = 0; s < P_COUNT_; s++)
            if (at[s]) fprintf(stderr, " %d at '%s';", at[s], step_names[s]);
        if (at[P_COUNT_]) fprintf(stderr, " %d failed;", at[P_COUNT_]);
        if (unstarted) fprintf(stderr, " %d never started;", unstarted);
        fputc('\n', stderr);
    }
    /* The connections close with the process. */
    return p->remaining > 0 ? 1 : 0;
}

/* --- Setup and report --------------------------------------------------- */

static int parse_endpoints(const char *list, endpoint_t **out) {
    char *copy = strdup(list);
    if (!copy) die("out of memory");
    int cap = 16, n = 0;
    endpoint_t *eps = calloc((size_t)cap, sizeof *eps);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *colon = strrchr(tok, ':');
        if (!colon || colon == tok || !colon[1]) die("endpoint '%s' is not HOST:PORT", tok);
        *colon = '\0';
        const char *host = tok;
        char hostbuf[64];
        if (host[0] == '[') { /* [v6]:port */
            snprintf(hostbuf, sizeof hostbuf, "%s", host + 1);
            char *e = strchr(hostbuf, ']');
            if (e) *e = '\0';
            host = hostbuf;
        }
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
        int rc = getaddrinfo(host, colon + 1, &hints, &ai);
        if (rc != 0 || !ai) die("endpoint %s:%s: %s", host, colon + 1, gai_strerror(rc));
        if (n == cap) {
            cap *= 2;
            eps = realloc(eps, (size_t)cap * sizeof *eps);
            if (!eps) die("out of memory");
        }
        endpoint_t *e = &eps[n++];
        memset(e, 0, sizeof *e);
        memcpy(&e->addr, ai->ai_addr, ai->ai_addrlen);
        e->len = ai->ai_addrlen;
        e->loopback4 = ai->ai_family == AF_INET &&
            (ntohl(((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr) >> 24) == 127;
        if (snprintf(e->name, sizeof e->name, "%s:%s", host, colon + 1) >= (int)sizeof e->name)
            die("endpoint %s:%s: the name is too long", host, colon + 1);
        freeaddrinfo(ai);
    }
    free(copy);
    *out = eps;
    return n;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Percentile (0..100) of the positive values, in ms; -1 if none. */
static double pct_ms(int64_t *sorted, int n, double q) {
    if (n == 0) return -1;
    int i = (int)(q / 100.0 * (n - 1) + 0.5);
    return (double)sorted[i] / 1e6;
}

static int collect(const int64_t *src, int n, int64_t *dst) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (src[i] > 0) dst[k++] = src[i];
    qsort(dst, (size_t)k, sizeof *dst, cmp_i64);
    return k;
}

static const char usage_head[] =
    "usage: bootstrap-sim --ranks R --nodes M --endpoints HOST:PORT[,HOST:PORT...] [options]\n"
    "\n"
    "Simulates R ranks (M nodes of R/M) doing the store requests of torch 2.x's\n"
    "init_process_group under torchrun and prints one line with the time it took.\n"
    "Node n's ranks connect to endpoint n % E.\n\n";

int main(int argc, char **argv) {
    sim_opts o = {.ranks = 0, .nodes = 0, .procs = 0, .nccl = NCCL_NCCL2, .timeout_s = 120,
                  .prefix = ""};
    static const opts_choice ncclc[] = {{"nccl2", NCCL_NCCL2}, {"legacy", NCCL_LEGACY}, {NULL, 0}};
    const opts_opt table[] = {
        {"ranks", 0, OPTS_INT, .target = &o.ranks, .lo = 1, .hi = 10000000, .metavar = "R",
         .help = "simulated ranks (WORLD_SIZE)"},
        {"nodes", 0, OPTS_INT, .target = &o.nodes, .lo = 1, .hi = 10000000, .metavar = "M",
         .help = "simulated nodes; rank r is on node r / (R/M) (default: R)"},
        {"endpoints", 0, OPTS_STR, .target = &o.endpoints, .metavar = "H:P,...",
         .help = "the store, or one endpoint per node (per-node proxies)"},
        {"procs", 0, OPTS_INT, .target = &o.procs, .lo = 1, .hi = 1024, .metavar = "P",
         .help = "processes driving the ranks (default: as few as the\n"
                 "descriptor limit allows)"},
        {"timeout", 0, OPTS_SECONDS, .target = &o.timeout_s, .positive = 1, .metavar = "S",
         .help = "give up after S seconds (default 120)"},
        {"prefix", 0, OPTS_STR, .target = &o.prefix, .metavar = "ID",
         .help = "a run id put in front of every key, so that repeated runs\n"
                 "on one store use fresh keys (default: none, torch's own keys)"},
        {"nccl", 0, OPTS_CHOICE, .target = &o.nccl, .choices = ncclc, .metavar = "nccl2|legacy",
         .help = "the unique-id exchange of torch 2.15's default NCCL engine\n"
                 "(nccl2: WAIT, WAIT, MULTI_GET) or of the older one (legacy:\n"
                 "WAIT, GET); default nccl2"},
        {"ranks-per-root", 0, OPTS_INT, .target = &o.ranks_per_root, .lo = 0, .hi = INT_MAX,
         .metavar = "K",
         .help = "TORCH_NCCL_RANKS_PER_ROOT: above K ranks, ceil(R/K) roots\n"
                 "each set an id and every rank gets them all (torch's\n"
                 "default is 128); 0 (the default): rank 0 alone sets it"},
        {"barrier", 0, OPTS_FLAG, .target = &o.barrier,
         .help = "add the store-based barrier (TORCH_DIST_INIT_BARRIER=1)"},
        {"connect-window", 0, OPTS_INT, .target = &o.connect_window, .lo = 0, .hi = INT_MAX,
         .metavar = "N", .help = "at most N connects in flight per process (default 0: no limit)"},
        {"src-per-node", 0, OPTS_FLAG, .target = &o.src_per_node,
         .help = "give each node its own source address in 127/8 (for more\n"
                 "than ~28,000 connections to one endpoint; note that torch's\n"
                 "server then does a reverse DNS lookup for each connection)"},
        {"src-port-base", 0, OPTS_INT, .target = &o.src_port_base, .lo = 0, .hi = 65535,
         .metavar = "N",
         .help = "bind rank r's connection to 127.0.0.1:N+r (to a 127/8 store;\n"
                 "ports below 32768 stay clear of the kernel's ephemeral ones)"},
        {"help", 'h', .type = OPTS_HELP, .help = "show this help"},
    };
    opts_spec spec = {.prog = "bootstrap-sim", .opts = table,
                      .nopts = sizeof table / sizeof table[0], .no_operands = 1};
    char err[512];
    int next;
    int rc = opts_parse(&spec, argc, argv, &next, err, sizeof err);
    if (rc == OPTS_HELP_GIVEN) {
        opts_print_help(&spec, usage_head, NULL, stdout);
        return 0;
    }
    if (rc == 0 && (!o.ranks || !o.endpoints)) {
        snprintf(err, sizeof err, "--ranks and --endpoints are required");
        rc = -EINVAL;
    }
    if (rc < 0) {
        fprintf(stderr, "bootstrap-sim: %s\n", err);
        return 2;
    }
    if (!o.nodes) o.nodes = o.ranks;
    if (o.nodes > o.ranks) die("--nodes (%d) is more than --ranks (%d)", o.nodes, o.ranks);
    signal(SIGPIPE, SIG_IGN);
    fdlimit_raise();
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    long fds = rl.rlim_cur == RLIM_INFINITY ? 1000000 : (long)rl.rlim_cur;
    long per_proc = fds - 64;
    if (!o.procs) o.procs = (int)((o.ranks + per_proc - 1) / per_proc);
    if (o.procs > o.ranks) o.procs = o.ranks;
    if ((o.ranks + o.procs - 1) / o.procs > per_proc)
        die("%d ranks in %d processes need %d descriptors each; the limit is %ld: use --procs %ld "
            "or more", o.ranks, o.procs, (o.ranks + o.procs - 1) / o.procs + 64, fds,
            (o.ranks + per_proc - 1) / per_proc);

    endpoint_t *eps = NULL;
    int neps = parse_endpoints(o.endpoints, &eps);

    /* Keys and the prebuilt requests (the same in every process). */
    proc_t p = {.o = &o, .eps = eps, .neps = neps, .rpn = o.ranks / o.nodes};
    int scalable = o.ranks_per_root > 0 && o.ranks > o.ranks_per_root;
    p.nkeys = scalable ? (o.ranks + o.ranks_per_root - 1) / o.ranks_per_root : 1;
    p.uid_keys = calloc((size_t)p.nkeys, sizeof *p.uid_keys);
    if (!p.uid_keys) die("out of memory");
    for (int i = 0; i < p.nkeys; i++) {
        char rest[128];
        if (o.nccl == NCCL_NCCL2)
            snprintf(rest, sizeof rest, scalable ? "default_pg/0//cuda//0/nccl_storekey_0_%d"
                                                 : "default_pg/0//cuda//0/nccl_storekey_0", i);
        else if (scalable)
            snprintf(rest, sizeof rest, "default_pg/0//cuda//UniqueNCCLID:%d", i);
        else
            snprintf(rest, sizeof rest, "default_pg/0//cuda//0");
        p.uid_keys[i] = user_key(&o, rest);
    }
    for (int i = 0; i < UID_BYTES; i++) p.uid_value[i] = (char)(i * 7 + 1);
    char *init_key = NULL;
    if ((o.prefix && *o.prefix ? asprintf(&init_key, "%s/init/", o.prefix)
                               : asprintf(&init_key, "init/")) < 0)
        die("out of memory");
    build_add(&p.req_init_add, init_key, 1);
    build_keys_req(&p.req_wait_uid, STORE_OP_WAIT, p.uid_keys, p.nkeys);
    build_keys_req(&p.req_mget_uid, STORE_OP_MULTI_GET, p.uid_keys, p.nkeys);
    enc_check(store_enc_op(&p.req_get_uid, STORE_GEN_V2, STORE_OP_GET));
    enc_check(store_enc_bytes(&p.req_get_uid, p.uid_keys[0], strlen(p.uid_keys[0])));
    char *bar_key = user_key(&o, "default_pg/store_based_barrier_key:0");
    char *last_key = user_key(&o, "default_pg/store_based_barrier_key:0:last_worker");
    build_add(&p.req_bar_add, bar_key, 1);
    build_add(&p.req_bar_count, bar_key, 0);
    build_set(&p.req_bar_set, last_key, "1", 1);
    build_keys_req(&p.req_bar_wait, STORE_OP_WAIT, &last_key, 1);

    /* The two programs. */
    static uint8_t prog_root[16], prog_other[16];
    int nr = 0, no = 0;
    prog_root[nr++] = P_HS, prog_root[nr++] = P_INIT_ADD;
    prog_other[no++] = P_HS, prog_other[no++] = P_INIT_ADD;
    prog_root[nr++] = P_GATE, prog_root[nr++] = P_SET_UID;
    if (o.nccl == NCCL_NCCL2) {
        for (int k = 0; k < 2; k++) prog_root[nr++] = P_WAIT_UID, prog_other[no++] = P_WAIT_UID;
        prog_root[nr++] = P_MGET_UID, prog_other[no++] = P_MGET_UID;
    } else if (scalable) {
        prog_root[nr++] = P_WAIT_UID, prog_other[no++] = P_WAIT_UID;
        prog_root[nr++] = P_MGET_UID, prog_other[no++] = P_MGET_UID;
    } else {
        prog_other[no++] = P_WAIT_UID, prog_other[no++] = P_GET_UID; /* rank 0 only sets */
    }
    if (o.barrier) {
        const uint8_t bar[] = {P_BAR_ADD, P_BAR_COUNT, P_BAR_WAIT};
        for (size_t k = 0; k < sizeof bar; k++) prog_root[nr++] = bar[k], prog_other[no++] = bar[k];
    }
    prog_root[nr++] = P_DONE, prog_other[no++] = P_DONE;
    p.prog_root = prog_root;
    p.prog_other = prog_other;

    /* Shared memory for the gate and the per-rank results. */
    size_t R = (size_t)o.ranks;
    size_t shsize = sizeof(shared_t) + R * (2 * sizeof(int64_t) + sizeof(int32_t)) + 64;
    shared_t *sh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) die("mmap: %s", strerror(errno));
    atomic_init(&sh->started, 0);
    atomic_init(&sh->finished, 0);
    int64_t *t_hs = (int64_t *)(void *)((char *)sh + ((sizeof(shared_t) + 7) & ~(size_t)7));
    int64_t *t_done = t_hs + R;
    int32_t *attempts = (int32_t *)(void *)(t_done + R);
    p.sh = sh;
    p.t_hs = t_hs;
    p.t_done = t_done;
    p.attempts = attempts;
    fflush(NULL);
    sh->t0_ns = clock_now_ns();

    pid_t *kids = calloc((size_t)o.procs, sizeof *kids);
    if (!kids) die("out of memory");
    for (int i = 0; i < o.procs; i++) {
        int lo = (int)((int64_t)o.ranks * i / o.procs);
        int hi = (int)((int64_t)o.ranks * (i + 1) / o.procs);
        pid_t pid = fork();
        if (pid < 0) die("fork: %s", strerror(errno));
        if (pid == 0) {
            p.lo = lo;
            p.hi = hi;
            _exit(run_proc(&p));
        }
        kids[i] = pid;
    }
    /* Wait for the children; past the timeout (and a grace) they are killed. */
    int bad = 0, left = o.procs;
    int64_t hard = sh->t0_ns + (int64_t)((o.timeout_s + 10) * 1e9);
    while (left > 0) {
        int st;
        pid_t w = waitpid(-1, &st, WNOHANG);
        if (w > 0) {
            left--;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) bad++;
            continue;
        }
        if (w < 0 && errno != EINTR) break;
        if (clock_now_ns() > hard) {
            for (int i = 0; i < o.procs; i++) kill(kids[i], SIGKILL);
            hard = INT64_MAX;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    int64_t end = clock_now_ns() - sh->t0_ns;
    struct rusage ru;
    double cpu = 0;
    if (getrusage(RUSAGE_CHILDREN, &ru) == 0)
        cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
              (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;

    int64_t *tmp = malloc(R * sizeof *tmp);
    if (!tmp) die("out of memory");
    int ok = collect(t_done, o.ranks, tmp);
    double done_p50 = pct_ms(tmp, ok, 50), done_p99 = pct_ms(tmp, ok, 99);
    double secs = ok == o.ranks ? (double)tmp[ok - 1] / 1e9 : (double)end / 1e9;
    int nhs = collect(t_hs, o.ranks, tmp);
    double c50 = pct_ms(tmp, nhs, 50), c99 = pct_ms(tmp, nhs, 99), cmax = pct_ms(tmp, nhs, 100);
    long retries = 0;
    for (size_t i = 0; i < R; i++) retries += attempts[i] > 1 ? attempts[i] - 1 : 0;
    printf("bootstrap ranks=%d nodes=%d endpoints=%d procs=%d nccl=%s uid_keys=%d barrier=%d "
           "ok=%d failed=%d seconds=%.3f connect_p50_ms=%.1f connect_p99_ms=%.1f "
           "connect_max_ms=%.1f done_p50_ms=%.1f done_p99_ms=%.1f connect_retries=%ld cpu_s=%.2f\n",
           o.ranks, o.nodes, neps, o.procs, o.nccl == NCCL_NCCL2 ? "nccl2" : "legacy", p.nkeys,
           o.barrier, ok, o.ranks - ok, secs, c50, c99, cmax, done_p50, done_p99, retries, cpu);
    fflush(stdout);
    return ok == o.ranks && !bad ? 0 : 1;
}
