/* ddprun-store: the store server on its own, in the foreground.
 *
 *   ddprun-store [--host H] [--port P] [--max-key-bytes N] [--max-value-bytes N]
 *                [--max-conns N] [--request-timeout S] [--stats-every S]
 *                [--proxy-to HOST:PORT] [--verbose] [--quiet]
 *
 * Port 0 picks a free port; the line "ddprun-store: listening on H:P" on
 * stderr says which, once the server accepts connections. SIGINT or SIGTERM
 * stops it and it exits 0. --stats-every S prints its counters (requests and
 * their rate, connections, keys) every S seconds, for operators and
 * benchmarks. DDPRUN_STORE_TOKEN, when set, is the secret
 * every client must present first.
 *
 * With --proxy-to it is a per-node store proxy instead (store/store_proxy.h):
 * it serves this node's clients (on 127.0.0.1 unless --host says otherwise)
 * and carries them all to the store at HOST:PORT over one connection. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/build_info.h"
#include "common/ddprun_env.h"
#include "common/fdlimit.h"
#include "common/log.h"
#include "common/opts.h"
#include "store/store_proxy.h"
#include "store/store_server.h"

static const char usage_head[] =
    "usage: ddprun-store [options]\n"
    "\n"
    "Runs the ddprun key-value store (compatible with PyTorch's TCPStore) in the\n"
    "foreground until SIGINT or SIGTERM.\n"
    "\n";

static const char usage_tail[] =
    "\n"
    "Environment: " DDPRUN_ENV_STORE_TOKEN "=secret makes clients present the secret\n"
    "first (PyTorch's own clients then cannot connect). " DDPRUN_ENV_LOG_LEVEL "=\n"
    "error|warn|info|debug sets the log level.\n";

static void print_usage(const opts_spec *spec) {
    opts_print_help(spec, usage_head, usage_tail, stdout);
}

/* Fills *o and the log level from the command line. 0; 1 after --help;
 * or -EINVAL with the message printed. */
static int parse_args(int argc, char **argv, store_server_opts *o, int *stats_every,
                      const char **proxy_to) {
    int max_key = 0, max_value = 0, verbose = 0, quiet = 0, timeout_s = 0;
    const opts_opt table[] = {
        {"host", 0, OPTS_STR, .target = &o->host, .metavar = "H",
         .help = "address or name to listen on (default: all, IPv6 and IPv4)"},
        {"port", 0, OPTS_INT, .target = &o->port, .lo = 0, .hi = 65535, .metavar = "P",
         .help = "port to listen on; 0 picks a free one (default 29400)"},
        {"max-key-bytes", 0, OPTS_INT, .target = &max_key, .lo = 1, .hi = INT_MAX,
         .metavar = "N", .help = "longest key accepted (default 8192)"},
        {"max-value-bytes", 0, OPTS_INT, .target = &max_value, .lo = 1, .hi = INT_MAX,
         .metavar = "N", .help = "longest value accepted (default 8388608)"},
        {"max-conns", 0, OPTS_INT, .target = &o->max_conns, .lo = 1, .hi = INT_MAX,
         .metavar = "N", .help = "most connections open at once (default 65536)"},
        {"request-timeout", 0, OPTS_INT, .target = &timeout_s, .lo = 1, .hi = 86400,
         .metavar = "S", .help = "a client that begins a request and does not finish\n"
                                 "it in S seconds is dropped (default 60)"},
        {"stats-every", 0, OPTS_INT, .target = stats_every, .lo = 1, .hi = 86400,
         .metavar = "S", .help = "print the requests served (and their rate), the\n"
                                 "connections and the keys every S seconds"},
        {"proxy-to", 0, OPTS_STR, .target = proxy_to, .metavar = "HOST:PORT",
         .help = "be a per-node proxy: serve this node's clients\n"
                 "(on 127.0.0.1 unless --host) and carry them all\n"
                 "to ddprun's store at HOST:PORT over one connection"},
        {"verbose", 'v', OPTS_FLAG, .target = &verbose,
         .help = "log every connection and disconnection"},
        {"quiet", 'q', OPTS_FLAG, .target = &quiet, .help = "log errors only"},
        {"help", 'h', .type = OPTS_HELP, .help = "show this help"},
        {"version", 0, .type = OPTS_VERSION,
         .help = "print the version and the build's options"},
    };
    opts_spec spec = {.prog = "ddprun-store", .opts = table,
                      .nopts = sizeof table / sizeof table[0], .abbrev = 1, .no_operands = 1};
    char err[512];
    int next, rc = opts_parse(&spec, argc, argv, &next, err, sizeof err);
    if (rc == OPTS_HELP_GIVEN) print_usage(&spec);
    if (rc == OPTS_VERSION_GIVEN) {
        build_info_print(stdout, "ddprun-store");
        rc = OPTS_HELP_GIVEN; /* printed: nothing to run */
    }
    if (rc == 0 && verbose && quiet) {
        snprintf(err, sizeof err, "--verbose and --quiet contradict each other; give one");
        rc = -EINVAL;
    }
    if (rc < 0) fprintf(stderr, "ddprun-store: %s\n", err);
    if (rc) return rc;
    o->max_key = (uint32_t)max_key;
    o->max_value = (uint32_t)max_value;
    o->request_timeout_ms = timeout_s * 1000;
    if (verbose || quiet) log_set_level(verbose ? LOG_DEBUG : LOG_ERROR);
    return 0;
}

typedef struct {
    uv_signal_t sigint, sigterm;
    uv_timer_t stats;
    int stats_every; /* s; 0: no stats */
    store_stats last;
    store_server srv;
    store_proxy *proxy; /* --proxy-to: this instead of srv */
} store_main;

/* "host:port" or "[v6]:port" into host (len bytes) and *port. */
static int split_hostport(const char *s, char *host, size_t len, int *port) {
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s) return -EINVAL;
    const char *h = s, *hend = colon;
    if (*s == '[') {
        if (colon[-1] != ']') return -EINVAL;
        h = s + 1, hend = colon - 1;
    }
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || p < 1 || p > 65535 || (size_t)(hend - h) >= len)
        return -EINVAL;
    snprintf(host, len, "%.*s", (int)(hend - h), h);
    *port = (int)p;
    return 0;
}

/* --stats-every: the counters, and the requests' rate since the last line. */
static void on_stats(uv_timer_t *t) {
    store_main *m = t->data;
    store_stats now;
    store_server_stats(&m->srv, &now);
    fprintf(stderr,
            "ddprun-store: stats: %llu requests (%.0f/s), %llu connections open (%llu accepted, "
            "%llu dropped), %llu keys\n",
            (unsigned long long)now.requests,
            (double)(now.requests - m->last.requests) / m->stats_every,
            (unsigned long long)now.conns_open, (unsigned long long)now.conns_accepted,
            (unsigned long long)now.conns_dropped, (unsigned long long)now.keys);
    m->last = now;
}

static void on_closed(uv_handle_t *h) { (void)h; }

static void on_signal(uv_signal_t *sig, int signum) {
    store_main *m = sig->data;
    log_info("SIG%s received; shutting down", sigabbrev_np(signum));
    if (m->proxy) store_proxy_close(m->proxy, NULL, NULL);
    else store_server_close(&m->srv, NULL);
    uv_close((uv_handle_t *)&m->sigint, on_closed);
    uv_close((uv_handle_t *)&m->sigterm, on_closed);
    uv_close((uv_handle_t *)&m->stats, on_closed);
}

int main(int argc, char **argv) {
    log_init("ddprun-store");
    store_server_opts o = {.port = 29400};
    store_main m = {0};
    const char *proxy_to = NULL;
    int rc = parse_args(argc, argv, &o, &m.stats_every, &proxy_to);
    if (rc) return rc == OPTS_HELP_GIVEN ? 0 : 2;
    o.token = getenv(DDPRUN_ENV_STORE_TOKEN);
    char up_host[256];
    int up_port = 0;
    if (proxy_to && split_hostport(proxy_to, up_host, sizeof up_host, &up_port)) {
        fprintf(stderr, "ddprun-store: --proxy-to: '%s' is not HOST:PORT\n", proxy_to);
        return 2;
    }
    if (proxy_to && m.stats_every) {
        fprintf(stderr, "ddprun-store: --stats-every counts the store's requests; a proxy "
                        "(--proxy-to) has none of its own\n");
        return 2;
    }
    fdlimit_raise();
    signal(SIGPIPE, SIG_IGN);

    uv_loop_t *loop = uv_default_loop();
    if (proxy_to) {
        store_proxy_opts po = {.host = o.host, .port = o.port, .upstream_host = up_host,
                               .upstream_port = up_port, .token = o.token};
        rc = store_proxy_start(loop, &po, &m.proxy);
    } else {
        rc = store_server_init(loop, &m.srv, &o);
    }
    if (rc) {
        fprintf(stderr, "ddprun-store: cannot listen on %s port %d: %s%s\n",
                o.host ? o.host : "*", o.port, uv_strerror(rc),
                rc == UV_EADDRINUSE ? " (choose another --port, or 0 for a free one)" : "");
        return 1;
    }
    uv_signal_init(loop, &m.sigint);
    uv_signal_init(loop, &m.sigterm);
    m.sigint.data = m.sigterm.data = &m;
    uv_signal_start(&m.sigint, on_signal, SIGINT);
    uv_signal_start(&m.sigterm, on_signal, SIGTERM);
    uv_timer_init(loop, &m.stats);
    m.stats.data = &m;
    if (m.stats_every)
        uv_timer_start(&m.stats, on_stats, (uint64_t)m.stats_every * 1000,
                       (uint64_t)m.stats_every * 1000);
    if (m.proxy)
        fprintf(stderr, "ddprun-store: a proxy to the store at %s, listening on %s:%d\n",
                proxy_to, o.host ? o.host : "127.0.0.1", store_proxy_port(m.proxy));
    else
        fprintf(stderr, "ddprun-store: listening on %s:%d%s\n", o.host ? o.host : "*",
                store_server_port(&m.srv), o.token ? " (token required)" : "");
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 0;
}
