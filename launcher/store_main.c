/* ddprun-store: the store server on its own, in the foreground.
 *
 *   ddprun-store [--host H] [--port P] [--max-key-bytes N] [--max-value-bytes N]
 *                [--max-conns N] [--verbose] [--quiet]
 *
 * Port 0 picks a free port; the line "ddprun-store: listening on H:P" on
 * stderr says which, once the server accepts connections. SIGINT or SIGTERM
 * stops it and it exits 0. DDPRUN_STORE_TOKEN, when set, is the secret
 * every client must present first. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "common/fdlimit.h"
#include "common/log.h"
#include "rendezvous/store_server.h"

static const char usage[] =
    "usage: ddprun-store [options]\n"
    "\n"
    "Runs the ddprun key-value store (compatible with PyTorch's TCPStore) in the\n"
    "foreground until SIGINT or SIGTERM.\n"
    "\n"
    "  --host H             address or name to listen on (default: all, IPv6 and IPv4)\n"
    "  --port P             port to listen on; 0 picks a free one (default 29400)\n"
    "  --max-key-bytes N    longest key accepted (default 8192)\n"
    "  --max-value-bytes N  longest value accepted (default 8388608)\n"
    "  --max-conns N        most connections open at once (default 65536)\n"
    "  -v, --verbose        log every connection and disconnection\n"
    "  -q, --quiet          log errors only\n"
    "  -h, --help           show this help\n"
    "\n"
    "Environment: DDPRUN_STORE_TOKEN=secret makes clients present the secret\n"
    "first (PyTorch's own clients then cannot connect). DDPRUN_LOG_LEVEL=\n"
    "error|warn|info|debug sets the log level.\n";

/* Parses a whole decimal number in [lo, hi] or explains why not. */
static int parse_num(const char *flag, const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "ddprun-store: %s: '%s' is not a number from %ld to %ld\n", flag, s, lo,
                hi);
        return -1;
    }
    *out = v;
    return 0;
}

typedef struct {
    uv_signal_t sigint, sigterm;
    store_server srv;
} store_main;

static void on_closed(uv_handle_t *h) { (void)h; }

static void on_signal(uv_signal_t *sig, int signum) {
    store_main *m = sig->data;
    log_info("SIG%s received; shutting down", sigabbrev_np(signum));
    store_server_close(&m->srv, NULL);
    uv_close((uv_handle_t *)&m->sigint, on_closed);
    uv_close((uv_handle_t *)&m->sigterm, on_closed);
}

int main(int argc, char **argv) {
    log_init("ddprun-store");
    store_server_opts o = {.port = 29400};
    static const struct option opts[] = {
        {"host", required_argument, 0, 'H'},
        {"port", required_argument, 0, 'p'},
        {"max-key-bytes", required_argument, 0, 'k'},
        {"max-value-bytes", required_argument, 0, 'V'},
        {"max-conns", required_argument, 0, 'c'},
        {"verbose", no_argument, 0, 'v'},
        {"quiet", no_argument, 0, 'q'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int ch;
    long v;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, ":vqh", opts, NULL)) != -1) {
        switch (ch) {
        case 'H': o.host = optarg; break;
        case 'p':
            if (parse_num("--port", optarg, 0, 65535, &v)) return 2;
            o.port = (int)v;
            break;
        case 'k':
            if (parse_num("--max-key-bytes", optarg, 1, INT_MAX, &v)) return 2;
            o.max_key = (uint32_t)v;
            break;
        case 'V':
            if (parse_num("--max-value-bytes", optarg, 1, INT_MAX, &v)) return 2;
            o.max_value = (uint32_t)v;
            break;
        case 'c':
            if (parse_num("--max-conns", optarg, 1, INT_MAX, &v)) return 2;
            o.max_conns = (int)v;
            break;
        case 'v': log_set_level(LOG_DEBUG); break;
        case 'q': log_set_level(LOG_ERROR); break;
        case 'h': fputs(usage, stdout); return 0;
        case ':':
            fprintf(stderr, "ddprun-store: %s needs a value (see --help)\n", argv[optind - 1]);
            return 2;
        default:
            fprintf(stderr, "ddprun-store: unknown option '%s' (see --help)\n", argv[optind - 1]);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ddprun-store: unexpected argument '%s' (see --help)\n", argv[optind]);
        return 2;
    }
    o.token = getenv("DDPRUN_STORE_TOKEN");
    fdlimit_raise();
    signal(SIGPIPE, SIG_IGN);

    uv_loop_t *loop = uv_default_loop();
    store_main m;
    int rc = store_server_init(loop, &m.srv, &o);
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
    fprintf(stderr, "ddprun-store: listening on %s:%d%s\n", o.host ? o.host : "*",
            store_server_port(&m.srv), o.token ? " (token required)" : "");
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    return 0;
}
