/* See coll_blame.h. */
#include "agent/coll_blame.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/proc_stat.h"

/* A hang is a wait of at least this long; and of ranks that all entered
 * the collective, one stands out when its last sign of life came at least
 * this much before every other's. */
#define HANG_S 1.0

/* The process's state letter, 'Z' if it is on its way out, '?' if it is
 * gone. */
static char proc_state(int pid) {
    proc_stat st;
    if (proc_stat_read(pid, &st) != 0) return '?';
    return st.flags & PROC_PF_EXITING ? 'Z' : st.state;
}

char coll_state_seen(char before, char now) {
    int explains = before && strchr("TtD", before) != NULL;
    return explains && (now == 'Z' || now == '?') ? before : now;
}

int coll_pos_read(const char *path, const char *host, int local_rank, coll_pos *p) {
    coll_view v;
    memset(p, 0, sizeof *p);
    int rc = coll_record_read(path, &v);
    if (rc) return rc;
    double wall = clock_wall_s(), mono = clock_now_s();
    p->rank = v.rank, p->local_rank = local_rank, p->pid = v.pid, p->step = v.step;
    snprintf(p->host, sizeof p->host, "%s", host);
    p->entered = v.entered, p->done = v.done;
    p->alive = v.alive_ns ? wall - (mono - (double)v.alive_ns * 1e-9) : 0;
    const coll_entry_view *e = coll_view_entry(&v, v.entered);
    if (e) {
        snprintf(p->op, sizeof p->op, "%s", e->op);
        p->bytes = e->bytes;
        p->issued = wall - (mono - (double)e->issued_ns * 1e-9);
    }
    p->state = proc_state(v.pid);
    return 0;
}

char *coll_pos_json(const coll_pos *ps, int n, double at) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        const coll_pos *p = &ps[i];
        char state[2] = {p->state ? p->state : '?', 0};
        json_t *o = json_pack("{s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:s, s:I, s:f, s:f, s:s}",
                              "rank", p->rank, "local_rank", p->local_rank, "pid", p->pid,
                              "host", p->host, "step",
                              (json_int_t)p->step, "entered", (json_int_t)p->entered, "done",
                              (json_int_t)p->done, "op", p->op, "bytes", (json_int_t)p->bytes,
                              "issued", p->issued, "alive", p->alive, "state", state);
        if (!o || json_array_append_new(a, o)) {
            json_decref(a);
            return NULL;
        }
    }
    json_t *top = a ? json_pack("{s:f, s:o}", "at", at, "ranks", a) : NULL;
    char *s = top ? json_dumps(top, JSON_COMPACT) : NULL;
    json_decref(top);
    return s;
}

int coll_pos_from_json(const char *json, double not_before, coll_pos *ps, int *n, int max) {
    json_t *top = json_loads(json, 0, NULL), *a = NULL;
    double at = 0;
    if (json_unpack(top, "{s:F, s:o}", "at", &at, "ranks", &a) != 0 || !json_is_array(a)) {
        json_decref(top);
        return -EINVAL;
    }
    if (at < not_before) {
        json_decref(top);
        return -ESTALE;
    }
    size_t i;
    json_t *o;
    json_array_foreach(a, i, o) {
        if (*n >= max) break;
        coll_pos p = {0};
        const char *host = "", *op = "", *state = "?";
        json_int_t step = 0, entered = 0, done = 0, bytes = 0;
        if (json_unpack(o, "{s:i, s:i, s:i, s:s, s:I, s:I, s:I, s:s, s:I, s:F, s:F, s:s}", "rank",
                        &p.rank, "local_rank", &p.local_rank, "pid", &p.pid, "host", &host,
                        "step", &step, "entered",
                        &entered, "done", &done, "op", &op, "bytes", &bytes, "issued", &p.issued,
                        "alive", &p.alive, "state", &state) != 0)
            continue;
        snprintf(p.host, sizeof p.host, "%s", host);
        snprintf(p.op, sizeof p.op, "%s", op);
        p.step = step, p.entered = (uint64_t)entered, p.done = (uint64_t)done;
        p.bytes = (uint64_t)bytes, p.state = state[0] ? state[0] : '?';
        ps[(*n)++] = p;
    }
    json_decref(top);
    return 0;
}

static const char *state_words(char s) {
    switch (s) {
    case 'T': return "; its process is stopped (SIGSTOP)";
    case 't': return "; its process is stopped by a debugger";
    case 'D': return "; its process is in an uninterruptible wait (disk, network file system or "
                     "device)";
    case 'Z': return "; its process has exited";
    default: return "";
    }
}

static void size_words(uint64_t bytes, char *out, size_t len) {
    if (bytes >= 1 << 20) snprintf(out, len, " of %.1f MB", (double)bytes / (1 << 20));
    else if (bytes >= 1 << 10) snprintf(out, len, " of %.1f kB", (double)bytes / (1 << 10));
    else if (bytes) snprintf(out, len, " of %llu bytes", (unsigned long long)bytes);
    else out[0] = 0;
}

/* "ranks 0, 2, 3" of the positions flagged in pick (at most 8 named). */
static void rank_list(const coll_pos *ps, int n, const char *pick, char *out, size_t len) {
    int count = 0, named = 0;
    for (int i = 0; i < n; i++) count += pick[i];
    size_t at = (size_t)snprintf(out, len, "%s", count == 1 ? "rank " : "ranks ");
    for (int i = 0; i < n && at < len; i++) {
        if (!pick[i]) continue;
        if (named == 8) {
            snprintf(out + at, len - at, " and %d more", count - 8);
            return;
        }
        at += (size_t)snprintf(out + at, len - at, "%s%d", named ? ", " : "", ps[i].rank);
        named++;
    }
}

static void blame(coll_verdict *v, const coll_pos *p) {
    if (v->nblamed < (int)(sizeof v->blamed / sizeof v->blamed[0])) v->blamed[v->nblamed++] = *p;
    v->nblamed_all++;
}

int coll_blame(const coll_pos *ps, int n, coll_verdict *v) {
    memset(v, 0, sizeof *v);
    if (n < 2) return 0;
    uint64_t seq = 0;
    for (int i = 0; i < n; i++)
        if (ps[i].entered > seq) seq = ps[i].entered;
    if (!seq) return 0;
    char *behind = calloc((size_t)n, 1), *inside = calloc((size_t)n, 1);
    if (!behind || !inside) {
        free(behind), free(inside);
        return 0;
    }
    int nbehind = 0, ninside = 0, first = -1, late = -1;
    for (int i = 0; i < n; i++) {
        const coll_pos *p = &ps[i];
        if (p->entered < seq) {
            behind[i] = 1, nbehind++;
        } else if (p->done < seq) {
            inside[i] = 1, ninside++;
            double waited = p->issued > 0 && p->alive > p->issued ? p->alive - p->issued : 0;
            if (waited > v->waited) v->waited = waited;
            if (first < 0 || ps[i].alive < ps[first].alive) late = first, first = i;
            else if (late < 0 || ps[i].alive < ps[late].alive) late = i;
            if (!v->op[0]) snprintf(v->op, sizeof v->op, "%s", p->op), v->bytes = p->bytes;
        }
    }
    v->seq = seq;
    char size[48], who[160], waiting[160];
    size_words(v->bytes, size, sizeof size);
    int found = 0;
    if (nbehind && ninside && v->waited >= HANG_S) {
        /* some never entered the collective the others waited in */
        const coll_pos *b = NULL;
        for (int i = 0; i < n; i++)
            if (behind[i]) {
                blame(v, &ps[i]);
                if (!b) b = &ps[i];
            }
        rank_list(ps, n, behind, who, sizeof who);
        rank_list(ps, n, inside, waiting, sizeof waiting);
        snprintf(v->text, sizeof v->text,
                 "%s waited %.1f s in collective #%llu (%s%s) for %s, which never entered it: "
                 "rank %d (host %s, pid %d) had entered #%llu and finished #%llu, in step "
                 "%lld%s",
                 waiting, v->waited, (unsigned long long)seq, v->op, size, who, b->rank, b->host,
                 b->pid, (unsigned long long)b->entered, (unsigned long long)b->done,
                 (long long)b->step, state_words(b->state));
        found = 1;
    } else if (!nbehind && ninside >= 2 && late >= 0 &&
               ps[late].alive - ps[first].alive >= HANG_S) {
        /* all entered it; one fell silent inside it long before the rest */
        const coll_pos *b = &ps[first];
        blame(v, b);
        snprintf(v->text, sizeof v->text,
                 "every rank entered collective #%llu (%s%s); rank %d (host %s, pid %d) fell "
                 "silent in it %.1f s before any other, which went on waiting for it (step "
                 "%lld)%s",
                 (unsigned long long)seq, v->op, size, b->rank, b->host, b->pid,
                 ps[late].alive - b->alive, (long long)b->step, state_words(b->state));
        found = 1;
    }
    free(behind);
    free(inside);
    return found;
}

int coll_verdict_blames(const coll_verdict *v, int rank) {
    for (int i = 0; i < v->nblamed; i++)
        if (v->blamed[i].rank == rank) return 1;
    return 0;
}
