/* The rendezvous algorithm over the store; see rdzv.h for the keys.
 *
 * Joining round r: take an index with ADD(njoined), publish a description
 * under node/<index>, then wait until the round is closed. Any member may
 * close it, with COMPARE_SET on `state` so exactly one count wins: at once
 * when max nodes have joined, or when the nodes the round expects (the
 * survivors of the previous round plus those waiting) are all there, else
 * last_call_timeout after min nodes were there. A node that finds the round
 * already closed registers under waiting/ (the running members see it and
 * restart to admit it) and waits for the next round to open, watching the
 * running round's members: one gone, and it ends the round itself (nobody
 * else may be left to: a requeued job's dead predecessor).
 *
 * The heartbeat has its own thread and store connection: its lease is
 * renewed every third of the interval whatever the rendezvous thread is
 * doing (a long read of the round, a wait, a starved process), so a slow
 * rendezvous is never taken for a lost node. */
#include "rendezvous/rdzv.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/thread_prio.h"
#include "rendezvous/rdzv_kv.h"

#define KEY_MAX RDZV_KEY_MAX
#define NSIDE 2
/* r<round>/node/<i> of a joiner that never filled its place (read_members) */
#define DEAD_SLOT "-"

struct rdzv {
    /* Guards the round state below, which the rendezvous thread writes
     * and the agent's main thread reads (rdzv_end_round, rdzv_poke). */
    pthread_mutex_t mu;
    rdzv_opts o;
    int in_job_store; /* RDZV_IN_JOB_STORE: the keys share the workers' store, and */
                      /* keys can be owned by a connection (alive/<agent>) */
    char *run_id, *hostname;
    char prefix[256];
    char agent_id[96];
    rdzv_kv *c;                 /* the rendezvous thread's handle; owns alive/<id> */
    rdzv_kv *side[NSIDE];       /* handles for other threads */
    /* The heartbeat (beat_main): its thread, its handle, its lease. */
    rdzv_kv *hb;
    pthread_t beat_thread;
    int beat_started;
    pthread_mutex_t beat_mu;
    pthread_cond_t beat_cv;     /* signalled to stop the heartbeat */
    int beat_stop;              /* under beat_mu */
    atomic_int beat_err;        /* a renewal failed for good: -errno, for the rendezvous */
    uint64_t lease;             /* the heartbeat's (its thread's, once started) */
    int64_t last_renew_ms;      /* (the heartbeat's thread's) */
    unsigned renewals;          /* (the heartbeat's thread's) */
    int round;                  /* the round last joined or seen */
    int member_round;           /* the round this agent is a member of; -1 none */
    int member_rank;            /* its node rank there */
    int poked_round;            /* rdzv_poke for this round, not yet seen; -1 none */
    int restart_count;
    int nnodes;
    rdzv_node nodes[RDZV_MAX_NODES];
    char *node_text;            /* the descriptions the nodes point into */
};

/* The job's key: prefix + formatted suffix. */
#define key(r, buf, ...) rdzv_key(buf, (r)->prefix, __VA_ARGS__)

static int set_str(rdzv_kv *c, const char *k, const char *v) {
    return kv_set(c, k, v, strlen(v));
}


/* The message for a call to the store (or etcd) that failed: where no
 * answer came in time (none of its servers: out of reach, or too slow) or
 * the connection broke for good, the store is lost and this node stops
 * (rdzv_lost_message says so, naming it); otherwise what failed. */
static int store_failed(rdzv *r, int rc, const char *what, char *err, size_t errlen) {
    if (rc == -EHOSTUNREACH || rc == -ETIMEDOUT || kv_broken(r->c))
        rdzv_lost_message(r, rc, err, errlen);
    else
        snprintf(err, errlen, "rendezvous '%s': %s: %s", r->run_id, what, strerror(-rc));
    return rc;
}

/* Notes a renewal: when, and for `ddprun status` beat/<agent> the
 * wall-clock time of it, at every third renewal (once a heartbeat
 * interval), where the store cannot tell when a lease was renewed (etcd
 * can, kv_renewed_age: there each write is a consensus round and a disk
 * sync, and one at every renewal was a third of an idle job's load). On
 * the heartbeat's thread. (After the renewal, not before: should the
 * store stall with this write unanswered, the lease has its whole
 * lifetime left, and the store counts the write, read once it runs
 * again, as a sign of the lease's owner.) */
static int beat_time(rdzv *r) {
    char k[KEY_MAX], v[32];
    r->last_renew_ms = clock_now_ms();
    if (r->o.on_beat) r->o.on_beat(r->o.ctx, r->last_renew_ms);
    if (r->renewals++ % 3 || r->hb->ops->renewed_age) return 0;
    snprintf(v, sizeof v, "%.3f", clock_wall_s());
    return set_str(r->hb, key(r, k, "beat/%s", r->agent_id), v);
}

/* A fresh heartbeat: a new lease and hb/<agent> bound to it. A lease that
 * lapsed before its key was written (a store slower to answer than the
 * heartbeat: etcd given 1,000 agents' joins at once on two cores) is
 * granted again, up to BEAT_TRIES times; then -ETIME. */
#define BEAT_TRIES 5
static int beat_again(rdzv *r) {
    char k[KEY_MAX];
    int rc = -ENOENT;
    for (int i = 0; rc == -ENOENT && i < BEAT_TRIES; i++) {
        if (i) log_debug("rendezvous: the heartbeat's lease lapsed before its key was written; "
                         "granting another");
        rc = kv_lease_grant(r->hb, (int64_t)(r->o.heartbeat * 1000), &r->lease);
        if (rc == 0) rc = kv_set_owned(r->hb, key(r, k, "hb/%s", r->agent_id), "1", 1, r->lease);
    }
    if (rc == -ENOENT) rc = -ETIME;
    if (rc == 0) { /* beat/ comes with the first renewal: one write fewer per agent */
        r->last_renew_ms = clock_now_ms();
        if (r->o.on_beat) r->o.on_beat(r->o.ctx, r->last_renew_ms);
    }
    return rc;
}

/* Renews the heartbeat lease. A lease that lapsed (this node was cut off
 * for longer than a heartbeat: the others have re-formed without it) is
 * granted anew, so the node comes back as a new one, admitted at the next
 * round. */
static int renew(rdzv *r) {
    int rc = kv_lease_renew(r->hb, r->lease);
    if (rc == -ENOENT) {
        log_warn("rendezvous: this agent's heartbeat lapsed (the store saw no renewal for %.1f s); "
                 "it rejoins as a new node",
                 r->o.heartbeat);
        return beat_again(r);
    }
    if (rc == 0) rc = beat_time(r);
    return rc;
}

/* The heartbeat's thread: a renewal every third of the interval until
 * rdzv_close, each sent a third after the one before was sent (not after
 * its answer came: a store slow to answer must not stretch the renewals
 * it reads past the lease). A renewal that fails is tried again at the
 * next third (a store that is slow to answer, or restarting, may still
 * take it); a handle broken for good (the store gone, or rdzv_cancel) ends
 * the thread, and the rendezvous thread's next wait returns the error. */
static void *beat_main(void *p) {
    rdzv *r = p;
    if (thread_prio_raise(THREAD_PRIO_CONTROL) == 0)
        log_debug("rendezvous: the heartbeat runs at nice %d", THREAD_PRIO_CONTROL);
    int64_t every = (int64_t)(r->o.heartbeat * 1000 / 3);
    if (every < 10) every = 10;
    int64_t due = r->last_renew_ms + every;
    pthread_mutex_lock(&r->beat_mu);
    while (!r->beat_stop) {
        while (!r->beat_stop && clock_now_ms() < due) {
            int64_t ms = due - clock_now_ms();
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            ts.tv_sec += ms / 1000;
            ts.tv_nsec += (ms % 1000) * 1000000;
            if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
            pthread_cond_timedwait(&r->beat_cv, &r->beat_mu, &ts);
        }
        if (r->beat_stop) break;
        pthread_mutex_unlock(&r->beat_mu);
        due = clock_now_ms() + every; /* the next, a third after this one leaves */
        int rc = renew(r);
        if (rc && kv_broken(r->hb)) {
            atomic_store(&r->beat_err, rc);
            pthread_mutex_lock(&r->beat_mu);
            break;
        }
        pthread_mutex_lock(&r->beat_mu);
    }
    pthread_mutex_unlock(&r->beat_mu);
    return NULL;
}

static int beat_start(rdzv *r) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->beat_cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r->beat_mu, NULL);
    int rc = pthread_create(&r->beat_thread, NULL, beat_main, r);
    if (rc) return -rc;
    r->beat_started = 1;
    return 0;
}

static void beat_stop(rdzv *r) {
    if (!r->beat_started) return;
    pthread_mutex_lock(&r->beat_mu);
    r->beat_stop = 1;
    pthread_cond_signal(&r->beat_cv);
    pthread_mutex_unlock(&r->beat_mu);
    pthread_join(r->beat_thread, NULL);
    r->beat_started = 0;
    pthread_cond_destroy(&r->beat_cv);
    pthread_mutex_destroy(&r->beat_mu);
}

/* Takes a poke for this agent's round, if one came. */
static int take_poke(rdzv *r) {
    pthread_mutex_lock(&r->mu);
    int poked = r->poked_round >= 0 && r->poked_round == r->member_round;
    if (poked) r->poked_round = -1;
    pthread_mutex_unlock(&r->mu);
    return poked;
}

/* WAIT_ANY until `deadline_ms`, in slices of a third of the heartbeat, so
 * that a heartbeat broken for good (its store gone) is noticed.
 * -EINTR: rdzv_poke, where the store's handle is interrupted rather than
 * woken by a key, and only when `pokeable`; other waits go on. */
static int wait_any_until(rdzv *r, size_t n, const uint8_t *conds, const char *const *keys,
                          int64_t deadline_ms, int pokeable, size_t *idx) {
    int slice = (int)(r->o.heartbeat * 1000 / 3);
    if (slice < 10) slice = 10;
    for (;;) {
        int rc = atomic_load(&r->beat_err); /* the heartbeat's store is gone */
        if (rc) return rc;
        int64_t left = deadline_ms - clock_now_ms();
        if (left <= 0) return -ETIMEDOUT;
        rc = kv_wait_any(r->c, n, conds, keys, left < slice ? (int)left : slice, idx);
        if (rc == -EINTR && pokeable && take_poke(r)) return rc;
        if (rc != -ETIMEDOUT && rc != -EINTR) return rc;
    }
}

/* Adds to keys/conds, from nk, the keys whose absence says agent `id` is
 * gone: its heartbeat, and on a store its connection's alive/ key (buf
 * holds them); returns the new count. */
static size_t watch_gone(const rdzv *r, const char *id, char (*buf)[KEY_MAX], const char **keys,
                         uint8_t *conds, size_t nk) {
    if (r->in_job_store) keys[nk] = key(r, buf[nk], "alive/%s", id), conds[nk++] = STORE_COND_ABSENT;
    keys[nk] = key(r, buf[nk], "hb/%s", id), conds[nk++] = STORE_COND_ABSENT;
    return nk;
}

/* ---- opening ------------------------------------------------------------- */

static void make_agent_id(rdzv *r) {
    unsigned rnd = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f) {
        if (fread(&rnd, sizeof rnd, 1, f) != 1) rnd = 0;
        fclose(f);
    }
    snprintf(r->agent_id, sizeof r->agent_id, "%s:%d:%08x", r->hostname, (int)getpid(), rnd);
}

/* The first request failed: the place answers but will not serve (a store
 * that is not ours, etcd refusing us), or it does not answer after all. */
static void first_request_failed(const rdzv *r, int rc, char *err, size_t errlen) {
    rdzv_kv *probe = NULL;
    char why[1024] = "";
    if (rc == -ETIME)
        snprintf(err, errlen, "%s answers slower than the heartbeat: %d leases of %.1f s in a "
                 "row lapsed before the key that goes with each was written (a store host "
                 "starved of CPU? raise --rdzv-conf heartbeat=S, or give the store a host of "
                 "its own)", r->c->where, BEAT_TRIES, r->o.heartbeat);
    else if (r->o.backend->open(&r->o.where, 0, &probe, why, sizeof why) != 0)
        snprintf(err, errlen, "%s", why);
    else if (r->in_job_store)
        snprintf(err, errlen, "%s is not a ddprun store (%s)", r->c->where, strerror(-rc));
    else
        snprintf(err, errlen, "%s: %s", r->c->where, strerror(-rc));
    kv_close(probe);
}

/* The settings every node of the job must share, as their flags say them. */
static void shared_settings(const rdzv *r, char *out, size_t n) {
    if (r->o.min_nodes == r->o.max_nodes)
        snprintf(out, n, "--nnodes=%d --max-restarts=%d", r->o.min_nodes, r->o.max_restarts);
    else
        snprintf(out, n, "--nnodes=%d:%d --max-restarts=%d", r->o.min_nodes, r->o.max_nodes,
                 r->o.max_restarts);
}

/* The first node to come sets the job's shared settings ("settings":
 * "<flags>\t<host>", COMPARE_SET); a node whose own differ is refused,
 * both named (agents that disagree on --nnodes would each count a round
 * complete at its own size). */
static int agree_on_settings(rdzv *r, char *err, size_t errlen) {
    char k[KEY_MAX], mine[160], v[600];
    shared_settings(r, mine, sizeof mine);
    snprintf(v, sizeof v, "%s\t%s", mine, r->hostname);
    uint8_t *cur = NULL;
    size_t cn = 0;
    int rc = kv_compare_set(r->c, key(r, k, "settings"), "", 0, v, strlen(v), &cur, &cn);
    if (rc) return store_failed(r, rc, "cannot agree on the job's settings", err, errlen);
    const char *tab = memchr(cur, '\t', cn);
    size_t flen = tab ? (size_t)(tab - (const char *)cur) : cn;
    if (flen != strlen(mine) || memcmp(cur, mine, flen) != 0) {
        snprintf(err, errlen,
                 "rendezvous '%s': this node's %s differ from the job's %.*s (node %.*s's, the "
                 "first to join): every node of a job must give the same --nnodes and "
                 "--max-restarts",
                 r->run_id, mine, (int)flen, (const char *)cur,
                 tab ? (int)(cn - flen - 1) : 1, tab ? tab + 1 : "?");
        rc = -EINVAL;
    }
    free(cur);
    return rc;
}

int rdzv_open(const rdzv_opts *o, rdzv **out, char *err, size_t errlen) {
    *out = NULL;
    rdzv *r = calloc(1, sizeof *r);
    if (!r) return -ENOMEM;
    r->o = *o;
    /* The caller's options may live on its stack: keep a copy of the
     * store address that every later round's description carries. */
    r->o.store_addr = o->store_addr ? strdup(o->store_addr) : NULL;
    r->o.worker_ports = o->worker_ports ? strdup(o->worker_ports) : NULL;
    r->in_job_store = (o->backend->flags & RDZV_IN_JOB_STORE) != 0;
    r->run_id = strdup(o->run_id);
    r->hostname = strdup(o->hostname);
    r->member_round = r->member_rank = -1;
    r->poked_round = -1;
    pthread_mutex_init(&r->mu, NULL);
    snprintf(r->prefix, sizeof r->prefix, "%s%s/", o->key_prefix ? o->key_prefix : "/ddprun/",
             o->run_id);
    make_agent_id(r);
    /* The heartbeat's lease, the first request, finds out whether the
     * place serves us; if not, first_request_failed() asks why. */
    int rc = o->backend->open(&o->where, 1, &r->c, err, errlen);
    if (rc == 0) rc = o->backend->open(&o->where, 1, &r->hb, err, errlen);
    for (int i = 0; rc == 0 && i < NSIDE; i++)
        rc = o->backend->open(&o->where, 1, &r->side[i], err, errlen);
    if (rc) {
        rdzv_close(r);
        return rc;
    }
    /* The endpoint's strings may live on the caller's stack too. */
    memset(&r->o.where, 0, sizeof r->o.where);
    char k[KEY_MAX];
    rc = beat_again(r);
    /* alive/ goes with the store connection; elsewhere it would go with the
     * heartbeat's lease, as hb/ does: one key says it there */
    if (rc == 0 && r->in_job_store)
        rc = kv_set_owned(r->c, key(r, k, "alive/%s", r->agent_id), "1", 1, 0);
    if (rc) {
        r->o.where = o->where;
        first_request_failed(r, rc, err, errlen);
        rdzv_close(r);
        return rc;
    }
    if ((rc = agree_on_settings(r, err, errlen)) || (rc = beat_start(r))) {
        if (rc == -EAGAIN) snprintf(err, errlen, "cannot start the heartbeat's thread");
        rdzv_close(r);
        return rc;
    }
    *out = r;
    return 0;
}

void rdzv_cancel(rdzv *r) {
    if (!r) return;
    if (r->c) r->c->ops->cancel(r->c);
    if (r->hb) r->hb->ops->cancel(r->hb);
    for (int i = 0; i < NSIDE; i++)
        if (r->side[i]) r->side[i]->ops->cancel(r->side[i]);
}

void rdzv_close(rdzv *r) {
    if (!r) return;
    if (r->beat_started) r->hb->ops->cancel(r->hb); /* a renewal under way ends now */
    beat_stop(r);
    kv_close(r->hb);
    kv_close(r->c);
    for (int i = 0; i < NSIDE; i++) kv_close(r->side[i]);
    free(r->node_text);
    free(r->run_id);
    free(r->hostname);
    free((char *)r->o.store_addr);
    free((char *)r->o.worker_ports);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

const char *rdzv_agent_id(const rdzv *r) { return r->agent_id; }

/* ---- the end of the job -------------------------------------------------- */

/* Closes the job: no round follows. The first word stays (1: every node
 * finished; RDZV_CLOSED_KEPT: one node's workers said the result is kept). */
static int close_job(rdzv *r, int how) {
    char k[KEY_MAX], v[16];
    uint8_t *out = NULL;
    size_t on;
    snprintf(v, sizeof v, "%d", how);
    int rc = kv_compare_set(r->c, key(r, k, "closed"), "", 0, v, strlen(v), &out, &on);
    free(out);
    return rc;
}

/* This agent's word at round's exit barrier that its workers finished:
 * r<round>/done/<id>, counted; the last one closes the job (for nodes
 * still arriving) before it lets the others go (alldone). */
static int say_done(rdzv *r, int round) {
    char k[KEY_MAX];
    int64_t ndone;
    int rc = set_str(r->c, key(r, k, "r%d/done/%s", round, r->agent_id), "1");
    if (rc == 0) rc = kv_add(r->c, key(r, k, "r%d/ndone", round), 1, &ndone);
    if (rc == 0 && ndone >= r->nnodes) rc = close_job(r, 1);
    if (rc == 0 && ndone >= r->nnodes) rc = set_str(r->c, key(r, k, "r%d/alldone", round), "1");
    return rc;
}

/* This node was a member of the round in which another node's workers
 * finished the job and said its result is kept (RDZV_CLOSED_KEPT); its own
 * failure, whatever it was, came after the end. It says at that round's
 * barrier that it finished too, so that the node that kept the result can
 * go. */
static int job_kept(rdzv *r, char *err, size_t errlen) {
    char k[KEY_MAX], by[300] = "another node";
    uint8_t *v = NULL;
    size_t vn;
    if (kv_try_get(r->c, key(r, k, "kept_by"), &v, &vn) == 0)
        snprintf(by, sizeof by, "node %.*s", (int)vn, (char *)v);
    free(v);
    int rc = say_done(r, r->member_round);
    if (rc) return store_failed(r, rc, "cannot say this node is done", err, errlen);
    snprintf(err, errlen,
             "rendezvous '%s': %s had finished the job and kept its result (a data-parallel "
             "job's ranks hold one state): this node's failure came after the end and nothing "
             "is lost; this node finishes too",
             r->run_id, by);
    return RDZV_JOB_KEPT;
}

/* The job is closed (-EPIPE from a wait; `how` its "closed", 0 when not
 * read yet): for a member of its last round whose result was kept
 * elsewhere, RDZV_JOB_KEPT; else -EPIPE, said. */
static int job_closed(rdzv *r, long how, char *err, size_t errlen) {
    char k[KEY_MAX];
    kv_long q = {key(r, k, "closed"), 0, 0, how};
    if (r->member_round >= 0 && (how || kv_get_longs(r->c, 1, &q) == 0) &&
        q.val == RDZV_CLOSED_KEPT)
        return job_kept(r, err, errlen);
    snprintf(err, errlen,
             "rendezvous '%s' is closed: the job has finished%s", r->run_id,
             r->member_round >= 0 ? ""
                                  : " (this node came after its end, with nothing to do; a new "
                                    "job needs a --rdzv-id of its own)");
    return -EPIPE;
}

/* ---- joining a round ---------------------------------------------------- */

/* A joiner's description: agent id, host, workers, the rank it asked for,
 * its own store, its workers' ports, and the round it was last a member of
 * with its rank there ("round:rank"; an older ddprun writes the first four
 * or six fields). */
static void describe_self(const rdzv *r, char *out, size_t n) {
    /* (member_round is written on this thread: no lock to read it here) */
    snprintf(out, n, "%s\t%s\t%d\t%d\t%s\t%s\t%d:%d", r->agent_id, r->hostname, r->o.nproc,
             r->o.node_rank, r->o.store_addr ? r->o.store_addr : "-",
             r->o.worker_ports ? r->o.worker_ports : "-", r->member_round, r->member_rank);
}

/* The next tab-separated field of *s, cut off in place; NULL when there is
 * none. (sscanf took each agent 2% of its time reading a round of 1,000
 * nodes.) */
static const char *field(char **s) {
    char *f = *s;
    if (!f) return NULL;
    char *tab = strchr(f, '\t');
    if (tab) *tab = 0;
    *s = tab ? tab + 1 : NULL;
    return f;
}

static int int_field(char **s, int *v) {
    const char *f = field(s);
    char *end;
    if (!f) return -1;
    long x = strtol(f, &end, 10);
    if (end == f || *end || x < INT_MIN || x > INT_MAX) return -1;
    *v = (int)x;
    return 0;
}

int rdzv_parse_node(char *s, rdzv_node *node) {
    memset(node, 0, sizeof *node);
    node->prev_round = node->prev_rank = -1;
    node->store = node->worker_ports = "-";
    char *p = s;
    if (!(node->agent_id = field(&p)) || !node->agent_id[0] || !(node->host = field(&p)) ||
        int_field(&p, &node->nproc) || int_field(&p, &node->node_rank_hint))
        return -EPROTO;
    const char *store = field(&p), *ports = field(&p), *prev = field(&p);
    if (!store || !ports) return 0; /* an older ddprun's four or six fields */
    node->store = store, node->worker_ports = ports;
    const char *colon;
    char *end;
    if (prev && (colon = strchr(prev, ':'))) { /* "round:rank" */
        long round = strtol(prev, &end, 10), rank = strtol(colon + 1, &end, 10);
        if (end != colon + 1 && !*end) node->prev_round = (int)round, node->prev_rank = (int)rank;
    }
    return 0;
}

/* The hosts that joined round `round`, for a timeout message. */
static void joined_hosts(rdzv *r, int round, long n, char *out, size_t cap) {
    size_t len = 0;
    out[0] = 0;
    for (long i = 1; i <= n && len + 8 < cap; i++) {
        char k[KEY_MAX];
        uint8_t *v = NULL;
        size_t vn;
        rdzv_node node;
        if (kv_try_get(r->c, key(r, k, "r%d/node/%ld", round, i), &v, &vn) != 0) continue;
        if (rdzv_parse_node((char *)v, &node) == 0)
            len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "", node.host);
        free(v);
    }
}

/* Waits until round `round` is closed and returns its node count. The
 * caller has just joined as the n-th node and read `expect`; the round was
 * open when it looked. -EPIPE if the job closes meanwhile. */
static int expected_nodes(rdzv *r, rdzv_kv *c, int round, long *expect);

static int wait_closed(rdzv *r, int round, int64_t n, long expect, int64_t join_deadline,
                       long *closed, int *closer, char *err, size_t errlen) {
    const int64_t self = n;
    char kstate[KEY_MAX], kjoin[KEY_MAX], knext[KEY_MAX], kclosed[KEY_MAX];
    key(r, kstate, "r%d/state", round);
    key(r, kjoin, "r%d/njoined", round);
    long st = -1;
    int rc = 0;
    int64_t last_call = 0;
    for (int again = 0; rc == 0; again = 1) {
        if (again) { /* both in one request where the backend can */
            kv_long q[] = {{kjoin, 1, 0, 0}, {kstate, 0, -1, 0}};
            if ((rc = kv_get_longs(r->c, 2, q))) break;
            n = q[0].val, st = q[1].val;
        }
        if (st >= 0) {
            *closed = st;
            return 0;
        }
        if (n >= r->o.max_nodes || (n >= r->o.min_nodes && n >= expect)) {
            /* the count, then the closer's id: readers take the number
             * (strtol), and the closer knows the round is its own */
            char v[160];
            snprintf(v, sizeof v, "%lld %s", (long long)n, r->agent_id);
            uint8_t *out = NULL;
            size_t on;
            rc = kv_compare_set(r->c, kstate, "", 0, v, strlen(v), &out, &on);
            *closer = rc == 0 && on == strlen(v) && memcmp(out, v, on) == 0;
            free(out);
            continue;
        }
        if (n >= r->o.min_nodes && !last_call)
            last_call = clock_now_ms() + (int64_t)(r->o.last_call_timeout * 1000);
        int64_t deadline = last_call ? last_call : join_deadline;
        /* The last joiner so far, a member of the round before, counts
         * again every heartbeat of the last call: a member alive when the
         * round opened (so expected) and lost since would otherwise hold
         * the round for the whole last call. */
        int64_t beat_ms = (int64_t)(r->o.heartbeat * 1000);
        int recount = last_call && n == self && round > 0 && r->member_round == round - 1 &&
                      deadline > clock_now_ms() + beat_ms;
        if (recount) deadline = clock_now_ms() + beat_ms;
        /* Woken by the arrival that can close the round (the min-th node
         * starts the last call; the expected one closes it), not by each
         * one: on etcd every wake-up is a few requests of every waiter. */
        long target = n < r->o.min_nodes ? r->o.min_nodes : expect;
        if (target > r->o.max_nodes) target = r->o.max_nodes;
        if (target <= n) target = n + 1;
        /* and the job's end: a member of the last round, whose result was
         * kept by another member, waits for no round */
        const char *keys[] = {kstate, key(r, knext, "r%d/node/%ld", round, target),
                              key(r, kclosed, "closed")};
        const uint8_t conds[] = {STORE_COND_EXISTS, STORE_COND_EXISTS, STORE_COND_EXISTS};
        size_t idx;
        rc = wait_any_until(r, 3, conds, keys, deadline, 0, &idx);
        if (rc == 0 && idx == 2) return -EPIPE;
        if (rc == -ETIMEDOUT && recount) {
            long now_expected = expect;
            rc = expected_nodes(r, r->c, round - 1, &now_expected);
            if (rc == 0 && now_expected < expect) {
                log_info("rendezvous '%s': round %d: %ld of the %ld nodes it expected %s no "
                         "longer alive; it now waits for %ld (%lld here)",
                         r->run_id, round, expect - now_expected, expect,
                         expect - now_expected == 1 ? "is" : "are", now_expected, (long long)n);
                expect = now_expected;
            }
        } else if (rc == -ETIMEDOUT && last_call) {
            expect = n; /* last call is over: close with whoever is here */
            rc = 0;
        } else if (rc == -ETIMEDOUT) {
            char hosts[1024];
            joined_hosts(r, round, n, hosts, sizeof hosts);
            snprintf(err, errlen,
                     "rendezvous '%s' timed out after %.0f s: %lld of min %d nodes joined%s%s%s",
                     r->run_id, r->o.join_timeout, (long long)n, r->o.min_nodes,
                     n ? " (" : "", hosts, n ? ")" : "");
            return -ETIMEDOUT;
        }
    }
    return store_failed(r, rc, "cannot wait for the round to close", err, errlen);
}

/* Nodes that asked for a rank (--node-rank) first, by that rank; then the
 * rest in natural order of host names (node2 before node10), then by
 * agent id. A total order, so every agent computes the same ranks. */
static int node_cmp(const void *a, const void *b) {
    const rdzv_node *x = a, *y = b;
    int hx = x->node_rank_hint >= 0, hy = y->node_rank_hint >= 0;
    if (hx != hy) return hy - hx;
    if (hx && x->node_rank_hint != y->node_rank_hint)
        return (x->node_rank_hint > y->node_rank_hint) - (x->node_rank_hint < y->node_rank_hint);
    int c = strverscmp(x->host, y->host);
    return c ? c : strcmp(x->agent_id, y->agent_id);
}

static int node_cmp_p(const void *a, const void *b) {
    return node_cmp(*(const rdzv_node *const *)a, *(const rdzv_node *const *)b);
}

/* Survivors of the last round keep their ranks where the round has them
 * (their workers keep their global ranks, and their snapshots stay on
 * their node); the other nodes fill the free ranks in node_cmp's order.
 * Not where a node asked for a rank (--node-rank): those order the round.
 * p: the nodes in node_cmp's order; out: the ranks' order. */
static void keep_survivor_ranks(rdzv_node **p, int n, rdzv_node **out, char *taken) {
    /* the latest round any of them was a member of; none where a node asked
     * for a rank (node_cmp puts those first) */
    int last = -1;
    for (int i = 0; i < n && p[0]->node_rank_hint < 0; i++)
        if (p[i]->prev_round > last) last = p[i]->prev_round;
    memset(taken, 0, (size_t)n);
    for (int i = 0; last >= 0 && i < n; i++) {
        int r = p[i]->prev_rank;
        if (p[i]->prev_round != last || r < 0 || r >= n || taken[r]) continue;
        out[r] = p[i], taken[r] = 1, p[i] = NULL;
    }
    for (int i = 0, slot = 0; i < n; i++) {
        if (!p[i]) continue;
        while (taken[slot]) slot++;
        out[slot] = p[i], taken[slot] = 1;
    }
}

/* Orders the round's n nodes into ranks: node_cmp's order, then the
 * survivors' ranks kept (not with strict ranks). Every agent reads the
 * same descriptions, so all compute the same. */
static int order_nodes(rdzv_node *nodes, int n, int strict) {
    rdzv_node **p = malloc((size_t)n * sizeof *p), **ranked = malloc((size_t)n * sizeof *ranked);
    rdzv_node *sorted = malloc((size_t)n * sizeof *sorted);
    char *taken = malloc((size_t)n + 1);
    int rc = p && ranked && sorted && taken ? 0 : -ENOMEM;
    if (rc == 0) {
        for (int i = 0; i < n; i++) p[i] = &nodes[i];
        qsort(p, (size_t)n, sizeof *p, node_cmp_p);
        if (!strict) keep_survivor_ranks(p, n, ranked, taken);
        rdzv_node **order = strict ? p : ranked;
        for (int i = 0; i < n; i++) sorted[i] = *order[i];
        memcpy(nodes, sorted, (size_t)n * sizeof *nodes);
    }
    free(p), free(ranked), free(sorted), free(taken);
    return rc;
}

/* Where ranges are costly (rdzv_kv_ops.ranges_costly), the node that
 * closed a round writes its members' descriptions as one value,
 * r<round>/members, one a line (a dead place's tombstone included), and
 * the others read that: on etcd, 1,000 agents each reading 1,000 keys
 * was the largest load of a round's forming. */
static int members_published(const rdzv *r) { return r->c->ops->ranges_costly; }

/* r<round>/members into vals/lens, for places 1..n; -ENOENT where it is
 * missing or does not hold n lines (the places are then read one by one). */
static int read_published(rdzv *r, int round, long n, uint8_t **vals, size_t *lens) {
    char k[KEY_MAX];
    uint8_t *v = NULL;
    size_t vn = 0, at = 0;
    int rc = kv_try_get(r->c, key(r, k, "r%d/members", round), &v, &vn);
    long i = 0;
    for (; rc == 0 && i < n && at < vn; i++) {
        const uint8_t *nl = memchr(v + at, '\n', vn - at);
        size_t len = nl ? (size_t)(nl - (v + at)) : vn - at;
        if (!(vals[i] = malloc(len + 1))) rc = -ENOMEM;
        else memcpy(vals[i], v + at, len), lens[i] = len;
        at += len + 1;
    }
    free(v);
    if (rc == 0 && (i != n || at != vn + 1)) rc = -ENOENT; /* n lines, no more, no fewer */
    for (long j = 0; rc && j < i; j++) free(vals[j]), vals[j] = NULL, lens[j] = 0;
    return rc;
}

/* The closer's: vals/lens (places 1..n, each filled) as r<round>/members.
 * A value the store refuses (too large) is written empty, so that the
 * others stop waiting for it and read the places. */
static void publish_members(rdzv *r, int round, long n, uint8_t **vals, const size_t *lens) {
    char k[KEY_MAX];
    buf_t b = {0};
    int rc = 0;
    for (long i = 0; rc == 0 && i < n; i++)
        rc = buf_append(&b, vals[i], lens[i]) || (i + 1 < n && buf_append(&b, "\n", 1)) ? -ENOMEM : 0;
    key(r, k, "r%d/members", round);
    if (rc == 0) rc = kv_set(r->c, k, b.data, b.len);
    if (rc) {
        log_debug("rendezvous '%s': round %d: its %ld members not written as one value (%s); "
                  "each reads them one by one", r->run_id, round, n, strerror(-rc));
        kv_set(r->c, k, "", 0);
    }
    buf_free(&b);
}

/* A member that did not close the round: until the closer has written
 * the members (or two heartbeats and a second: it died meanwhile; then
 * the places are read one by one). Outside r->mu: the wait can be long. */
static int wait_published(rdzv *r, int round) {
    char k[KEY_MAX];
    const char *keys[] = {key(r, k, "r%d/members", round)};
    const uint8_t cond = STORE_COND_EXISTS;
    size_t idx;
    int64_t until = clock_now_ms() + (int64_t)(2 * r->o.heartbeat * 1000) + 1000;
    int rc = wait_any_until(r, 1, &cond, keys, until, 0, &idx);
    return rc == -ETIMEDOUT ? 0 : rc;
}

/* Reads the members' descriptions and orders them into ranks; the closer
 * of the round (closer) then writes them as one value where the backend
 * wants that (members_published), and the others read that value. */
static int read_members(rdzv *r, int round, long n, int closer, char *err, size_t errlen) {
    if (n > RDZV_MAX_NODES) {
        snprintf(err, errlen, "rendezvous '%s': %ld nodes exceed the limit of %d", r->run_id, n,
                 RDZV_MAX_NODES);
        return -E2BIG;
    }
    char **keys = calloc((size_t)n, sizeof *keys);
    uint8_t **vals = calloc((size_t)n, sizeof *vals);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    int rc = keys && vals && lens ? 0 : -ENOMEM;
    for (long i = 0; rc == 0 && i < n; i++) {
        keys[i] = malloc(KEY_MAX);
        if (!keys[i]) rc = -ENOMEM;
        else key(r, keys[i], "r%d/node/%ld", round, i + 1);
    }
    int published = -ENOENT;
    if (rc == 0 && members_published(r) && !closer)
        rc = (published = read_published(r, round, n, vals, lens)) == -ENOENT ? 0 : published;
    if (rc == 0 && published) rc = kv_multi_get(r->c, (size_t)n, (const char *const *)keys, vals, lens);
    /* A description not yet written after its index: its joiner writes it
     * next, unless it died between the two. Past a heartbeat the slot is
     * closed for good with a tombstone, COMPARE_SET against the joiner's
     * own, so every member reads the same winner (a joiner that loses
     * waits for the next round). */
    int64_t give_up = clock_now_ms() + (int64_t)((r->o.heartbeat > 1 ? r->o.heartbeat : 1) * 1000);
    for (long i = 0; rc == 0 && i < n; i++) {
        if (lens[i]) continue;
        const uint8_t cond = STORE_COND_EXISTS;
        size_t idx;
        free(vals[i]);
        vals[i] = NULL;
        rc = wait_any_until(r, 1, &cond, (const char *const *)&keys[i], give_up, 0, &idx);
        if (rc == -ETIMEDOUT)
            rc = kv_compare_set(r->c, keys[i], "", 0, DEAD_SLOT, strlen(DEAD_SLOT), &vals[i],
                                &lens[i]);
        else if (rc == 0)
            rc = kv_try_get(r->c, keys[i], &vals[i], &lens[i]);
    }
    if (rc == 0 && closer && members_published(r)) publish_members(r, round, n, vals, lens);
    /* the descriptions, each NUL-terminated, in one buffer that the nodes
     * point into until the next round is read */
    size_t total = 0;
    for (long i = 0; rc == 0 && i < n; i++) total += lens[i] + 1;
    char *text = rc == 0 ? malloc(total ? total : 1) : NULL;
    if (rc == 0 && !text) rc = -ENOMEM;
    long live = 0;
    for (size_t i = 0, at = 0; rc == 0 && i < (size_t)n; i++) {
        if (lens[i] == strlen(DEAD_SLOT) && memcmp(vals[i], DEAD_SLOT, lens[i]) == 0) continue;
        char *desc = text + at;
        memcpy(desc, vals[i], lens[i]);
        desc[lens[i]] = 0;
        at += lens[i] + 1;
        rc = rdzv_parse_node(desc, &r->nodes[live++]);
    }
    if (rc == 0) {
        free(r->node_text);
        r->node_text = text;
    } else {
        free(text);
    }
    if (rc == 0 && live < n)
        log_warn("rendezvous '%s': round %d: %ld of its %ld joiners never said who they are (died "
                 "between taking a place and filling it): the round goes on without them",
                 r->run_id, round, n - live, n);
    for (long i = 0; i < n && keys; i++) {
        free(keys[i]);
        if (vals) free(vals[i]);
    }
    free(keys);
    free(vals);
    free(lens);
    if (rc) {
        char what[64];
        snprintf(what, sizeof what, "cannot read the members of round %d", round);
        return store_failed(r, rc, what, err, errlen);
    }
    n = live;
    r->nnodes = (int)n;
    if ((rc = order_nodes(r->nodes, (int)n, r->o.strict_ranks))) {
        snprintf(err, errlen, "rendezvous '%s': out of memory ordering round %d", r->run_id,
                 round);
        return rc;
    }
    for (long i = 0; r->o.strict_ranks && i < n; i++) {
        if (r->nodes[i].node_rank_hint != i) {
            snprintf(err, errlen,
                     "static rendezvous '%s': node ranks must be 0..%ld, each once; got %d on %s",
                     r->run_id, n - 1, r->nodes[i].node_rank_hint, r->nodes[i].host);
            return -EINVAL;
        }
    }
    return 0;
}

static int starts_with(const char *s, const char *prefix) {
    return prefix && strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Node rank 0 runs this before it lets the round's workers start anywhere
 * (the round's "ready" key comes after it). */
int rdzv_clear_worker_keys(rdzv_kv *kv, const char *keep, size_t *cleared) {
    char **keys = NULL;
    size_t n = 0;
    *cleared = 0;
    int rc = kv_list(kv, "", &keys, &n);
    if (rc) return rc;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (starts_with(keys[i], "/ddprun/") || starts_with(keys[i], keep)) continue;
        rc = kv_del(kv, keys[i]);
        if (rc == -ENOENT) rc = 0; /* gone meanwhile */
        if (rc == 0) (*cleared)++;
    }
    rdzv_kv_free_keys(keys, n);
    return rc;
}

static int fill_result(rdzv *r, int round, rdzv_result *res) {
    memset(res, 0, sizeof *res);
    res->round = round;
    res->group_world_size = r->nnodes;
    res->restart_count = r->restart_count;
    res->nodes = r->nodes;
    res->group_rank = -1;
    for (int i = 0; i < r->nnodes; i++) {
        if (strcmp(r->nodes[i].agent_id, r->agent_id) == 0) {
            res->group_rank = i;
            res->rank_offset = res->world_size;
        }
        res->world_size += r->nodes[i].nproc;
    }
    if (!r->in_job_store && r->nnodes > 0)
        snprintf(res->master_store, sizeof res->master_store, "%s", r->nodes[0].store);
    return res->group_rank >= 0 ? 0 : -EPROTO;
}

static int end_round(rdzv *r, rdzv_kv *c, int round, int restarts, rdzv_event why);
static int open_next_round(rdzv *r, rdzv_kv *c, int round, int restart_count,
                           rdzv_event why, int count);

/* The node count round `round` closed with (0: not closed). */
static long round_size(rdzv *r, int round) {
    char k[KEY_MAX];
    kv_long q = {key(r, k, "r%d/state", round), 0, 0, 0};
    return kv_get_longs(r->c, 1, &q) == 0 ? q.val : 0;
}

/* Waits for round round+1 to open (after this round ended or closed
 * without us). `watch`: the round's members (r->nodes, read by the
 * caller) are watched too, and one gone ends the round, as a member's own
 * watch would: without it a job requeued under the same id (Slurm's
 * requeue keeps the job id) on a store that outlived it (etcd) would wait
 * for ever as spares of the dead job's round. Watched also: the node that
 * ended the round, until the next one is open; if it is lost first, this
 * node opens it (open_next_round). */
static int wait_next_round(rdzv *r, int round, int watch, int64_t deadline, char *err,
                           size_t errlen) {
    char k[KEY_MAX], kclosed[KEY_MAX], kout[KEY_MAX], writer[KEY_MAX] = "";
    int n = watch ? r->nnodes : 0, rc = 0, members = watch;
    size_t cap = 4 + 2 * (size_t)n, nk = 0, idx = 0, mfirst = 0;
    char(*buf)[KEY_MAX] = malloc(cap * KEY_MAX);
    const char **keys = malloc(cap * sizeof *keys);
    uint8_t *conds = malloc(cap);
    if (!buf || !keys || !conds) rc = -ENOMEM;
    key(r, kout, "r%d/outcome", round);
    while (rc == 0) {
        nk = 0;
        keys[nk] = key(r, k, "r%d/open", round + 1), conds[nk++] = STORE_COND_EXISTS;
        keys[nk] = key(r, kclosed, "closed"), conds[nk++] = STORE_COND_EXISTS;
        /* The node that ended the round, until it opens the next one: one
         * that dies in between would leave every other waiting for ever. */
        uint8_t *v = NULL;
        size_t vn = 0;
        const char *sp;
        if (kv_try_get(r->c, kout, &v, &vn) == 0 && (sp = memchr(v, ' ', vn)) != NULL) {
            snprintf(writer, sizeof writer, "%.*s", (int)(vn - (size_t)(sp + 1 - (char *)v)),
                     sp + 1);
            if (strcmp(writer, r->agent_id) != 0) nk = watch_gone(r, writer, buf, keys, conds, nk);
        }
        int failed = v && vn >= 7 && memcmp(v, "failure", 7) == 0;
        free(v);
        mfirst = nk;
        for (int i = 0; members && i < n; i++)
            nk = watch_gone(r, r->nodes[i].agent_id, buf, keys, conds, nk);
        if ((rc = wait_any_until(r, nk, conds, keys, deadline, 0, &idx)) || idx < 2) break;
        if (idx < mfirst) {
            log_warn("rendezvous '%s': round %d was ended by agent %s, lost before it opened "
                     "the next round: this node opens it",
                     r->run_id, round, writer);
            rc = open_next_round(r, r->c, round, r->restart_count,
                                 failed ? RDZV_EV_FAILURE : RDZV_EV_MEMBERSHIP, 0);
            continue;
        }
        log_info("rendezvous '%s': round %d, which this node waits to end, lost a node; "
                 "ending it",
                 r->run_id, round);
        rc = end_round(r, r->c, round, r->restart_count, RDZV_EV_MEMBERSHIP);
        members = 0; /* now for the next round only */
    }
    free(buf), free(keys), free(conds);
    if (rc == 0 && idx == 1) rc = -EPIPE;
    if (rc == 0) { /* the next attempt guesses this round first */
        pthread_mutex_lock(&r->mu);
        r->round = round + 1;
        pthread_mutex_unlock(&r->mu);
    }
    if (rc == -ETIMEDOUT)
        snprintf(err, errlen,
                 "rendezvous '%s' timed out after %.0f s waiting for round %d to end and admit "
                 "this node",
                 r->run_id, r->o.join_timeout, round);
    else if (rc == -EPIPE)
        snprintf(err, errlen, "rendezvous '%s' is closed: the job has finished", r->run_id);
    else if (rc)
        store_failed(r, rc, "cannot wait for the next round", err, errlen);
    return rc;
}

/* Registers as waiting for the running round `round` (of n nodes) and
 * waits for the next one. */
static int wait_as_late_node(rdzv *r, int round, long n, int64_t deadline, char *err,
                             size_t errlen) {
    if (n < r->o.max_nodes) {
        char k[KEY_MAX];
        int64_t w;
        int rc = kv_add(r->c, key(r, k, "r%d/nwaiting", round), 1, &w);
        if (rc == 0) rc = set_str(r->c, key(r, k, "r%d/waiting/%lld", round, (long long)w), r->agent_id);
        if (rc) return rc;
        log_info("rendezvous '%s': round %d is running with %ld nodes; waiting to be admitted",
                 r->run_id, round, n);
    } else { /* (counted for --replace-stragglers: rdzv_live_spares) */
        char k[KEY_MAX];
        int64_t w;
        int rc = kv_add(r->c, key(r, k, "r%d/nspare", round), 1, &w);
        if (rc == 0) rc = set_str(r->c, key(r, k, "r%d/spare/%lld", round, (long long)w), r->agent_id);
        if (rc) return rc;
        log_info("rendezvous '%s': round %d is full (%ld nodes); standing by as a spare",
                 r->run_id, round, n);
    }
    char why[256];
    pthread_mutex_lock(&r->mu); /* (the round's members, to watch) */
    int watch = read_members(r, round, n, 0, why, sizeof why) == 0;
    pthread_mutex_unlock(&r->mu);
    int rc = wait_next_round(r, round, watch, deadline, err, errlen);
    if (rc == -EPIPE) {
        snprintf(err, errlen, "rendezvous '%s': the job finished without this node (it stood by)",
                 r->run_id);
        return RDZV_NOT_NEEDED;
    }
    return rc;
}

/* What an attempt at the current round reads first, in one request where
 * the backend can: the round's number, whether the job is closed, and the
 * round's restart count, state and expected node count. The round is
 * guessed (the last one seen) and read again if it moved on. A round is
 * current once it is open (rN/open), whatever the counter "round" says:
 * the counter follows the opening, and a node that died between the two
 * (or another that opened the round for it: open_next_round) leaves it
 * behind, never ahead. */
static int read_round(rdzv *r, long *cur, long *closed_job, long *restarts, long *st,
                      long *expect) {
    long guess = r->round;
    for (;;) {
        char k[6][KEY_MAX];
        kv_long q[] = {{key(r, k[0], "round"), 1, 0, 0},
                       {key(r, k[1], "closed"), 0, 0, 0},
                       {key(r, k[2], "r%ld/restarts", guess), 0, 0, 0},
                       {key(r, k[3], "r%ld/state", guess), 0, -1, 0},
                       {key(r, k[4], "r%ld/expect", guess), 0, r->o.max_nodes, 0},
                       {key(r, k[5], "r%ld/open", guess + 1), 0, 0, 0}};
        int rc = kv_get_longs(r->c, 6, q);
        if (rc) return rc;
        if (q[5].val || q[0].val > guess) { /* it moved on */
            guess = q[0].val > guess ? q[0].val : guess + 1;
            continue;
        }
        *cur = guess, *closed_job = q[1].val, *restarts = q[2].val, *st = q[3].val;
        *expect = q[4].val;
        return 0;
    }
}

/* One attempt at the current round; 1 means "go round again". */
/* try_round's "the round moved on: try the next one". */
#define ROUND_AGAIN (RDZV_JOB_KEPT + 1)

/* Until node rank 0 (r->nodes[0]) says round `round` is ready: 0. Or
 * ROUND_AGAIN, where the round ended first, or node rank 0 died before it
 * made the round ready (then this node ends it, as a member's watch
 * would): a job requeued under the same id on a store that outlived it
 * (etcd) finds its dead predecessor in the round it joins. */
static int wait_ready(rdzv *r, int round, const char *ready, int64_t deadline) {
    char buf[4][KEY_MAX];
    const char *keys[4] = {ready, key(r, buf[1], "r%d/outcome", round)};
    uint8_t conds[4] = {STORE_COND_EXISTS, STORE_COND_EXISTS};
    size_t idx, nk = watch_gone(r, r->nodes[0].agent_id, buf, keys, conds, 2);
    int rc = wait_any_until(r, nk, conds, keys, deadline, 0, &idx);
    if (rc || idx == 0) return rc;
    if (idx >= 2) {
        log_info("rendezvous '%s': round %d's node rank 0 (%s) was lost before it made the "
                 "round ready; ending it",
                 r->run_id, round, r->nodes[0].host);
        rc = end_round(r, r->c, round, r->restart_count, RDZV_EV_MEMBERSHIP);
    }
    return rc ? rc : ROUND_AGAIN;
}

static int try_round(rdzv *r, rdzv_result *res, int64_t deadline, char *err, size_t errlen) {
    char k[KEY_MAX];
    long cur = 0, restarts = 0, st = -1, closed_job = 0, expect = 0;
    int rc = read_round(r, &cur, &closed_job, &restarts, &st, &expect);
    if (rc) return store_failed(r, rc, "cannot read the round", err, errlen);
    int round = (int)cur;
    log_debug("rendezvous '%s': round %ld read (state %ld)", r->run_id, cur, st);
    pthread_mutex_lock(&r->mu);
    r->round = round;
    r->restart_count = (int)restarts;
    pthread_mutex_unlock(&r->mu);
    if (closed_job) return job_closed(r, closed_job, err, errlen);
    if (restarts > r->o.max_restarts) return RDZV_RESTARTS_SPENT;
    if (st >= 0) { /* closed: ours that just ended, or one we arrived too late for */
        if (r->member_round == round) rc = wait_next_round(r, round, 0, deadline, err, errlen);
        else rc = wait_as_late_node(r, round, st, deadline, err, errlen);
        if (rc == -EPIPE) rc = job_closed(r, 0, err, errlen);
        return rc ? rc : ROUND_AGAIN;
    }
    int64_t idx;
    char desc[1600];
    describe_self(r, desc, sizeof desc);
    rc = kv_add(r->c, key(r, k, "r%d/njoined", round), 1, &idx);
    /* Our place, unless the members gave up on it already (read_members) */
    uint8_t *won = NULL;
    size_t wn = 0;
    if (rc == 0)
        rc = kv_compare_set(r->c, key(r, k, "r%d/node/%lld", round, (long long)idx), "", 0, desc,
                            strlen(desc), &won, &wn);
    int lost_place = rc == 0 && (wn != strlen(desc) || memcmp(won, desc, wn) != 0);
    free(won);
    long n = 0;
    int closer = 0;
    if (rc == 0) log_debug("rendezvous '%s': round %d: joined as node %lld", r->run_id, round,
                           (long long)idx);
    if (rc == 0 && !lost_place)
        rc = wait_closed(r, round, idx, expect, deadline, &n, &closer, err, errlen);
    if (rc == 0) log_debug("rendezvous '%s': round %d: closed with %ld nodes", r->run_id, round, n);
    if (rc == -EPIPE) rc = job_closed(r, 0, err, errlen);
    if (rc) return rc;
    if (lost_place || idx > n) { /* the round closed just before our index was counted */
        if (lost_place) n = round_size(r, round);
        rc = wait_as_late_node(r, round, n, deadline, err, errlen);
        return rc ? rc : ROUND_AGAIN;
    }
    if (members_published(r) && !closer && (rc = wait_published(r, round)))
        return store_failed(r, rc, "cannot wait for the round's members", err, errlen);
    pthread_mutex_lock(&r->mu);
    rc = read_members(r, round, n, closer, err, errlen);
    pthread_mutex_unlock(&r->mu);
    if (rc) return rc;
    if (r->nnodes < r->o.min_nodes) { /* joiners died: too few; every member ends it alike */
        rc = end_round(r, r->c, round, (int)restarts, RDZV_EV_MEMBERSHIP);
        return rc ? rc : ROUND_AGAIN;
    }
    if ((rc = fill_result(r, round, res))) return rc;
    log_debug("rendezvous '%s': round %d: members read; this node's rank is %d", r->run_id, round,
              res->group_rank);
    const char *ready = key(r, k, "r%d/ready", round);
    char kw[KEY_MAX]; /* (k holds ready's key) */
    if (res->group_rank == 0) {
        /* The workers' store is the rendezvous' own, or (elsewhere) the one
         * node rank 0's agent hosts for them. */
        size_t cleared = 0;
        if (r->in_job_store) rc = rdzv_clear_worker_keys(r->c, r->o.key_prefix, &cleared);
        else if (r->o.clear_own_store) rc = r->o.clear_own_store(r->o.ctx, &cleared);
        if (rc == 0 && cleared > 0)
            log_info("rendezvous '%s': round %d: the workers' store emptied of the %zu key%s "
                     "an earlier round's workers left (each round's workers start from an "
                     "empty store)",
                     r->run_id, round, cleared, cleared == 1 ? "" : "s");
        char hostport[160];
        if (rc == 0 && r->o.worker_hosted_store &&
            (rc = r->o.worker_hosted_store(r->o.ctx, hostport, sizeof hostport)) == 0)
            rc = set_str(r->c, key(r, kw, "r%d/workers_store", round), hostport);
        if (rc == 0) rc = set_str(r->c, ready, "1");
    } else {
        rc = wait_ready(r, round, ready, deadline);
        if (rc == 0) log_debug("rendezvous '%s': round %d: ready", r->run_id, round);
        if (rc == ROUND_AGAIN) return rc;
    }
    if (rc) {
        snprintf(err, errlen, "rendezvous '%s': round %d did not become ready: %s", r->run_id,
                 round, strerror(-rc));
        return rc;
    }
    /* Node rank 0's choice, whatever this node's own environment says: every
     * node's workers must look for their store in the same place. */
    uint8_t *v = NULL;
    size_t vn = 0;
    if (kv_try_get(r->c, key(r, kw, "r%d/workers_store", round), &v, &vn) == 0) {
        snprintf(res->master_store, sizeof res->master_store, "%.*s", (int)vn, (char *)v);
        res->worker_hosted = 1;
        free(v);
    }
    pthread_mutex_lock(&r->mu);
    r->member_round = round;
    r->member_rank = res->group_rank;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

int rdzv_next(rdzv *r, rdzv_result *res, char *err, size_t errlen) {
    int64_t deadline = clock_now_ms() + (int64_t)(r->o.join_timeout * 1000);
    int rc;
    while ((rc = try_round(r, res, deadline, err, errlen)) == ROUND_AGAIN) {}
    if (rc == RDZV_RESTARTS_SPENT) res->restart_count = r->restart_count;
    return rc;
}

/* ---- while the round runs -------------------------------------------------- */

/* How many members each member watches (rdzv_watch). Two: a member slow
 * to hear (its CPU busy) has a second watcher beside it. */
#define WATCHED 2

int rdzv_watch(rdzv *r, int timeout_ms, rdzv_event *ev) {
    *ev = RDZV_EV_NONE;
    int round = r->round, n = r->nnodes, nk = 0;
    size_t cap = 2 * WATCHED + 3;
    char(*buf)[KEY_MAX] = malloc(cap * KEY_MAX);
    const char **keys = malloc(cap * sizeof *keys);
    uint8_t *conds = malloc(cap);
    int rc = buf && keys && conds ? 0 : -ENOMEM;
    if (rc) goto out;
    /* 0: the round ended; 1: this agent is poked; 2: a node waits to join. */
    keys[nk] = key(r, buf[nk], "r%d/outcome", round), conds[nk++] = STORE_COND_EXISTS;
    keys[nk] = key(r, buf[nk], "r%d/poke/%s", round, r->agent_id), conds[nk++] = STORE_COND_EXISTS;
    if (n < r->o.max_nodes)
        keys[nk] = key(r, buf[nk], "r%d/waiting/1", round), conds[nk++] = STORE_COND_EXISTS;
    /* The next WATCHED members in rank order, around a ring: while one
     * node of the round lives, the first lost one after it in the ring is
     * watched by a survivor, who ends the round for all; the store holds
     * O(N) waits, not N^2 (every member watching every other cost each
     * agent O(N) a second, and 1,000 agents more CPU than two cores have). */
    int me = r->member_rank >= 0 && r->member_rank < n ? r->member_rank : 0;
    for (int j = 1; j <= WATCHED && j < n; j++)
        nk = watch_gone(r, r->nodes[(me + j) % n].agent_id, buf, keys, conds, nk);
    size_t idx = 0;
    if (take_poke(r)) {
        *ev = RDZV_EV_POKED;
        goto out;
    }
    rc = wait_any_until(r, (size_t)nk, conds, keys, clock_now_ms() + timeout_ms, 1, &idx);
    if (rc == -ETIMEDOUT) {
        rc = 0;
        goto out;
    }
    if (rc == -EINTR) {
        rc = 0;
        *ev = RDZV_EV_POKED;
        goto out;
    }
    if (rc) goto out;
    if (idx == 1) {
        kv_del(r->c, keys[1]);
        *ev = RDZV_EV_POKED;
    } else if (idx == 0) {
        uint8_t *v = NULL;
        size_t vn;
        rc = kv_try_get(r->c, keys[0], &v, &vn);
        *ev = rc == 0 && strncmp((char *)v, "failure", 7) == 0 ? RDZV_EV_FAILURE : RDZV_EV_MEMBERSHIP;
        log_debug("rendezvous '%s': round %d ended", r->run_id, round);
        free(v);
    } else {
        /* A member is gone or a node waits: end the round (the first
         * agent to say why wins; the others' calls change nothing). */
        log_info("rendezvous '%s': %s; the group restarts", r->run_id,
                 conds[idx] == STORE_COND_ABSENT ? "a node left" : "a node is waiting to join");
        rc = rdzv_end_round(r, -1, RDZV_EV_MEMBERSHIP);
        if (rc == 0) rc = rdzv_watch(r, 1000, ev); /* read back the winning reason */
        if (rc == 0 && *ev == RDZV_EV_NONE) *ev = RDZV_EV_MEMBERSHIP;
    }
out:
    free(buf);
    free(keys);
    free(conds);
    return rc;
}

static rdzv_kv *client_for(rdzv *r, int side) {
    return side >= 0 && side < NSIDE ? r->side[side] : r->c;
}

/* How many of the n agents `ids` are alive: their heartbeat's lease fresh
 * and, on a store, their connection open (alive/<id>; a node lost without
 * a word, power or a cable, keeps its connection open on the store's side
 * until TCP gives up, minutes later: only its heartbeat tells). All in one
 * request: a round trip per node made every node of a round of 1,000 wait
 * for the round's winner to make 1,000 of them. */
static int count_alive(rdzv *r, rdzv_kv *c, size_t n, const char *const *ids, long *alive) {
    size_t per = r->in_job_store ? 2 : 1, nk = n * per;
    char **keys = calloc(nk ? nk : 1, sizeof *keys);
    uint8_t **vals = calloc(nk ? nk : 1, sizeof *vals);
    size_t *lens = calloc(nk ? nk : 1, sizeof *lens);
    int rc = keys && vals && lens ? 0 : -ENOMEM;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        char k[KEY_MAX];
        if (!(keys[i * per] = strdup(key(r, k, "hb/%s", ids[i])))) rc = -ENOMEM;
        if (per == 2 && !(keys[i * per + 1] = strdup(key(r, k, "alive/%s", ids[i])))) rc = -ENOMEM;
    }
    if (rc == 0 && nk) rc = kv_multi_get(c, nk, (const char *const *)keys, vals, lens);
    *alive = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int yes = 1;
        for (size_t j = 0; j < per; j++) yes &= lens[i * per + j] > 0; /* (both hold "1") */
        *alive += yes;
    }
    for (size_t i = 0; i < nk && keys; i++) {
        free(keys[i]);
        if (vals && rc == 0) free(vals[i]);
    }
    free(keys), free(vals), free(lens);
    return rc;
}

/* How many nodes the round after `round` expects: round's members still
 * alive, and the nodes that waited to join it (at least min, at most max
 * nodes). r->nodes are round's members. */
static int expected_nodes(rdzv *r, rdzv_kv *c, int round, long *expect) {
    char k[KEY_MAX];
    pthread_mutex_lock(&r->mu); /* (the members, copied: their round may be read anew) */
    size_t n = (size_t)r->nnodes, have = 0;
    const char **ids = calloc(n ? n : 1, sizeof *ids);
    while (ids && have < n && (ids[have] = strdup(r->nodes[have].agent_id))) have++;
    pthread_mutex_unlock(&r->mu);
    long alive = 0;
    int rc = ids && have == n ? count_alive(r, c, n, ids, &alive) : -ENOMEM;
    for (size_t i = 0; i < have; i++) free((char *)ids[i]);
    free(ids);
    int64_t waiting = 0;
    if (rc == 0) rc = kv_add(c, key(r, k, "r%d/nwaiting", round), 0, &waiting);
    *expect = alive + (long)waiting;
    if (*expect > r->o.max_nodes) *expect = r->o.max_nodes;
    if (*expect < r->o.min_nodes) *expect = r->o.min_nodes;
    return rc;
}

/* The winner counts the survivors so the next round can close as soon as
 * they are all back, instead of after the last call. The round is open
 * once rN/open is there (read_round); `count`: and the counter "round"
 * follows. Another node that opens the round for a winner that died
 * (wait_next_round) does not count it: the winner may have, and the
 * counter must never run ahead of the open rounds. */
static int open_next_round(rdzv *r, rdzv_kv *c, int round, int restart_count,
                           rdzv_event why, int count) {
    char k[KEY_MAX], v[32];
    long expect = 0;
    int rc = expected_nodes(r, c, round, &expect);
    snprintf(v, sizeof v, "%d", restart_count + (why == RDZV_EV_FAILURE));
    if (rc == 0) rc = set_str(c, key(r, k, "r%d/restarts", round + 1), v);
    snprintf(v, sizeof v, "%ld", expect);
    if (rc == 0) rc = set_str(c, key(r, k, "r%d/expect", round + 1), v);
    if (rc == 0) rc = set_str(c, key(r, k, "r%d/open", round + 1), "1");
    int64_t next;
    if (rc == 0 && count) rc = kv_add(c, key(r, k, "round"), 1, &next);
    return rc;
}

/* Ends round `round` for `why` and opens the next one (the first reason
 * wins); r->nodes are the round's members. */
static int end_round(rdzv *r, rdzv_kv *c, int round, int restarts, rdzv_event why) {
    char k[KEY_MAX], mine[160];
    snprintf(mine, sizeof mine, "%s %s", why == RDZV_EV_FAILURE ? "failure" : "membership",
             r->agent_id);
    uint8_t *out = NULL;
    size_t on = 0;
    int rc = kv_compare_set(c, key(r, k, "r%d/outcome", round), "", 0, mine, strlen(mine),
                               &out, &on);
    int won = rc == 0 && on == strlen(mine) && memcmp(out, mine, on) == 0;
    free(out);
    if (rc || !won) return rc;
    return open_next_round(r, c, round, restarts, why, 1);
}

int rdzv_end_round(rdzv *r, int side, rdzv_event why) {
    pthread_mutex_lock(&r->mu);
    int round = r->member_round, restarts = r->restart_count;
    pthread_mutex_unlock(&r->mu);
    if (round < 0) return -EINVAL;
    return end_round(r, client_for(r, side), round, restarts, why);
}

int rdzv_record_failure(rdzv *r, int side, const char *json_line) {
    char k[KEY_MAX];
    rdzv_kv *c = client_for(r, side);
    int rc = kv_append(c, key(r, k, "failures"), json_line, strlen(json_line));
    return rc ? rc : kv_append(c, k, "\n", 1);
}

char *rdzv_failures(rdzv *r, int side) {
    char k[KEY_MAX];
    uint8_t *v = NULL;
    size_t n;
    if (kv_try_get(client_for(r, side), key(r, k, "failures"), &v, &n) != 0) return NULL;
    return (char *)v;
}

int rdzv_publish_status(rdzv *r, int side, const char *json) {
    char k[KEY_MAX];
    return set_str(client_for(r, side), key(r, k, "status/%s", r->agent_id), json);
}

int rdzv_live_spares(rdzv *r, int side, int round, int *n) {
    *n = 0;
    char k[KEY_MAX];
    rdzv_kv *c = client_for(r, side);
    int64_t count = 0;
    int rc = kv_add(c, key(r, k, "r%d/nspare", round), 0, &count);
    if (count > RDZV_MAX_NODES) count = RDZV_MAX_NODES;
    const char **ids = rc == 0 && count > 0 ? calloc((size_t)count, sizeof *ids) : NULL;
    size_t have = 0;
    for (int64_t i = 1; ids && i <= count; i++) {
        uint8_t *id = NULL;
        size_t len;
        if (kv_try_get(c, key(r, k, "r%d/spare/%lld", round, (long long)i), &id, &len) != 0)
            continue;
        char *s = strndup((char *)id, len);
        free(id);
        if (s) ids[have++] = s;
    }
    long alive = 0; /* still there: as a round's members are counted */
    if (have) rc = count_alive(r, c, have, ids, &alive);
    for (size_t i = 0; i < have; i++) free((char *)ids[i]);
    free(ids);
    *n = (int)alive;
    return rc;
}

int rdzv_publish_node_info(rdzv *r, int side, int round, const char *what, int group_rank,
                           const char *json) {
    char k[KEY_MAX];
    return set_str(client_for(r, side), key(r, k, "r%d/%s/%d", round, what, group_rank), json);
}

int rdzv_node_infos(rdzv *r, int side, int round, const char *what, int nnodes, char **out) {
    if (nnodes <= 0) return 0;
    if (nnodes > RDZV_MAX_NODES) return -E2BIG;
    char **keys = calloc((size_t)nnodes, sizeof *keys);
    uint8_t **vals = calloc((size_t)nnodes, sizeof *vals);
    size_t *lens = calloc((size_t)nnodes, sizeof *lens);
    int rc = keys && vals && lens ? 0 : -ENOMEM;
    for (int i = 0; rc == 0 && i < nnodes; i++) {
        out[i] = NULL;
        if (!(keys[i] = malloc(KEY_MAX))) rc = -ENOMEM;
        else key(r, keys[i], "r%d/%s/%d", round, what, i);
    }
    if (rc == 0)
        rc = kv_multi_get(client_for(r, side), (size_t)nnodes, (const char *const *)keys, vals,
                          lens);
    for (int i = 0; i < nnodes && keys; i++) {
        if (rc == 0 && lens[i] && (out[i] = malloc(lens[i] + 1))) {
            memcpy(out[i], vals[i], lens[i]);
            out[i][lens[i]] = 0;
        }
        free(keys[i]);
        if (vals) free(vals[i]);
    }
    free(keys);
    free(vals);
    free(lens);
    return rc;
}

int rdzv_poke(rdzv *r, int side) {
    char k[KEY_MAX];
    pthread_mutex_lock(&r->mu);
    int round = r->member_round;
    if (r->c->ops->interrupt) r->poked_round = round;
    pthread_mutex_unlock(&r->mu);
    /* Where the handle can be interrupted (etcd), the poke stays inside
     * this process: a key would be a write that every agent's watch sees. */
    if (r->c->ops->interrupt) {
        r->c->ops->interrupt(r->c);
        return 0;
    }
    return set_str(client_for(r, side), key(r, k, "r%d/poke/%s", round, r->agent_id), "1");
}

/* Whether the agent `id` said at round's exit barrier that its workers
 * finished (r<round>/done/<id>). */
static int said_done(rdzv *r, int round, const char *id) {
    char k[KEY_MAX];
    uint8_t *v = NULL;
    size_t vn;
    int yes = kv_try_get(r->c, key(r, k, "r%d/done/%s", round, id), &v, &vn) == 0;
    free(v);
    return yes;
}

/* Whether every member of round not gone has said at its exit barrier
 * that its workers finished (one request: the store's CHECK). */
static int rest_said_done(rdzv *r, int round, const uint8_t *gone, char (*buf)[KEY_MAX],
                          const char **keys, int *all) {
    size_t nk = 0;
    for (int i = 0; i < r->nnodes; i++)
        if (!gone[i] && strcmp(r->nodes[i].agent_id, r->agent_id) != 0)
            keys[nk] = key(r, buf[nk], "r%d/done/%s", round, r->nodes[i].agent_id), nk++;
    *all = 1;
    return nk ? kv_check(r->c, nk, keys, all) : 0;
}

int rdzv_exit_barrier(rdzv *r, double timeout_s, int kept) {
    char k[KEY_MAX], kdone[KEY_MAX], kout[KEY_MAX];
    int round = r->member_round, n = r->nnodes;
    int rc = say_done(r, round);
    /* Kept: the job is over, whatever befalls the others from now on. */
    if (rc == 0 && kept) rc = set_str(r->c, key(r, k, "kept_by"), r->hostname);
    if (rc == 0 && kept) rc = close_job(r, RDZV_CLOSED_KEPT);
    key(r, kdone, "r%d/alldone", round);
    if (rc) return rc;
    /* Also watched: every other member's liveness. One lost here, whose
     * workers had not said they finished, cannot finish any more: it is
     * counted as done (its workers were past their last collective, as
     * this node's are: a data-parallel job's ranks finish together), and
     * said, rather than waited for until the timeout. */
    size_t cap = 2 + 2 * (size_t)n;
    char(*buf)[KEY_MAX] = malloc(cap * KEY_MAX);
    const char **keys = malloc(cap * sizeof *keys);
    uint8_t *conds = malloc(cap), *gone = calloc((size_t)n + 1, 1);
    int *member = malloc(cap * sizeof *member);
    if (!buf || !keys || !conds || !gone || !member) rc = -ENOMEM;
    int64_t deadline = clock_now_ms() + (int64_t)(timeout_s * 1000);
    while (rc == 0) {
        size_t nk = 0;
        keys[nk] = kdone, conds[nk] = STORE_COND_EXISTS, member[nk++] = -1;
        if (!kept) /* (kept, a failure elsewhere comes after the end: rdzv_next says so) */
            keys[nk] = key(r, kout, "r%d/outcome", round), conds[nk] = STORE_COND_EXISTS,
            member[nk++] = -1;
        int others = 0;
        for (int i = 0; i < n; i++) {
            if (gone[i] || strcmp(r->nodes[i].agent_id, r->agent_id) == 0) continue;
            others++;
            size_t from = nk;
            nk = watch_gone(r, r->nodes[i].agent_id, buf, keys, conds, nk);
            while (from < nk) member[from++] = i;
        }
        if (others == 0) { /* every other member finished or is gone */
            rc = close_job(r, 1);
            break;
        }
        size_t idx;
        rc = wait_any_until(r, nk, conds, keys, deadline, 0, &idx);
        if (rc) break;
        if (member[idx] < 0) {
            rc = idx == 0 ? 0 : RDZV_ANOTHER_FAILED;
            break;
        }
        int i = member[idx];
        gone[i] = 1;
        if (said_done(r, round, r->nodes[i].agent_id)) continue;
        log_warn("rendezvous '%s': node %s was lost at the exit barrier before it said its "
                 "workers finished; this node's finished (past the last collective, as its "
                 "must have been): the job is done",
                 r->run_id, r->nodes[i].host);
        /* The count of those done cannot reach the round's size any more:
         * once every member still here has said it finished, the barrier
         * is passed (whichever of them sees it last lets the others go). */
        int all = 0;
        rc = rest_said_done(r, round, gone, buf, keys, &all);
        if (rc == 0 && all) rc = close_job(r, 1);
        if (rc == 0 && all) rc = set_str(r->c, kdone, "1");
        if (rc || all) break;
    }
    free(buf), free(keys), free(conds), free(gone), free(member);
    return rc;
}

void rdzv_lost_message(const rdzv *r, int rc, char *err, size_t errlen) {
    int broke = kv_broken(r->c); /* what broke the connection, if anything did */
    int why_rc = broke ? broke : rc;
    const char *why = why_rc == -ETIMEDOUT ? "it stopped answering"
                      : why_rc == -EHOSTUNREACH
                          ? "no answer in time: out of reach, or too slow"
                          : strerror(-why_rc);
    snprintf(err, errlen, r->in_job_store
                              ? "lost the rendezvous: %s does not answer (%s): the job cannot go "
                                "on without it; this node stops"
                              : "lost the rendezvous: no member of %s answers (%s): the job "
                                "cannot go on without it; this node stops",
             r->c->where, why);
}

const char *rdzv_where(const rdzv *r) { return r->c->where; }
