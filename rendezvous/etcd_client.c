/* See etcd_client.h. */
#include "rendezvous/etcd_client.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base64.h"
#include "common/buf.h"
#include "common/clock.h"
#include "common/err.h"
#include "common/log.h"
#include "rendezvous/curl_lib.h"

#define MAX_MEMBERS 16
#define DEFAULT_TIMEOUT_MS 5000
/* An election takes a second or two, and a member's host whose link went
 * down a moment holds the others' writes till it is back or replaced:
 * a whole cluster not answering for a few seconds is no reason to stop. */
#define DEFAULT_PATIENCE_MS 10000

/* The client's watch: a stream of its own (c->stream, run by c->multi)
 * beside the plain requests, so that a waiter can read the keys once etcd
 * has the watch, and wait on across several calls. */
typedef struct {
    etcd_client *c;
    int active;            /* the stream is in c->multi */
    int member;            /* the member it comes from */
    struct curl_slist *hdr;
    char *body;            /* the create request */
    buf_t in;              /* what came and is not yet a whole line */
    const etcd_want *want; /* the caller's, for as long as the watch lasts */
    size_t nwant;
    int nwatches;          /* create requests in the body (one per key, or the range) */
    int ncreated;          /* of which etcd said it has */
    int64_t created;       /* the store's revision when etcd had the last of them */
    int64_t event_rev;     /* a wanted event's revision; 0: none yet */
    size_t which;          /* which one */
    int canceled;          /* etcd cancelled the watch (its start revision was compacted) */
    int refused;           /* etcd answered with an error (a negative errno) */
    int done;              /* the transfer ended */
} watch_state;

struct etcd_client {
    const curl_lib *lib;  /* libcurl's entry points */
    CURL *curl;
    CURL *stream;         /* the watch's transfer (its options copied from curl) */
    CURLM *multi;         /* runs the watch, which etcd_interrupt can wake and end */
    watch_state w;
    atomic_int interrupt; /* etcd_interrupt was called; the next wait for an event ends */
    atomic_int cancelled; /* etcd_cancel was called: every request fails */
    uint64_t watch_events; /* events the watches' streams brought, wanted or not */
    char member[MAX_MEMBERS][256]; /* "host:port" */
    int nmembers, cur;
    char scheme[8];               /* "http" or "https" */
    int has_cert;                 /* a client certificate is given */
    char token[512];              /* etcd's auth token ("" without auth) */
    char *user, *password;
    int timeout_ms, patience_ms;
    int answered; /* a member answered this client: from then on members out of reach
                   * are waited for (before, a wrong list or certificate is said at once) */
    char err[1024];
};


static int fail(etcd_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(etcd_client *c, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err_vset(c->err, sizeof c->err, rc, fmt, ap);
    va_end(ap);
    return rc;
}

const char *etcd_error(const etcd_client *c) { return c->err; }
const char *etcd_member(const etcd_client *c) { return c->member[c->cur]; }
int etcd_members(const etcd_client *c) { return c->nmembers; }

/* --- one request --------------------------------------------------------- */

/* A reply being received. */
typedef struct {
    buf_t body;
} reply_buf;

static size_t on_body(char *p, size_t size, size_t n, void *ctx) {
    reply_buf *r = ctx;
    return buf_append(&r->body, p, size * n) ? 0 : size * n;
}

void etcd_interrupt(etcd_client *c) {
    atomic_store(&c->interrupt, 1);
    c->lib->multi_wakeup(c->multi);
}

void etcd_cancel(etcd_client *c) {
    atomic_store(&c->cancelled, 1);
    c->lib->multi_wakeup(c->multi);
}

static int cancelled(etcd_client *c) {
    return atomic_load(&c->cancelled) ? fail(c, -ECANCELED, "the request was cancelled") : 0;
}

/* curl's progress callback, at least once a second during a transfer:
 * nonzero aborts it (etcd_cancel). */
static int on_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    (void)dt, (void)dn, (void)ut, (void)un;
    return atomic_load(&((etcd_client *)ctx)->cancelled);
}

static int is_member_trouble(CURLcode e) {
    return e == CURLE_COULDNT_CONNECT || e == CURLE_COULDNT_RESOLVE_HOST ||
           e == CURLE_OPERATION_TIMEDOUT || e == CURLE_RECV_ERROR || e == CURLE_SEND_ERROR ||
           e == CURLE_GOT_NOTHING || e == CURLE_PARTIAL_FILE;
}

/* An answer that says "not now" (no leader during an election, a leader
 * change under the request, the member overloaded): worth asking another
 * member, or the same one a moment later. */
static int is_transient(long status, json_t *reply) {
    const char *msg = json_string_value(json_object_get(reply, "message"));
    if (!msg) msg = json_string_value(json_object_get(reply, "error"));
    json_int_t code = json_integer_value(json_object_get(reply, "code"));
    return status == 503 || code == 14 /* UNAVAILABLE */ || code == 4 /* DEADLINE_EXCEEDED */ ||
           (msg && (strstr(msg, "leader") || strstr(msg, "timed out") ||
                    strstr(msg, "too many requests")));
}

/* The gateway's error object {"error", "code", "message"} as an errno. */
static int error_code(etcd_client *c, long status, json_t *reply, const char *path) {
    const char *msg = json_string_value(json_object_get(reply, "message"));
    if (!msg) msg = json_string_value(json_object_get(reply, "error"));
    json_int_t code = json_integer_value(json_object_get(reply, "code"));
    int rc = -EPROTO;
    if (code == 16 || (msg && strstr(msg, "authentication failed"))) rc = -EACCES;
    else if (msg && strstr(msg, "lease not found")) rc = -ENOENT;
    else if (code == 7) rc = -EACCES; /* permission denied */
    return fail(c, rc, "etcd at %s refused %s (HTTP %ld): %s", c->member[c->cur], path, status,
                msg ? msg : "no message");
}

/* A request's headers: JSON, and the auth token when there is one. */
static struct curl_slist *headers(const etcd_client *c) {
    struct curl_slist *hdr = c->lib->slist_append(NULL, "Content-Type: application/json");
    if (c->token[0]) {
        char auth[600];
        snprintf(auth, sizeof auth, "Authorization: %s", c->token);
        hdr = c->lib->slist_append(hdr, auth);
    }
    return hdr;
}

/* Whether a turn of the members that all failed is worth another, a
 * tenth of a second later: not past give_up. */
static int another_turn(int64_t give_up) {
    if (clock_now_ms() >= give_up) return 0;
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    return 1;
}

/* How long a request waits for its answer: the timeout, after which it
 * goes to the next member; but with one member, half the client's
 * patience. A request given up and sent again to the same member is only
 * more load on it: a member slow to answer 1,000 agents got each request
 * as many times as it was late by timeouts (a 1 s timeout at a 2 s
 * heartbeat), and fell further behind. Yet a member can also drop a
 * request: one stopped while ours was on its way proposed it on waking,
 * as a leader already deposed, and answered only at its own request
 * timeout (7 s), later than our patience. Half the patience sends each
 * request at most twice, the second time to a member awake again. */
static int answer_ms(const etcd_client *c) {
    int half = c->patience_ms / 2;
    return c->nmembers > 1 || half < c->timeout_ms ? c->timeout_ms : half;
}

/* POSTs body to path on the current member, failing over to the others. */
static int post(etcd_client *c, const char *path, json_t *body, json_t **reply) {
    *reply = NULL;
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text) return fail(c, -ENOMEM, "out of memory for an etcd request");
    int rc = -EHOSTUNREACH;
    char tried[1024] = "";
    /* Every member in turn; a whole turn of "not now" answers or of
     * members out of reach is tried again until the client's patience,
     * which it has once a member answered, even "not now", or kept a
     * connection and said nothing (an election as the client connects
     * can take longer than two timeouts). Before, a member list or a
     * certificate that is wrong is said at once. */
    int64_t start = clock_now_ms();
    int again = 0, busy = 0;
    for (int k = 0;; k++) {
        if (atomic_load(&c->cancelled)) {
            rc = cancelled(c);
            break;
        }
        if (k > 0 && k % c->nmembers == 0 &&
            (!again || !another_turn(start + (c->answered || busy ? c->patience_ms
                                                                  : 2 * c->timeout_ms))))
            break;
        if (k % c->nmembers == 0) tried[0] = '\0', rc = -EHOSTUNREACH, again = 0;
        int m = (c->cur + k) % c->nmembers;
        char url[512];
        snprintf(url, sizeof url, "%s://%s%s", c->scheme, c->member[m], path);
        reply_buf r = {0};
        struct curl_slist *hdr = headers(c);
        c->lib->easy_setopt(c->curl, CURLOPT_URL, url);
        c->lib->easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdr);
        c->lib->easy_setopt(c->curl, CURLOPT_POSTFIELDS, text);
        c->lib->easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
        c->lib->easy_setopt(c->curl, CURLOPT_WRITEDATA, &r);
        c->lib->easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, (long)answer_ms(c));
        c->lib->easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
        CURLcode e = c->lib->easy_perform(c->curl);
        c->lib->slist_free_all(hdr);
        long status = 0;
        c->lib->easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
        if (e != CURLE_OK && atomic_load(&c->cancelled)) {
            rc = cancelled(c);
            buf_free(&r.body);
            break;
        }
        if (e != CURLE_OK) {
            size_t len = strlen(tried);
            snprintf(tried + len, sizeof tried - len, "%s%s (%s)", len ? ", " : "", c->member[m],
                     c->lib->easy_strerror(e));
            buf_free(&r.body);
            if (is_member_trouble(e)) {
                log_debug("etcd: %s%s: %s; trying the next member", c->member[m], path,
                          c->lib->easy_strerror(e));
                busy |= e == CURLE_OPERATION_TIMEDOUT;
                again |= c->answered || busy;
                continue;
            }
            rc = fail(c, -EPROTO, "etcd request %s failed: %s", path, tried);
            break;
        }
        c->cur = m, c->answered = 1;
        json_error_t jerr;
        json_t *o = json_loadb((const char *)r.body.data, r.body.len, 0, &jerr);
        buf_free(&r.body);
        if (!o) {
            rc = fail(c, -EPROTO, "etcd at %s answered %s with what is not JSON (HTTP %ld)",
                      c->member[m], path, status);
            break;
        }
        if ((status != 200 || json_object_get(o, "error")) && is_transient(status, o)) {
            error_code(c, status, o, path);
            log_debug("etcd: %s; trying again", c->err);
            json_decref(o);
            rc = -EAGAIN, again = 1;
            continue;
        }
        if (status != 200 || json_object_get(o, "error")) {
            rc = error_code(c, status, o, path);
            log_debug("etcd: %s", c->err);
            json_decref(o);
            break;
        }
        *reply = o;
        rc = 0;
        c->err[0] = '\0';
        break;
    }
    if (rc == -EAGAIN) rc = -EHOSTUNREACH; /* c->err holds the last "not now" */
    else if (rc == -EHOSTUNREACH)
        fail(c, rc, "no etcd member answered %s: %s%s", path, tried,
             strcmp(c->scheme, "https") == 0 && !c->has_cert
                 ? " (over TLS: if the members ask for a client certificate, give cert= and "
                   "key= in --rdzv-conf)"
                 : "");
    free(text);
    return rc;
}

/* --- values ------------------------------------------------------------- */

static json_t *b64(const void *p, size_t n) {
    char *s = malloc(base64_len(n) + 1);
    if (!s) return NULL;
    base64_encode(p, n, s);
    json_t *j = json_string(s);
    free(s);
    return j;
}

static json_t *b64s(const char *s) { return b64(s, strlen(s)); }

/* The key just past every key starting with prefix (etcd's range_end). */
static json_t *prefix_end(const char *prefix) {
    size_t n = strlen(prefix);
    char *end = strdup(prefix);
    if (!end) return NULL;
    while (n > 0 && (unsigned char)end[n - 1] == 0xff) n--;
    if (n == 0) { /* every key */
        free(end);
        return b64("\0", 1);
    }
    end[n - 1]++;
    json_t *j = b64(end, n);
    free(end);
    return j;
}

/* The gateway writes 64-bit numbers as strings. */
/* The end of the range from first: past every key starting with it (last
 * NULL), or just past last. */
static json_t *range_end(const char *first, const char *last) {
    return last ? b64(last, strlen(last) + 1) : prefix_end(first);
}

static int64_t num(json_t *o, const char *field) {
    json_t *v = json_object_get(o, field);
    if (json_is_integer(v)) return json_integer_value(v);
    const char *s = json_string_value(v);
    return s ? strtoll(s, NULL, 10) : 0;
}

static int read_kv(json_t *j, etcd_kv *kv) {
    memset(kv, 0, sizeof *kv);
    size_t klen = 0, vlen = 0;
    const char *k = json_string_value(json_object_get(j, "key"));
    const char *v = json_string_value(json_object_get(j, "value"));
    kv->key = k ? (char *)base64_decode(k, &klen) : NULL;
    kv->value = base64_decode(v ? v : "", &vlen);
    kv->len = vlen;
    kv->create_revision = num(j, "create_revision");
    kv->mod_revision = num(j, "mod_revision");
    kv->version = num(j, "version");
    kv->lease = num(j, "lease");
    if (!kv->key || !kv->value) {
        etcd_kv_free(kv);
        return -EPROTO;
    }
    return 0;
}

void etcd_kv_free(etcd_kv *kv) {
    if (!kv) return;
    free(kv->key);
    free(kv->value);
    kv->key = NULL;
    kv->value = NULL;
}

void etcd_kvs_free(etcd_kv *kvs, size_t n) {
    for (size_t i = 0; kvs && i < n; i++) etcd_kv_free(&kvs[i]);
    free(kvs);
}

/* --- the API ------------------------------------------------------------ */

int etcd_put(etcd_client *c, const char *key, const void *val, size_t len, int64_t lease,
             int64_t *revision) {
    json_t *body = json_pack("{s:o, s:o}", "key", b64s(key), "value", b64(val, len)), *r;
    if (body && lease) json_object_set_new(body, "lease", json_integer(lease));
    int rc = body ? post(c, "/v3/kv/put", body, &r) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (rc == 0 && revision) *revision = num(json_object_get(r, "header"), "revision");
    if (rc == 0) json_decref(r);
    return rc;
}

int etcd_bump(etcd_client *c, const char *key, int64_t *version) {
    json_t *body = json_pack("{s:o, s:o, s:b}", "key", b64s(key), "value", b64s("+"), "prev_kv",
                             1),
           *r;
    int rc = body ? post(c, "/v3/kv/put", body, &r) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (rc) return rc;
    json_t *prev = json_object_get(r, "prev_kv");
    *version = (prev ? num(prev, "version") : 0) + 1;
    json_decref(r);
    return 0;
}

static int range(etcd_client *c, json_t *body, etcd_kv **kvs, size_t *n, int64_t *revision) {
    json_t *r;
    *kvs = NULL;
    *n = 0;
    int rc = body ? post(c, "/v3/kv/range", body, &r) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (rc) return rc;
    json_t *arr = json_object_get(r, "kvs");
    size_t m = json_array_size(arr);
    if (revision) *revision = num(json_object_get(r, "header"), "revision");
    if (m && !(*kvs = calloc(m, sizeof **kvs))) rc = fail(c, -ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < m; i++) {
        if (read_kv(json_array_get(arr, i), &(*kvs)[i])) {
            rc = fail(c, -EPROTO, "etcd at %s sent a key it cannot read", c->member[c->cur]);
            break;
        }
        (*n)++;
    }
    json_decref(r);
    if (rc) {
        etcd_kvs_free(*kvs, *n);
        *kvs = NULL;
        *n = 0;
    }
    return rc;
}

int etcd_get(etcd_client *c, const char *key, etcd_kv *kv) {
    etcd_kv *kvs;
    size_t n;
    memset(kv, 0, sizeof *kv);
    int rc = range(c, json_pack("{s:o}", "key", b64s(key)), &kvs, &n, NULL);
    if (rc) return rc;
    if (n == 0) {
        free(kvs);
        return -ENOENT;
    }
    *kv = kvs[0];
    for (size_t i = 1; i < n; i++) etcd_kv_free(&kvs[i]);
    free(kvs);
    return 0;
}

int etcd_get_many(etcd_client *c, size_t n, const char *const *keys, etcd_kv *kvs,
                  int64_t *revision) {
    memset(kvs, 0, n * sizeof *kvs);
    json_t *reads = json_array(), *r;
    for (size_t i = 0; reads && i < n; i++)
        if (json_array_append_new(reads, json_pack("{s:{s:o}}", "request_range", "key", b64s(keys[i]))))
            json_decref(reads), reads = NULL;
    json_t *body = reads ? json_pack("{s:o}", "success", reads) : NULL;
    int rc = body ? post(c, "/v3/kv/txn", body, &r) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (rc) return rc;
    json_t *resps = json_object_get(r, "responses");
    if (json_array_size(resps) != n)
        rc = fail(c, -EPROTO, "etcd at %s answered %zu reads with %zu", c->member[c->cur], n,
                  json_array_size(resps));
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *resp = json_object_get(json_array_get(resps, i), "response_range");
        json_t *kv = json_array_get(json_object_get(resp, "kvs"), 0);
        if (kv && read_kv(kv, &kvs[i]))
            rc = fail(c, -EPROTO, "etcd at %s sent a key it cannot read", c->member[c->cur]);
    }
    if (rc == 0 && revision) *revision = num(json_object_get(r, "header"), "revision");
    json_decref(r);
    if (rc)
        for (size_t i = 0; i < n; i++) etcd_kv_free(&kvs[i]);
    return rc;
}

int etcd_get_in(etcd_client *c, const char *first, const char *last, etcd_kv **kvs, size_t *n,
                int64_t *revision) {
    return range(c, json_pack("{s:o, s:o}", "key", b64s(first), "range_end", range_end(first, last)),
                 kvs, n, revision);
}

int etcd_keys_in(etcd_client *c, const char *first, const char *last, etcd_kv **kvs, size_t *n,
                 int64_t *revision) {
    return range(c, json_pack("{s:o, s:o, s:b}", "key", b64s(first), "range_end",
                              range_end(first, last), "keys_only", 1),
                 kvs, n, revision);
}

int etcd_cas(etcd_client *c, const char *key, int64_t expect, const void *val, size_t len,
             int64_t lease, etcd_kv *now) {
    json_t *put = json_pack("{s:o, s:o}", "key", b64s(key), "value", b64(val, len));
    if (put && lease) json_object_set_new(put, "lease", json_integer(lease));
    char want[32];
    snprintf(want, sizeof want, "%" PRId64, expect);
    json_t *body = json_pack("{s:[{s:o, s:s, s:s, s:s}], s:[{s:o}], s:[{s:{s:o}}]}", "compare",
                             "key", b64s(key), "result", "EQUAL", "target", "MOD", "mod_revision",
                             want, "success", "request_put", put, "failure", "request_range",
                             "key", b64s(key)),
           *r;
    int rc = body ? post(c, "/v3/kv/txn", body, &r) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (now) memset(now, 0, sizeof *now);
    if (rc) return rc;
    if (json_is_true(json_object_get(r, "succeeded"))) {
        json_decref(r);
        return 0;
    }
    json_t *resp = json_object_get(json_array_get(json_object_get(r, "responses"), 0),
                                   "response_range");
    json_t *kv = json_array_get(json_object_get(resp, "kvs"), 0);
    if (now && kv && read_kv(kv, now)) rc = fail(c, -EPROTO, "etcd sent a key it cannot read");
    json_decref(r);
    return rc ? rc : fail(c, -ESTALE, "'%s' changed (expected revision %" PRId64 ")", key, expect);
}

static int delete_range(etcd_client *c, json_t *body) {
    json_t *r;
    int rc = body ? post(c, "/v3/kv/deleterange", body, &r) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (rc == 0) json_decref(r);
    return rc;
}

int etcd_delete(etcd_client *c, const char *key) {
    return delete_range(c, json_pack("{s:o}", "key", b64s(key)));
}

int etcd_delete_prefix(etcd_client *c, const char *prefix) {
    return delete_range(c, json_pack("{s:o, s:o}", "key", b64s(prefix), "range_end",
                                     prefix_end(prefix)));
}

int etcd_lease_grant(etcd_client *c, int ttl_s, int64_t *id) {
    json_t *body = json_pack("{s:i}", "TTL", ttl_s), *r;
    int rc = post(c, "/v3/lease/grant", body, &r);
    json_decref(body);
    if (rc) return rc;
    *id = num(r, "ID");
    json_decref(r);
    return *id ? 0 : fail(c, -EPROTO, "etcd granted a lease without an id");
}

int etcd_lease_keepalive(etcd_client *c, int64_t id, int *ttl_s) {
    json_t *body = json_pack("{s:I}", "ID", (json_int_t)id), *r;
    int rc = post(c, "/v3/lease/keepalive", body, &r);
    json_decref(body);
    if (rc) return rc;
    json_t *res = json_object_get(r, "result");
    int64_t ttl = num(res ? res : r, "TTL");
    json_decref(r);
    if (ttl_s) *ttl_s = (int)ttl;
    return ttl > 0 ? 0 : fail(c, -ENOENT, "lease %" PRId64 " has expired", id);
}

int etcd_lease_ttl(etcd_client *c, int64_t id, int *ttl_s, int *granted_s) {
    json_t *body = json_pack("{s:I}", "ID", (json_int_t)id), *r;
    int rc = post(c, "/v3/lease/timetolive", body, &r);
    json_decref(body);
    if (rc) return rc;
    int64_t ttl = num(r, "TTL"), granted = num(r, "grantedTTL");
    json_decref(r);
    if (ttl <= 0) return fail(c, -ENOENT, "lease %" PRId64 " has expired", id);
    *ttl_s = (int)ttl, *granted_s = (int)granted;
    return 0;
}

int etcd_lease_revoke(etcd_client *c, int64_t id) {
    json_t *body = json_pack("{s:I}", "ID", (json_int_t)id), *r;
    int rc = post(c, "/v3/lease/revoke", body, &r);
    json_decref(body);
    if (rc == 0) json_decref(r);
    return rc == -ENOENT ? 0 : rc;
}

/* --- watches ------------------------------------------------------------- */

/* The first of events that w wants (any event when it names none): its
 * index in w->want and, in *rev, its revision; -1 if none. */
static long wanted(const watch_state *w, json_t *events, int64_t *rev) {
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        json_t *kv = json_object_get(ev, "kv");
        *rev = num(kv, "mod_revision");
        if (w->nwant == 0) return 0;
        const char *k64 = json_string_value(json_object_get(kv, "key"));
        const char *type = json_string_value(json_object_get(ev, "type"));
        int deleted = type && strcmp(type, "DELETE") == 0; /* a put has no type: 0 is left out */
        size_t klen = 0;
        char *k = k64 ? (char *)base64_decode(k64, &klen) : NULL;
        for (size_t j = 0; k && j < w->nwant; j++) {
            const etcd_want *x = &w->want[j];
            if (x->deleted == deleted && strlen(x->key) == klen && memcmp(x->key, k, klen) == 0) {
                free(k);
                return (long)j;
            }
        }
        free(k);
    }
    return -1;
}

/* The watch's stream: one JSON object a line, the first saying the watch
 * is created; events not wanted are passed over here, so a waiter is not
 * woken by every write of a busy range. Returning 0 ends the transfer. */
static size_t on_stream(char *p, size_t size, size_t n, void *ctx) {
    watch_state *w = ctx;
    if (buf_append(&w->in, p, size * n)) return 0;
    for (;;) {
        char *start = (char *)w->in.data, *nl = memchr(start, '\n', w->in.len);
        if (!nl) return size * n;
        json_t *o = json_loadb(start, (size_t)(nl - start), 0, NULL);
        size_t rest = w->in.len - (size_t)(nl + 1 - start);
        memmove(start, nl + 1, rest);
        w->in.len = rest;
        json_t *res = o ? json_object_get(o, "result") : NULL;
        int64_t rev = 0;
        long which = -1;
        if (!res) { /* {"error": {...}}: what etcd says instead of a watch */
            json_t *e = json_object_get(o, "error");
            w->refused = o ? error_code(w->c, 0, json_is_object(e) ? e : o, "/v3/watch")
                           : fail(w->c, -EPROTO, "etcd sent a watch line that is not JSON");
        } else if (json_is_true(json_object_get(res, "canceled"))) {
            w->canceled = 1;
        } else {
            if (json_is_true(json_object_get(res, "created")) && ++w->ncreated >= w->nwatches)
                w->created = num(json_object_get(res, "header"), "revision");
            json_t *events = json_object_get(res, "events");
            w->c->watch_events += json_array_size(events);
            which = wanted(w, events, &rev);
            if (which >= 0) w->which = (size_t)which, w->event_rev = rev;
        }
        json_decref(o);
        if (w->refused || w->canceled || which >= 0) return 0; /* nothing more is needed */
    }
}

/* Runs the watch until an event it wants, (with until_created) until
 * etcd has it, the deadline, or an interrupt. */
static int drive(etcd_client *c, int64_t deadline, int until_created) {
    watch_state *w = &c->w;
    for (;;) {
        if (w->event_rev) return 0;
        if (until_created && w->created) return 0;
        if (w->refused) return w->refused;
        if (w->canceled)
            return fail(c, -ESTALE, "etcd at %s cancelled the watch (its start revision was "
                        "compacted?)", c->member[c->cur]);
        if (w->done) return fail(c, -EPIPE, "the watch's stream from %s ended", c->member[c->cur]);
        if (atomic_load(&c->cancelled)) return cancelled(c);
        if (atomic_exchange(&c->interrupt, 0)) return fail(c, -EINTR, "the wait was interrupted");
        int64_t left = deadline - clock_now_ms();
        if (left <= 0) return fail(c, -ETIMEDOUT, "no change within the wait");
        int running, queued;
        if (c->lib->multi_perform(c->multi, &running) != CURLM_OK)
            return fail(c, -ENOMEM, "the watch's transfer failed");
        CURLMsg *m;
        while ((m = c->lib->multi_info_read(c->multi, &queued)))
            if (m->msg == CURLMSG_DONE) w->done = 1;
        if (!w->done && !w->event_rev && !w->refused && !w->canceled &&
            !(until_created && w->created))
            c->lib->multi_poll(c->multi, NULL, 0, (int)(left < 1000 ? left : 1000), NULL);
    }
}

void etcd_watch_stop(etcd_client *c) {
    watch_state *w = &c->w;
    if (w->active) c->lib->multi_remove_handle(c->multi, c->stream);
    c->lib->slist_free_all(w->hdr);
    free(w->body);
    buf_free(&w->in);
    memset(w, 0, sizeof *w);
}

uint64_t etcd_watch_events(const etcd_client *c) { return c->watch_events; }

/* A stream from a member that went away silently (a pulled cable) just
 * stays quiet; the client's next plain request fails over from it, and
 * from then on the watch no longer counts. */
int etcd_watch_active(const etcd_client *c) { return c->w.active && c->w.member == c->cur; }

/* One create request (key alone, or the range from key to last). */
static char *create_request(const char *key, const char *last, int range, int64_t after) {
    json_t *req = range ? json_pack("{s:o, s:o}", "key", b64s(key), "range_end", range_end(key, last))
                        : json_pack("{s:o}", "key", b64s(key));
    if (req && after > 0) json_object_set_new(req, "start_revision", json_integer(after + 1));
    json_t *body = json_pack("{s:o}", "create_request", req);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    return text;
}

/* The watch's body: the range's create request, or one per wanted key,
 * a line each (etcd's gateway reads a stream's messages one after the
 * other from the body, and they share the stream). */
static char *watch_body(const char *first, const char *last, int64_t after, const etcd_want *want,
                        size_t nwant, int *nwatches) {
    buf_t b = {0};
    int bad = 0;
    *nwatches = first ? 1 : (int)nwant;
    for (int i = 0; !bad && i < *nwatches; i++) {
        char *one = first ? create_request(first, last, 1, after)
                          : create_request(want[i].key, NULL, 0, after);
        bad = !one || buf_append(&b, one, strlen(one)) || buf_append(&b, "\n", 1);
        free(one);
    }
    if (bad) {
        buf_free(&b);
        return NULL;
    }
    b.data[b.len - 1] = 0; /* (the last line's newline) */
    return (char *)b.data;
}

int etcd_watch_start(etcd_client *c, const char *first, const char *last, int64_t after,
                     const etcd_want *want, size_t nwant, int64_t *created) {
    etcd_watch_stop(c);
    if (!first && nwant == 0) return fail(c, -EINVAL, "a watch of no key");
    int nwatches = 0;
    char *text = watch_body(first, last, after, want, nwant, &nwatches);
    if (!text) return fail(c, -ENOMEM, "out of memory for a watch");
    char tried[1024] = "";
    int rc = -EHOSTUNREACH;
    int64_t give_up = clock_now_ms() + c->patience_ms; /* as post's */
    for (int k = 0;; k++) {
        if (atomic_load(&c->cancelled)) {
            rc = cancelled(c);
            break;
        }
        if (k > 0 && k % c->nmembers == 0 && !another_turn(give_up)) break;
        if (k % c->nmembers == 0) tried[0] = '\0';
        int m = (c->cur + k) % c->nmembers;
        watch_state *w = &c->w;
        char url[512];
        snprintf(url, sizeof url, "%s://%s/v3/watch", c->scheme, c->member[m]);
        w->c = c, w->want = want, w->nwant = nwant, w->body = strdup(text), w->hdr = headers(c);
        w->nwatches = nwatches;
        c->lib->easy_setopt(c->stream, CURLOPT_URL, url);
        c->lib->easy_setopt(c->stream, CURLOPT_HTTPHEADER, w->hdr);
        c->lib->easy_setopt(c->stream, CURLOPT_POSTFIELDS, w->body);
        c->lib->easy_setopt(c->stream, CURLOPT_WRITEFUNCTION, on_stream);
        c->lib->easy_setopt(c->stream, CURLOPT_WRITEDATA, w);
        c->lib->easy_setopt(c->stream, CURLOPT_TIMEOUT_MS, 0L); /* a stream: the waits time it */
        c->lib->easy_setopt(c->stream, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
        if (!w->body || c->lib->multi_add_handle(c->multi, c->stream) != CURLM_OK) {
            rc = fail(c, -ENOMEM, "out of memory for a watch");
            break;
        }
        w->active = 1;
        w->member = c->cur = m;
        /* Up to the member's whole timeout to say it has the watch. */
        rc = drive(c, clock_now_ms() + answer_ms(c), 1);
        if (rc == 0) {
            if (created) *created = w->created;
            break;
        }
        etcd_watch_stop(c);
        if (rc != -ETIMEDOUT && rc != -EPIPE) break; /* refused, interrupted: not the member's fault */
        size_t len = strlen(tried);
        snprintf(tried + len, sizeof tried - len, "%s%s (%s)", len ? ", " : "", c->member[m],
                 rc == -EPIPE ? "no stream" : "no answer");
        log_debug("etcd: %s/v3/watch: %s; trying the next member", c->member[m], c->err);
        rc = -EHOSTUNREACH;
    }
    if (rc == -EHOSTUNREACH) fail(c, rc, "no etcd member answered /v3/watch: %s", tried);
    free(text);
    return rc;
}

int etcd_watch_wait(etcd_client *c, int timeout_ms, size_t *which, int64_t *revision) {
    if (!c->w.active) return fail(c, -EINVAL, "no watch to wait on");
    int rc = drive(c, clock_now_ms() + timeout_ms, 0);
    if (rc == -ETIMEDOUT || rc == -EINTR) return rc; /* the watch goes on */
    if (rc == 0) {
        if (which) *which = c->w.which;
        if (revision) *revision = c->w.event_rev;
    }
    etcd_watch_stop(c);
    return rc;
}

int etcd_watch(etcd_client *c, const char *first, const char *last, int64_t after,
               int timeout_ms, const etcd_want *want, size_t nwant, size_t *which,
               int64_t *revision) {
    int rc = etcd_watch_start(c, first, last, after, want, nwant, NULL);
    if (rc == 0) rc = etcd_watch_wait(c, timeout_ms > 0 ? timeout_ms : 1, which, revision);
    etcd_watch_stop(c);
    return rc;
}

/* --- connecting --------------------------------------------------------- */

static int authenticate(etcd_client *c) {
    json_t *body = json_pack("{s:s, s:s}", "name", c->user, "password",
                             c->password ? c->password : ""),
           *r;
    c->token[0] = '\0';
    int rc = post(c, "/v3/auth/authenticate", body, &r);
    json_decref(body);
    if (rc == -EACCES || rc == -EPROTO)
        return fail(c, -EACCES, "etcd refused user '%s' (wrong user or password?): %s", c->user,
                    c->err);
    if (rc) return rc;
    const char *t = json_string_value(json_object_get(r, "token"));
    if (t) snprintf(c->token, sizeof c->token, "%s", t);
    json_decref(r);
    return 0;
}

/* Splits "h1:2379,h2:2379" into members; a member without a port gets
 * 2379, etcd's client port. */
static int parse_endpoints(etcd_client *c, const char *list) {
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            if (c->nmembers == MAX_MEMBERS || n >= sizeof c->member[0] - 6) return -EINVAL;
            const char *host = p;
            size_t hn = n;
            if (hn > 7 && strncmp(host, "http://", 7) == 0) host += 7, hn -= 7;
            else if (hn > 8 && strncmp(host, "https://", 8) == 0) host += 8, hn -= 8;
            int has_port = memchr(host, ':', hn) && host[0] != '[';
            snprintf(c->member[c->nmembers++], sizeof c->member[0], "%.*s%s", (int)hn, host,
                     has_port || (host[0] == '[' && host[hn - 1] != ']') ? "" : ":2379");
        }
        p += n + (p[n] == ',');
    }
    return c->nmembers > 0 ? 0 : -EINVAL;
}

int etcd_connect(const etcd_opts *o, etcd_client **out, char *err, size_t errlen) {
    *out = NULL;
    const curl_lib *lib = curl_lib_get(err, errlen);
    if (!lib) return -ELIBACC;
    etcd_client *c = calloc(1, sizeof *c);
    if (c) c->lib = lib;
    if (!c || !(c->curl = lib->easy_init()) || !(c->multi = lib->multi_init())) {
        if (c && c->curl) lib->easy_cleanup(c->curl);
        free(c);
        snprintf(err, errlen, "out of memory for the etcd client");
        return -ENOMEM;
    }
    int rc = 0;
    if (!o->endpoints || parse_endpoints(c, o->endpoints)) {
        snprintf(err, errlen, "'%s' is not a list of etcd members (host:port,host:port; at "
                 "most %d)", o->endpoints ? o->endpoints : "", MAX_MEMBERS);
        rc = -EINVAL;
        goto out;
    }
    c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DEFAULT_TIMEOUT_MS;
    c->patience_ms = o->patience_ms > 0 ? o->patience_ms
                     : 2 * c->timeout_ms > DEFAULT_PATIENCE_MS ? 2 * c->timeout_ms
                                                               : DEFAULT_PATIENCE_MS;
    snprintf(c->scheme, sizeof c->scheme, "%s", o->cacert ? "https" : "http");
    c->lib->easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    c->lib->easy_setopt(c->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    c->lib->easy_setopt(c->curl, CURLOPT_XFERINFODATA, c);
    c->lib->easy_setopt(c->curl, CURLOPT_NOPROGRESS, 0L);
    c->lib->easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
    if (o->cacert) c->lib->easy_setopt(c->curl, CURLOPT_CAINFO, o->cacert);
    if (o->cert) c->lib->easy_setopt(c->curl, CURLOPT_SSLCERT, o->cert);
    c->has_cert = o->cert != NULL;
    if (o->key) c->lib->easy_setopt(c->curl, CURLOPT_SSLKEY, o->key);
    if (!(c->stream = c->lib->easy_duphandle(c->curl))) rc = -ENOMEM; /* the same TLS options */
    if (o->user && !(c->user = strdup(o->user))) rc = -ENOMEM;
    if (o->password && !(c->password = strdup(o->password))) rc = -ENOMEM;
    json_t *body = json_object(), *r = NULL;
    if (rc == 0 && !o->no_probe) rc = post(c, "/v3/maintenance/status", body, &r);
    json_decref(body);
    json_decref(r);
    if (rc == 0 && c->user) rc = authenticate(c);
    if (rc) snprintf(err, errlen, "%s", c->err[0] ? c->err : strerror(-rc));
out:
    if (rc) {
        etcd_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void etcd_close(etcd_client *c) {
    if (!c) return;
    etcd_watch_stop(c);
    if (c->stream) c->lib->easy_cleanup(c->stream);
    if (c->curl) c->lib->easy_cleanup(c->curl);
    if (c->multi) c->lib->multi_cleanup(c->multi);
    free(c->user);
    free(c->password);
    free(c);
}
