/* The CPU communicator ("tcp" backend): set-up through the store, the
 * layout of ranks on hosts, and the collectives built from two layers:
 * shared memory among the ranks of a host (comm_shm.c) and a TCP ring among
 * one rank per host (comm_ring.c). With one host only shared memory is
 * used; with one rank per host (or no_shm) only the ring; otherwise an
 * all-reduce is a sum on each host, a ring all-reduce of the hosts' sums
 * and a copy back to each host's ranks.
 *
 * Failure: the first error of any call makes the communicator unusable
 * (every later call returns that error at once), tells the local peers
 * through the segment and shuts the ring's connections, so the whole job
 * fails within about one slice instead of each rank waiting for its own
 * timeout. The trainer then exits and the agent restarts the group.
 *
 * Asynchronous all-reduces go through comm_async.c's queue, which runs
 * each on its thread through the function it was given here
 * (comm_exec_allreduce): the queue knows nothing of the communicator. */
#include "worker/comm/comm.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"
#include "store/store_client.h"
#include "worker/comm/comm_async.h"
#include "worker/comm/comm_bootstrap.h"
#include "worker/comm/comm_ring.h"
#include "worker/comm/comm_shm.h"

#define COMM_DEFAULT_TIMEOUT_MS 300000

struct comm {
    int rank, world, timeout_ms;
    /* Hosts are numbered in the order of their lowest rank; "host-major"
     * order lists host 0's ranks, then host 1's, each host's in rank order. */
    int nhosts, host;   /* how many, and this rank's */
    int lindex, lsize;  /* this rank's place on its host, and the host's rank count */
    int *host_of;       /* [world] each rank's host */
    int *host_first;    /* [nhosts + 1] where each host starts in host-major order */
    int *hm_rank;       /* [world] the rank at each host-major position */
    int *hm_pos;        /* [world] each rank's host-major position */
    comm_shm *shm;      /* the ranks of this host (NULL when alone on it) */
    comm_ring ring;     /* the hosts' first ranks (used when nhosts > 1) */
    atomic_int broken;  /* 0, or the error that made the communicator unusable */
    comm_stop stop;     /* comm_destroy and comm_abort_at: in-flight calls give up */
    char err[512];
    comm_async async;   /* the asynchronous all-reduces, run by comm_exec_allreduce */
    coll_record *record; /* comm_opts' (NULL: none) */
};

/* --- failure -------------------------------------------------------------- */

/* Makes the communicator unusable after the first failure and makes sure
 * the peers find out. */
static int comm_fail(comm *c, comm_call *k, int rc) {
    int zero = 0;
    if (atomic_compare_exchange_strong(&c->broken, &zero, rc)) {
        if (k->err[0])
            snprintf(c->err, sizeof c->err, "rank %d: %s", c->rank, k->err);
        else
            snprintf(c->err, sizeof c->err, "rank %d: %s failed: %s", c->rank, k->op,
                     strerror(-rc));
        comm_shm_abort(c->shm, rc);
        comm_ring_shutdown(&c->ring);
    }
    return rc;
}

/* --- the collectives across hosts ---------------------------------------- */

static int multi_host(const comm *c) { return c->nhosts > 1; }
static int leader(const comm *c) { return c->lindex == 0; }

static int do_allreduce(comm *c, float *buf, size_t count, comm_call *k) {
    int rc = 0;
    if (c->shm) rc = comm_shm_allreduce(c->shm, buf, count, k);
    if (!rc && multi_host(c) && leader(c)) rc = comm_ring_allreduce(&c->ring, buf, count, k);
    if (!rc && multi_host(c) && c->shm)
        rc = comm_shm_broadcast(c->shm, buf, count * sizeof(float), 0, k);
    return rc;
}

static int do_broadcast(comm *c, void *buf, size_t bytes, int root, comm_call *k) {
    int rhost = c->host_of[root], rlocal = c->hm_pos[root] - c->host_first[rhost], rc = 0;
    if (c->host == rhost) {
        /* The root's host first, so that its leader has the bytes to send on. */
        if (c->shm) rc = comm_shm_broadcast(c->shm, buf, bytes, rlocal, k);
        if (!rc && multi_host(c) && leader(c))
            rc = comm_ring_broadcast(&c->ring, buf, bytes, rhost, k);
    } else {
        if (leader(c)) rc = comm_ring_broadcast(&c->ring, buf, bytes, rhost, k);
        if (!rc && c->shm) rc = comm_shm_broadcast(c->shm, buf, bytes, 0, k);
    }
    return rc;
}

/* The ranks' blocks are gathered in host-major order (each host's ranks
 * next to each other, as the ring needs them), then put in rank order. */
static int do_allgather(comm *c, const void *send, void *recv, size_t bytes, comm_call *k) {
    if (!multi_host(c)) return comm_shm_allgather(c->shm, send, recv, bytes, k);
    int identity = 1, rc = 0;
    for (int i = 0; i < c->world; i++) identity &= c->hm_rank[i] == i;
    uint8_t *hm = identity ? recv : malloc((size_t)c->world * bytes);
    size_t *offs = calloc((size_t)c->nhosts, sizeof *offs);
    size_t *lens = calloc((size_t)c->nhosts, sizeof *lens);
    if (!hm || !offs || !lens) {
        rc = comm_call_fail(k, -ENOMEM, "all-gather: out of memory");
        goto out;
    }
    uint8_t *mine = hm + (size_t)c->host_first[c->host] * bytes;
    if (c->shm)
        rc = comm_shm_allgather(c->shm, send, mine, bytes, k);
    else
        memmove(mine, send, bytes);
    if (!rc && leader(c)) {
        for (int h = 0; h < c->nhosts; h++) {
            offs[h] = (size_t)c->host_first[h] * bytes;
            lens[h] = (size_t)(c->host_first[h + 1] - c->host_first[h]) * bytes;
        }
        rc = comm_ring_allgatherv(&c->ring, hm, offs, lens, k);
        for (int i = 0; !rc && !identity && i < c->world; i++)
            memcpy((uint8_t *)recv + (size_t)c->hm_rank[i] * bytes, hm + (size_t)i * bytes, bytes);
    }
    if (!rc && c->shm) rc = comm_shm_broadcast(c->shm, recv, (size_t)c->world * bytes, 0, k);
out:
    if (!identity) free(hm);
    free(offs);
    free(lens);
    return rc;
}

static int do_barrier(comm *c, comm_call *k) {
    int rc = 0;
    if (c->shm) rc = comm_shm_barrier(c->shm, k);
    if (!rc && multi_host(c) && leader(c)) rc = comm_ring_barrier(&c->ring, k);
    if (!rc && multi_host(c) && c->shm) rc = comm_shm_barrier(c->shm, k);
    return rc;
}

/* --- the public calls ---------------------------------------------------- */

typedef enum { OP_ALLREDUCE, OP_BROADCAST, OP_ALLGATHER, OP_BARRIER } op_kind;

typedef struct {
    op_kind kind;
    void *buf;
    const void *send;
    size_t n; /* floats for an all-reduce, bytes otherwise */
    int root;
} op_args;

static const char *const op_names[] = {"all-reduce", "broadcast", "all-gather", "barrier"};

static int exec(comm *c, const op_args *a) {
    int rc = atomic_load(&c->broken);
    if (rc) return rc;
    if (c->world == 1) {
        if (a->kind == OP_ALLGATHER) memmove(a->buf, a->send, a->n);
        return 0;
    }
    char msg[sizeof c->err - 32] = "";
    comm_call k = comm_call_start(op_names[a->kind], c->timeout_ms, &c->stop, msg, sizeof msg);
    k.rec = c->record;
    switch (a->kind) {
    case OP_ALLREDUCE: rc = a->n ? do_allreduce(c, a->buf, a->n, &k) : 0; break;
    case OP_BROADCAST: rc = a->n ? do_broadcast(c, a->buf, a->n, a->root, &k) : 0; break;
    case OP_ALLGATHER: rc = a->n ? do_allgather(c, a->send, a->buf, a->n, &k) : 0; break;
    case OP_BARRIER: rc = do_barrier(c, &k); break;
    }
    return rc ? comm_fail(c, &k, rc) : 0;
}

/* An asynchronous all-reduce, on the queue's thread (comm_async.c calls it
 * back). Marks the communicator broken on failure, as every call does. */
static int comm_exec_allreduce(void *ctx, float *buf, size_t count, uint64_t seq) {
    comm *c = ctx;
    op_args a = {.kind = OP_ALLREDUCE, .buf = buf, .n = count};
    int rc = exec(c, &a);
    coll_record_leave(c->record, seq, rc);
    return rc;
}

/* The bytes a call moves, for the collective record. */
static uint64_t op_bytes(const op_args *a) {
    return a->kind == OP_ALLREDUCE ? (uint64_t)a->n * sizeof(float) : (uint64_t)a->n;
}

int comm_allreduce_sum_async(comm *c, float *buf, size_t count, comm_req **req) {
    uint64_t seq = coll_record_enter(c->record, op_names[OP_ALLREDUCE], count * sizeof(float));
    int rc = comm_async_push(&c->async, buf, count, seq, req);
    if (rc) coll_record_leave(c->record, seq, rc);
    return rc;
}

int comm_wait(comm_req *req) {
    comm *c = comm_async_owner(req);
    int64_t t0 = clock_now_ns();
    int rc = comm_async_wait(req);
    if (c) coll_record_blocked(c->record, clock_now_ns() - t0);
    return rc;
}

/* A synchronous call runs on the caller's thread once the asynchronous
 * requests issued before it have run, which keeps every rank's sequence of
 * collectives in the order the program issued them. */
static int run_sync(comm *c, const op_args *a) {
    int64_t t0 = clock_now_ns();
    uint64_t seq = coll_record_enter(c->record, op_names[a->kind], op_bytes(a));
    comm_async_drain(&c->async);
    int rc = exec(c, a);
    coll_record_leave(c->record, seq, rc);
    coll_record_blocked(c->record, clock_now_ns() - t0);
    return rc;
}

int comm_allreduce_sum(comm *c, float *buf, size_t count) {
    return run_sync(c, &(op_args){.kind = OP_ALLREDUCE, .buf = buf, .n = count});
}

int comm_broadcast(comm *c, void *buf, size_t bytes, int root) {
    if (root < 0 || root >= c->world) return -EINVAL;
    return run_sync(c, &(op_args){.kind = OP_BROADCAST, .buf = buf, .n = bytes, .root = root});
}

int comm_allgather(comm *c, const void *send, void *recv, size_t bytes) {
    return run_sync(c, &(op_args){.kind = OP_ALLGATHER, .buf = recv, .send = send, .n = bytes});
}

int comm_barrier(comm *c) { return run_sync(c, &(op_args){.kind = OP_BARRIER}); }

int comm_alloc(comm *c, size_t bytes, void **out, char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = 0;
    if (!c->shm) {
        snprintf(err, errlen, "no other rank shares this host");
        return -ENOTSUP;
    }
    comm_async_drain(&c->async);
    int rc = atomic_load(&c->broken);
    if (rc) {
        snprintf(err, errlen, "%s", c->err);
        return rc;
    }
    char msg[sizeof c->err - 32] = "";
    comm_call k = comm_call_start("shared allocation", c->timeout_ms, &c->stop, msg, sizeof msg);
    rc = comm_shm_window(c->shm, bytes, out, &k);
    if (rc && rc != -ENOMEM) comm_fail(c, &k, rc);
    snprintf(err, errlen, "%s", rc == -ENOMEM ? msg : rc ? c->err : "");
    return rc;
}

void comm_free(comm *c, void *p) {
    if (c && c->shm && p) comm_shm_window_free(c->shm, p);
}

int comm_rank(const comm *c) { return c->rank; }
int comm_world(const comm *c) { return c->world; }

const char *comm_error(const comm *c) {
    return atomic_load(&c->broken) ? c->err : "";
}

/* --- set-up -------------------------------------------------------------- */

/* Groups ranks by host identity: hosts in order of their lowest rank. */
static int build_topology(comm *c, const comm_peers *p) {
    int w = c->world;
    c->host_of = malloc((size_t)w * sizeof(int));
    c->host_first = calloc((size_t)w + 1, sizeof(int));
    c->hm_rank = malloc((size_t)w * sizeof(int));
    c->hm_pos = malloc((size_t)w * sizeof(int));
    int *first_rank = malloc((size_t)w * sizeof(int)); /* each host's lowest rank */
    if (!c->host_of || !c->host_first || !c->hm_rank || !c->hm_pos || !first_rank) {
        free(first_rank);
        return -ENOMEM;
    }
    c->nhosts = 0;
    for (int i = 0; i < w; i++) {
        int h = 0;
        while (h < c->nhosts && strcmp(p->hostid[first_rank[h]], p->hostid[i]) != 0) h++;
        if (h == c->nhosts) first_rank[c->nhosts++] = i;
        c->host_of[i] = h;
        c->host_first[h + 1]++;
    }
    for (int h = 0; h < c->nhosts; h++) c->host_first[h + 1] += c->host_first[h];
    int *fill = calloc((size_t)c->nhosts, sizeof(int));
    if (!fill) {
        free(first_rank);
        return -ENOMEM;
    }
    for (int i = 0; i < w; i++) {
        int h = c->host_of[i], pos = c->host_first[h] + fill[h]++;
        c->hm_rank[pos] = i;
        c->hm_pos[i] = pos;
    }
    c->host = c->host_of[c->rank];
    c->lindex = c->hm_pos[c->rank] - c->host_first[c->host];
    c->lsize = c->host_first[c->host + 1] - c->host_first[c->host];
    free(fill);
    free(first_rank);
    return 0;
}

static int setup_shm(comm *c, store_client *st, const comm_opts *o, const comm_peers *p,
                     comm_call *k) {
    int lead = c->hm_rank[c->host_first[c->host]];
    char key[512], name[128];
    snprintf(key, sizeof key, "%sshm/%d", o->prefix, lead);
    int rc;
    if (leader(c)) {
        pid_t pids[COMM_SHM_MAX_LOCAL];
        for (int i = 0; i < c->lsize && i < COMM_SHM_MAX_LOCAL; i++)
            pids[i] = p->pid[c->hm_rank[c->host_first[c->host] + i]];
        rc = comm_shm_create(o->prefix, c->lsize, pids, &c->shm, name, sizeof name, k);
        if (rc) return rc;
        store_client_set_timeout(st, (int)(comm_call_left_ns(k) / 1000000) + 1);
        rc = store_set(st, key, name, strlen(name));
        if (rc)
            return comm_call_fail(k, rc, "cannot publish the shared memory's name under %s: %s",
                                  key, strerror(-rc));
    } else {
        uint8_t *v = NULL;
        size_t len = 0;
        store_client_set_timeout(st, (int)(comm_call_left_ns(k) / 1000000) + 1);
        rc = store_get(st, key, &v, &len);
        if (rc)
            return comm_call_fail(k, rc,
                                  "rank %d (first on this host) did not publish its shared "
                                  "memory under %s: %s",
                                  lead, key, strerror(-rc));
        snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1),
                 (const char *)v);
        free(v);
        rc = comm_shm_attach(name, c->lsize, c->lindex, &c->shm, k);
        if (rc) return rc;
    }
    return comm_shm_ready(c->shm, k);
}

static int setup_ring(comm *c, int listen_fd, const comm_opts *o, const comm_peers *p,
                      comm_call *k) {
    int n = c->nhosts;
    c->ring.n = n;
    c->ring.pos = c->host;
    c->ring.next_rank = c->hm_rank[c->host_first[(c->host + 1) % n]];
    c->ring.prev_rank = c->hm_rank[c->host_first[(c->host + n - 1) % n]];
    return comm_ring_connect(&c->ring, listen_fd, p->addr[c->ring.next_rank], c->rank,
                             hash_fnv1a64(HASH_FNV1A64_INIT, o->prefix, strlen(o->prefix)), k);
}

static int check_opts(const comm_opts *o, char *err, size_t errlen) {
    const char *why = NULL;
    if (!o->prefix) why = "no key prefix";
    else if (o->world < 1) why = "world size below 1";
    else if (o->rank < 0 || o->rank >= o->world) why = "rank outside 0..world-1";
    else if (o->world > 1 && (!o->store_host || o->store_port <= 0 || o->store_port > 65535))
        why = "no store address (MASTER_ADDR/MASTER_PORT)";
    if (!why) return 0;
    snprintf(err, errlen, "communicator options: %s (rank %d, world %d)", why, o->rank, o->world);
    return -EINVAL;
}

static int connect_all(comm *c, const comm_opts *o, comm_call *k) {
    store_client *st = NULL;
    comm_peers peers = {0};
    int listen_fd = -1, port = 0, rc;
    store_client_opts so = {.host = o->store_host, .port = o->store_port,
                            .connect_timeout_ms = c->timeout_ms, .timeout_ms = c->timeout_ms};
    rc = store_client_connect(&so, &st);
    if (rc) {
        rc = comm_call_fail(k, rc, "cannot reach the store at %s:%d: %s", o->store_host,
                            o->store_port, strerror(-rc));
        goto out;
    }
    char addr[300], hostid[512];
    if ((rc = comm_ring_listen(&listen_fd, &port, k)) ||
        (rc = comm_bootstrap_addr(st, port, addr, sizeof addr, k)))
        goto out;
    comm_bootstrap_hostid(hostid, sizeof hostid);
    if (o->no_shm) /* every rank a host of its own */
        snprintf(hostid + strlen(hostid), sizeof hostid - strlen(hostid), "/rank%d", c->rank);
    rc = comm_bootstrap_exchange(st, o->prefix, c->rank, c->world, addr, hostid, &peers, k);
    if (rc) goto out;
    if ((rc = build_topology(c, &peers))) {
        rc = comm_call_fail(k, rc, "out of memory");
        goto out;
    }
    if (c->lsize > 1 && (rc = setup_shm(c, st, o, &peers, k))) goto out;
    if (multi_host(c) && leader(c)) rc = setup_ring(c, listen_fd, o, &peers, k);
out:
    if (listen_fd >= 0) close(listen_fd);
    comm_peers_free(&peers);
    store_client_close(st);
    return rc;
}

int comm_init(const comm_opts *o, comm **out, char *err, size_t errlen) {
    *out = NULL;
    if (errlen) err[0] = 0;
    int rc = check_opts(o, err, errlen);
    if (rc) return rc;
    comm *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    c->rank = o->rank;
    c->world = o->world;
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : COMM_DEFAULT_TIMEOUT_MS;
    c->stop.abort_at_ns = o->abort_at_ns;
    c->record = o->record;
    c->nhosts = c->lsize = 1;
    comm_ring_clear(&c->ring);
    comm_async_init(&c->async, comm_exec_allreduce, c);
    if (c->world > 1) {
        comm_call k = comm_call_start("communicator set-up", c->timeout_ms, &c->stop, err,
                                      errlen);
        k.rec = c->record;
        uint64_t seq = coll_record_enter(c->record, "set-up", 0);
        rc = connect_all(c, o, &k);
        coll_record_leave(c->record, seq, rc);
        if (rc) {
            if (errlen && !err[0]) snprintf(err, errlen, "%s", strerror(-rc));
            comm_shm_abort(c->shm, rc);
            comm_destroy(c);
            return rc;
        }
    }
    *out = c;
    return 0;
}

void comm_destroy(comm *c) {
    if (!c) return;
    atomic_store(&c->stop.cancel, 1);
    comm_async_stop(&c->async);
    comm_shm_destroy(c->shm);
    comm_ring_close(&c->ring);
    free(c->host_of);
    free(c->host_first);
    free(c->hm_rank);
    free(c->hm_pos);
    free(c);
}
