/* store-load: a load generator for the store, used by the benchmark
 * (bench/store_bench.sh) and by the scale tests. It drives any server that
 * speaks the TCPStore protocol (ddprun-store or PyTorch's TCPStore) through
 * the same blocking C client, so that when two servers are compared the
 * client side is byte-for-byte identical and only the server differs.
 *
 * Modes:
 *   bench      N threads, one connection each, closed-loop round trips of
 *              one operation for S seconds; prints throughput and latency
 *              percentiles as one key=value line.
 *   scale      N concurrent connections meet at a counter and a barrier
 *              key; checks that every one of them is released.
 *   idle       loads K keys, opens N idle connections and holds them, so
 *              the caller can read the server's memory use.
 *
 * Every mode prints one machine-readable line on stdout and exits 0 only if
 * no operation failed. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/fdlimit.h"
#include "common/opts.h"
#include "store/store_client.h"

/* Everything the command line can set; each mode reads the fields it needs. */
typedef struct {
    const char *mode;
    const char *host;
    int port;
    int conns;          /* bench, idle: connections; scale: clients */
    double seconds;     /* bench: measured duration */
    const char *op;     /* bench: set | get | add */
    store_gen gen;      /* protocol generation the client speaks */
    int no_ext;         /* never send our extension's HELLO */
    size_t value_bytes; /* bench set/get and idle: value size */
    int timeout_ms;     /* connect and per-call timeout */
    int keys;           /* idle: keys to load */
    double hold_seconds;/* idle: how long to keep the connections open */
} load_opts;

static void sleep_seconds(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Client options for one connection. The scale and idle modes open
 * thousands of connections at once, so they rely on the client's connect
 * retries (with backoff) to ride out a full listen backlog. */
static store_client_opts client_opts(const load_opts *o) {
    store_client_opts co = {0};
    co.host = o->host;
    co.port = o->port;
    co.connect_timeout_ms = o->timeout_ms;
    co.timeout_ms = o->timeout_ms;
    co.gen = o->gen;
    co.no_ext = o->no_ext;
    return co;
}

/* --- Latency histogram -------------------------------------------------
 * Log-linear buckets over nanoseconds: 16 linear sub-buckets per power of
 * two, so any recorded latency is known to within 1/16 (6.25%) of its
 * value, in a fixed 8 KiB per thread, whatever the number of samples. */
#define HIST_SUB_BITS 4
#define HIST_SUB (1u << HIST_SUB_BITS)
#define HIST_BUCKETS (64u * HIST_SUB)

typedef struct {
    uint64_t count[HIST_BUCKETS];
    uint64_t total;
} hist;

static unsigned hist_index(uint64_t ns) {
    if (ns < HIST_SUB) return (unsigned)ns;
    unsigned msb = 63u - (unsigned)__builtin_clzll(ns);
    unsigned shift = msb - HIST_SUB_BITS;
    unsigned sub = (unsigned)(ns >> shift) & (HIST_SUB - 1);
    return (shift + 1) * HIST_SUB + sub;
}

/* The middle of bucket `i`, in nanoseconds (the inverse of hist_index). */
static double hist_value(unsigned i) {
    if (i < HIST_SUB) return i;
    unsigned shift = i / HIST_SUB - 1;
    uint64_t low = (uint64_t)(HIST_SUB + i % HIST_SUB) << shift;
    return (double)low + (double)((uint64_t)1 << shift) / 2.0;
}

static void hist_add(hist *h, uint64_t ns) {
    h->count[hist_index(ns)]++;
    h->total++;
}

static void hist_merge(hist *into, const hist *from) {
    for (unsigned i = 0; i < HIST_BUCKETS; i++) into->count[i] += from->count[i];
    into->total += from->total;
}

/* The latency below which a fraction `q` of the samples fall, in µs. */
static double hist_quantile_us(const hist *h, double q) {
    if (h->total == 0) return 0;
    uint64_t rank = (uint64_t)(q * (double)h->total + 0.999999);
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->count[i];
        if (seen >= rank) return hist_value(i) / 1000.0;
    }
    return hist_value(HIST_BUCKETS - 1) / 1000.0;
}

/* --- bench ---------------------------------------------------------------
 * What one "op" is, in round trips, is decided by the client and is the same
 * against every server:
 *   set  SET then CHECK of the same key. SET has no reply in the protocol,
 *        so the CHECK is what makes it a measurable round trip (and proves
 *        the server has applied the SET).
 *   get  store_get(): against the generation-1 protocol the client sends
 *        WAIT then GET, as torch's own client does.
 *   add  one ADD, one reply. */
typedef enum { BENCH_SET, BENCH_GET, BENCH_ADD } bench_op;

typedef struct {
    const load_opts *o;
    bench_op op;
    int id;
    const char *run;            /* prefix that keeps runs on one server apart */
    pthread_barrier_t *start;   /* all threads connected: measuring starts */
    atomic_int *stop;           /* set by main when the time is up */
    hist *h;
    uint64_t ops;
    int err;                    /* first error (negative errno), 0 if none */
    const char *err_what;
} bench_thread;

static int bench_one(bench_thread *t, store_client *c, const char *key, const uint8_t *val) {
    const load_opts *o = t->o;
    switch (t->op) {
    case BENCH_SET: {
        int rc = store_set(c, key, val, o->value_bytes);
        if (rc < 0) return rc;
        const char *keys[1] = {key};
        int ready = 0;
        rc = store_check(c, 1, keys, &ready);
        if (rc == 0 && !ready) rc = -EPROTO;
        return rc;
    }
    case BENCH_GET: {
        uint8_t *got = NULL;
        size_t n = 0;
        int rc = store_get(c, key, &got, &n);
        if (rc == 0 && n != o->value_bytes) rc = -EPROTO;
        free(got);
        return rc;
    }
    case BENCH_ADD: {
        int64_t v;
        return store_add(c, key, 1, &v);
    }
    }
    return -EINVAL;
}

static void *bench_main(void *arg) {
    bench_thread *t = arg;
    const load_opts *o = t->o;
    store_client *c = NULL;
    uint8_t *val = calloc(1, o->value_bytes ? o->value_bytes : 1);
    char key[128];
    snprintf(key, sizeof key, "bench/%s/%d", t->run, t->id);
    if (!val) {
        t->err = -ENOMEM;
        t->err_what = "setup";
    }
    if (!t->err) {
        memset(val, 'v', o->value_bytes);
        store_client_opts co = client_opts(o);
        t->err = store_client_connect(&co, &c);
        t->err_what = "connect";
    }
    /* GET needs a key to read; it is written before measuring starts. */
    if (!t->err && t->op == BENCH_GET) {
        t->err = store_set(c, key, val, o->value_bytes);
        t->err_what = "prime";
        if (!t->err) {
            const char *keys[1] = {key};
            int ready = 0;
            t->err = store_check(c, 1, keys, &ready);
        }
    }
    /* Every thread reaches the barrier, failed or not, so main never hangs. */
    pthread_barrier_wait(t->start);
    while (!t->err && !atomic_load_explicit(t->stop, memory_order_relaxed)) {
        uint64_t t0 = (uint64_t)clock_now_ns();
        int rc = bench_one(t, c, key, val);
        uint64_t t1 = (uint64_t)clock_now_ns();
        if (rc < 0) {
            t->err = rc;
            t->err_what = t->o->op;
            break;
        }
        /* An operation that finishes after the deadline is not counted, so
         * ops/s is operations completed inside the measured interval. */
        if (atomic_load_explicit(t->stop, memory_order_relaxed)) break;
        hist_add(t->h, t1 - t0);
        t->ops++;
    }
    if (c) store_client_close(c);
    free(val);
    return NULL;
}

/* Starts a thread with a small stack: the load modes run up to thousands
 * of threads and each only needs a few frames of the client's calls. */
static int start_thread(pthread_t *th, void *(*fn)(void *), void *arg) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int rc = pthread_create(th, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    return -rc;
}

static const char *gen_name(store_gen g) { return g == STORE_GEN_V1 ? "v1" : "v2"; }

static int run_bench(const load_opts *o) {
    /* parse_args lets only these three through. */
    bench_op op = strcmp(o->op, "set") == 0   ? BENCH_SET
                  : strcmp(o->op, "get") == 0 ? BENCH_GET
                                              : BENCH_ADD;
    int n = o->conns;
    char run[64];
    snprintf(run, sizeof run, "%ld.%llu", (long)getpid(), (unsigned long long)(uint64_t)clock_now_ns());
    bench_thread *ts = calloc((size_t)n, sizeof *ts);
    pthread_t *ths = calloc((size_t)n, sizeof *ths);
    hist *hs = calloc((size_t)n + 1, sizeof *hs);
    if (!ts || !ths || !hs) {
        fprintf(stderr, "store-load: out of memory for %d threads\n", n);
        return 1;
    }
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n + 1);
    atomic_int stop = 0;
    int started = 0;
    for (int i = 0; i < n; i++) {
        ts[i] = (bench_thread){.o = o, .op = op, .id = i, .run = run, .start = &start,
                               .stop = &stop, .h = &hs[i + 1]};
        int rc = start_thread(&ths[i], bench_main, &ts[i]);
        if (rc < 0) {
            /* The barrier counts on n threads; without them main would
             * wait forever, so this is fatal. */
            fprintf(stderr, "store-load: cannot start thread %d: %s\n", i, strerror(-rc));
            exit(1);
        }
        started++;
    }
    pthread_barrier_wait(&start);
    uint64_t t0 = (uint64_t)clock_now_ns();
    sleep_seconds(o->seconds);
    atomic_store(&stop, 1);
    uint64_t t1 = (uint64_t)clock_now_ns();
    uint64_t ops = 0;
    int errors = 0;
    hist *all = &hs[0];
    for (int i = 0; i < started; i++) {
        pthread_join(ths[i], NULL);
        ops += ts[i].ops;
        hist_merge(all, ts[i].h);
        if (ts[i].err) {
            if (errors++ < 5)
                fprintf(stderr, "store-load: connection %d: %s failed: %s\n", i,
                        ts[i].err_what, strerror(-ts[i].err));
        }
    }
    double secs = (double)(t1 - t0) / 1e9;
    printf("op=%s conns=%d gen=%s ext=%d value_bytes=%zu seconds=%.2f ops=%" PRIu64
           " ops_per_s=%.0f p50_us=%.1f p99_us=%.1f errors=%d\n",
           o->op, n, gen_name(o->gen), !o->no_ext, o->value_bytes, secs, ops,
           (double)ops / secs, hist_quantile_us(all, 0.50), hist_quantile_us(all, 0.99), errors);
    fflush(stdout);
    pthread_barrier_destroy(&start);
    free(ts);
    free(ths);
    free(hs);
    return errors ? 1 : 0;
}

/* --- scale ---------------------------------------------------------------
 * Each client ADDs 1 to a counter and then WAITs on a barrier key; the one
 * whose ADD returns the number of clients sets the barrier key. Nobody can
 * be released before every client has connected and added, so all of them
 * are connected at the same time. The ADD results must also be exactly
 * 1..N, each once, which checks that the server's ADD is atomic. */
typedef struct {
    const load_opts *o;
    const char *count_key, *go_key;
    atomic_uchar *seen;     /* seen[v] = 1 once some ADD returned v */
    atomic_int *released;
    atomic_int *dropped;
    atomic_int *reported;   /* errors printed so far (the first few only) */
    int id;
} scale_client;

static void scale_fail(scale_client *s, const char *what, int rc) {
    atomic_fetch_add(s->dropped, 1);
    if (atomic_fetch_add(s->reported, 1) < 5)
        fprintf(stderr, "store-load: client %d: %s: %s\n", s->id, what, strerror(-rc));
}

static void *scale_main(void *arg) {
    scale_client *s = arg;
    const load_opts *o = s->o;
    store_client *c = NULL;
    store_client_opts co = client_opts(o);
    int rc = store_client_connect(&co, &c);
    if (rc < 0) {
        scale_fail(s, "connect", rc);
        return NULL;
    }
    int64_t v = 0;
    rc = store_add(c, s->count_key, 1, &v);
    if (rc < 0) {
        scale_fail(s, "add", rc);
        goto out;
    }
    if (v < 1 || v > o->conns || atomic_exchange(&s->seen[v], 1)) {
        scale_fail(s, "add returned a duplicate or out-of-range count", -EPROTO);
        goto out;
    }
    if (v == o->conns) {
        rc = store_set(c, s->go_key, "go", 2);
        if (rc < 0) {
            scale_fail(s, "set barrier key", rc);
            goto out;
        }
    }
    const char *keys[1] = {s->go_key};
    rc = store_wait(c, 1, keys, -1);
    if (rc < 0) {
        scale_fail(s, "wait", rc);
        goto out;
    }
    atomic_fetch_add(s->released, 1);
out:
    store_client_close(c);
    return NULL;
}

static int run_scale(const load_opts *o) {
    int n = o->conns;
    char count_key[96], go_key[96];
    unsigned long long run = (uint64_t)clock_now_ns();
    snprintf(count_key, sizeof count_key, "scale/%ld.%llu/count", (long)getpid(), run);
    snprintf(go_key, sizeof go_key, "scale/%ld.%llu/go", (long)getpid(), run);
    scale_client *cs = calloc((size_t)n, sizeof *cs);
    pthread_t *ths = calloc((size_t)n, sizeof *ths);
    atomic_uchar *seen = calloc((size_t)n + 1, sizeof *seen);
    if (!cs || !ths || !seen) {
        fprintf(stderr, "store-load: out of memory for %d clients\n", n);
        return 1;
    }
    atomic_int released = 0, dropped = 0, reported = 0;
    uint64_t t0 = (uint64_t)clock_now_ns();
    int started = 0;
    for (int i = 0; i < n; i++) {
        cs[i] = (scale_client){.o = o, .count_key = count_key, .go_key = go_key, .seen = seen,
                               .released = &released, .dropped = &dropped,
                               .reported = &reported, .id = i};
        int rc = start_thread(&ths[i], scale_main, &cs[i]);
        if (rc < 0) {
            /* Without this client the counter never reaches n and the
             * others would wait out their timeout: say so and stop early. */
            fprintf(stderr, "store-load: cannot start client thread %d of %d: %s\n", i, n,
                    strerror(-rc));
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(ths[i], NULL);
    double secs = (double)((uint64_t)clock_now_ns() - t0) / 1e9;
    int rel = atomic_load(&released), drop = atomic_load(&dropped) + (n - started);
    printf("clients=%d released=%d dropped=%d seconds=%.2f\n", n, rel, drop, secs);
    fflush(stdout);
    free(cs);
    free(ths);
    free(seen);
    return rel == n && drop == 0 ? 0 : 1;
}

/* --- idle ----------------------------------------------------------------
 * Loads the keys through one connection, then opens the idle connections
 * from this thread (they send nothing after their first round trip, so no
 * thread per connection is needed). */
static int load_keys(const load_opts *o, store_client *c) {
    enum { BATCH = 1000 };
    char(*names)[32] = malloc(sizeof(*names) * BATCH);
    const char **keys = malloc(sizeof(*keys) * BATCH);
    const void **vals = malloc(sizeof(*vals) * BATCH);
    size_t *lens = malloc(sizeof(*lens) * BATCH);
    uint8_t *val = malloc(o->value_bytes ? o->value_bytes : 1);
    int rc = -ENOMEM;
    if (!names || !keys || !vals || !lens || !val) goto out;
    memset(val, 'x', o->value_bytes);
    rc = 0;
    for (int base = 0; base < o->keys && rc == 0; base += BATCH) {
        size_t n = 0;
        for (int i = base; i < o->keys && n < BATCH; i++, n++) {
            snprintf(names[n], sizeof names[n], "idle/%d", i);
            keys[n] = names[n];
            vals[n] = val;
            lens[n] = o->value_bytes;
        }
        /* MULTI_SET exists only in the current generation; against the
         * old one the SETs are simply pipelined (SET has no reply). */
        if (o->gen == STORE_GEN_V1) {
            for (size_t i = 0; i < n && rc == 0; i++) rc = store_set(c, keys[i], val, lens[i]);
        } else {
            rc = store_multi_set(c, n, keys, vals, lens);
        }
    }
    if (rc == 0) {
        /* One round trip after the last write: the server has applied
         * every SET before the caller measures it. */
        char last[32];
        snprintf(last, sizeof last, "idle/%d", o->keys - 1);
        const char *k[1] = {last};
        int ready = 0;
        rc = o->keys > 0 ? store_check(c, 1, k, &ready) : 0;
        if (rc == 0 && o->keys > 0 && !ready) rc = -EPROTO;
    }
out:
    free(names);
    free(keys);
    free(vals);
    free(lens);
    free(val);
    return rc;
}

static int run_idle(const load_opts *o) {
    store_client *loader = NULL;
    store_client **cs = calloc((size_t)o->conns, sizeof *cs);
    int opened = 0, rc = -ENOMEM, status = 1;
    if (!cs) goto out;
    store_client_opts co = client_opts(o);
    rc = store_client_connect(&co, &loader);
    if (rc < 0) {
        fprintf(stderr, "store-load: connect: %s\n", strerror(-rc));
        goto out;
    }
    rc = load_keys(o, loader);
    if (rc < 0) {
        fprintf(stderr, "store-load: loading %d keys: %s\n", o->keys, strerror(-rc));
        goto out;
    }
    for (; opened < o->conns; opened++) {
        rc = store_client_connect(&co, &cs[opened]);
        /* A connection counts once the server has answered on it; a bare
         * connect may still sit in the kernel's accept queue. */
        const char *k[1] = {"idle/0"};
        int ready = 0;
        if (rc == 0) rc = store_check(cs[opened], 1, k, &ready);
        if (rc < 0) {
            fprintf(stderr, "store-load: idle connection %d: %s\n", opened, strerror(-rc));
            /* A connection that opened but failed its round trip is
             * closed with the others below. */
            if (cs[opened]) opened++;
            goto out;
        }
    }
    printf("ready keys=%d conns=%d\n", o->keys, opened);
    fflush(stdout);
    sleep_seconds(o->hold_seconds);
    status = 0;
out:
    for (int i = 0; i < opened; i++)
        if (cs[i]) store_client_close(cs[i]);
    if (loader) store_client_close(loader);
    free(cs);
    return status;
}

/* --- command line -------------------------------------------------------- */
static void usage(FILE *f) {
    fputs("usage: store-load bench --host H --port P --conns N --seconds S --op set|get|add\n"
          "                        [--gen v1|v2] [--no-ext] [--value-bytes B] [--timeout-ms T]\n"
          "       store-load scale --host H --port P --clients N [--timeout-ms T]\n"
          "                        [--gen v1|v2] [--no-ext]\n"
          "       store-load idle  --host H --port P --conns N --keys K --value-bytes B\n"
          "                        --hold-seconds S [--gen v1|v2] [--no-ext]\n",
          f);
}

static const opts_choice ops[] = {{"set", 0}, {"get", 0}, {"add", 0}, {NULL, 0}};
static const opts_choice gens[] = {{"v1", STORE_GEN_V1}, {"v2", STORE_GEN_V2}, {NULL, 0}};
_Static_assert(sizeof(store_gen) == sizeof(int), "OPTS_CHOICE stores an int");

/* The mode is argv[1] and the options follow it. 0; 1 for --help; or
 * -EINVAL with the message printed. */
static int parse_args(int argc, char **argv, load_opts *o) {
    if (argc < 2) return -EINVAL;
    o->mode = argv[1];
    const opts_opt table[] = {
        {"host", 0, OPTS_STR, .target = &o->host},
        {"port", 0, OPTS_INT, .target = &o->port, .lo = 1, .hi = 65535},
        {"conns", 0, OPTS_INT, .target = &o->conns, .lo = 1, .hi = INT_MAX},
        {"clients", 0, OPTS_INT, .target = &o->conns, .lo = 1, .hi = INT_MAX},
        {"seconds", 0, OPTS_SECONDS, .target = &o->seconds, .positive = 1},
        {"op", 0, OPTS_STR, .target = &o->op, .choices = ops},
        {"value-bytes", 0, OPTS_SIZE, .target = &o->value_bytes},
        {"timeout-ms", 0, OPTS_INT, .target = &o->timeout_ms, .lo = 1, .hi = INT_MAX},
        {"keys", 0, OPTS_INT, .target = &o->keys, .lo = 0, .hi = INT_MAX},
        {"hold-seconds", 0, OPTS_SECONDS, .target = &o->hold_seconds},
        {"gen", 0, OPTS_CHOICE, .target = &o->gen, .choices = gens},
        {"no-ext", 0, OPTS_FLAG, .target = &o->no_ext},
        {"help", 'h', .type = OPTS_HELP},
    };
    opts_spec spec = {.prog = "store-load", .opts = table,
                      .nopts = sizeof table / sizeof table[0], .no_operands = 1};
    char err[512];
    int next, rc = opts_parse(&spec, argc - 1, argv + 1, &next, err, sizeof err);
    if (rc == 0 && (!o->host || !o->port)) {
        snprintf(err, sizeof err, "--host and --port are required");
        rc = -EINVAL;
    }
    if (rc == 0 && !o->conns) {
        snprintf(err, sizeof err, "--conns (or --clients) is required");
        rc = -EINVAL;
    }
    if (rc < 0) fprintf(stderr, "store-load: %s\n", err);
    return rc;
}

int main(int argc, char **argv) {
    load_opts o = {.op = "add", .gen = STORE_GEN_V2, .seconds = 3, .value_bytes = 100,
                   .timeout_ms = 60000, .keys = 100000, .hold_seconds = 10};
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    int rc = parse_args(argc, argv, &o);
    if (rc) usage(rc == OPTS_HELP_GIVEN ? stdout : stderr);
    if (rc) return rc == OPTS_HELP_GIVEN ? 0 : 2;
    /* A server that hangs up mid-write must show up as an error from the
     * client call, not kill the load generator. */
    signal(SIGPIPE, SIG_IGN);
    fdlimit_raise();
    if (strcmp(o.mode, "bench") == 0) return run_bench(&o);
    if (strcmp(o.mode, "scale") == 0) return run_scale(&o);
    if (strcmp(o.mode, "idle") == 0) return run_idle(&o);
    fprintf(stderr, "store-load: unknown mode '%s'\n", o.mode);
    usage(stderr);
    return 2;
}
