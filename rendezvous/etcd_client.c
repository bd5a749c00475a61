/* See etcd_client.h. */
#include "rendezvous/etcd_client.h"

#include <curl/curl.h>
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
#include "common/log.h"

#define MAX_MEMBERS 16
#define DEFAULT_TIMEOUT_MS 5000

struct etcd_client {
    CURL *curl;
    CURLM *multi;         /* runs the streams (watches), which etcd_interrupt can end */
    atomic_int interrupt; /* etcd_interrupt was called; the next stream ends */
    char member[MAX_MEMBERS][256]; /* "host:port" */
    int nmembers, cur;
    char scheme[8];               /* "http" or "https" */
    int has_cert;                 /* a client certificate is given */
    char token[512];              /* etcd's auth token ("" without auth) */
    char *user, *password;
    int timeout_ms;
    char err[1024];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static int fail(etcd_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(etcd_client *c, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return rc;
}

const char *etcd_error(const etcd_client *c) { return c->err; }
const char *etcd_member(const etcd_client *c) { return c->member[c->cur]; }

/* --- one request --------------------------------------------------------- */

/* What a streamed request (a watch) waits for: one of want (any event
 * when nwant is 0), for at most ms. Other events in the watched range are
 * passed over inside the stream, so a waiter is not woken by every write
 * of a busy range. */
typedef struct {
    int ms;
    const etcd_want *want;
    size_t nwant;
    size_t which; /* the one seen */
} stream_want;

/* A reply being received: whole, or for a stream, up to the first object
 * holding a wanted event (or the end of the transfer). */
typedef struct {
    buf_t body;
    const stream_want *want; /* NULL: not a stream */
    json_t *event;           /* the object that held the wanted event */
    size_t which;            /* the wanted event it held */
    int canceled;            /* etcd cancelled the watch (its revision was compacted) */
} reply_buf;

/* The first of events that w wants: its index in w->want, or -1. */
static long wanted(const stream_want *w, json_t *events) {
    if (w->nwant == 0) return json_array_size(events) > 0 ? 0 : -1;
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        const char *k64 = json_string_value(json_object_get(json_object_get(ev, "kv"), "key"));
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

static size_t on_body(char *p, size_t size, size_t n, void *ctx) {
    reply_buf *r = ctx;
    if (buf_append(&r->body, p, size * n)) return 0;
    if (!r->want) return size * n;
    /* The gateway streams one JSON object per chunk, newline-separated. */
    for (;;) {
        char *start = (char *)r->body.data, *nl = memchr(start, '\n', r->body.len);
        if (!nl) return size * n;
        json_t *o = json_loadb(start, (size_t)(nl - start), 0, NULL);
        size_t rest = r->body.len - (size_t)(nl + 1 - start);
        memmove(start, nl + 1, rest);
        r->body.len = rest;
        json_t *res = o ? json_object_get(o, "result") : NULL;
        if (res && json_is_true(json_object_get(res, "canceled"))) {
            r->canceled = 1;
            json_decref(o);
            return 0; /* ends the transfer: nothing more will come */
        }
        long which = res ? wanted(r->want, json_object_get(res, "events")) : -1;
        if (which >= 0) {
            r->which = (size_t)which;
            r->event = json_incref(res);
            json_decref(o);
            return 0; /* ends the transfer: what we waited for came */
        }
        json_decref(o);
    }
}

/* Runs the transfer set up on c->curl. A stream runs under c->multi so
 * that etcd_interrupt, from another thread, can wake and end it
 * (*interrupted := 1); a plain request runs to its end. */
static CURLcode perform(etcd_client *c, int stream, int *interrupted) {
    *interrupted = 0;
    if (!stream) return curl_easy_perform(c->curl);
    CURLcode res = CURLE_OK;
    if (curl_multi_add_handle(c->multi, c->curl) != CURLM_OK) return CURLE_OUT_OF_MEMORY;
    for (;;) {
        if (atomic_exchange(&c->interrupt, 0)) {
            *interrupted = 1;
            break;
        }
        int running = 0, queued;
        if (curl_multi_perform(c->multi, &running) != CURLM_OK) {
            res = CURLE_OUT_OF_MEMORY;
            break;
        }
        CURLMsg *m = curl_multi_info_read(c->multi, &queued);
        if (m && m->msg == CURLMSG_DONE) {
            res = m->data.result;
            break;
        }
        curl_multi_poll(c->multi, NULL, 0, 1000, NULL);
    }
    curl_multi_remove_handle(c->multi, c->curl);
    return res;
}

void etcd_interrupt(etcd_client *c) {
    atomic_store(&c->interrupt, 1);
    curl_multi_wakeup(c->multi);
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

/* POSTs body to path on the current member, failing over to the others.
 * A stream (a watch: want not NULL) stops at the first event it wants,
 * given in *reply; want->ms without one is -ETIMEDOUT, not a member's
 * failure. */
static int post(etcd_client *c, const char *path, json_t *body, json_t **reply,
                stream_want *want) {
    int stream_ms = want ? want->ms : 0;
    *reply = NULL;
    char *text = json_dumps(body, JSON_COMPACT);
    if (!text) return fail(c, -ENOMEM, "out of memory for an etcd request");
    int rc = -EHOSTUNREACH;
    char tried[1024] = "";
    /* Every member in turn; a whole turn of "not now" answers (an election
     * takes a second or two) is tried again until twice the timeout. */
    int64_t give_up = clock_now_ms() + 2 * (int64_t)c->timeout_ms;
    for (int k = 0;; k++) {
        if (k > 0 && k % c->nmembers == 0) {
            if (rc != -EAGAIN || clock_now_ms() >= give_up) break;
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
            rc = -EHOSTUNREACH;
        }
        int m = (c->cur + k) % c->nmembers;
        char url[512];
        snprintf(url, sizeof url, "%s://%s%s", c->scheme, c->member[m], path);
        reply_buf r = {.want = want};
        struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
        char auth[600];
        if (c->token[0]) {
            snprintf(auth, sizeof auth, "Authorization: %s", c->token);
            hdr = curl_slist_append(hdr, auth);
        }
        curl_easy_setopt(c->curl, CURLOPT_URL, url);
        curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &r);
        curl_easy_setopt(c->curl, CURLOPT_TIMEOUT_MS, (long)(stream_ms > 0 ? stream_ms : c->timeout_ms));
        curl_easy_setopt(c->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)c->timeout_ms);
        int interrupted;
        CURLcode e = perform(c, want != NULL, &interrupted);
        curl_slist_free_all(hdr);
        if (interrupted) {
            buf_free(&r.body);
            rc = fail(c, -EINTR, "the wait was interrupted");
            break;
        }
        long status = 0;
        curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
        if (r.event) { /* a watch saw its event (the transfer was cut on purpose) */
            c->cur = m;
            *reply = r.event;
            want->which = r.which;
            buf_free(&r.body);
            rc = 0;
            break;
        }
        if (r.canceled) {
            c->cur = m;
            buf_free(&r.body);
            rc = fail(c, -ESTALE, "etcd at %s cancelled the watch (its start revision was "
                      "compacted?)", c->member[m]);
            break;
        }
        if (stream_ms > 0 && e == CURLE_OPERATION_TIMEDOUT && status == 200) {
            c->cur = m;
            buf_free(&r.body);
            rc = fail(c, -ETIMEDOUT, "no change within %d ms", stream_ms);
            break;
        }
        if (stream_ms > 0 && stream_ms < c->timeout_ms && e == CURLE_OPERATION_TIMEDOUT) {
            /* The wait's own budget ran out before the member answered: too
             * short to blame it (a busy machine, a fresh connection). A
             * member that is really gone is passed over by the next plain
             * request, which has the whole timeout. */
            buf_free(&r.body);
            rc = fail(c, -ETIMEDOUT, "no answer within the wait's %d ms", stream_ms);
            break;
        }
        if (e != CURLE_OK) {
            size_t len = strlen(tried);
            snprintf(tried + len, sizeof tried - len, "%s%s (%s)", len ? ", " : "", c->member[m],
                     curl_easy_strerror(e));
            buf_free(&r.body);
            if (is_member_trouble(e)) {
                log_debug("etcd: %s%s: %s; trying the next member", c->member[m], path,
                          curl_easy_strerror(e));
                continue;
            }
            rc = fail(c, -EPROTO, "etcd request %s failed: %s", path, tried);
            break;
        }
        c->cur = m;
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
            rc = -EAGAIN;
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
    int rc = body ? post(c, "/v3/kv/put", body, &r, NULL) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (rc == 0 && revision) *revision = num(json_object_get(r, "header"), "revision");
    if (rc == 0) json_decref(r);
    return rc;
}

int etcd_bump(etcd_client *c, const char *key, int64_t *version) {
    json_t *body = json_pack("{s:o, s:o, s:b}", "key", b64s(key), "value", b64s("+"), "prev_kv",
                             1),
           *r;
    int rc = body ? post(c, "/v3/kv/put", body, &r, NULL) : fail(c, -ENOMEM, "out of memory");
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
    int rc = body ? post(c, "/v3/kv/range", body, &r, NULL) : fail(c, -ENOMEM, "out of memory");
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
    int rc = body ? post(c, "/v3/kv/txn", body, &r, NULL) : fail(c, -ENOMEM, "out of memory");
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
    int rc = body ? post(c, "/v3/kv/txn", body, &r, NULL) : fail(c, -ENOMEM, "out of memory");
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
    int rc = body ? post(c, "/v3/kv/deleterange", body, &r, NULL) : fail(c, -ENOMEM, "out of memory");
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
    int rc = post(c, "/v3/lease/grant", body, &r, NULL);
    json_decref(body);
    if (rc) return rc;
    *id = num(r, "ID");
    json_decref(r);
    return *id ? 0 : fail(c, -EPROTO, "etcd granted a lease without an id");
}

int etcd_lease_keepalive(etcd_client *c, int64_t id, int *ttl_s) {
    json_t *body = json_pack("{s:I}", "ID", (json_int_t)id), *r;
    int rc = post(c, "/v3/lease/keepalive", body, &r, NULL);
    json_decref(body);
    if (rc) return rc;
    json_t *res = json_object_get(r, "result");
    int64_t ttl = num(res ? res : r, "TTL");
    json_decref(r);
    if (ttl_s) *ttl_s = (int)ttl;
    return ttl > 0 ? 0 : fail(c, -ENOENT, "lease %" PRId64 " has expired", id);
}

int etcd_lease_revoke(etcd_client *c, int64_t id) {
    json_t *body = json_pack("{s:I}", "ID", (json_int_t)id), *r;
    int rc = post(c, "/v3/lease/revoke", body, &r, NULL);
    json_decref(body);
    if (rc == 0) json_decref(r);
    return rc == -ENOENT ? 0 : rc;
}

int etcd_watch(etcd_client *c, const char *first, const char *last, int64_t after,
               int timeout_ms, const etcd_want *want, size_t nwant, size_t *which,
               int64_t *revision) {
    json_t *req = json_pack("{s:o, s:o}", "key", b64s(first), "range_end", range_end(first, last));
    if (req && after > 0) json_object_set_new(req, "start_revision", json_integer(after + 1));
    json_t *body = json_pack("{s:o}", "create_request", req), *r;
    stream_want w = {timeout_ms > 0 ? timeout_ms : 1, want, nwant, 0};
    int rc = body ? post(c, "/v3/watch", body, &r, &w) : fail(c, -ENOMEM, "out of memory");
    json_decref(body);
    if (rc) return rc;
    if (which) *which = w.which;
    if (revision) {
        json_t *events = json_object_get(r, "events");
        json_t *kv = json_object_get(json_array_get(events, json_array_size(events) - 1), "kv");
        *revision = kv ? num(kv, "mod_revision") : num(json_object_get(r, "header"), "revision");
    }
    json_decref(r);
    return 0;
}

/* --- connecting --------------------------------------------------------- */

static int authenticate(etcd_client *c) {
    json_t *body = json_pack("{s:s, s:s}", "name", c->user, "password",
                             c->password ? c->password : ""),
           *r;
    c->token[0] = '\0';
    int rc = post(c, "/v3/auth/authenticate", body, &r, NULL);
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
    pthread_once(&curl_once, curl_init_once);
    etcd_client *c = calloc(1, sizeof *c);
    if (!c || !(c->curl = curl_easy_init()) || !(c->multi = curl_multi_init())) {
        if (c && c->curl) curl_easy_cleanup(c->curl);
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
    snprintf(c->scheme, sizeof c->scheme, "%s", o->cacert ? "https" : "http");
    curl_easy_setopt(c->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->curl, CURLOPT_TCP_NODELAY, 1L);
    if (o->cacert) curl_easy_setopt(c->curl, CURLOPT_CAINFO, o->cacert);
    if (o->cert) curl_easy_setopt(c->curl, CURLOPT_SSLCERT, o->cert);
    c->has_cert = o->cert != NULL;
    if (o->key) curl_easy_setopt(c->curl, CURLOPT_SSLKEY, o->key);
    if (o->user && !(c->user = strdup(o->user))) rc = -ENOMEM;
    if (o->password && !(c->password = strdup(o->password))) rc = -ENOMEM;
    json_t *body = json_object(), *r = NULL;
    if (rc == 0 && !o->no_probe) rc = post(c, "/v3/maintenance/status", body, &r, NULL);
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
    if (c->curl) curl_easy_cleanup(c->curl);
    if (c->multi) curl_multi_cleanup(c->multi);
    free(c->user);
    free(c->password);
    free(c);
}
