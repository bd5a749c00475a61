/* ddprun-store-cli: a command-line client for the store, for people who
 * want to look inside a running rendezvous, set a key by hand while
 * debugging, or script a small demo. One invocation is one connection and
 * one command; the command's result goes to stdout and nothing else does,
 * so the output can be used in shell scripts.
 *
 * Exit status: 0 success, 1 the command failed (or `check` found a key
 * missing), 2 the command line was wrong. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/build_info.h"
#include "common/ddprun_env.h"
#include "common/opts.h"
#include "store/store_client.h"

#define PROG "ddprun-store-cli"
#define EXIT_FAIL 1
#define EXIT_USAGE 2

/* The c10d rendezvous' default port, which is where a store usually is. */
#define DEFAULT_PORT 29400
#define DEFAULT_TIMEOUT_MS 30000
/* Short, because a person at a terminal would rather hear at once that
 * nothing is listening; scripts that start the store just before may
 * raise it. */
#define DEFAULT_CONNECT_TIMEOUT_MS 3000

typedef struct {
    const char *host;
    int port;
    int timeout_ms;
    int connect_timeout_ms;
    store_gen gen;
    int no_ext;
    char addr[300]; /* "host:port" for messages */
} cli_opts;

/* One subcommand. Arguments are checked (count and integers) before
 * connecting, so a typo is reported without needing a server. */
typedef struct {
    const char *name;
    const char *args;        /* synopsis of the arguments, for messages and --help */
    int min_args, max_args;  /* max_args < 0: no upper bound */
    unsigned int_args;       /* bit i set: argument i must be an integer */
    int (*run)(store_client *c, const cli_opts *o, char **argv, int argc);
    const char *help;
} command;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs(PROG ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The whole string must be a decimal integer that fits in int64_t. */
static int parse_i64(const char *s, int64_t *out) {
    return opts_parse_i64(s, INT64_MIN, INT64_MAX, out);
}

/* A hint for the errors a person can do something about; "" otherwise. */
static const char *hint(int rc, const cli_opts *o) {
    switch (-rc) {
    case ETIMEDOUT: return " (raise --timeout to wait longer)";
    case EPROTO:
        return o->no_ext ? " (the server may lack this command: PyTorch's TCPStore has fewer)"
                         : " (is this a store? for PyTorch's TCPStore use --no-ext)";
    case EOPNOTSUPP:
        return o->gen == STORE_GEN_V1 ? " (torch 1.13's protocol, --protocol v1, lacks this command)"
                                      : "";
    case ECONNRESET:
    case EPIPE: {
        /* A store with a token drops clients that present none, and the
         * client only learns it from the hang-up. */
        const char *tok = getenv(DDPRUN_ENV_STORE_TOKEN);
        return tok && *tok ? " (the server closed the connection)"
                           : " (the server closed the connection; if it requires a token, "
                             "set " DDPRUN_ENV_STORE_TOKEN ")";
    }
    default: return "";
    }
}

/* Report a failed store call about `what` (a command and its key). */
static int failed(const cli_opts *o, const char *what, int rc) {
    say("%s: %s%s", what, strerror(-rc), hint(rc, o));
    return EXIT_FAIL;
}

/* Print a value as it is stored, then a newline so the shell prompt does
 * not run into it. */
static int print_value(const uint8_t *v, size_t n) {
    if (n && fwrite(v, 1, n, stdout) != n) return -1;
    return putchar('\n') == EOF ? -1 : 0;
}

static int cmd_set(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    int rc = store_set(c, a[0], a[1], strlen(a[1]));
    return rc ? failed(o, "set", rc) : 0;
}

static int cmd_get(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    uint8_t *v = NULL;
    size_t len = 0;
    int rc = store_try_get(c, a[0], &v, &len);
    if (rc == -ENOENT) {
        say("get: no key '%s' (use `wait %s` first to wait for it)", a[0], a[0]);
        return EXIT_FAIL;
    }
    if (rc) return failed(o, "get", rc);
    print_value(v, len);
    free(v);
    return 0;
}

static int cmd_add(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    int64_t delta, result;
    parse_i64(a[1], &delta);
    int rc = store_add(c, a[0], delta, &result);
    if (rc == -ECONNRESET || rc == -EPIPE) {
        /* ddprun-store drops a client whose ADD cannot be done, and a
         * hang-up is all the client sees; its log line has the details. */
        say("add: the server closed the connection: the value of '%s' is probably not a "
            "decimal integer, or the sum overflows (the store's log says which)", a[0]);
        return EXIT_FAIL;
    }
    if (rc) return failed(o, "add", rc);
    printf("%" PRId64 "\n", result);
    return 0;
}

static int cmd_cas(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    uint8_t *v = NULL;
    size_t len = 0;
    int rc = store_compare_set(c, a[0], a[1], strlen(a[1]), a[2], strlen(a[2]), &v, &len);
    if (rc) return failed(o, "cas", rc);
    print_value(v, len);
    free(v);
    return 0;
}

static int cmd_wait(store_client *c, const cli_opts *o, char **a, int n) {
    int rc = store_wait(c, (size_t)n, (const char *const *)a, -1);
    if (rc == -ETIMEDOUT) {
        say("wait: timed out after %d ms: not every key exists yet (raise --timeout to wait "
            "longer)", o->timeout_ms);
        return EXIT_FAIL;
    }
    return rc ? failed(o, "wait", rc) : 0;
}

static int cmd_check(store_client *c, const cli_opts *o, char **a, int n) {
    int ready = 0;
    int rc = store_check(c, (size_t)n, (const char *const *)a, &ready);
    if (rc) return failed(o, "check", rc);
    puts(ready ? "ready" : "not ready");
    return ready ? 0 : EXIT_FAIL;
}

static int cmd_del(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    int deleted = 0;
    int rc = store_delete(c, a[0], &deleted);
    if (rc) return failed(o, "del", rc);
    printf("%d\n", deleted);
    return 0;
}

static int cmp_str(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

static int cmd_keys(store_client *c, const cli_opts *o, char **a, int n) {
    (void)a, (void)n;
    char **keys = NULL;
    size_t nkeys = 0;
    int rc = store_list_keys(c, &keys, &nkeys);
    if (rc) return failed(o, "keys", rc);
    /* The server lists keys in hash order; sorted output reads better and
     * diffs cleanly. */
    if (nkeys) qsort(keys, nkeys, sizeof *keys, cmp_str);
    for (size_t i = 0; i < nkeys; i++) puts(keys[i]);
    store_free_keys(keys, nkeys);
    return 0;
}

static int cmd_num_keys(store_client *c, const cli_opts *o, char **a, int n) {
    (void)a, (void)n;
    int64_t num = 0;
    int rc = store_num_keys(c, &num);
    if (rc) return failed(o, "num-keys", rc);
    printf("%" PRId64 "\n", num);
    return 0;
}

static int cmd_append(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    int rc = store_append(c, a[0], a[1], strlen(a[1]));
    return rc ? failed(o, "append", rc) : 0;
}

static int cmd_ping(store_client *c, const cli_opts *o, char **a, int n) {
    (void)a, (void)n;
    double rtt = 0;
    int rc = store_ping(c, &rtt);
    if (rc) return failed(o, "ping", rc);
    printf("%.1f us\n", rtt);
    return 0;
}

static int cmd_push(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    int rc = store_queue_push(c, a[0], a[1], strlen(a[1]));
    return rc ? failed(o, "push", rc) : 0;
}

static int cmd_pop(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    uint8_t *v = NULL;
    size_t len = 0;
    int rc = store_queue_pop(c, a[0], 0, &v, &len);
    if (rc == -ENOENT) {
        say("pop: queue '%s' is empty", a[0]);
        return EXIT_FAIL;
    }
    if (rc) return failed(o, "pop", rc);
    print_value(v, len);
    free(v);
    return 0;
}

static int cmd_qlen(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    int64_t len = 0;
    int rc = store_queue_len(c, a[0], &len);
    if (rc) return failed(o, "qlen", rc);
    printf("%" PRId64 "\n", len);
    return 0;
}

static int cmd_barrier(store_client *c, const cli_opts *o, char **a, int n) {
    (void)n;
    int64_t world = 0;
    parse_i64(a[1], &world);
    int rc = store_barrier(c, a[0], world, -1);
    if (rc == -ETIMEDOUT) {
        say("barrier '%s': timed out after %d ms before %" PRId64 " clients entered (raise "
            "--timeout to wait longer)", a[0], o->timeout_ms, world);
        return EXIT_FAIL;
    }
    return rc ? failed(o, "barrier", rc) : 0;
}

static const command commands[] = {
    {"set", "KEY VALUE", 2, 2, 0, cmd_set, "store VALUE under KEY"},
    {"get", "KEY", 1, 1, 0, cmd_get,
     "print KEY's value; fails at once if KEY is missing\n(wait for it first with `wait KEY`)"},
    {"add", "KEY N", 2, 2, 1u << 1, cmd_add,
     "add N to the integer in KEY (missing counts as 0)\nand print the result"},
    {"cas", "KEY EXPECTED DESIRED", 3, 3, 0, cmd_cas,
     "set KEY to DESIRED if it holds EXPECTED (or is\nmissing and EXPECTED is \"\"); print the value\n"
     "stored afterwards"},
    {"wait", "KEY...", 1, -1, 0, cmd_wait, "wait until every KEY exists"},
    {"check", "KEY...", 1, -1, 0, cmd_check,
     "print \"ready\" and exit 0 if every KEY exists,\nelse \"not ready\" and exit 1"},
    {"del", "KEY", 1, 1, 0, cmd_del, "delete KEY; print 1 if it existed, else 0"},
    {"keys", "", 0, 0, 0, cmd_keys, "list every key, sorted, one per line"},
    {"num-keys", "", 0, 0, 0, cmd_num_keys, "print how many keys the store holds"},
    {"append", "KEY VALUE", 2, 2, 0, cmd_append, "append VALUE to KEY's value (creates KEY)"},
    {"ping", "", 0, 0, 0, cmd_ping, "time one round trip; print it in microseconds"},
    {"push", "KEY VALUE", 2, 2, 0, cmd_push, "push VALUE onto the queue KEY"},
    {"pop", "KEY", 1, 1, 0, cmd_pop,
     "pop and print the oldest value of queue KEY;\nfails at once if the queue is empty"},
    {"qlen", "KEY", 1, 1, 0, cmd_qlen, "print the length of queue KEY"},
    {"barrier", "KEY N", 2, 2, 1u << 1, cmd_barrier,
     "return once N clients (this one included) have\nentered barrier KEY"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

#define STR_(x) #x
#define STR(x) STR_(x)

/* The list of commands, for --help. */
static void usage_commands(FILE *f) {
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char syn[64];
        snprintf(syn, sizeof syn, "%s %s", commands[i].name, commands[i].args);
        fprintf(f, "  %-26s", syn);
        /* Continuation lines of a long description line up under its start. */
        for (const char *h = commands[i].help; *h; h++) {
            fputc(*h, f);
            if (*h == '\n') fprintf(f, "%28s", "");
        }
        fputc('\n', f);
    }
}

static void usage(const opts_spec *spec) {
    char options[2048];
    opts_format_help(spec, options, sizeof options);
    printf("usage: " PROG " [OPTIONS] COMMAND [ARGS...]\n"
           "\n"
           "Talks to a ddprun store (ddprun-store, or the store inside a ddprun agent)\n"
           "or to PyTorch's TCPStore server: one connection, one command. Results go to\n"
           "stdout, errors to stderr. Keys and values are taken verbatim (PyTorch 1.13's\n"
           "client adds a leading '/' to every key it sends).\n"
           "\n"
           "Options:\n"
           "%s"
           "\n"
           "Commands:\n",
           options);
    usage_commands(stdout);
    printf("\n"
           "Environment:\n"
           "  " DDPRUN_ENV_STORE_TOKEN "        shared secret to present when the store has one\n"
           "\n"
           "Exit status: 0 success, 1 the command failed (or check found a key missing),\n"
           "2 the command line was wrong.\n"
           "\n"
           "Example:\n"
           "  " PROG " --port 29400 set greeting hello\n"
           "  " PROG " --port 29400 get greeting\n");
}

_Static_assert(sizeof(store_gen) == sizeof(int), "OPTS_CHOICE stores an int");
static const opts_choice protocols[] = {{"v1", STORE_GEN_V1}, {"v2", STORE_GEN_V2}, {NULL, 0}};

/* Fills *o from the options; returns the index of the command word, or
 * -1 after a usage error (already reported), or -2 after --help (printed).
 * Options end at the command word, so that its arguments (e.g. a negative
 * N for add) are never taken for options. */
static int parse_options(int argc, char **argv, cli_opts *o) {
    const opts_opt table[] = {
        {"host", 0, OPTS_STR, .target = &o->host, .metavar = "H",
         .help = "store address or name (default 127.0.0.1)"},
        {"port", 0, OPTS_INT, .target = &o->port, .lo = 1, .hi = 65535, .metavar = "P",
         .help = "store port (default " STR(DEFAULT_PORT) ")"},
        {"timeout", 0, OPTS_INT, .target = &o->timeout_ms, .lo = 1, .hi = INT32_MAX,
         .metavar = "MS", .help = "how long one command may take, waits and\n"
                                  "barriers included (default " STR(DEFAULT_TIMEOUT_MS) ")"},
        {"connect-timeout", 0, OPTS_INT, .target = &o->connect_timeout_ms, .lo = 1,
         .hi = INT32_MAX, .metavar = "MS",
         .help = "how long to keep retrying the connection\n"
                 "(default " STR(DEFAULT_CONNECT_TIMEOUT_MS) ")"},
        {"protocol", 0, OPTS_CHOICE, .target = &o->gen, .choices = protocols,
         .want = "v1 (torch 1.13) or v2 (torch >= 2)", .metavar = "v1|v2",
         .help = "wire generation: v2 is torch >= 2 (default), v1\n"
                 "is torch 1.13, which has only set, get, add, cas,\n"
                 "wait, check, del and num-keys"},
        {"no-ext", 0, OPTS_FLAG, .target = &o->no_ext,
         .help = "do not send ddprun's HELLO handshake; needed to\n"
                 "talk to PyTorch's own TCPStore server"},
        {"help", 'h', .type = OPTS_HELP, .help = "show this help"},
        {"version", 0, .type = OPTS_VERSION,
         .help = "print the version and the build's options"},
    };
    opts_spec spec = {.prog = PROG, .opts = table, .nopts = sizeof table / sizeof table[0],
                      .abbrev = 1, .help_col = 28};
    char err[512];
    int next, rc = opts_parse(&spec, argc, argv, &next, err, sizeof err);
    if (rc == OPTS_HELP_GIVEN || rc == OPTS_VERSION_GIVEN) {
        if (rc == OPTS_HELP_GIVEN) usage(&spec);
        else build_info_print(stdout, PROG);
        return -2;
    }
    if (rc == 0 && next >= argc) {
        snprintf(err, sizeof err, "no command given (see --help for the list)");
        rc = -EINVAL;
    }
    if (rc) {
        say("%s", err);
        return -1;
    }
    return next;
}

static const command *find_command(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

/* Argument count and integer arguments; reports and returns -1 if wrong. */
static int check_args(const command *cmd, char **args, int nargs) {
    if (nargs < cmd->min_args || (cmd->max_args >= 0 && nargs > cmd->max_args)) {
        if (cmd->max_args == 0) say("%s takes no arguments", cmd->name);
        else say("%s needs %s (usage: " PROG " %s %s)", cmd->name, cmd->args, cmd->name,
                 cmd->args);
        return -1;
    }
    for (int i = 0; i < nargs && i < 32; i++) {
        int64_t v;
        if ((cmd->int_args >> i & 1u) && parse_i64(args[i], &v)) {
            say("%s: '%s' is not an integer", cmd->name, args[i]);
            return -1;
        }
    }
    if (strcmp(cmd->name, "barrier") == 0) {
        int64_t n;
        parse_i64(args[1], &n);
        if (n < 1) {
            say("barrier: N is the number of clients to wait for and must be at least 1, not "
                "%" PRId64, n);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    cli_opts o = {
        .host = "127.0.0.1",
        .port = DEFAULT_PORT,
        .timeout_ms = DEFAULT_TIMEOUT_MS,
        .connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS,
        .gen = STORE_GEN_V2,
    };
    int at = parse_options(argc, argv, &o);
    if (at == -2) return 0;
    if (at < 0) return EXIT_USAGE;
    const command *cmd = find_command(argv[at]);
    if (!cmd) {
        say("unknown command '%s' (see --help for the list)", argv[at]);
        return EXIT_USAGE;
    }
    char **args = argv + at + 1;
    int nargs = argc - at - 1;
    if (check_args(cmd, args, nargs)) return EXIT_USAGE;

    /* IPv6 literals are bracketed so that the port stays readable. */
    snprintf(o.addr, sizeof o.addr, strchr(o.host, ':') ? "[%s]:%d" : "%s:%d", o.host, o.port);
    store_client_opts copts = {
        .host = o.host,
        .port = o.port,
        .connect_timeout_ms = o.connect_timeout_ms,
        .timeout_ms = o.timeout_ms,
        .gen = o.gen,
        .no_ext = o.no_ext,
    };
    store_client *c = NULL;
    int rc = store_client_connect(&copts, &c);
    if (rc) {
        say("cannot connect to %s: %s%s", o.addr, strerror(-rc),
            rc == -EACCES        ? " (the store refused the token in " DDPRUN_ENV_STORE_TOKEN ")"
            : rc == -EHOSTUNREACH ? " (is the host name right?)"
                                  : "");
        return EXIT_FAIL;
    }
    int status = cmd->run(c, &o, args, nargs);
    store_client_close(c);
    if (fflush(stdout) == EOF || ferror(stdout)) {
        say("cannot write the result: %s", strerror(errno));
        return EXIT_FAIL;
    }
    return status;
}
