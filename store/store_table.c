/* The store's data and its semantics: the key table, waiters (WAIT,
 * WAIT_ANY, BARRIER), queues, torch 1.13 watchers, and ownership of keys by
 * a connection or a lease. store_server.c feeds parsed requests to
 * store_table_handle(); replies go into the requesting connection's output
 * buffer, and replies to other connections (wakeups, watch events) are
 * queued and flushed from the loop's idle phase.
 *
 * Every key has one entry in an open-addressing table. An entry may exist
 * without a value: it then only anchors waiters, watchers or a queue, and
 * is freed as soon as none of those remain. */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/hash.h"
#include "common/log.h"
#include "store/store_internal.h"

/* Drops c through the network side, saying why. */
__attribute__((format(printf, 2, 3))) static void drop(store_conn *c, const char *fmt, ...) {
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    c->srv->net->drop(c, why);
}

/* The lists of waiters and watchers an entry anchors. */
enum { L_EXISTS = 0, L_ABSENT = 1, L_BARRIER = 2, L_WATCH = 3, L_COUNT };
enum { W_ALL, W_ANY, W_BARRIER };

struct store_wnode {
    store_wnode *prev, *next; /* in the entry's list */
    store_entry *entry;       /* NULL once unlinked */
    store_waiter *w;          /* the wait it belongs to; NULL for a watch */
    store_conn *conn;         /* watches: the watching connection */
    store_wnode *conn_next;   /* watches: the connection's list */
    uint8_t list;
    uint32_t index; /* position in the WAIT_ANY request */
};

struct store_waiter {
    store_conn *conn;
    uint64_t since_ms; /* uv_now when it began */
    int stall_said;    /* store_table_stalls has reported it */
    int kind;
    size_t remaining; /* W_ALL: keys still missing */
    int64_t target;   /* W_BARRIER: the world size the key's count must reach */
    size_t n;
    store_wnode nodes[];
};

typedef struct qitem {
    struct qitem *next;
    uint64_t n;
    uint8_t data[];
} qitem;

struct store_entry {
    uint64_t hash;
    uint8_t *val;
    uint64_t vlen;
    int has_value;
    qitem *qhead, *qtail;
    uint64_t qlen;
    uint32_t pins; /* > 0 while an operation walks the entry's lists */
    struct {
        store_wnode *head, *tail;
    } lists[L_COUNT];
    store_conn *owner_conn; /* at most one of owner_conn / owner_lease */
    store_lease *owner_lease;
    store_entry *own_prev, *own_next;
    uint32_t klen;
    uint8_t key[];
};

struct store_lease {
    uint64_t id;
    int64_t ttl_ms;
    uint64_t deadline;
    store_lease *next, *prev; /* every lease */
    store_lease *hnext;       /* its bucket by id */
    store_entry *owned;
    store_conn *renewer;      /* the connection of its grant or latest renewal, while open */
};

static const uint8_t empty_bytes[1];

/* ---- replies ----------------------------------------------------------- */

static void r_u8(store_conn *c, uint8_t v) { c->oom |= store_enc_u8(&c->out, v) != 0; }
static void r_u32(store_conn *c, uint32_t v) { c->oom |= store_enc_u32(&c->out, v) != 0; }
static void r_u64(store_conn *c, uint64_t v) { c->oom |= store_enc_u64(&c->out, v) != 0; }
static void r_bytes(store_conn *c, const void *p, uint64_t n) {
    c->oom |= store_enc_bytes(&c->out, p, n) != 0;
}

/* A key as it may appear in a log line: printable, bounded. */
static const char *key_for_log(const uint8_t *k, uint64_t n, char *out, size_t cap) {
    size_t j = 0;
    for (uint64_t i = 0; i < n && j + 4 < cap; i++) out[j++] = k[i] >= 32 && k[i] < 127 ? (char)k[i] : '?';
    if (n > 0 && j + 4 >= cap) memcpy(out + j, "...", 3), j += 3;
    out[j] = 0;
    return out;
}

/* ---- the hash table ---------------------------------------------------- */

static uint64_t key_hash(const store_server *srv, const uint8_t *k, uint64_t n) {
    uint64_t h = hash_fnv1a64(HASH_FNV1A64_INIT ^ srv->table.hash_seed, k, n);
    return h ^ (h >> 29);
}

int store_table_init(store_server *srv) {
    srv->table.nslots = 1024;
    srv->table.slots = calloc(srv->table.nslots, sizeof *srv->table.slots);
    if (!srv->table.slots) return -ENOMEM;
    if (getrandom(&srv->table.hash_seed, sizeof srv->table.hash_seed, GRND_NONBLOCK) < 0)
        srv->table.hash_seed = (uint64_t)(uintptr_t)srv;
    srv->table.next_lease_id = 1;
    return 0;
}

static size_t slot_of(const store_server *srv, const uint8_t *k, uint64_t n, uint64_t h) {
    size_t mask = srv->table.nslots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        store_entry *e = srv->table.slots[i];
        if (!e || (e->hash == h && e->klen == n && memcmp(e->key, k, n) == 0)) return i;
    }
}

static store_entry *entry_find(store_server *srv, store_bytes key) {
    uint64_t h = key_hash(srv, key.p, key.n);
    return srv->table.slots[slot_of(srv, key.p, key.n, h)];
}

static int table_grow(store_server *srv) {
    size_t old_n = srv->table.nslots;
    store_entry **old = srv->table.slots;
    store_entry **slots = calloc(old_n * 2, sizeof *slots);
    if (!slots) return -ENOMEM;
    srv->table.slots = slots;
    srv->table.nslots = old_n * 2;
    for (size_t i = 0; i < old_n; i++)
        if (old[i]) srv->table.slots[slot_of(srv, old[i]->key, old[i]->klen, old[i]->hash)] = old[i];
    free(old);
    return 0;
}

/* The entry for key, created (without a value) if missing; NULL on OOM. */
static store_entry *entry_get(store_server *srv, store_bytes key) {
    uint64_t h = key_hash(srv, key.p, key.n);
    size_t i = slot_of(srv, key.p, key.n, h);
    if (srv->table.slots[i]) return srv->table.slots[i];
    if ((srv->table.nentries + 1) * 2 > srv->table.nslots) {
        if (table_grow(srv) != 0) return NULL;
        i = slot_of(srv, key.p, key.n, h);
    }
    store_entry *e = calloc(1, sizeof *e + key.n);
    if (!e) return NULL;
    e->hash = h;
    e->klen = (uint32_t)key.n;
    memcpy(e->key, key.p, key.n);
    srv->table.slots[i] = e;
    srv->table.nentries++;
    return e;
}

/* Linear probing with backward-shift deletion keeps lookups tombstone-free. */
static void table_remove(store_server *srv, store_entry *e) {
    size_t mask = srv->table.nslots - 1;
    size_t i = slot_of(srv, e->key, e->klen, e->hash);
    srv->table.slots[i] = NULL;
    for (size_t j = (i + 1) & mask; srv->table.slots[j]; j = (j + 1) & mask) {
        size_t home = srv->table.slots[j]->hash & mask;
        int movable = i <= j ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            srv->table.slots[i] = srv->table.slots[j];
            srv->table.slots[j] = NULL;
            i = j;
        }
    }
    srv->table.nentries--;
}

static int present(const store_entry *e) { return e && (e->has_value || e->qlen > 0); }

static void entry_maybe_free(store_server *srv, store_entry *e) {
    if (!e || e->pins || e->has_value || e->qlen || e->owner_conn || e->owner_lease)
        return;
    for (int l = 0; l < L_COUNT; l++)
        if (e->lists[l].head) return;
    table_remove(srv, e);
    free(e);
}

/* Completing a waiter frees entries it leaves empty, which may include
 * the one whose list is being walked: pin that one for the walk. Whoever
 * started the operation frees the entry afterwards if it is empty. */
static void pin(store_entry *e) { e->pins++; }
static void unpin(store_entry *e) { e->pins--; }

/* ---- waiter lists ------------------------------------------------------ */

static void node_link(store_entry *e, store_wnode *n, int list) {
    n->entry = e;
    n->list = (uint8_t)list;
    n->next = NULL;
    n->prev = e->lists[list].tail;
    if (n->prev) n->prev->next = n;
    else e->lists[list].head = n;
    e->lists[list].tail = n;
}

static void node_unlink(store_wnode *n) {
    store_entry *e = n->entry;
    if (!e) return;
    if (n->prev) n->prev->next = n->next;
    else e->lists[n->list].head = n->next;
    if (n->next) n->next->prev = n->prev;
    else e->lists[n->list].tail = n->prev;
    n->entry = NULL;
}

/* Ends a wait: unlinks what is left of it and frees it. */
static void waiter_free(store_server *srv, store_waiter *w) {
    for (size_t i = 0; i < w->n; i++) {
        store_entry *e = w->nodes[i].entry;
        node_unlink(&w->nodes[i]);
        entry_maybe_free(srv, e);
    }
    if (w->conn->wait == w) w->conn->wait = NULL;
    free(w);
}

/* A wait ends unanswered (CANCEL_WAIT, a timed-out 1.13 client, a
 * disconnect). A barrier it had entered keeps that arrival in its count, as
 * torch's server does. */
static void waiter_cancel(store_server *srv, store_waiter *w) { waiter_free(srv, w); }

/* A wait is satisfied: reply and let the connection's held requests run. */
static void waiter_complete(store_server *srv, store_waiter *w, uint32_t index) {
    store_conn *c = w->conn;
    r_u8(c, STORE_WAIT_STOP_WAITING);
    if (w->kind == W_ANY) r_u64(c, index);
    waiter_free(srv, w);
    c->srv->net->wake(c);
}

/* The key now exists: wake its EXISTS waiters (all of them, or with
 * only_one the first whose wait this completes, as a queue push does). */
static void wake_exists(store_server *srv, store_entry *e, int only_one) {
    pin(e);
    if (only_one) {
        for (store_wnode *n = e->lists[L_EXISTS].head; n; n = n->next) {
            store_waiter *w = n->w;
            if (w->kind == W_ANY || w->remaining == 1) {
                waiter_complete(srv, w, n->index);
                break;
            }
        }
        unpin(e);
        return;
    }
    /* Completing a wait unlinks its other nodes, which may sit further on
     * in this very list (WAIT on the same key twice), so always restart
     * from the head: each step removes the head. */
    store_wnode *n;
    while ((n = e->lists[L_EXISTS].head) != NULL) {
        store_waiter *w = n->w;
        node_unlink(n);
        if (w->kind == W_ANY) waiter_complete(srv, w, n->index);
        else if (--w->remaining == 0) waiter_complete(srv, w, 0);
    }
    unpin(e);
}

/* A value read as ADD and BARRIER read it, decimal text (a missing value
 * counts 0). Returns 1 with *v set, or 0 if the value is not a decimal
 * integer that fits in 64 bits. */
static int value_int(const store_entry *e, int64_t *v) {
    *v = 0;
    if (!e->has_value) return 1;
    char text[32], *end = NULL;
    if (e->vlen == 0 || e->vlen >= sizeof text) return 0;
    memcpy(text, e->val, e->vlen);
    text[e->vlen] = 0;
    errno = 0;
    *v = strtoll(text, &end, 10);
    return end != text && !*end && !errno;
}

/* The key's value changed: release the barrier waiters whose world size
 * its count now reaches (any write counts, as in torch's server: a SET or
 * ADD of the key can release a barrier too). */
static void wake_barrier(store_server *srv, store_entry *e) {
    int64_t count;
    if (!e->lists[L_BARRIER].head || !value_int(e, &count)) return;
    pin(e);
    for (store_wnode *n = e->lists[L_BARRIER].head, *next; n; n = next) {
        next = n->next; /* a barrier waiter has this one node only */
        if (count >= n->w->target) waiter_complete(srv, n->w, 0);
    }
    unpin(e);
}

static void wake_absent(store_server *srv, store_entry *e) {
    store_wnode *n;
    pin(e);
    while ((n = e->lists[L_ABSENT].head) != NULL) waiter_complete(srv, n->w, n->index);
    unpin(e);
}

/* torch 1.13's WATCH_KEY events: type, key, old value, new value. */
static void notify_watchers(store_entry *e, int type, const uint8_t *old, uint64_t oldn,
                            const uint8_t *new_, uint64_t newn) {
    for (store_wnode *n = e->lists[L_WATCH].head; n; n = n->next) {
        store_conn *c = n->conn;
        c->srv->net->wake(c);
        /* A watcher that does not read is dropped at its next flush. */
        if (store_conn_unsent(c) > store_out_hard(c->srv)) continue;
        r_u8(c, (uint8_t)type);
        r_bytes(c, e->key, e->klen);
        r_bytes(c, old, oldn);
        r_bytes(c, new_, newn);
    }
}

/* ---- values and ownership --------------------------------------------- */

static void disown(store_entry *e) {
    store_entry **head = e->owner_conn ? &e->owner_conn->owned
                         : e->owner_lease ? &e->owner_lease->owned
                                          : NULL;
    if (!head) return;
    if (e->own_prev) e->own_prev->own_next = e->own_next;
    else *head = e->own_next;
    if (e->own_next) e->own_next->own_prev = e->own_prev;
    e->own_prev = e->own_next = NULL;
    e->owner_conn = NULL;
    e->owner_lease = NULL;
}

static void own(store_entry *e, store_conn *c, store_lease *l) {
    store_entry **head = c ? &c->owned : &l->owned;
    e->owner_conn = c;
    e->owner_lease = l;
    e->own_prev = NULL;
    e->own_next = *head;
    if (*head) (*head)->own_prev = e;
    *head = e;
}

/* Stores a value (taking ownership of `val`, malloc'd) and tells watchers
 * and waiters. A plain write also ends any ownership of the key. */
static void value_put(store_server *srv, store_entry *e, uint8_t *val, uint64_t n) {
    int was_present = present(e);
    int existed = e->has_value;
    uint8_t *old = e->val;
    uint64_t oldn = e->vlen;
    e->val = val;
    e->vlen = n;
    e->has_value = 1;
    if (!existed) srv->stats.keys++;
    if (e->lists[L_WATCH].head)
        notify_watchers(e, existed ? STORE_WATCH_KEY_UPDATED : STORE_WATCH_KEY_CREATED,
                        existed ? old : empty_bytes, existed ? oldn : 0, val, n);
    free(old);
    if (!was_present) wake_exists(srv, e, 0);
    wake_barrier(srv, e);
}

static uint8_t *dup_bytes(store_conn *c, const uint8_t *p, uint64_t n) {
    uint8_t *d = malloc(n ? n : 1);
    if (!d) c->oom = 1;
    else if (n) memcpy(d, p, n);
    return d;
}

/* SET semantics: copy the bytes in; 0 or -ENOMEM (already flagged). */
static int value_set(store_conn *c, store_entry *e, const uint8_t *p, uint64_t n) {
    uint8_t *d = dup_bytes(c, p, n);
    if (!d) return -ENOMEM;
    disown(e);
    value_put(c->srv, e, d, n);
    return 0;
}

static void value_delete(store_server *srv, store_entry *e) {
    if (!e->has_value) return;
    if (e->lists[L_WATCH].head)
        notify_watchers(e, STORE_WATCH_KEY_DELETED, e->val, e->vlen, empty_bytes, 0);
    free(e->val);
    e->val = NULL;
    e->vlen = 0;
    e->has_value = 0;
    srv->stats.keys--;
    disown(e);
    if (!present(e)) wake_absent(srv, e);
}

/* Deletes every key on an owner's list (a closed connection, an expired
 * or revoked lease). */
static void release_owned(store_server *srv, store_entry **head) {
    while (*head) {
        store_entry *e = *head;
        value_delete(srv, e); /* unlinks e from *head through disown() */
        entry_maybe_free(srv, e);
    }
}

/* ---- leases ------------------------------------------------------------- */

static void lease_arm(store_server *srv, uint64_t first);

/* Leases are found by id in a bucket array (ids are sequential, so id &
 * mask spreads them evenly): a renewal costs O(1) with thousands of
 * agents, not a walk of every lease. */
static store_lease **lease_bucket(store_table *t, uint64_t id) {
    return &t->lease_buckets[id & (t->lease_nbuckets - 1)];
}

static int lease_add(store_server *srv, store_lease *l) {
    store_table *t = &srv->table;
    if (t->nleases + 1 > t->lease_nbuckets) { /* grow: rehash every lease */
        size_t n = t->lease_nbuckets ? t->lease_nbuckets * 2 : 64;
        store_lease **b = calloc(n, sizeof *b);
        if (!b) return -ENOMEM;
        free(t->lease_buckets);
        t->lease_buckets = b;
        t->lease_nbuckets = n;
        for (store_lease *x = t->leases; x; x = x->next) {
            store_lease **head = lease_bucket(t, x->id);
            x->hnext = *head;
            *head = x;
        }
    }
    store_lease **head = lease_bucket(t, l->id);
    l->hnext = *head;
    *head = l;
    l->prev = NULL;
    l->next = t->leases;
    if (t->leases) t->leases->prev = l;
    t->leases = l;
    t->nleases++;
    return 0;
}

/* Notes the connection whose renewals keep a lease (NULL: none). */
static void lease_renewed_by(store_lease *l, store_conn *c) {
    if (c && c->closing) c = NULL; /* (store_table_conn_gone has run for it) */
    if (l->renewer == c) return;
    if (l->renewer) l->renewer->leases--;
    if (c) c->leases++;
    l->renewer = c;
}

static void lease_free(store_server *srv, store_lease *l) {
    store_table *t = &srv->table;
    store_lease **pp = lease_bucket(t, l->id);
    while (*pp != l) pp = &(*pp)->hnext;
    *pp = l->hnext;
    if (l->prev) l->prev->next = l->next;
    else t->leases = l->next;
    if (l->next) l->next->prev = l->prev;
    t->nleases--;
    lease_renewed_by(l, NULL);
    release_owned(srv, &l->owned);
    free(l);
}

/* A lease is judged by what its owner sent, not by when the store got
 * round to reading it. libuv runs timers before it polls the sockets, so
 * when the lease timer fires, what clients sent since the last poll
 * (srv->polled_ms) is unread: a renewal may wait there, the more so the
 * longer the store did not run (its host busy, swapping, paused). So the
 * leases that lapse are those due by that last poll; one due since is
 * judged after the next.
 *
 * And a lease due by then whose renewing connection sent anything read
 * since it was due is its owner's, alive: a client that waits for each
 * answer (the agents' heartbeat writes its time for `ddprun status` after
 * a renewal) could renew only after that request's answer. Such a lease
 * counts as renewed when that request was read. */
static void on_lease_timer(uv_timer_t *t) {
    store_server *srv = t->data;
    uint64_t now = uv_now(srv->loop), cut = srv->polled_ms;
    if (now - cut >= 1000)
        log_warn("the store did not run for %.1f s (its host busy or paused): its leases are "
                 "judged by the renewals sent meanwhile, once it has read them",
                 (double)(now - cut) / 1000);
    /* one walk: the verdicts, and the next deadline (a lease due since
     * the last poll is that, so the timer comes back after the next) */
    uint64_t first = UINT64_MAX;
    for (store_lease *l = srv->table.leases, *next; l; l = next) {
        next = l->next;
        if (l->deadline <= cut) {
            if (l->renewer && l->renewer->progress_ms >= l->deadline) {
                l->deadline = l->renewer->progress_ms + (uint64_t)l->ttl_ms;
            } else {
                log_debug("lease %" PRIu64 " expired (not renewed within %" PRId64 " ms); "
                          "deleting its keys", l->id, l->ttl_ms);
                lease_free(srv, l);
                continue;
            }
        }
        if (l->deadline < first) first = l->deadline;
    }
    lease_arm(srv, first);
}

/* One timer, armed for the earliest deadline, so an unrenewed lease is
 * noticed the moment it lapses; one already due, in 1 ms (a timer of 0
 * started from the lease timer would fire again in the same pass over the
 * timers, before the sockets are read). A renewal only moves a deadline
 * later and a revoke removes one: neither re-arms it (a timer that fires
 * early finds nothing due and re-arms), so the walk of every lease happens
 * once per firing, not once per renewal. */
static void lease_arm(store_server *srv, uint64_t first) {
    if (!srv->table.leases) {
        uv_timer_stop(&srv->lease_timer);
        return;
    }
    uint64_t now = uv_now(srv->loop), delay = first > now ? first - now : 1;
    srv->table.lease_due = now + delay;
    uv_timer_start(&srv->lease_timer, on_lease_timer, delay, 0);
}

static void lease_schedule(store_server *srv) {
    uint64_t first = UINT64_MAX;
    for (store_lease *l = srv->table.leases; l; l = l->next)
        if (l->deadline < first) first = l->deadline;
    lease_arm(srv, first);
}

static store_lease *lease_find(store_server *srv, uint64_t id) {
    if (!srv->table.lease_nbuckets) return NULL;
    for (store_lease *l = *lease_bucket(&srv->table, id); l; l = l->hnext)
        if (l->id == id) return l;
    return NULL;
}

/* ---- waits -------------------------------------------------------------- */

static store_waiter *waiter_new(store_conn *c, int kind, size_t n) {
    store_waiter *w = calloc(1, sizeof *w + n * sizeof(store_wnode));
    if (!w) {
        c->oom = 1;
        return NULL;
    }
    w->conn = c;
    w->since_ms = uv_now(c->srv->loop);
    w->kind = kind;
    w->n = n;
    for (size_t i = 0; i < n; i++) w->nodes[i].w = w;
    return w;
}

/* The entry of the next item in req's list, made if missing (to anchor a
 * waiter); NULL with the connection marked out of memory. */
static store_entry *next_entry(store_conn *c, const store_req *req, const uint8_t **cur,
                               store_item *it) {
    store_list_next(req, cur, it);
    store_entry *e = entry_get(c->srv, it->key);
    if (!e) c->oom = 1;
    return e;
}

/* WAIT: reply at once if every key exists, else wait for the missing ones. */
static void do_wait(store_conn *c, const store_req *req) {
    store_server *srv = c->srv;
    store_waiter *w = waiter_new(c, W_ALL, req->nitems);
    if (!w) return;
    const uint8_t *cur = req->list;
    for (uint64_t i = 0; i < req->nitems; i++) {
        store_item it;
        store_entry *e = next_entry(c, req, &cur, &it);
        if (!e) break;
        if (!present(e)) {
            node_link(e, &w->nodes[i], L_EXISTS);
            w->remaining++;
        }
    }
    if (c->oom || w->remaining == 0) {
        if (!c->oom) r_u8(c, STORE_WAIT_STOP_WAITING);
        waiter_free(srv, w);
        return;
    }
    c->wait = w;
}

/* WAIT_ANY: reply with the first condition that already holds, else wait
 * for the first that comes to hold. */
static void do_wait_any(store_conn *c, const store_req *req) {
    store_server *srv = c->srv;
    const uint8_t *cur = req->list;
    for (uint64_t i = 0; i < req->nitems; i++) {
        store_item it;
        store_list_next(req, &cur, &it);
        int exists = present(entry_find(srv, it.key));
        if (exists == (it.cond == STORE_COND_EXISTS)) {
            r_u8(c, STORE_WAIT_STOP_WAITING);
            r_u64(c, i);
            return;
        }
    }
    store_waiter *w = waiter_new(c, W_ANY, req->nitems);
    if (!w) return;
    cur = req->list;
    for (uint64_t i = 0; i < req->nitems; i++) {
        store_item it;
        store_entry *e = next_entry(c, req, &cur, &it);
        if (!e) {
            waiter_free(srv, w);
            return;
        }
        w->nodes[i].index = (uint32_t)i;
        node_link(e, &w->nodes[i], it.cond == STORE_COND_EXISTS ? L_EXISTS : L_ABSENT);
    }
    c->wait = w;
}

/* ---- operations ----------------------------------------------------------- */

/* Adds delta to the key's decimal value (a missing key counts as 0) and
 * stores the sum as decimal text; 0 with *sum set, or -1 if the connection
 * was dropped (a value that is not an integer, an overflow) or is out of
 * memory. */
static int add_to(store_conn *c, store_entry *e, int64_t delta, int64_t *sum) {
    int64_t cur;
    char k[80];
    if (!value_int(e, &cur)) {
        drop(c, "ADD on key '%s' whose value is not a decimal integer",
                  key_for_log(e->key, e->klen, k, sizeof k));
        return -1;
    }
    if (__builtin_add_overflow(cur, delta, sum)) {
        drop(c, "ADD of %" PRId64 " to key '%s' (%" PRId64 ") overflows 64 bits", delta,
                  key_for_log(e->key, e->klen, k, sizeof k), cur);
        return -1;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%" PRId64, *sum);
    return value_set(c, e, (const uint8_t *)text, (uint64_t)n) == 0 ? 0 : -1;
}

static void do_add(store_conn *c, const store_req *req) {
    store_entry *e = entry_get(c->srv, req->key);
    if (!e) {
        c->oom = 1;
        return;
    }
    int64_t sum;
    if (add_to(c, e, req->num, &sum) == 0) r_u64(c, (uint64_t)sum);
}

/* BARRIER, as torch's server does it: the key's value is the count of
 * arrivals (an ADD of 1, so the key is visible to GET, LIST_KEYS and
 * GETNUMKEYS); an arrival that brings it to world_size or more is answered
 * at once and releases every earlier one still waiting. Nothing resets
 * the count: entering again under the same key passes straight through,
 * and a cancelled or disconnected arrival still counts. */
static void do_barrier(store_conn *c, const store_req *req) {
    store_entry *e = entry_get(c->srv, req->key);
    if (!e) {
        c->oom = 1;
        return;
    }
    int64_t count;
    if (add_to(c, e, 1, &count) != 0) return;
    if (count >= req->num) {
        r_u8(c, STORE_WAIT_STOP_WAITING);
        return;
    }
    store_waiter *w = waiter_new(c, W_BARRIER, 1);
    if (!w) return;
    w->target = req->num;
    node_link(e, &w->nodes[0], L_BARRIER);
    c->wait = w;
}

static void do_compare_set(store_conn *c, const store_req *req) {
    store_entry *e = entry_find(c->srv, req->key);
    if (!e || !e->has_value) {
        if (req->expected.n != 0) { /* torch's answer: the expected value, unchanged */
            r_bytes(c, req->expected.p, req->expected.n);
            return;
        }
        e = entry_get(c->srv, req->key);
        if (e && value_set(c, e, req->value.p, req->value.n) == 0)
            r_bytes(c, req->value.p, req->value.n);
        else
            c->oom = 1;
        return;
    }
    if (e->vlen == req->expected.n && memcmp(e->val, req->expected.p, e->vlen) == 0)
        value_set(c, e, req->value.p, req->value.n);
    r_bytes(c, e->val, e->vlen);
}

static void do_append(store_conn *c, const store_req *req) {
    store_entry *e = entry_get(c->srv, req->key);
    uint64_t old = e && e->has_value ? e->vlen : 0;
    uint8_t *d = e ? malloc(old + req->value.n + 1) : NULL;
    if (!d) {
        c->oom = 1;
        return;
    }
    if (old) memcpy(d, e->val, old);
    memcpy(d + old, req->value.p, req->value.n);
    disown(e);
    value_put(c->srv, e, d, old + req->value.n);
}

static void do_queue_push(store_conn *c, const store_req *req) {
    store_entry *e = entry_get(c->srv, req->key);
    qitem *q = e ? malloc(sizeof *q + req->value.n) : NULL;
    if (!q) {
        c->oom = 1;
        return;
    }
    q->next = NULL;
    q->n = req->value.n;
    memcpy(q->data, req->value.p, q->n);
    if (e->qtail) e->qtail->next = q;
    else e->qhead = q;
    e->qtail = q;
    e->qlen++;
    wake_exists(c->srv, e, 1);
}

static void do_queue_pop(store_conn *c, const store_req *req) {
    store_entry *e = entry_find(c->srv, req->key);
    r_u64(c, e ? e->qlen : 0);
    if (!e || !e->qhead) return;
    qitem *q = e->qhead;
    e->qhead = q->next;
    if (!e->qhead) e->qtail = NULL;
    e->qlen--;
    r_bytes(c, q->data, q->n);
    free(q);
    if (!present(e)) wake_absent(c->srv, e);
    entry_maybe_free(c->srv, e);
}

static void do_list_keys(store_conn *c) {
    store_server *srv = c->srv;
    r_u64(c, srv->stats.keys);
    for (size_t i = 0; i < srv->table.nslots; i++) {
        store_entry *e = srv->table.slots[i];
        if (e && e->has_value) r_bytes(c, e->key, e->klen);
    }
}

static void do_hello(store_conn *c, const store_req *req) {
    const char *want = c->srv->token;
    if (want) {
        size_t n = strlen(want);
        unsigned diff = (unsigned)(n != req->token.n);
        for (size_t i = 0; i < req->token.n; i++) diff |= (unsigned)(want[i % n] ^ req->token.p[i]);
        if (diff) {
            drop(c, "presented a wrong token");
            return;
        }
    }
    c->authed = 1;
    r_u8(c, 0);
    r_u32(c, STORE_EXT_VERSION);
}

static void do_set_owned(store_conn *c, const store_req *req) {
    store_lease *l = NULL;
    if (req->id != 0 && !(l = lease_find(c->srv, req->id))) {
        r_u8(c, 1);
        return;
    }
    store_entry *e = entry_get(c->srv, req->key);
    if (!e || value_set(c, e, req->value.p, req->value.n) != 0) {
        c->oom = 1;
        return;
    }
    own(e, l ? NULL : c, l);
    r_u8(c, 0);
}

static void do_lease(store_conn *c, const store_req *req) {
    store_server *srv = c->srv;
    if (req->op == STORE_OP_LEASE_GRANT) {
        store_lease *l = calloc(1, sizeof *l);
        if (!l) {
            c->oom = 1;
            return;
        }
        l->id = srv->table.next_lease_id++;
        l->ttl_ms = req->num;
        lease_renewed_by(l, c);
        l->deadline = uv_now(srv->loop) + (uint64_t)req->num;
        if (lease_add(srv, l)) {
            lease_renewed_by(l, NULL);
            free(l);
            c->oom = 1;
            return;
        }
        /* armed for it unless an earlier deadline already is */
        if (!uv_is_active((uv_handle_t *)&srv->lease_timer) || l->deadline < srv->table.lease_due)
            lease_schedule(srv);
        r_u64(c, l->id);
        return;
    }
    store_lease *l = lease_find(srv, req->id);
    r_u8(c, l ? 0 : 1);
    if (!l) return;
    if (req->op == STORE_OP_LEASE_RENEW) {
        l->deadline = uv_now(srv->loop) + (uint64_t)l->ttl_ms;
        lease_renewed_by(l, c);
    } else {
        lease_free(srv, l);
    }
}

static void do_watch(store_conn *c, const store_req *req) {
    if (c->nwatches >= STORE_MAX_WATCHES) {
        c->refused = "more than 1024 WATCH_KEY registrations on one connection";
        return;
    }
    store_entry *e = entry_get(c->srv, req->key);
    store_wnode *n = e ? calloc(1, sizeof *n) : NULL;
    if (!n) {
        c->oom = 1;
        return;
    }
    n->conn = c;
    n->conn_next = c->watches;
    c->watches = n;
    c->nwatches++;
    node_link(e, n, L_WATCH);
    r_u8(c, STORE_WATCH_CALLBACK_REGISTERED);
}

/* The list requests that answer (or act) key by key. */
static void do_keys(store_conn *c, const store_req *req) {
    int all = 1;
    const uint8_t *cur = req->list;
    for (uint64_t i = 0; i < req->nitems && !c->oom; i++) {
        store_item it;
        store_list_next(req, &cur, &it);
        store_entry *e = entry_find(c->srv, it.key);
        if (req->op == STORE_OP_CHECK) {
            all &= present(e);
        } else if (req->op == STORE_OP_MULTI_GET) {
            if (e && e->has_value) r_bytes(c, e->val, e->vlen);
            else r_bytes(c, empty_bytes, 0);
        } else { /* MULTI_SET */
            if (!e && !(e = entry_get(c->srv, it.key))) c->oom = 1;
            else value_set(c, e, it.value.p, it.value.n);
        }
    }
    if (req->op == STORE_OP_CHECK) r_u8(c, all ? STORE_CHECK_READY : STORE_CHECK_NOT_READY);
}

void store_table_handle(store_conn *c, const store_req *req) {
    store_server *srv = c->srv;
    store_entry *e;
    switch (req->op) {
    case STORE_OP_VALIDATE: break; /* the generation was decided from it already */
    case STORE_OP_HELLO: do_hello(c, req); break;
    case STORE_OP_PING: r_u32(c, req->u32); break;
    case STORE_OP_SET:
        if (!(e = entry_get(srv, req->key))) c->oom = 1;
        else value_set(c, e, req->value.p, req->value.n);
        break;
    case STORE_OP_GET:
        e = entry_find(srv, req->key);
        if (e && e->has_value) r_bytes(c, e->val, e->vlen);
        else r_bytes(c, empty_bytes, 0);
        break;
    case STORE_OP_ADD: do_add(c, req); break;
    case STORE_OP_COMPARE_SET: do_compare_set(c, req); break;
    case STORE_OP_CHECK:
    case STORE_OP_MULTI_GET:
    case STORE_OP_MULTI_SET: do_keys(c, req); break;
    case STORE_OP_WAIT: do_wait(c, req); break;
    case STORE_OP_WAIT_ANY: do_wait_any(c, req); break;
    case STORE_OP_BARRIER: do_barrier(c, req); break;
    case STORE_OP_GETNUMKEYS: r_u64(c, srv->stats.keys); break;
    case STORE_OP_DELETE_KEY:
        e = entry_find(srv, req->key);
        r_u64(c, e && e->has_value ? 1 : 0);
        if (e) {
            value_delete(srv, e);
            entry_maybe_free(srv, e);
        }
        break;
    case STORE_OP_APPEND: do_append(c, req); break;
    case STORE_OP_CANCEL_WAIT:
        if (c->wait) waiter_cancel(srv, c->wait);
        r_u8(c, STORE_WAIT_CANCELED);
        break;
    case STORE_OP_QUEUE_PUSH: do_queue_push(c, req); break;
    case STORE_OP_QUEUE_POP: do_queue_pop(c, req); break;
    case STORE_OP_QUEUE_LEN:
        e = entry_find(srv, req->key);
        r_u64(c, e ? e->qlen : 0);
        break;
    case STORE_OP_LIST_KEYS: do_list_keys(c); break;
    case STORE_OP_WATCH_KEY: do_watch(c, req); break;
    case STORE_OP_SET_OWNED: do_set_owned(c, req); break;
    case STORE_OP_LEASE_GRANT:
    case STORE_OP_LEASE_RENEW:
    case STORE_OP_LEASE_REVOKE: do_lease(c, req); break;
    case STORE_OP_MUX: /* the network side's (store_server.c) */
    case STORE_OP_COUNT_: break;
    }
}

void store_table_cancel_wait(store_conn *c) {
    if (c->wait) waiter_cancel(c->srv, c->wait);
}

int store_table_is_cancel(const store_conn *c, uint8_t code) {
    int cancel = store_wire_code(c->gen, STORE_OP_CANCEL_WAIT);
    return cancel >= 0 && code == (uint8_t)cancel;
}

void store_table_conn_gone(store_server *srv, store_conn *c) {
    if (c->wait) waiter_cancel(srv, c->wait);
    for (store_lease *l = srv->table.leases; c->leases && l; l = l->next)
        if (l->renewer == c) lease_renewed_by(l, NULL);
    release_owned(srv, &c->owned);
    while (c->watches) {
        store_wnode *n = c->watches;
        store_entry *e = n->entry;
        c->watches = n->conn_next;
        node_unlink(n);
        free(n);
        entry_maybe_free(srv, e);
    }
}

void store_table_free(store_server *srv) {
    while (srv->table.leases) {
        store_lease *l = srv->table.leases;
        srv->table.leases = l->next;
        free(l);
    }
    free(srv->table.lease_buckets);
    srv->table.lease_buckets = NULL;
    srv->table.lease_nbuckets = srv->table.nleases = 0;
    for (size_t i = 0; i < srv->table.nslots; i++) {
        store_entry *e = srv->table.slots[i];
        if (!e) continue;
        while (e->qhead) {
            qitem *q = e->qhead;
            e->qhead = q->next;
            free(q);
        }
        free(e->val);
        free(e);
    }
    free(srv->table.slots);
    srv->table.slots = NULL;
    srv->table.nslots = srv->table.nentries = 0;
}

/* ---- stalls ------------------------------------------------------------- */

size_t store_table_stalls(store_server *srv, uint64_t now, uint64_t older_than,
                          store_stall *out, size_t max) {
    size_t n = 0;
    for (store_conn *c = srv->conns; c && n < max; c = c->next) {
        store_waiter *w = c->wait;
        if (!w || w->stall_said || w->kind == W_BARRIER || now - w->since_ms < older_than)
            continue;
        int took = 0;
        for (size_t i = 0; i < w->n && n < max; i++) {
            const store_wnode *node = &w->nodes[i];
            const store_entry *e = node->entry;
            if (!e || node->list != L_EXISTS) continue; /* here already, or not a wait for it */
            if (e->klen >= 8 && memcmp(e->key, "/ddprun/", 8) == 0) continue; /* an agent's */
            store_stall *s = &out[n++];
            s->conn = c;
            s->waited_ms = now - w->since_ms;
            size_t k = e->klen < sizeof s->key - 1 ? e->klen : sizeof s->key - 1;
            memcpy(s->key, e->key, k);
            s->key[k] = 0;
            took = 1;
        }
        if (took) w->stall_said = 1;
    }
    return n;
}
