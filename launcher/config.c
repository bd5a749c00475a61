/* ddprun's command line. It reads torchrun's flags, in both the --a-b and
 * --a_b spellings and with PET_<NAME> environment variables as their
 * defaults, and checks them. The result is one agent_config, which
 * includes the worker's own command line. The rules follow torchrun (argparse): a
 * long option may be abbreviated to any unique prefix, a value follows
 * either as "--flag=value" or as the next argument, and the first argument
 * that is not an option is PROGRAM, after which nothing is parsed. Nothing
 * here exits or prints, except that --help prints the usage. */
#include "launcher/config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_RDZV_PORT 29400
#define OPT_NAME_MAX 48

/* Every option, in the order its value is applied. The order does not
 * matter for correctness, because checks that involve several options run
 * after all of them are applied. It is the order of the help text. */
enum {
    O_NNODES, O_NPROC, O_NODE_RANK, O_RDZV_BACKEND, O_RDZV_ENDPOINT, O_RDZV_ID,
    O_RDZV_CONF, O_STANDALONE, O_MAX_RESTARTS, O_MONITOR_INTERVAL, O_START_METHOD,
    O_ROLE, O_LOG_DIR, O_REDIRECTS, O_TEE, O_LOCAL_RANKS_FILTER, O_MASTER_ADDR,
    O_MASTER_PORT, O_LOCAL_ADDR, O_SHUTDOWN_TIMEOUT, O_MODULE, O_NO_PYTHON, O_HELP,
    O_USE_ENV, O_RUN_PATH, N_OPTS
};

typedef struct parse_state parse_state;

/* Parses one option's final value into cfg. src is the option's name as the
 * user gave it ("--nnodes" or "PET_NNODES"), so that errors name it. */
typedef int (*opt_apply)(agent_config *cfg, const char *src, const char *val,
                         parse_state *st);

typedef enum { OPT_VALUE, OPT_FLAG, OPT_HELP, OPT_REFUSED } opt_kind;

typedef struct {
    const char *name; /* the long name in its hyphenated spelling */
    char short_name;  /* its one-letter form, or 0 */
    opt_kind kind;
    opt_apply apply;  /* OPT_VALUE and OPT_FLAG */
    const char *why;  /* OPT_REFUSED: the message */
} opt_def;

/* The values are gathered first, from the environment and then from the
 * command line, and parsed only at the end. This way a bad PET_ variable
 * that the command line overrides is not an error, as in torchrun. */
struct parse_state {
    char **env;
    char *err;
    size_t errlen;
    const char *val[N_OPTS];
    char src[N_OPTS][OPT_NAME_MAX + 8];
    int prog; /* index in argv of PROGRAM */
};

/* ---- errors and small parsers ---- */

static int fail(parse_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(parse_state *st, const char *fmt, ...) {
    if (st->err && st->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->err, st->errlen, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

static int fail_nomem(parse_state *st) {
    fail(st, "out of memory while reading the command line");
    return -ENOMEM;
}

/* Looks a variable up in the environment array the caller passed, not in
 * the process's own, so that tests can pass their own. */
static const char *env_get(char **env, const char *name) {
    size_t n = strlen(name);
    for (char **e = env; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

/* A whole decimal integer in [lo, hi]; 0, or -1 if s is anything else. */
static int parse_long(const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    long v;
    if (parse_long(s, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

/* A finite number of seconds, at least lo (or above lo if strict). */
static int parse_seconds(const char *s, double lo, int strict, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || (strict && v == lo)) return -1;
    *out = v;
    return 0;
}

static int set_str(parse_state *st, char **dst, const char *val) {
    char *copy = strdup(val);
    if (!copy) return fail_nomem(st);
    free(*dst);
    *dst = copy;
    return 0;
}

/* For the options where torchrun treats an empty value as "not given". */
static int set_opt_str(parse_state *st, char **dst, const char *val) {
    if (*val) return set_str(st, dst, val);
    free(*dst);
    *dst = NULL;
    return 0;
}

/* ---- --nnodes and --nproc-per-node ---- */

static int apply_nnodes(agent_config *cfg, const char *src, const char *val,
                        parse_state *st) {
    char first[32];
    const char *colon = strchr(val, ':');
    size_t n = colon ? (size_t)(colon - val) : strlen(val);
    if (n >= sizeof first || (colon && strchr(colon + 1, ':')))
        return fail(st, "%s: '%s' is not N or MIN:MAX (e.g. 2 or 1:4)", src, val);
    memcpy(first, val, n);
    first[n] = '\0';
    int lo, hi;
    if (parse_int(first, 1, INT_MAX, &lo) || parse_int(colon ? colon + 1 : first, 1, INT_MAX, &hi))
        return fail(st, "%s: '%s' is not N or MIN:MAX with positive integers (e.g. 2 or 1:4)",
                    src, val);
    if (lo > hi) return fail(st, "%s: '%s' has MIN greater than MAX", src, val);
    cfg->min_nodes = lo;
    cfg->max_nodes = hi;
    return 0;
}

/* Counts the GPUs that CUDA_VISIBLE_DEVICES lets a worker see. CUDA stops
 * at the first entry it cannot use, so counting stops at the first empty or
 * negative entry ("-1" is the usual way to hide every GPU). */
static int count_visible_devices(const char *cvd) {
    int n = 0;
    const char *p = cvd;
    for (;;) {
        while (*p == ' ') p++;
        if (*p == '\0' || *p == ',' || *p == '-') break;
        n++;
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    return n;
}

/* The NVIDIA driver makes one /dev/nvidiaN per GPU; nvidiactl, nvidia-uvm
 * and the like are not GPUs. Counting them needs neither CUDA nor a driver
 * library in the launcher. */
static int count_dev_gpus(void) {
    DIR *d = opendir("/dev");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *s = e->d_name;
        if (strncmp(s, "nvidia", 6) != 0 || !isdigit((unsigned char)s[6])) continue;
        s += 6;
        while (isdigit((unsigned char)*s)) s++;
        if (*s == '\0') n++;
    }
    closedir(d);
    return n;
}

static int count_gpus(parse_state *st) {
    const char *cvd = env_get(st->env, "CUDA_VISIBLE_DEVICES");
    return cvd ? count_visible_devices(cvd) : count_dev_gpus();
}

static int count_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
}

static int no_gpu_error(const char *src, parse_state *st) {
    const char *cvd = env_get(st->env, "CUDA_VISIBLE_DEVICES");
    if (cvd)
        return fail(st, "%s: 'gpu' but CUDA_VISIBLE_DEVICES='%s' shows no GPU; "
                    "give a number or 'cpu'", src, cvd);
    return fail(st, "%s: 'gpu' but this node has no GPU (no /dev/nvidia[0-9]* device); "
                "give a number or 'cpu'", src);
}

static int apply_nproc(agent_config *cfg, const char *src, const char *val,
                       parse_state *st) {
    if (strcmp(val, "cpu") == 0) {
        cfg->nproc_mode = NPROC_CPU;
        cfg->nproc_per_node = count_cpus();
    } else if (strcmp(val, "gpu") == 0 || strcmp(val, "auto") == 0) {
        int gpus = count_gpus(st);
        cfg->nproc_mode = val[0] == 'g' ? NPROC_GPU : NPROC_AUTO;
        if (gpus == 0 && cfg->nproc_mode == NPROC_GPU) return no_gpu_error(src, st);
        cfg->nproc_per_node = gpus > 0 ? gpus : count_cpus();
    } else if (parse_int(val, 1, INT_MAX, &cfg->nproc_per_node) == 0) {
        cfg->nproc_mode = NPROC_NUMBER;
    } else {
        return fail(st, "%s: '%s' is not a positive integer, cpu, gpu or auto", src, val);
    }
    return 0;
}

static int apply_node_rank(agent_config *cfg, const char *src, const char *val,
                           parse_state *st) {
    if (parse_int(val, 0, INT_MAX, &cfg->node_rank))
        return fail(st, "%s: '%s' is not a non-negative integer", src, val);
    return 0;
}

/* ---- rendezvous ---- */

static int apply_rdzv_backend(agent_config *cfg, const char *src, const char *val,
                              parse_state *st) {
    if (strcmp(val, "static") == 0 || strcmp(val, "c10d") == 0) {
        snprintf(cfg->rdzv_backend, sizeof cfg->rdzv_backend, "%s", val);
        return 0;
    }
    if (strcmp(val, "etcd") == 0 || strcmp(val, "etcd-v2") == 0)
        return fail(st, "%s: '%s' is not supported; use c10d (ddprun hosts the store itself, "
                    "no etcd server needed)", src, val);
    return fail(st, "%s: '%s' is not a rendezvous backend (expected static or c10d)", src, val);
}

/* torchrun's rule for host names and addresses: letters, digits, '_', '.',
 * ':' and '-'. The '%' of an IPv6 zone ("fe80::1%eth0") is added. */
static int valid_host(const char *h, size_t n) {
    if (n == 0) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)h[i]) && !strchr("_.:-%", h[i])) return 0;
    return 1;
}

/* Splits "host", "host:port", "[v6]", "[v6]:port" or a bare IPv6 address
 * ("::1", which has more than one ':' and so cannot carry a port) into
 * the host's position in s and its port. Returns -1 if malformed. */
static int split_endpoint(const char *s, const char **host, size_t *hlen, int *port) {
    const char *port_s = NULL;
    *host = s;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || (close[1] && close[1] != ':')) return -1;
        *host = s + 1;
        *hlen = (size_t)(close - s - 1);
        if (close[1]) port_s = close + 2;
    } else {
        const char *colon = strchr(s, ':');
        int bare_v6 = colon && strchr(colon + 1, ':');
        *hlen = colon && !bare_v6 ? (size_t)(colon - s) : strlen(s);
        if (colon && !bare_v6) port_s = colon + 1;
    }
    if (!port_s) return valid_host(*host, *hlen) ? 0 : -1;
    if (!isdigit((unsigned char)port_s[0]) || parse_int(port_s, 0, 65535, port)) return -1;
    return valid_host(*host, *hlen) ? 0 : -1;
}

static int apply_rdzv_endpoint(agent_config *cfg, const char *src, const char *val,
                               parse_state *st) {
    if (!*val) return set_opt_str(st, &cfg->rdzv_host, val);
    const char *host;
    size_t hlen;
    int port = DEFAULT_RDZV_PORT;
    if (split_endpoint(val, &host, &hlen, &port))
        return fail(st, "%s: '%s' is not HOST[:PORT] (e.g. node1:29400 or [::1]:29400; "
                    "a port is 0 to 65535)", src, val);
    char *copy = strndup(host, hlen);
    if (!copy) return fail_nomem(st);
    free(cfg->rdzv_host);
    cfg->rdzv_host = copy;
    cfg->rdzv_port = port;
    return 0;
}

static int apply_rdzv_id(agent_config *cfg, const char *src, const char *val,
                         parse_state *st) {
    if (!*val) return fail(st, "%s: the job id must not be empty", src);
    return set_str(st, &cfg->rdzv_id, val);
}

typedef enum { CONF_SECONDS, CONF_COUNT, CONF_BOOL } conf_kind;

typedef struct {
    const char *key;
    conf_kind kind;
    size_t offset; /* into rdzv_conf */
} conf_key;

/* "heartbeat" is an older name of keep_alive_interval and "timeout" is what
 * torchrun's static backend calls its join timeout; both are kept so that
 * existing command lines work. */
static const conf_key conf_keys[] = {
    {"join_timeout", CONF_SECONDS, offsetof(rdzv_conf, join_timeout)},
    {"timeout", CONF_SECONDS, offsetof(rdzv_conf, join_timeout)},
    {"last_call_timeout", CONF_SECONDS, offsetof(rdzv_conf, last_call_timeout)},
    {"close_timeout", CONF_SECONDS, offsetof(rdzv_conf, close_timeout)},
    {"keep_alive_interval", CONF_SECONDS, offsetof(rdzv_conf, keep_alive_interval)},
    {"heartbeat", CONF_SECONDS, offsetof(rdzv_conf, keep_alive_interval)},
    {"keep_alive_max_attempt", CONF_COUNT, offsetof(rdzv_conf, keep_alive_max_attempt)},
    {"read_timeout", CONF_SECONDS, offsetof(rdzv_conf, read_timeout)},
    {"is_host", CONF_BOOL, offsetof(rdzv_conf, is_host)},
};

/* The spellings of true and false that torchrun's get_as_bool accepts. */
static int parse_bool(const char *s, int *out) {
    static const char *yes[] = {"1", "true", "t", "yes", "y"};
    static const char *no[] = {"0", "false", "f", "no", "n"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0) return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0) return *out = 0, 0;
    }
    return -1;
}

static int set_conf_value(rdzv_conf *rc, const conf_key *k, const char *v, const char *src,
                          parse_state *st) {
    char *field = (char *)rc + k->offset;
    if (k->kind == CONF_SECONDS && parse_seconds(v, 0, 1, (double *)(void *)field))
        return fail(st, "%s: %s='%s' is not a positive number of seconds", src, k->key, v);
    if (k->kind == CONF_COUNT && parse_int(v, 1, INT_MAX, (int *)(void *)field))
        return fail(st, "%s: %s='%s' is not a positive integer", src, k->key, v);
    if (k->kind == CONF_BOOL && parse_bool(v, (int *)(void *)field))
        return fail(st, "%s: %s='%s' is not true or false", src, k->key, v);
    return 0;
}

/* Copies s[0..n) without the blanks around it; -1 if it does not fit,
 * because a silently shortened number or key would be misread. */
static int trim_copy(char *dst, size_t cap, const char *s, size_t n) {
    while (n && isspace((unsigned char)*s)) s++, n--;
    while (n && isspace((unsigned char)s[n - 1])) n--;
    if (n >= cap) return -1;
    memcpy(dst, s, n);
    dst[n] = '\0';
    return 0;
}

/* One "key=value" item of --rdzv-conf, s[0..n). */
static int apply_conf_item(rdzv_conf *rc, const char *s, size_t n, const char *src,
                           parse_state *st) {
    char item[256], key[256], value[256], *eq;
    if (trim_copy(item, sizeof item, s, n))
        return fail(st, "%s: '%.*s' is too long for a key=value item", src, (int)n, s);
    if (!(eq = strchr(item, '=')) || eq == item)
        return fail(st, "%s: '%s' is not key=value (the form is key1=value1,key2=value2)", src,
                    item);
    *eq = '\0';
    trim_copy(key, sizeof key, item, strlen(item));
    trim_copy(value, sizeof value, eq + 1, strlen(eq + 1));
    for (size_t i = 0; i < sizeof conf_keys / sizeof conf_keys[0]; i++) {
        if (strcmp(key, conf_keys[i].key) != 0) continue;
        if (!*value) return fail(st, "%s: '%s' has no value", src, key);
        return set_conf_value(rc, &conf_keys[i], value, src, st);
    }
    return fail(st, "%s: unknown key '%s' (known: join_timeout, last_call_timeout, "
                "close_timeout, keep_alive_interval, keep_alive_max_attempt, read_timeout, "
                "is_host)", src, key);
}

static int apply_rdzv_conf(agent_config *cfg, const char *src, const char *val,
                           parse_state *st) {
    const char *p = val;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int rc = apply_conf_item(&cfg->rdzv, p, n, src, st);
        if (rc) return rc;
        if (!comma) return 0;
        p = comma + 1;
    }
}

/* ---- flags: torchrun's check_env reads PET_FLAG as an integer, zero meaning off ---- */

static int parse_flag(const char *src, const char *val, int *out, parse_state *st) {
    long v;
    if (parse_long(val, LONG_MIN, LONG_MAX, &v))
        return fail(st, "%s: '%s' is not 0 or 1", src, val);
    *out = v != 0;
    return 0;
}

static int apply_standalone(agent_config *cfg, const char *src, const char *val,
                            parse_state *st) {
    return parse_flag(src, val, &cfg->standalone, st);
}

static int apply_module(agent_config *cfg, const char *src, const char *val,
                        parse_state *st) {
    return parse_flag(src, val, &cfg->run_module, st);
}

static int apply_no_python(agent_config *cfg, const char *src, const char *val,
                           parse_state *st) {
    return parse_flag(src, val, &cfg->no_python, st);
}

/* ---- restarts, timing, role ---- */

static int apply_max_restarts(agent_config *cfg, const char *src, const char *val,
                              parse_state *st) {
    if (parse_int(val, 0, INT_MAX, &cfg->max_restarts))
        return fail(st, "%s: '%s' is not a non-negative integer", src, val);
    return 0;
}

static int apply_monitor_interval(agent_config *cfg, const char *src, const char *val,
                                  parse_state *st) {
    if (parse_seconds(val, 0, 1, &cfg->monitor_interval))
        return fail(st, "%s: '%s' is not a positive number of seconds", src, val);
    return 0;
}

static int apply_shutdown_timeout(agent_config *cfg, const char *src, const char *val,
                                  parse_state *st) {
    if (parse_seconds(val, 0, 0, &cfg->shutdown_timeout))
        return fail(st, "%s: '%s' is not a non-negative number of seconds", src, val);
    return 0;
}

/* ddprun always starts workers as fresh processes; the choice only exists
 * in torchrun for its Python function entry points. It is still checked,
 * so that a typo is not silently accepted. */
static int apply_start_method(agent_config *cfg, const char *src, const char *val,
                              parse_state *st) {
    (void)cfg;
    if (strcmp(val, "spawn") && strcmp(val, "fork") && strcmp(val, "forkserver"))
        return fail(st, "%s: '%s' is not spawn, fork or forkserver", src, val);
    return 0;
}

static int apply_role(agent_config *cfg, const char *src, const char *val,
                      parse_state *st) {
    if (!*val) return fail(st, "%s: the role must not be empty", src);
    return set_str(st, &cfg->role, val);
}

static int apply_log_dir(agent_config *cfg, const char *src, const char *val,
                         parse_state *st) {
    (void)src;
    return set_opt_str(st, &cfg->log_dir, val);
}

/* ---- worker output: --redirects, --tee, --local-ranks-filter ---- */

/* Adds or replaces one local rank's entry; the last one given wins, as in
 * torchrun's dict. */
static int stream_map_set(stream_spec *spec, int rank, int value) {
    for (int i = 0; i < spec->n; i++)
        if (spec->rank[i] == rank) return spec->value[i] = value, 0;
    if (spec->n == AGENT_MAX_RANK_MAP) return -1;
    spec->rank[spec->n] = rank;
    spec->value[spec->n++] = value;
    return 0;
}

/* One "RANK:VALUE" item, s[0..n). */
static int stream_map_item(stream_spec *spec, const char *s, size_t n) {
    char item[32], *colon;
    if (n == 0 || n >= sizeof item) return -1;
    memcpy(item, s, n);
    item[n] = '\0';
    if (!(colon = strchr(item, ':'))) return -1;
    *colon = '\0';
    int rank, value;
    if (!isdigit((unsigned char)item[0]) || parse_int(item, 0, INT_MAX, &rank)) return -1;
    if (!isdigit((unsigned char)colon[1]) || parse_int(colon + 1, 0, 3, &value)) return -1;
    return stream_map_set(spec, rank, value);
}

static int parse_streams(const char *val, stream_spec *spec) {
    memset(spec, 0, sizeof *spec);
    if (val[0] >= '0' && val[0] <= '3' && val[1] == '\0') {
        spec->dflt = val[0] - '0';
        return 0;
    }
    for (const char *p = val;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (stream_map_item(spec, p, n)) return -1;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static int apply_streams(stream_spec *spec, const char *src, const char *val,
                         parse_state *st) {
    if (parse_streams(val, spec) == 0) return 0;
    memset(spec, 0, sizeof *spec);
    return fail(st, "%s: '%s' is not 0-3 or a map like 0:1,1:2 (LOCAL_RANK:VALUE, at most %d; "
                "0 none, 1 stdout, 2 stderr, 3 both)", src, val, AGENT_MAX_RANK_MAP);
}

static int apply_redirects(agent_config *cfg, const char *src, const char *val,
                           parse_state *st) {
    return apply_streams(&cfg->redirects, src, val, st);
}

static int apply_tee(agent_config *cfg, const char *src, const char *val,
                     parse_state *st) {
    return apply_streams(&cfg->tee, src, val, st);
}

static int apply_local_ranks_filter(agent_config *cfg, const char *src, const char *val,
                                    parse_state *st) {
    free(cfg->local_ranks_filter);
    cfg->local_ranks_filter = NULL;
    cfg->n_local_ranks_filter = 0;
    if (!*val) return 0;
    size_t n = 1;
    for (const char *p = val; *p; p++) n += *p == ',';
    int *ranks = calloc(n, sizeof *ranks);
    if (!ranks) return fail_nomem(st);
    const char *p = val;
    for (size_t i = 0; i < n; i++) {
        char item[32];
        const char *comma = strchr(p, ',');
        int bad = trim_copy(item, sizeof item, p, comma ? (size_t)(comma - p) : strlen(p));
        if (bad || !isdigit((unsigned char)item[0]) || parse_int(item, 0, INT_MAX, &ranks[i])) {
            free(ranks);
            return fail(st, "%s: '%s' is not a list of local ranks like 0,2", src, val);
        }
        p = comma ? comma + 1 : p;
    }
    cfg->local_ranks_filter = ranks;
    cfg->n_local_ranks_filter = (int)n;
    return 0;
}

/* ---- addresses ---- */

static int apply_master_addr(agent_config *cfg, const char *src, const char *val,
                             parse_state *st) {
    (void)src;
    return set_opt_str(st, &cfg->master_addr, val);
}

static int apply_master_port(agent_config *cfg, const char *src, const char *val,
                             parse_state *st) {
    if (parse_int(val, 0, 65535, &cfg->master_port))
        return fail(st, "%s: '%s' is not a port (0 to 65535)", src, val);
    return 0;
}

static int apply_local_addr(agent_config *cfg, const char *src, const char *val,
                            parse_state *st) {
    (void)src;
    return set_opt_str(st, &cfg->local_addr, val);
}

static const opt_def opts[N_OPTS] = {
    [O_NNODES] = {"nnodes", 0, OPT_VALUE, apply_nnodes, NULL},
    [O_NPROC] = {"nproc-per-node", 0, OPT_VALUE, apply_nproc, NULL},
    [O_NODE_RANK] = {"node-rank", 0, OPT_VALUE, apply_node_rank, NULL},
    [O_RDZV_BACKEND] = {"rdzv-backend", 0, OPT_VALUE, apply_rdzv_backend, NULL},
    [O_RDZV_ENDPOINT] = {"rdzv-endpoint", 0, OPT_VALUE, apply_rdzv_endpoint, NULL},
    [O_RDZV_ID] = {"rdzv-id", 0, OPT_VALUE, apply_rdzv_id, NULL},
    [O_RDZV_CONF] = {"rdzv-conf", 0, OPT_VALUE, apply_rdzv_conf, NULL},
    [O_STANDALONE] = {"standalone", 0, OPT_FLAG, apply_standalone, NULL},
    [O_MAX_RESTARTS] = {"max-restarts", 0, OPT_VALUE, apply_max_restarts, NULL},
    [O_MONITOR_INTERVAL] = {"monitor-interval", 0, OPT_VALUE, apply_monitor_interval, NULL},
    [O_START_METHOD] = {"start-method", 0, OPT_VALUE, apply_start_method, NULL},
    [O_ROLE] = {"role", 0, OPT_VALUE, apply_role, NULL},
    [O_LOG_DIR] = {"log-dir", 0, OPT_VALUE, apply_log_dir, NULL},
    [O_REDIRECTS] = {"redirects", 'r', OPT_VALUE, apply_redirects, NULL},
    [O_TEE] = {"tee", 't', OPT_VALUE, apply_tee, NULL},
    [O_LOCAL_RANKS_FILTER] = {"local-ranks-filter", 0, OPT_VALUE, apply_local_ranks_filter,
                              NULL},
    [O_MASTER_ADDR] = {"master-addr", 0, OPT_VALUE, apply_master_addr, NULL},
    [O_MASTER_PORT] = {"master-port", 0, OPT_VALUE, apply_master_port, NULL},
    [O_LOCAL_ADDR] = {"local-addr", 0, OPT_VALUE, apply_local_addr, NULL},
    [O_SHUTDOWN_TIMEOUT] = {"shutdown-timeout", 0, OPT_VALUE, apply_shutdown_timeout, NULL},
    [O_MODULE] = {"module", 'm', OPT_FLAG, apply_module, NULL},
    [O_NO_PYTHON] = {"no-python", 0, OPT_FLAG, apply_no_python, NULL},
    [O_HELP] = {"help", 'h', OPT_HELP, NULL, NULL},
    [O_USE_ENV] = {"use-env", 0, OPT_REFUSED, NULL,
                   "--use-env is deprecated (it belonged to torch.distributed.launch): ddprun "
                   "always passes the local rank as LOCAL_RANK in the environment; drop the "
                   "flag and read os.environ['LOCAL_RANK']"},
    [O_RUN_PATH] = {"run-path", 0, OPT_REFUSED, NULL,
                    "--run-path is not supported (there is no Python interpreter inside "
                    "ddprun to run the script in); drop it and the script runs as "
                    "python3 -u PROGRAM"},
};

/* ---- finding an option by what the user typed ---- */

/* Levenshtein distance, for suggesting the option that was meant. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > OPT_NAME_MAX || lb > OPT_NAME_MAX) return INT_MAX / 2;
    int row[OPT_NAME_MAX + 1];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int prev = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int cur = row[j], best = prev + (a[i - 1] != b[j - 1]);
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            prev = cur;
        }
    }
    return row[lb];
}

static size_t common_prefix(const char *a, const char *b) {
    size_t n = 0;
    while (a[n] && a[n] == b[n]) n++;
    return n;
}

/* The option the user most likely meant: a near-typo (one edit) first,
 * then one that starts the same way ("--nprocs" -> --nproc-per-node), then
 * a farther typo. NULL when nothing is close. */
static const char *suggest(const char *name) {
    int best_ed = INT_MAX, ed_i = -1;
    size_t best_lcp = 0;
    int lcp_i = -1;
    for (int i = 0; i < N_OPTS; i++) {
        int ed = edit_distance(name, opts[i].name);
        size_t lcp = common_prefix(name, opts[i].name);
        if (ed < best_ed) best_ed = ed, ed_i = i;
        if (lcp > best_lcp) best_lcp = lcp, lcp_i = i;
    }
    if (best_ed <= 1) return opts[ed_i].name;
    if (best_lcp >= 4) return opts[lcp_i].name;
    if (best_ed <= 2) return opts[ed_i].name;
    return NULL;
}

static int unknown_option(const char *typed, size_t n, const char *name, parse_state *st) {
    const char *s = suggest(name);
    if (s)
        return fail(st, "unknown option '%.*s' (did you mean --%s?)", (int)n, typed, s);
    return fail(st, "unknown option '%.*s' (see ddprun --help)", (int)n, typed);
}

/* Lists the options that start with name, for an ambiguous abbreviation. */
static int ambiguous_option(const char *typed, size_t n, const char *name, parse_state *st) {
    char list[512] = "";
    size_t used = 0, len = strlen(name);
    for (int i = 0; i < N_OPTS && used < sizeof list; i++)
        if (strncmp(opts[i].name, name, len) == 0)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s",
                                     used ? ", " : "", opts[i].name);
    return fail(st, "option '%.*s' is ambiguous: it could be %s", (int)n, typed, list);
}

/* Finds a long option by its exact name or a unique prefix of one, as
 * argparse does, so that torchrun command lines such as "--nproc=4" work. */
static int find_long(const char *typed, size_t n, const char *name, parse_state *st) {
    int found = -1, matches = 0;
    size_t len = strlen(name);
    for (int i = 0; i < N_OPTS; i++) {
        if (strcmp(opts[i].name, name) == 0) return i;
        if (len && strncmp(opts[i].name, name, len) == 0) found = i, matches++;
    }
    if (matches == 1) return found;
    if (matches > 1) return ambiguous_option(typed, n, name, st);
    return unknown_option(typed, n, name, st);
}

/* Copies the name part of an option (after the dashes, before any '=') with
 * '_' turned into '-', so that both of torchrun's spellings match. */
static void normalize_name(char *dst, const char *s, size_t n) {
    if (n > OPT_NAME_MAX) n = OPT_NAME_MAX;
    for (size_t i = 0; i < n; i++) dst[i] = s[i] == '_' ? '-' : s[i];
    dst[n] = '\0';
}

/* "--name", "--name=value": returns the option's index and sets *inline_val
 * to what follows '=' (NULL when nothing does). */
static int lookup_long(const char *arg, const char **inline_val, parse_state *st) {
    const char *body = arg + 2, *eq = strchr(body, '=');
    size_t n = eq ? (size_t)(eq - body) : strlen(body);
    char name[OPT_NAME_MAX + 1];
    *inline_val = eq ? eq + 1 : NULL;
    if (n > OPT_NAME_MAX) return unknown_option(arg, n + 2, "", st);
    normalize_name(name, body, n);
    return find_long(arg, n + 2, name, st);
}

/* "-r 3", "-r3", "-r=3", "-m", "-h". Anything else that starts with one dash
 * ("-nnodes") is reported as unknown with the long option it resembles. */
static int lookup_short(const char *arg, const char **inline_val, parse_state *st) {
    *inline_val = NULL;
    for (int i = 0; i < N_OPTS; i++) {
        if (opts[i].short_name != arg[1]) continue;
        if (arg[2] == '\0') return i;
        if (opts[i].kind != OPT_VALUE) break;
        *inline_val = arg[2] == '=' ? arg + 3 : arg + 2;
        return i;
    }
    char name[OPT_NAME_MAX + 1];
    size_t n = strlen(arg + 1);
    normalize_name(name, arg + 1, n);
    return unknown_option(arg, strlen(arg), n > OPT_NAME_MAX ? "" : name, st);
}

/* ---- gathering the values ---- */

static int is_negative_number(const char *s) {
    char *end = NULL;
    (void)strtod(s, &end);
    return s[0] == '-' && end != s && *end == '\0';
}

/* A following argument is taken as a value unless it looks like an option,
 * as argparse does; otherwise a forgotten value would silently swallow the
 * next flag ("--log-dir --nnodes 2"). */
static int looks_like_option(const char *s) {
    return s[0] == '-' && s[1] != '\0' && !is_negative_number(s);
}

static int take_value(int argc, char **argv, int *i, const char **val, int idx,
                      parse_state *st) {
    if (*i + 1 >= argc || looks_like_option(argv[*i + 1]))
        return fail(st, "--%s expects a value (write --%s=VALUE for a value that starts "
                    "with '-')", opts[idx].name, opts[idx].name);
    *val = argv[++*i];
    return 0;
}

/* Reads the option at argv[*i] (and its value), advancing *i past both.
 * Returns 1 after printing the help. */
static int scan_option(int argc, char **argv, int *i, parse_state *st) {
    const char *arg = argv[*i], *val = NULL;
    int idx = arg[1] == '-' ? lookup_long(arg, &val, st) : lookup_short(arg, &val, st);
    if (idx < 0) return idx;
    const opt_def *o = &opts[idx];
    if (o->kind == OPT_HELP) {
        fputs(config_usage(), stdout);
        return 1;
    }
    if (o->kind == OPT_REFUSED) return fail(st, "%s", o->why);
    if (o->kind == OPT_FLAG && val)
        return fail(st, "--%s takes no value (got '%s')", o->name, val);
    if (o->kind == OPT_FLAG) val = "1";
    if (!val) {
        int rc = take_value(argc, argv, i, &val, idx, st);
        if (rc) return rc;
    }
    st->val[idx] = val;
    snprintf(st->src[idx], sizeof st->src[idx], "--%s", o->name);
    return 0;
}

/* Walks the command line up to PROGRAM, which is the first argument that
 * is not an option or the one after "--". */
static int scan_args(int argc, char **argv, parse_state *st) {
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') break;
        int rc = scan_option(argc, argv, &i, st);
        if (rc) return rc;
    }
    st->prog = i;
    return 0;
}

/* PET_<NAME> gives an option's default, where NAME is the long option in
 * upper case with '_' for '-' (PET_NPROC_PER_NODE). Empty counts as unset. */
static void scan_env(parse_state *st) {
    for (int i = 0; i < N_OPTS; i++) {
        if (opts[i].kind != OPT_VALUE && opts[i].kind != OPT_FLAG) continue;
        char var[OPT_NAME_MAX + 8] = "PET_";
        size_t n = 4;
        for (const char *p = opts[i].name; *p && n < sizeof var - 1; p++)
            var[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
        var[n] = '\0';
        const char *v = env_get(st->env, var);
        if (!v || !*v) continue;
        st->val[i] = v;
        snprintf(st->src[i], sizeof st->src[i], "%s", var);
    }
}

/* ---- checks across options, and the worker's command ---- */

static int set_defaults(agent_config *cfg, parse_state *st) {
    memset(cfg, 0, sizeof *cfg);
    cfg->min_nodes = cfg->max_nodes = 1;
    cfg->nproc_mode = NPROC_NUMBER;
    cfg->nproc_per_node = 1;
    cfg->node_rank = -1;
    snprintf(cfg->rdzv_backend, sizeof cfg->rdzv_backend, "static");
    cfg->rdzv_port = DEFAULT_RDZV_PORT;
    cfg->rdzv = (rdzv_conf){.join_timeout = 600, .last_call_timeout = 30, .close_timeout = 30,
                            .keep_alive_interval = 5, .keep_alive_max_attempt = 3,
                            .read_timeout = 60, .is_host = -1};
    cfg->monitor_interval = 0.1;
    cfg->master_port = -1;
    cfg->shutdown_timeout = 30;
    if (set_str(st, &cfg->rdzv_id, "none") || set_str(st, &cfg->role, "default"))
        return -ENOMEM;
    return 0;
}

/* A version-4 UUID, like the rdzv id torchrun makes for --standalone. The
 * clock and pid stand in when the kernel has no entropy to give yet; the
 * id only has to differ between jobs, not be secret. */
static void random_uuid(char out[37]) {
    unsigned char b[16];
    if (getrandom(b, sizeof b, GRND_NONBLOCK) != (ssize_t)sizeof b) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^
                     ((uint64_t)getpid() << 32);
        for (int i = 0; i < 16; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            b[i] = (unsigned char)(x >> 56);
        }
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    char *p = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) *p++ = '-';
        p += sprintf(p, "%02x", b[i]);
    }
}

/* --standalone: a one-node job whose agent hosts its own store on a free
 * port. Like torchrun, explicit rendezvous options are overridden quietly. */
static int apply_standalone_mode(agent_config *cfg, parse_state *st) {
    if (cfg->min_nodes != 1 || cfg->max_nodes != 1)
        return fail(st, "--standalone runs a single node, but %s is %d:%d; drop --standalone "
                    "and use --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT for several nodes",
                    st->src[O_NNODES], cfg->min_nodes, cfg->max_nodes);
    char id[37];
    random_uuid(id);
    snprintf(cfg->rdzv_backend, sizeof cfg->rdzv_backend, "c10d");
    cfg->rdzv_port = 0;
    if (set_str(st, &cfg->rdzv_host, "localhost") || set_str(st, &cfg->rdzv_id, id))
        return -ENOMEM;
    return 0;
}

/* The static backend assigns no ranks: every node must be told its own and
 * where node 0 is. */
static int check_static(const agent_config *cfg, parse_state *st) {
    if (cfg->min_nodes != cfg->max_nodes)
        return fail(st, "%s: static rendezvous needs a fixed number of nodes, got %d:%d "
                    "(use --rdzv-backend=c10d)", st->src[O_NNODES], cfg->min_nodes,
                    cfg->max_nodes);
    if (cfg->max_nodes == 1) return 0;
    if (cfg->node_rank < 0)
        return fail(st, "--node-rank: static rendezvous with %d nodes needs each node's rank "
                    "(0 to %d); pass --node-rank or use --rdzv-backend=c10d",
                    cfg->max_nodes, cfg->max_nodes - 1);
    if (!cfg->master_addr && !cfg->rdzv_host)
        return fail(st, "--master-addr: static rendezvous with %d nodes needs the address of "
                    "node 0; pass --master-addr (or --rdzv-endpoint)", cfg->max_nodes);
    return 0;
}

static int validate(agent_config *cfg, parse_state *st) {
    int rc;
    if (cfg->run_module && cfg->no_python)
        return fail(st, "-m/--module and --no-python cannot be used together: -m runs PROGRAM "
                    "as a Python module, --no-python runs it without Python");
    if (cfg->standalone && (rc = apply_standalone_mode(cfg, st))) return rc;
    if (strcmp(cfg->rdzv_backend, "static") == 0 && (rc = check_static(cfg, st))) return rc;
    if (strcmp(cfg->rdzv_backend, "c10d") == 0 && !cfg->rdzv_host)
        return fail(st, "--rdzv-backend=c10d needs --rdzv-endpoint=HOST[:PORT], the store every "
                    "node meets at (or --standalone on a single node)");
    if (cfg->node_rank >= cfg->max_nodes)
        return fail(st, "%s: %d is not below the number of nodes (%d); node ranks run from "
                    "0 to %d", st->src[O_NODE_RANK], cfg->node_rank, cfg->max_nodes,
                    cfg->max_nodes - 1);
    return 0;
}

/* Builds the worker's command the way torchrun does: without --no-python,
 * PROGRAM always runs under Python (PYTHON_EXEC, or python3) with -u so its
 * output is not held back in a buffer; a .py ending does not matter. */
static int build_argv(agent_config *cfg, int argc, char **argv, parse_state *st) {
    if (st->prog >= argc)
        return fail(st, "no training program given (usage: ddprun [options] PROGRAM [ARGS...])");
    const char *py = env_get(st->env, "PYTHON_EXEC");
    const char *pre[3];
    int npre = 0;
    if (!cfg->no_python) {
        pre[npre++] = py && *py ? py : "python3";
        pre[npre++] = "-u";
        if (cfg->run_module) pre[npre++] = "-m";
    }
    int n = npre + (argc - st->prog);
    if (!(cfg->argv = calloc((size_t)n + 1, sizeof *cfg->argv))) return fail_nomem(st);
    for (int i = 0; i < n; i++) {
        const char *a = i < npre ? pre[i] : argv[st->prog + i - npre];
        if (!(cfg->argv[i] = strdup(a))) return fail_nomem(st);
        cfg->argc = i + 1;
    }
    return 0;
}

static int apply_values(agent_config *cfg, parse_state *st) {
    for (int i = 0; i < N_OPTS; i++) {
        if (!st->val[i] || !opts[i].apply) continue;
        int rc = opts[i].apply(cfg, st->src[i], st->val[i], st);
        if (rc) return rc;
    }
    return 0;
}

int config_parse(int argc, char **argv, char **environ_, agent_config *cfg, char *err,
                 size_t errlen) {
    parse_state st = {.env = environ_, .err = err, .errlen = errlen};
    for (int i = 0; i < N_OPTS; i++)
        snprintf(st.src[i], sizeof st.src[i], "--%s", opts[i].name);
    if (err && errlen) err[0] = '\0';
    int rc = set_defaults(cfg, &st);
    if (rc == 0) {
        scan_env(&st);
        rc = scan_args(argc, argv, &st);
    }
    if (rc == 0) rc = apply_values(cfg, &st);
    if (rc == 0) rc = validate(cfg, &st);
    if (rc == 0) rc = build_argv(cfg, argc, argv, &st);
    if (rc != 0) config_free(cfg);
    return rc;
}

void config_free(agent_config *cfg) {
    if (!cfg) return;
    free(cfg->rdzv_host);
    free(cfg->rdzv_id);
    free(cfg->role);
    free(cfg->log_dir);
    free(cfg->local_ranks_filter);
    free(cfg->master_addr);
    free(cfg->local_addr);
    for (int i = 0; cfg->argv && cfg->argv[i]; i++) free(cfg->argv[i]);
    free(cfg->argv);
    cfg->rdzv_host = cfg->rdzv_id = cfg->role = cfg->log_dir = NULL;
    cfg->master_addr = cfg->local_addr = NULL;
    cfg->local_ranks_filter = NULL;
    cfg->n_local_ranks_filter = 0;
    cfg->argv = NULL;
    cfg->argc = 0;
}

static const char usage_text[] =
    "usage: ddprun [options] PROGRAM [ARGS...]\n"
    "\n"
    "Starts --nproc-per-node workers running PROGRAM on this node, joins them with the\n"
    "other nodes' workers through a rendezvous, watches them, and restarts the whole\n"
    "group when one fails (up to --max-restarts times). Run the same command on every\n"
    "node. Workers get RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,\n"
    "MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT and the rest of torchrun's\n"
    "environment. The options are torchrun's.\n"
    "\n"
    "Every option may be spelled --a-b or --a_b, abbreviated to a unique prefix, and\n"
    "given as --opt=VALUE or --opt VALUE. Each also has an environment form,\n"
    "PET_<NAME> (e.g. PET_NPROC_PER_NODE=4; PET_STANDALONE=1 for a flag), which sets\n"
    "its default. The command line wins over the environment.\n"
    "\n"
    "Nodes and workers:\n"
    "  --nnodes N|MIN:MAX        number of nodes, or the range an elastic job accepts\n"
    "                            (default 1; PET_NNODES)\n"
    "  --nproc-per-node N|cpu|gpu|auto\n"
    "                            workers on this node: a number, one per CPU, one per GPU\n"
    "                            (/dev/nvidiaN, or the entries of CUDA_VISIBLE_DEVICES\n"
    "                            when set), or GPUs if any else CPUs (default 1;\n"
    "                            PET_NPROC_PER_NODE)\n"
    "  --node-rank R             this node's rank, 0 to nnodes-1; needed by the static\n"
    "                            backend with several nodes (default unset;\n"
    "                            PET_NODE_RANK)\n"
    "\n"
    "Rendezvous:\n"
    "  --rdzv-backend static|c10d\n"
    "                            static: fixed nodes with given ranks; c10d: nodes meet\n"
    "                            at --rdzv-endpoint, get ranks, may come and go\n"
    "                            (default static; PET_RDZV_BACKEND)\n"
    "  --rdzv-endpoint HOST[:PORT]\n"
    "                            where the c10d store runs: node1, node1:29400,\n"
    "                            [::1]:29400 or ::1 (default port 29400;\n"
    "                            PET_RDZV_ENDPOINT)\n"
    "  --rdzv-id ID              the job's id, the same on every node (default none;\n"
    "                            PET_RDZV_ID)\n"
    "  --rdzv-conf K=V,...       join_timeout (600 s), last_call_timeout (30 s),\n"
    "                            close_timeout (30 s), keep_alive_interval or\n"
    "                            heartbeat (5 s), keep_alive_max_attempt (3),\n"
    "                            read_timeout (60 s), is_host (true|false; default:\n"
    "                            decided from the endpoint); timeout is accepted for\n"
    "                            join_timeout (default empty; PET_RDZV_CONF)\n"
    "  --standalone              a one-node job with its own store on a free local\n"
    "                            port: sets c10d, localhost:0 and a random id; needs\n"
    "                            --nnodes 1 (default off; PET_STANDALONE)\n"
    "  --master-addr ADDR        address of node 0 for the static backend (default\n"
    "                            127.0.0.1 with one node; PET_MASTER_ADDR)\n"
    "  --master-port PORT        its port, 0 to 65535 (default 29500; PET_MASTER_PORT)\n"
    "  --local-addr ADDR         this node's name in the rendezvous (host order, logs,\n"
    "                            failure reports) (default: the host name;\n"
    "                            PET_LOCAL_ADDR)\n"
    "\n"
    "Failures and restarts:\n"
    "  --max-restarts N          restarts of the worker group before giving up, >= 0\n"
    "                            (default 0; PET_MAX_RESTARTS)\n"
    "  --monitor-interval S      seconds between checks of the workers, > 0; ddprun also\n"
    "                            sees exits at once (default 0.1; PET_MONITOR_INTERVAL)\n"
    "  --shutdown-timeout S      seconds a worker gets after SIGTERM before SIGKILL,\n"
    "                            >= 0 (default 30; PET_SHUTDOWN_TIMEOUT)\n"
    "  --role NAME               the workers' role (default default; PET_ROLE)\n"
    "  --start-method M          spawn|fork|forkserver: accepted for torchrun's sake;\n"
    "                            workers are always new processes (default spawn;\n"
    "                            PET_START_METHOD)\n"
    "\n"
    "Output:\n"
    "  --log-dir DIR             where worker logs go (default: a new directory under\n"
    "                            /tmp; PET_LOG_DIR)\n"
    "  -r, --redirects V         send workers' streams to files in the log directory:\n"
    "                            0 none, 1 stdout, 2 stderr, 3 both, or per local rank\n"
    "                            as 0:1,1:2 (default 0; PET_REDIRECTS)\n"
    "  -t, --tee V               copy workers' streams to files and the console; same\n"
    "                            values as --redirects (default 0; PET_TEE)\n"
    "  --local-ranks-filter L    show only these local ranks' output on the console,\n"
    "                            e.g. 0,2; streams --redirects or --tee send to files\n"
    "                            are still written for every rank (default all;\n"
    "                            PET_LOCAL_RANKS_FILTER)\n"
    "\n"
    "The program:\n"
    "  -m, --module              run PROGRAM as a Python module: python3 -u -m PROGRAM\n"
    "                            (default off; PET_MODULE)\n"
    "  --no-python               run PROGRAM itself instead of python3 -u PROGRAM, e.g.\n"
    "                            for a compiled program (default off; PET_NO_PYTHON)\n"
    "  -h, --help                print this help\n"
    "\n"
    "Without --no-python, PROGRAM runs as python3 -u PROGRAM ARGS, like torchrun;\n"
    "PYTHON_EXEC names another interpreter. Everything after PROGRAM goes to it\n"
    "untouched, even arguments that look like ddprun's options; \"--\" before PROGRAM\n"
    "ends ddprun's options explicitly.\n"
    "\n"
    "Examples:\n"
    "  One node, 4 workers:\n"
    "    ddprun --standalone --nproc-per-node 4 train.py --epochs 10\n"
    "  Two nodes (run on both; node1 hosts the store), 8 GPUs each, 3 restarts:\n"
    "    ddprun --nnodes 2 --nproc-per-node gpu --max-restarts 3 \\\n"
    "        --rdzv-backend c10d --rdzv-endpoint node1:29400 --rdzv-id job42 train.py\n"
    "  Elastic, 1 to 4 nodes, a compiled trainer:\n"
    "    ddprun --nnodes 1:4 --nproc-per-node 2 --max-restarts 3 --rdzv-backend c10d \\\n"
    "        --rdzv-endpoint node1 --rdzv-id job43 --no-python ./build/bin/ddp-train\n";

const char *config_usage(void) { return usage_text; }
