/* ddprun's command line. It reads torchrun's flags, in both the --a-b and
 * --a_b spellings and with PET_<NAME> environment variables as their
 * defaults, and checks them. The result is one agent_config, which
 * includes the worker's own command line. The rules are the option
 * engine's (common/opts.h) with abbreviations allowed, as torchrun
 * (argparse) allows them: a long option may be abbreviated to any unique
 * prefix, a value follows either as "--flag=value" or as the next argument,
 * and the first argument that is not an option is PROGRAM, after which
 * nothing is parsed. This file holds what each of torchrun's values means
 * and the checks across options. Nothing here exits or prints, except that
 * --help prints the usage and an --rdzv-conf key torchrun would ignore is
 * logged as a warning. */
#include "launcher/config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
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

#include "agent/worker_group.h"
#include "agent/worker_output.h"
#include "common/build_info.h"
#include "common/ddprun_env.h"
#include "common/err.h"
#include "common/log.h"
#include "common/opts.h"
#include "launcher/slurm_env.h"

#define DEFAULT_RDZV_PORT 29400
#define SRC_MAX (OPTS_NAME_MAX + 32)

/* One parse: the configuration being filled, the environment it reads
 * (CUDA_VISIBLE_DEVICES, PYTHON_EXEC besides the PET_ variables), where
 * messages go, and where --nnodes and --node-rank came from ("--nnodes" or
 * "PET_NNODES"), which the checks across options name. */
typedef struct {
    agent_config *cfg;
    char **env;
    char *err;
    size_t errlen;
    char nnodes_src[SRC_MAX];
    char node_rank_src[SRC_MAX];
    unsigned slurm_given;     /* SLURM_GIVEN_*: options a flag or PET_ set, Slurm must not */
    const char *start_method; /* checked, then unused */
    int prog;                 /* index in argv of PROGRAM */
    const char *completion;   /* --print-completion SHELL */
    const char *backend_alias; /* --rdzv-backend in torchrun's other spelling: said once */
} parse_state;

/* ---- errors and strings ---- */

static int fail(parse_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(parse_state *st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = err_vset(st->err, st->errlen, -EINVAL, fmt, ap);
    va_end(ap);
    return rc;
}

static int fail_nomem(const opts_arg *a) {
    opts_fail(a, "out of memory while reading the command line");
    return -ENOMEM;
}

static parse_state *state_of(const opts_arg *a) { return a->ctx; }

static agent_config *cfg_of(const opts_arg *a) { return state_of(a)->cfg; }

static int set_str(char **dst, const char *val) {
    char *copy = strdup(val);
    if (!copy) return -ENOMEM;
    free(*dst);
    *dst = copy;
    return 0;
}

/* For the options where torchrun treats an empty value as "not given". */
static int set_opt_str(const opts_arg *a, char **dst) {
    if (!*a->val) {
        free(*dst);
        *dst = NULL;
        return 0;
    }
    return set_str(dst, a->val) ? fail_nomem(a) : 0;
}

/* ---- --nnodes, --nproc-per-node, --node-rank ---- */

static int apply_nnodes(const opts_arg *a) {
    const char *val = a->val, *colon = strchr(val, ':');
    char first[32];
    size_t n = colon ? (size_t)(colon - val) : strlen(val);
    if (n >= sizeof first || (colon && strchr(colon + 1, ':')))
        return opts_fail(a, "%s: '%s' is not N or MIN:MAX (e.g. 2 or 1:4)", a->src, val);
    memcpy(first, val, n);
    first[n] = '\0';
    int lo, hi;
    if (opts_parse_int(first, 1, INT_MAX, &lo) ||
        opts_parse_int(colon ? colon + 1 : first, 1, INT_MAX, &hi))
        return opts_fail(a, "%s: '%s' is not N or MIN:MAX with positive integers (e.g. 2 or 1:4)",
                         a->src, val);
    if (lo > hi) return opts_fail(a, "%s: '%s' has MIN greater than MAX", a->src, val);
    cfg_of(a)->min_nodes = lo;
    cfg_of(a)->max_nodes = hi;
    state_of(a)->slurm_given |= SLURM_GIVEN_NNODES;
    snprintf(state_of(a)->nnodes_src, SRC_MAX, "%s", a->src);
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

static int count_gpus(char **env) {
    const char *cvd = opts_getenv(env, "CUDA_VISIBLE_DEVICES");
    return cvd ? count_visible_devices(cvd) : count_dev_gpus();
}

static int count_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > INT_MAX ? INT_MAX : (int)n;
}

static int no_gpu_error(const opts_arg *a) {
    const char *cvd = opts_getenv(state_of(a)->env, "CUDA_VISIBLE_DEVICES");
    if (cvd)
        return opts_fail(a, "%s: 'gpu' but CUDA_VISIBLE_DEVICES='%s' shows no GPU; "
                         "give a number or 'cpu'", a->src, cvd);
    return opts_fail(a, "%s: 'gpu' but this node has no GPU (no /dev/nvidia[0-9]* device); "
                     "give a number or 'cpu'", a->src);
}

static int apply_nproc(const opts_arg *a) {
    agent_config *cfg = cfg_of(a);
    const char *val = a->val;
    if (strcmp(val, "cpu") == 0) {
        cfg->nproc_mode = NPROC_CPU;
        cfg->nproc_per_node = count_cpus();
    } else if (strcmp(val, "gpu") == 0 || strcmp(val, "auto") == 0) {
        int gpus = count_gpus(state_of(a)->env);
        cfg->nproc_mode = val[0] == 'g' ? NPROC_GPU : NPROC_AUTO;
        if (gpus == 0 && cfg->nproc_mode == NPROC_GPU) return no_gpu_error(a);
        cfg->nproc_per_node = gpus > 0 ? gpus : count_cpus();
    } else if (opts_parse_int(val, 1, INT_MAX, &cfg->nproc_per_node) == 0) {
        cfg->nproc_mode = NPROC_NUMBER;
        if (cfg->nproc_per_node > WORKER_GROUP_MAX)
            return opts_fail(a, "%s: %d workers on one node is more than ddprun starts (at "
                             "most %d)", a->src, cfg->nproc_per_node, WORKER_GROUP_MAX);
    } else if (strcmp(val, "xpu") == 0) {
        return opts_fail(a, "%s: 'xpu' (one worker per Intel GPU) is not supported: ddprun "
                         "cannot count XPUs; give the number of workers instead", a->src);
    } else {
        return opts_bad(a, "a positive integer, cpu, gpu or auto");
    }
    return 0;
}

static int apply_node_rank(const opts_arg *a) {
    if (opts_parse_int(a->val, 0, INT_MAX, &cfg_of(a)->node_rank))
        return opts_bad(a, "a non-negative integer");
    state_of(a)->slurm_given |= SLURM_GIVEN_NODE_RANK;
    snprintf(state_of(a)->node_rank_src, SRC_MAX, "%s", a->src);
    return 0;
}

/* ---- rendezvous ---- */

static int apply_rdzv_backend(const opts_arg *a) {
    const char *val = a->val;
    state_of(a)->slurm_given |= SLURM_GIVEN_RDZV_BACKEND;
    int alias;
    const rdzv_backend *b = rdzv_backend_find(val, &alias);
    if (b) {
        cfg_of(a)->rdzv_backend = b;
        state_of(a)->backend_alias = alias ? val : NULL; /* torchrun's spelling */
        return 0;
    }
    char names[128];
    rdzv_backend_names(names, sizeof names);
    return opts_fail(a, "%s: '%s' is not a rendezvous backend (expected %s)", a->src, val,
                     names);
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
    if (!isdigit((unsigned char)port_s[0]) || opts_parse_int(port_s, 0, 65535, port)) return -1;
    return valid_host(*host, *hlen) ? 0 : -1;
}

static int apply_rdzv_endpoint(const opts_arg *a) {
    agent_config *cfg = cfg_of(a);
    state_of(a)->slurm_given |= SLURM_GIVEN_RDZV_ENDPOINT;
    if (set_opt_str(a, &cfg->rdzv_endpoints)) return -ENOMEM;
    if (!*a->val) return set_opt_str(a, &cfg->rdzv_host);
    const char *host;
    size_t hlen;
    int port = DEFAULT_RDZV_PORT;
    char first[512];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(a->val, ","), a->val);
    if (split_endpoint(first, &host, &hlen, &port))
        return opts_fail(a, "%s: '%s' is not HOST[:PORT] (e.g. node1:29400 or [::1]:29400; "
                         "a port is 0 to 65535)", a->src, a->val);
    char *copy = strndup(host, hlen);
    if (!copy) return fail_nomem(a);
    free(cfg->rdzv_host);
    cfg->rdzv_host = copy;
    cfg->rdzv_port = port;
    return 0;
}

static int apply_rdzv_id(const opts_arg *a) {
    if (!*a->val) return opts_fail(a, "%s: the job id must not be empty", a->src);
    state_of(a)->slurm_given |= SLURM_GIVEN_RDZV_ID;
    return set_str(&cfg_of(a)->rdzv_id, a->val) ? fail_nomem(a) : 0;
}

/* Under srun, what Slurm knows fills the options not given
 * (launcher/slurm_env.h); its checks below then name Slurm's variables. */
static int slurm_defaults(parse_state *st) {
    slurm_env_args a = {.env = st->env, .given = st->slurm_given, .err = st->err,
                        .errlen = st->errlen};
    int rc = slurm_env_defaults(&a, st->cfg);
    if (a.nnodes_src) snprintf(st->nnodes_src, SRC_MAX, "%s", a.nnodes_src);
    if (a.node_rank_src) snprintf(st->node_rank_src, SRC_MAX, "%s", a.node_rank_src);
    return rc;
}

/* CONF_TCP: store_type, which must say tcp; CONF_NO_EFFECT: a key torchrun
 * knows that means nothing here (accepted, ignored). */
typedef enum { CONF_SECONDS, CONF_COUNT, CONF_BOOL, CONF_TCP, CONF_NO_EFFECT, CONF_STRING } conf_kind;

typedef struct {
    const char *key;
    conf_kind kind;
    size_t offset; /* into rdzv_conf */
    int older;     /* an older name of another key: not listed */
} conf_key;

/* "heartbeat" is an older name of keep_alive_interval and "timeout" is what
 * torchrun's static backend calls its join timeout; both are kept so that
 * existing command lines work. */
static const conf_key conf_keys[] = {
    {"join_timeout", CONF_SECONDS, offsetof(rdzv_conf, join_timeout), 0},
    {"timeout", CONF_SECONDS, offsetof(rdzv_conf, join_timeout), .older = 1},
    {"last_call_timeout", CONF_SECONDS, offsetof(rdzv_conf, last_call_timeout), 0},
    {"close_timeout", CONF_SECONDS, offsetof(rdzv_conf, close_timeout), 0},
    {"keep_alive_interval", CONF_SECONDS, offsetof(rdzv_conf, keep_alive_interval), 0},
    {"heartbeat", CONF_SECONDS, offsetof(rdzv_conf, keep_alive_interval), .older = 1},
    {"keep_alive_max_attempt", CONF_COUNT, offsetof(rdzv_conf, keep_alive_max_attempt), 0},
    {"read_timeout", CONF_SECONDS, offsetof(rdzv_conf, read_timeout), 0},
    {"is_host", CONF_BOOL, offsetof(rdzv_conf, is_host), 0},
    /* torch 2.x's names: heartbeat_timeout is how long a silent node lives,
     * which is our heartbeat lease */
    {"heartbeat_timeout", CONF_SECONDS, offsetof(rdzv_conf, keep_alive_interval), 0},
    {"store_type", CONF_TCP, 0, 0},
    {"use_libuv", CONF_NO_EFFECT, 0, 0},
    {"cas_backoff_max_seconds", CONF_NO_EFFECT, 0, 0},
    /* etcd-v3 (etcd's own names; torchrun's etcd backends read the first three) */
    {"cacert", CONF_STRING, offsetof(rdzv_conf, cacert), 0},
    {"cert", CONF_STRING, offsetof(rdzv_conf, cert), 0},
    {"key", CONF_STRING, offsetof(rdzv_conf, key), 0},
    {"protocol", CONF_NO_EFFECT, 0, 0},
    {"user", CONF_STRING, offsetof(rdzv_conf, user), 0},
    {"password", CONF_STRING, offsetof(rdzv_conf, password), 0},
    {"key_prefix", CONF_STRING, offsetof(rdzv_conf, key_prefix), 0},
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

static int set_conf_value(rdzv_conf *rc, const conf_key *k, const char *v, const opts_arg *a) {
    char *field = (char *)rc + k->offset;
    if (k->kind == CONF_SECONDS && opts_parse_seconds(v, 1, (double *)(void *)field))
        return opts_fail(a, "%s: %s='%s' is not a positive number of seconds", a->src, k->key, v);
    if (k->kind == CONF_COUNT && opts_parse_int(v, 1, INT_MAX, (int *)(void *)field))
        return opts_fail(a, "%s: %s='%s' is not a positive integer", a->src, k->key, v);
    if (k->kind == CONF_BOOL && parse_bool(v, (int *)(void *)field))
        return opts_fail(a, "%s: %s='%s' is not true or false", a->src, k->key, v);
    if (k->kind == CONF_STRING)
        return set_str((char **)(void *)field, v) ? fail_nomem(a) : 0;
    if (k->kind == CONF_TCP && strcasecmp(v, "tcp") != 0)
        return opts_fail(a, "%s: store_type='%s' cannot be: ddprun's c10d rendezvous keeps its "
                         "state in its own TCP store (store_type=tcp)", a->src, v);
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
static int apply_conf_item(rdzv_conf *rc, const char *s, size_t n, const opts_arg *a) {
    char item[256], key[256], value[256], *eq;
    if (trim_copy(item, sizeof item, s, n))
        return opts_fail(a, "%s: '%.*s' is too long for a key=value item", a->src, (int)n, s);
    if (!(eq = strchr(item, '=')) || eq == item)
        return opts_fail(a, "%s: '%s' is not key=value (the form is key1=value1,key2=value2)",
                         a->src, item);
    *eq = '\0';
    trim_copy(key, sizeof key, item, strlen(item));
    trim_copy(value, sizeof value, eq + 1, strlen(eq + 1));
    for (size_t i = 0; i < sizeof conf_keys / sizeof conf_keys[0]; i++) {
        if (strcmp(key, conf_keys[i].key) != 0) continue;
        if (!*value) return opts_fail(a, "%s: '%s' has no value", a->src, key);
        return set_conf_value(rc, &conf_keys[i], value, a);
    }
    /* As torchrun: a key it does not know is not an error (Kubeflow passes
     * whatever the user wrote in rdzvConf), but it is said. */
    char known[512];
    size_t k = 0;
    known[0] = '\0';
    for (size_t i = 0; i < sizeof conf_keys / sizeof conf_keys[0] && k < sizeof known; i++)
        if (!conf_keys[i].older)
            k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", k ? ", " : "",
                                  conf_keys[i].key);
    log_warn("%s: unknown key '%s' ignored (known: %s)", a->src, key, known);
    return 0;
}

static int apply_rdzv_conf(const opts_arg *a) {
    const char *p = a->val;
    while (isspace((unsigned char)*p)) p++;
    if (!*p) return 0;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int rc = apply_conf_item(&cfg_of(a)->rdzv, p, n, a);
        if (rc) return rc;
        if (!comma) return 0;
        p = comma + 1;
    }
}

/* ---- role and the strings where empty means unset ---- */

/* Any role, the empty one included: TorchX passes --role "" and torchrun
 * takes it as it is (ROLE_NAME is then empty, the output prefix "[0]:"). */
static int apply_role(const opts_arg *a) {
    return set_str(&cfg_of(a)->role, a->val) ? fail_nomem(a) : 0;
}

static int apply_log_dir(const opts_arg *a) { return set_opt_str(a, &cfg_of(a)->log_dir); }

static int apply_master_addr(const opts_arg *a) {
    return set_opt_str(a, &cfg_of(a)->master_addr);
}

static int apply_local_addr(const opts_arg *a) { return set_opt_str(a, &cfg_of(a)->local_addr); }

/* --metrics-port and --health-check-port: [HOST:]PORT ([::1]:PORT for
 * IPv6), where HOST is the address to listen on and PORT 0 asks for a free
 * one; empty: off. Without HOST, *host stays NULL: the agent then listens
 * on 127.0.0.1 only (agent/agent.c, start_metrics); 0.0.0.0:PORT or
 * [::]:PORT is every interface. */
static int apply_listen(const opts_arg *a, char **host, int *port) {
    const char *val = a->val, *colon = strrchr(val, ':');
    free(*host);
    *host = NULL;
    *port = -1;
    if (!*val) return 0;
    const char *p = colon ? colon + 1 : val;
    if (opts_parse_int(p, 0, 65535, port)) {
        *port = -1;
        return opts_bad(a, "PORT or HOST:PORT, with a port from 0 to 65535 (0: a free one)");
    }
    if (!colon) return 0;
    size_t n = (size_t)(colon - val);
    if (n >= 2 && val[0] == '[' && val[n - 1] == ']') val++, n -= 2;
    if (n == 0) return 0;
    if (!(*host = strndup(val, n))) return fail_nomem(a);
    return 0;
}

static int apply_metrics_port(const opts_arg *a) {
    return apply_listen(a, &cfg_of(a)->metrics_host, &cfg_of(a)->metrics_port);
}

static int apply_health_port(const opts_arg *a) {
    agent_config *c = cfg_of(a);
    snprintf(c->health_setting, sizeof c->health_setting, "%s", a->src);
    return apply_listen(a, &c->health_host, &c->health_port);
}

/* ---- the log line prefix, duplicated lines, signals ---- */

static int apply_prefix_template(const opts_arg *a) {
    return set_opt_str(a, &cfg_of(a)->log_line_prefix_template);
}

/* A name in the template that torchrun would not replace stays as written,
 * as there, with a warning. */
static void check_prefix_template(const agent_config *c) {
    if (!c->log_line_prefix_template) return;
    char out[256], unknown[64];
    worker_prefix_vars dummy = {.role_name = "", .hostname = ""};
    if (worker_output_prefix(c->log_line_prefix_template, &dummy, out, sizeof out, unknown,
                             sizeof unknown))
        log_warn("log line prefix template '%s': '%s' is none of ${role_name}, ${local_rank}, "
                 "${rank}, ${hostname} (or $$ for a '$'); it stays as written",
                 c->log_line_prefix_template, unknown);
}

static void string_list_free(string_list *l) {
    for (int i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

/* torchrun's comma_separated_list: items split at ',', with ",," standing
 * for a comma inside an item. Empty items are dropped: an empty filter
 * would match every line. */
static int parse_filters(const char *val, string_list *l) {
    string_list_free(l);
    size_t len = strlen(val);
    char *item = malloc(len + 1);
    if (!(l->items = calloc(len / 2 + 2, sizeof *l->items)) || !item) {
        free(item);
        return -ENOMEM;
    }
    for (const char *p = val;;) {
        size_t k = 0;
        for (; *p && !(*p == ',' && p[1] != ','); p++) {
            item[k++] = *p;
            if (*p == ',') p++; /* ",," is one comma */
        }
        item[k] = '\0';
        if (k && !(l->items[l->n++] = strdup(item))) {
            free(item);
            return -ENOMEM;
        }
        if (!*p++) break;
    }
    free(item);
    return 0;
}

static int apply_dup_filters(const opts_arg *a, int which) {
    return parse_filters(a->val, &cfg_of(a)->dup_filters[which]) ? fail_nomem(a) : 0;
}

static int apply_dup_stdout(const opts_arg *a) { return apply_dup_filters(a, 0); }

static int apply_dup_stderr(const opts_arg *a) { return apply_dup_filters(a, 1); }

static const struct {
    const char *name;
    int sig;
} signal_names[] = {
    {"TERM", SIGTERM}, {"INT", SIGINT},   {"HUP", SIGHUP},   {"QUIT", SIGQUIT},
    {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"ALRM", SIGALRM}, {"XCPU", SIGXCPU},
    {"CONT", SIGCONT}, {"TSTP", SIGTSTP}, {"PIPE", SIGPIPE}, {"ABRT", SIGABRT},
};

/* A signal by name: SIGUSR1, USR1 or sigusr1. */
static int signal_by_name(const char *s, size_t n) {
    if (n > 3 && strncasecmp(s, "SIG", 3) == 0) s += 3, n -= 3;
    for (size_t i = 0; i < sizeof signal_names / sizeof signal_names[0]; i++)
        if (strlen(signal_names[i].name) == n && strncasecmp(s, signal_names[i].name, n) == 0)
            return signal_names[i].sig;
    return 0;
}

/* --signals-to-handle, TORCHELASTIC_SIGNALS_TO_HANDLE: the signals that
 * make the agent stop, forwarding them to the workers first. */
static int parse_signals(agent_config *c, const char *src, const char *val, char *err,
                         size_t errlen) {
    c->nsignals = 0;
    for (const char *p = val;;) {
        while (*p == ' ') p++;
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        while (n && p[n - 1] == ' ') n--;
        int sig = signal_by_name(p, n);
        if (!sig) {
            snprintf(err, errlen, "%s: '%.*s' is not a signal ddprun can handle (one of SIGTERM, "
                     "SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU, SIGCONT, "
                     "SIGTSTP, SIGPIPE, SIGABRT; SIGKILL and SIGSTOP cannot be caught)",
                     src, (int)n, p);
            return -EINVAL;
        }
        int seen = 0;
        for (int i = 0; i < c->nsignals; i++) seen |= c->signals[i] == sig;
        if (!seen) c->signals[c->nsignals++] = sig;
        if (!comma) return 0;
        p = comma + 1;
    }
}

static int apply_signals(const opts_arg *a) {
    return parse_signals(cfg_of(a), a->src, a->val, a->err, a->errlen);
}

/* ---- what only a Python torchrun can mean ---- */

static const opts_choice event_handlers[] = {
    {"null", 0}, {"dynamic_rendezvous", 0}, {"console", 1}, {NULL, 0}};

static const opts_choice completion_shells[] = {{"bash", 0}, {"zsh", 0}, {NULL, 0}};

static int apply_print_completion(const opts_arg *a) {
    state_of(a)->completion = a->val;
    return 0;
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
    if (!isdigit((unsigned char)item[0]) || opts_parse_int(item, 0, INT_MAX, &rank)) return -1;
    if (!isdigit((unsigned char)colon[1]) || opts_parse_int(colon + 1, 0, 3, &value)) return -1;
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

static int apply_streams(const opts_arg *a, stream_spec *spec) {
    if (parse_streams(a->val, spec) == 0) return 0;
    memset(spec, 0, sizeof *spec);
    return opts_fail(a, "%s: '%s' is not 0-3 or a map like 0:1,1:2 (LOCAL_RANK:VALUE, at most "
                     "%d; 0 none, 1 stdout, 2 stderr, 3 both)", a->src, a->val, AGENT_MAX_RANK_MAP);
}

static int apply_redirects(const opts_arg *a) { return apply_streams(a, &cfg_of(a)->redirects); }

static int apply_tee(const opts_arg *a) { return apply_streams(a, &cfg_of(a)->tee); }

static int apply_local_ranks_filter(const opts_arg *a) {
    agent_config *cfg = cfg_of(a);
    const char *val = a->val;
    free(cfg->local_ranks_filter);
    cfg->local_ranks_filter = NULL;
    cfg->n_local_ranks_filter = 0;
    if (!*val) return 0;
    size_t n = 1;
    for (const char *p = val; *p; p++) n += *p == ',';
    int *ranks = calloc(n, sizeof *ranks);
    if (!ranks) return fail_nomem(a);
    const char *p = val;
    for (size_t i = 0; i < n; i++) {
        char item[32];
        const char *comma = strchr(p, ',');
        int bad = trim_copy(item, sizeof item, p, comma ? (size_t)(comma - p) : strlen(p));
        if (bad || !isdigit((unsigned char)item[0]) ||
            opts_parse_int(item, 0, INT_MAX, &ranks[i])) {
            free(ranks);
            return opts_bad(a, "a list of local ranks like 0,2");
        }
        p = comma ? comma + 1 : p;
    }
    cfg->local_ranks_filter = ranks;
    cfg->n_local_ranks_filter = (int)n;
    return 0;
}

/* ---- the table ---- */

static const opts_choice start_methods[] = {
    {"spawn", 0}, {"fork", 0}, {"forkserver", 0}, {NULL, 0}};

static const opts_choice store_proxy_modes[] = {{"auto", STORE_PROXY_AUTO},
                                                {"on", STORE_PROXY_ON},
                                                {"off", STORE_PROXY_OFF},
                                                {NULL, 0}};

static const opts_choice numa_modes[] = {{"node", NUMA_NODE},
                                         {"socket", NUMA_SOCKET},
                                         {"exclusive", NUMA_EXCLUSIVE},
                                         {"core-complex", NUMA_CORE_COMPLEX},
                                         {NULL, 0}};

/* Every option, in the order --help lists them, under their headings (the
 * order their values are applied in, and ambiguity messages list them:
 * checks that involve several options run after all of them are applied),
 * with the help config_usage prints: what it does, its default and its
 * environment form. ddprun always starts workers as fresh processes;
 * --start-method only exists in torchrun for its Python function entry
 * points, but it is still checked, so that a typo is not silently
 * accepted. A flag's PET_ variable holds an integer, 0 for off, as
 * torchrun's check_env reads it (the engine's rule). The table's targets
 * are st's; out holds OPTS_MAX entries. Returns how many. */
static size_t option_table(parse_state *st, opts_opt *out) {
    agent_config *c = st->cfg;
    static char backends[128]; /* static|c10d|etcd-v3 */
    rdzv_backend_names_joined(backends, sizeof backends, "|");
    const opts_opt table[] = {
        {"nnodes", 0, OPTS_CALL, .apply = apply_nnodes, .metavar = "N|MIN:MAX",
         .section = "Nodes and workers:",
         .help = "number of nodes, or the range an elastic job accepts\n"
                 "(default 1; PET_NNODES)"},
        {"nproc-per-node", 0, OPTS_CALL, .apply = apply_nproc, .metavar = "N|cpu|gpu|auto",
         .help = "workers on this node: a number, one per CPU, one per GPU\n"
                 "(/dev/nvidiaN, or the entries of CUDA_VISIBLE_DEVICES\n"
                 "when set), or GPUs if any else CPUs (default 1;\n"
                 "PET_NPROC_PER_NODE)"},
        {"node-rank", 0, OPTS_CALL, .apply = apply_node_rank, .metavar = "R",
         .help = "this node's rank, 0 to nnodes-1; needed by the static\n"
                 "backend with several nodes (default unset;\n"
                 "PET_NODE_RANK)"},
        {"rdzv-backend", 0, OPTS_CALL, .apply = apply_rdzv_backend,
         .metavar = backends, .section = "Rendezvous:",
         .help = "static: fixed nodes with given ranks; c10d: nodes meet\n"
                 "at --rdzv-endpoint, get ranks, may come and go;\n"
                 "etcd-v3 (also etcd, etcd-v2): the same, kept in etcd,\n"
                 "--rdzv-endpoint naming every member h1:2379,h2:2379\n"
                 "(default static; PET_RDZV_BACKEND)"},
        {"rdzv-endpoint", 0, OPTS_CALL, .apply = apply_rdzv_endpoint, .metavar = "HOST[:PORT]",
         .help = "where the c10d store runs: node1, node1:29400,\n"
                 "[::1]:29400 or ::1 (default port 29400;\n"
                 "PET_RDZV_ENDPOINT)"},
        {"rdzv-id", 0, OPTS_CALL, .apply = apply_rdzv_id, .metavar = "ID",
         .help = "the job's id, the same on every node (default none;\n"
                 "PET_RDZV_ID)"},
        {"rdzv-conf", 0, OPTS_CALL, .apply = apply_rdzv_conf, .metavar = "K=V,...",
         .help = "join_timeout (600 s), last_call_timeout (30 s),\n"
                 "close_timeout (30 s), keep_alive_interval or\n"
                 "heartbeat (2 s), keep_alive_max_attempt (3),\n"
                 "read_timeout (60 s), is_host (true|false; default:\n"
                 "decided from the endpoint); timeout is accepted for\n"
                 "join_timeout (default empty; PET_RDZV_CONF)"},
        {"standalone", 0, OPTS_FLAG, .target = &c->standalone,
         .help = "a one-node job with its own store on a free local\n"
                 "port: sets c10d, localhost:0 and a random id; needs\n"
                 "--nnodes 1 (default off; PET_STANDALONE)"},
        {"master-addr", 0, OPTS_CALL, .apply = apply_master_addr, .metavar = "ADDR",
         .help = "address of node 0 for the static backend (default\n"
                 "127.0.0.1 with one node; PET_MASTER_ADDR)"},
        {"master-port", 0, OPTS_INT, .target = &c->master_port, .lo = 0, .hi = 65535,
         .want = "a port (0 to 65535)", .metavar = "PORT",
         .help = "its port, 0 to 65535 (default 29500; PET_MASTER_PORT)"},
        {"local-addr", 0, OPTS_CALL, .apply = apply_local_addr, .metavar = "ADDR",
         .help = "this node's name in the rendezvous (host order, logs,\n"
                 "failure reports) (default: the host name;\n"
                 "PET_LOCAL_ADDR)"},
        {"max-restarts", 0, OPTS_INT, .target = &c->max_restarts, .lo = 0, .hi = INT_MAX,
         .metavar = "N", .section = "Failures and restarts:",
         .help = "restarts of the worker group before giving up, >= 0\n"
                 "(default 0; PET_MAX_RESTARTS)"},
        {"monitor-interval", 0, OPTS_SECONDS, .target = &c->monitor_interval, .positive = 1,
         .metavar = "S",
         .help = "seconds between checks of the workers, > 0; ddprun also\n"
                 "sees exits at once (default 0.1; PET_MONITOR_INTERVAL)"},
        /* torchrun's own variables give these three defaults, after PET_'s */
        {"shutdown-timeout", 0, OPTS_SECONDS, .target = &c->shutdown_timeout,
         .want = "a number of seconds (0 or more)", .env_also = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT",
         .metavar = "S",
         .help = "seconds a worker gets after SIGTERM before SIGKILL,\n"
                 ">= 0 (default 30, or TORCH_ELASTIC_SHUTDOWN_TIMEOUT;\n"
                 "PET_SHUTDOWN_TIMEOUT)"},
        {"signals-to-handle", 0, OPTS_CALL, .apply = apply_signals,
         .env_also = "TORCHELASTIC_SIGNALS_TO_HANDLE",
         .metavar = "S,... signals that stop the job, forwarded to the workers;",
         .help = "add SIGUSR1 for a scheduler's preemption warning\n"
                 "(default SIGTERM,SIGINT,SIGHUP,SIGQUIT, or\n"
                 "TORCHELASTIC_SIGNALS_TO_HANDLE; PET_SIGNALS_TO_HANDLE)"},
        {"straggler-threshold", 0, OPTS_DOUBLE, .target = &c->straggler_pct, .lo = 1, .hi = 1000,
         .want = "a percentage (1 to 1000)", .metavar = "P",
         .help = "a rank whose compute per step is more than P percent\n"
                 "over the job's median, 3 windows running, is reported\n"
                 "as a straggler (ddp-train's ranks; default 15;\n"
                 "PET_STRAGGLER_THRESHOLD)"},
        {"straggler-window", 0, OPTS_SECONDS, .target = &c->straggler_window, .positive = 1,
         .metavar = "S",
         .help = "the straggler watch's window, s > 0 (default 10;\n"
                 "PET_STRAGGLER_WINDOW)"},
        {"replace-stragglers", 0, OPTS_FLAG, .target = &c->replace_stragglers,
         .help = "a straggler's node leaves the job when a spare node\n"
                 "stands by (--nnodes MIN:MAX, the round full), and the\n"
                 "group re-forms with the spare (default off;\n"
                 "PET_REPLACE_STRAGGLERS)"},
        {"role", 0, OPTS_CALL, .apply = apply_role, .metavar = "NAME",
         .help = "the workers' role (default default; PET_ROLE)"},
        {"start-method", 0, OPTS_STR, .target = &st->start_method, .choices = start_methods,
         .metavar = "M",
         .help = "spawn|fork|forkserver: accepted for torchrun's sake;\n"
                 "workers are always new processes (default spawn;\n"
                 "PET_START_METHOD)"},
        {"log-dir", 0, OPTS_CALL, .apply = apply_log_dir, .metavar = "DIR", .section = "Output:",
         .help = "where worker logs go (default: a new directory under\n"
                 "/tmp; PET_LOG_DIR)"},
        {"redirects", 'r', OPTS_CALL, .apply = apply_redirects, .metavar = "V",
         .help = "send workers' streams to files in the log directory:\n"
                 "0 none, 1 stdout, 2 stderr, 3 both, or per local rank\n"
                 "as 0:1,1:2 (default 0; PET_REDIRECTS)"},
        {"tee", 't', OPTS_CALL, .apply = apply_tee, .metavar = "V",
         .help = "copy workers' streams to files and the console; same\n"
                 "values as --redirects (default 0; PET_TEE)"},
        {"local-ranks-filter", 0, OPTS_CALL, .apply = apply_local_ranks_filter, .metavar = "L",
         .help = "show only these local ranks' output on the console,\n"
                 "e.g. 0,2; streams --redirects or --tee send to files\n"
                 "are still written for every rank (default all;\n"
                 "PET_LOCAL_RANKS_FILTER)"},
        {"log-line-prefix-template", 0, OPTS_CALL, .apply = apply_prefix_template,
         .env_also = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", .metavar = "T",
         .help = "prefix of tee'd lines: ${role_name} ${local_rank}\n"
                 "${rank} ${hostname} (default [${role_name}${local_rank}]:,\n"
                 "or TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)"},
        {"duplicate-stdout-filters", 0, OPTS_CALL, .apply = apply_dup_stdout, .metavar = "F,...",
         .help = "tee'd stdout lines holding any F also go to the\n"
                 "attempt's filtered_stdout.log (default none)"},
        {"duplicate-stderr-filters", 0, OPTS_CALL, .apply = apply_dup_stderr, .metavar = "F,...",
         .help = "the same for stderr, into filtered_stderr.log"},
        {"event-log-handler", 0, OPTS_CHOICE, .target = &c->event_log_console,
         .choices = event_handlers, .metavar = "H",
         .help = "null, dynamic_rendezvous, or console: worker events as\n"
                 "JSON lines on stderr (default null)"},
        {"metrics-port", 0, OPTS_CALL, .apply = apply_metrics_port, .metavar = "[HOST:]PORT",
         .help = "serve the agent's and the workers' metrics in\n"
                 "Prometheus' format at http://HOST:PORT/metrics; 0: a\n"
                 "free port, logged; HOST defaults to 127.0.0.1, and\n"
                 "0.0.0.0 or [::] is every interface (default off;\n"
                 "PET_METRICS_PORT)"},
        {"health-check-port", 0, OPTS_CALL, .apply = apply_health_port,
         .env_also = "TORCHELASTIC_HEALTH_CHECK_PORT", .metavar = "[HOST:]PORT",
         .help = "GET /health: 200 while the workers run and the\n"
                 "heartbeat is fresh, else 503 and why; HOST as for\n"
                 "--metrics-port (default off, or\n"
                 "TORCHELASTIC_HEALTH_CHECK_PORT; PET_HEALTH_CHECK_PORT)"},
        {"module", 'm', OPTS_FLAG, .target = &c->run_module, .section = "The program:",
         .help = "run PROGRAM as a Python module: python3 -u -m PROGRAM\n"
                 "(default off; PET_MODULE)"},
        {"no-python", 0, OPTS_FLAG, .target = &c->no_python,
         .help = "run PROGRAM itself instead of python3 -u PROGRAM, e.g.\n"
                 "for a compiled program (default off; PET_NO_PYTHON)"},
        {"tf-config", 0, OPTS_FLAG, .target = &c->tf_config,
         .help = "TensorFlow's TF_CONFIG for every worker (MultiWorkerMirrored-\n"
                 "Strategy): the round's workers as host:port, ports picked\n"
                 "free by each agent; index = RANK (PET_TF_CONFIG)"},
        {"store-proxy", 0, OPTS_CHOICE, .target = &c->store_proxy, .choices = store_proxy_modes,
         .metavar = "M",
         .help = "on|off|auto: this node's workers reach the job's store\n"
                 "through the agent, on one connection per node;\n"
                 "MASTER_ADDR:MASTER_PORT is then 127.0.0.1 and the\n"
                 "agent's port (auto: on for jobs of 16384 ranks or more)"},
        {"virtual-local-rank", 0, OPTS_FLAG, .target = &c->virtual_local_rank,
         .help = "LOCAL_RANK=0 for every worker, each seeing only its own\n"
                 "GPU as device 0 through CUDA_VISIBLE_DEVICES (default\n"
                 "off; PET_VIRTUAL_LOCAL_RANK)"},
        {"run-path", 0, OPTS_FLAG, .target = &c->run_path,
         .help = "run PROGRAM as a Python script whatever --no-python\n"
                 "and -m say (default off)"},
        {"numa-binding", 0, OPTS_CHOICE, .target = &c->numa_binding, .choices = numa_modes,
         .metavar = "M",
         .help = "node|socket|exclusive|core-complex: bind each worker\n"
                 "to CPUs near its GPU (or a share of the NUMA nodes)"},
        {"print-completion", 0, OPTS_CALL, .apply = apply_print_completion,
         .choices = completion_shells, .metavar = "SHELL",
         .help = "print a bash or zsh completion script"},
        {"help", 'h', .type = OPTS_HELP,
         .help = "print this help"},
        {"version", 0, .type = OPTS_VERSION,
         .help = "print the version and the build's options"},
        {"use-env", 0, OPTS_REFUSED,
         .help = "--use-env is deprecated (it belonged to torch.distributed.launch): ddprun "
                 "always passes the local rank as LOCAL_RANK in the environment; drop the "
                 "flag and read os.environ['LOCAL_RANK']"},
        {"logs-specs", 0, OPTS_REFUSED,
         .help = "--logs-specs names a Python plug-in (a torchrun.logs_specs entry point) "
                 "that replaces torchrun's logging; ddprun runs no Python itself and cannot "
                 "load one: drop it (--log-dir, --redirects, --tee, --local-ranks-filter and "
                 "--duplicate-stdout-filters shape ddprun's logs)"},
    };
    memcpy(out, table, sizeof table);
    return sizeof table / sizeof table[0];
}

/* The help's column, to which the option listing lines up. */
#define HELP_COL 28

static int read_options(parse_state *st, int argc, char **argv) {
    opts_opt table[OPTS_MAX];
    opts_spec spec = {.prog = "ddprun", .opts = table, .nopts = option_table(st, table),
                      .env_prefix = "PET_", .env = st->env, .abbrev = 1, .ctx = st,
                      .help_col = HELP_COL};
    int rc = opts_parse(&spec, argc, argv, &st->prog, st->err, st->errlen);
    if (rc == 0 && st->completion) {
        if (opts_print_completion(&spec, st->completion, stdout))
            return fail(st, "--print-completion: '%s' is not bash or zsh", st->completion);
        return OPTS_HELP_GIVEN; /* printed: nothing to run */
    }
    return rc;
}

/* ---- checks across options, and the worker's command ---- */

static int set_defaults(agent_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    cfg->min_nodes = cfg->max_nodes = 1;
    cfg->nproc_mode = NPROC_NUMBER;
    cfg->nproc_per_node = 1;
    cfg->node_rank = -1;
    cfg->rdzv_backend = rdzv_backend_find("static", NULL);
    cfg->rdzv_port = DEFAULT_RDZV_PORT;
    cfg->rdzv = (rdzv_conf){.join_timeout = 600, .last_call_timeout = 30, .close_timeout = 30,
                            .keep_alive_interval = 2, .keep_alive_max_attempt = 3,
                            .read_timeout = 60, .is_host = -1};
    cfg->monitor_interval = 0.1;
    cfg->master_port = -1;
    cfg->metrics_port = cfg->health_port = -1;
    cfg->shutdown_timeout = 30;
    cfg->straggler_pct = 15;
    cfg->straggler_window = 10;
    static const int default_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    memcpy(cfg->signals, default_signals, sizeof default_signals);
    cfg->nsignals = 4;
    if (set_str(&cfg->rdzv_id, "none") || set_str(&cfg->role, "default")) return -ENOMEM;
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
                    st->nnodes_src, cfg->min_nodes, cfg->max_nodes);
    char id[37];
    random_uuid(id);
    cfg->rdzv_backend = rdzv_backend_find("c10d", NULL);
    cfg->rdzv_port = 0;
    if (set_str(&cfg->rdzv_host, "localhost") || set_str(&cfg->rdzv_id, id)) return -ENOMEM;
    return 0;
}

/* The static backend assigns no ranks: every node must be told its own and
 * where node 0 is. */
static int check_static(const agent_config *cfg, parse_state *st) {
    if (cfg->min_nodes != cfg->max_nodes)
        return fail(st, "%s: static rendezvous needs a fixed number of nodes, got %d:%d "
                    "(use --rdzv-backend=c10d)", st->nnodes_src, cfg->min_nodes,
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
    if (cfg->run_module && cfg->no_python && !cfg->run_path)
        return fail(st, "-m/--module and --no-python cannot be used together: -m runs PROGRAM "
                    "as a Python module, --no-python runs it without Python");
    if (cfg->standalone && (rc = apply_standalone_mode(cfg, st))) return rc;
    const rdzv_backend *b = cfg->rdzv_backend;
    if ((b->flags & RDZV_FIXED_RANKS) && (rc = check_static(cfg, st))) return rc;
    if (!(b->flags & RDZV_FIXED_RANKS) && !cfg->rdzv_host)
        return fail(st, "--rdzv-backend=%s needs --rdzv-endpoint=%s", b->name, b->endpoint);
    if (!(b->flags & RDZV_MANY_ENDPOINTS) && cfg->rdzv_endpoints &&
        strchr(cfg->rdzv_endpoints, ','))
        return fail(st, "--rdzv-endpoint: '%s' lists several members, which the %s backend "
                    "does not take (it meets at one store): only a cluster's does",
                    cfg->rdzv_endpoints, b->name);
    if (st->backend_alias)
        log_info("--rdzv-backend %s: %s %s (%s)", st->backend_alias, b->alias_says,
                 cfg->rdzv_endpoints, b->alias_why);
    if (cfg->node_rank >= cfg->max_nodes)
        return fail(st, "%s: %d is not below the number of nodes (%d); node ranks run from "
                    "0 to %d", st->node_rank_src, cfg->node_rank, cfg->max_nodes,
                    cfg->max_nodes - 1);
    return 0;
}

/* Builds the worker's command the way torchrun does: without --no-python,
 * PROGRAM always runs under Python (PYTHON_EXEC, or python3) with -u so its
 * output is not held back in a buffer; a .py ending does not matter. */
static int build_argv(agent_config *cfg, int argc, char **argv, parse_state *st) {
    if (st->prog >= argc)
        return fail(st, "no training program given (usage: ddprun [options] PROGRAM [ARGS...])");
    const char *py = opts_getenv(st->env, "PYTHON_EXEC");
    const char *pre[3];
    int npre = 0;
    if (!cfg->no_python || cfg->run_path) {
        pre[npre++] = py && *py ? py : "python3";
        pre[npre++] = "-u";
        if (cfg->run_module && !cfg->run_path) pre[npre++] = "-m";
    }
    int n = npre + (argc - st->prog);
    if (!(cfg->argv = calloc((size_t)n + 1, sizeof *cfg->argv))) return -ENOMEM;
    for (int i = 0; i < n; i++) {
        const char *a = i < npre ? pre[i] : argv[st->prog + i - npre];
        if (!(cfg->argv[i] = strdup(a))) return -ENOMEM;
        cfg->argc = i + 1;
    }
    return 0;
}

/* What the agent needs of the environment (see agent_env). */
static int read_agent_env(parse_state *st, agent_config *cfg, char **env) {
    agent_env *e = &cfg->env;
    const char *v;
#define DUP(field, name) \
    if ((v = opts_getenv(env, name)) != NULL && !(e->field = strdup(v))) return -ENOMEM
    DUP(cuda_visible_devices, "CUDA_VISIBLE_DEVICES");
    DUP(store_token, DDPRUN_ENV_STORE_TOKEN);
    DUP(timer_file, "TORCHELASTIC_TIMER_FILE");
#undef DUP
    v = opts_getenv(env, "TMPDIR");
    if (!(e->tmpdir = strdup(v && *v ? v : "/tmp"))) return -ENOMEM;
    v = opts_getenv(env, DDPRUN_ENV_SHM_DIR);
    if (!(e->shm_dir = strdup(v && *v ? v : "/dev/shm"))) return -ENOMEM;
    if (e->timer_file && !*e->timer_file) free(e->timer_file), e->timer_file = NULL;
    e->omp_num_threads_set = opts_getenv(env, "OMP_NUM_THREADS") != NULL;
    e->nccl_async_set = opts_getenv(env, "NCCL_ASYNC_ERROR_HANDLING") != NULL;
    e->torch_nccl_async_set = opts_getenv(env, "TORCH_NCCL_ASYNC_ERROR_HANDLING") != NULL;
    v = opts_getenv(env, "TORCHELASTIC_ENABLE_FILE_TIMER");
    e->file_timer = v && strcmp(v, "1") == 0;
    v = opts_getenv(env, "TORCH_DISABLE_SHARE_RDZV_TCP_STORE");
    e->workers_host_store = v && strcmp(v, "1") == 0;
    e->store_stall_s = 60;
    if ((v = opts_getenv(env, DDPRUN_ENV_STORE_STALL_S)) != NULL) {
        char *end = NULL;
        double s = strtod(v, &end);
        if (!*v || *end || !(s >= 0 && s <= 1e6))
            return fail(st, DDPRUN_ENV_STORE_STALL_S "=%s: not a number of seconds from 0 (off) to "
                            "1000000", v);
        e->store_stall_s = s;
    }
    return 0;
}

int config_parse(int argc, char **argv, char **environ_, agent_config *cfg, char *err,
                 size_t errlen) {
    parse_state st = {.cfg = cfg, .env = environ_, .err = err, .errlen = errlen,
                      .nnodes_src = "--nnodes", .node_rank_src = "--node-rank"};
    if (err && errlen) err[0] = '\0';
    int rc = set_defaults(cfg);
    if (rc == 0) rc = read_options(&st, argc, argv);
    if (rc == OPTS_HELP_GIVEN && !st.completion) fputs(config_usage(), stdout);
    if (rc == OPTS_VERSION_GIVEN) {
        build_info_print(stdout, "ddprun");
        rc = OPTS_HELP_GIVEN; /* printed: nothing to run */
    }
    if (rc == 0) check_prefix_template(cfg);
    if (rc == 0) rc = slurm_defaults(&st);
    if (rc == 0) rc = validate(cfg, &st);
    if (rc == 0) rc = build_argv(cfg, argc, argv, &st);
    if (rc == 0) rc = read_agent_env(&st, cfg, environ_);
    if (rc == -ENOMEM) fail(&st, "out of memory while reading the command line");
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
    free(cfg->metrics_host), free(cfg->health_host);
    cfg->metrics_host = cfg->health_host = NULL;
    free(cfg->log_line_prefix_template);
    cfg->log_line_prefix_template = NULL;
    free(cfg->rdzv_endpoints);
    cfg->rdzv_endpoints = NULL;
    agent_env *e = &cfg->env;
    free(e->cuda_visible_devices), free(e->store_token), free(e->timer_file), free(e->tmpdir);
    free(e->shm_dir);
    memset(e, 0, sizeof *e);
    char **strs[] = {&cfg->rdzv.cacert, &cfg->rdzv.cert, &cfg->rdzv.key, &cfg->rdzv.user,
                     &cfg->rdzv.password, &cfg->rdzv.key_prefix};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) free(*strs[i]), *strs[i] = NULL;
    string_list_free(&cfg->dup_filters[0]);
    string_list_free(&cfg->dup_filters[1]);
    for (int i = 0; cfg->argv && cfg->argv[i]; i++) free(cfg->argv[i]);
    free(cfg->argv);
    cfg->rdzv_host = cfg->rdzv_id = cfg->role = cfg->log_dir = NULL;
    cfg->master_addr = cfg->local_addr = NULL;
    cfg->local_ranks_filter = NULL;
    cfg->n_local_ranks_filter = 0;
    cfg->argv = NULL;
    cfg->argc = 0;
}

static const char usage_head[] =
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
    "Started by srun once per node, ddprun takes the defaults of --nnodes, --node-rank,\n"
    "--rdzv-id and, with several nodes, --rdzv-backend and --rdzv-endpoint from Slurm's\n"
    "step, and says so (flags and PET_ variables still win).\n"
    "\n";

static const char usage_tail[] =
    "\n"
    "Without --no-python, PROGRAM runs as python3 -u PROGRAM ARGS, like torchrun;\n"
    "PYTHON_EXEC names another interpreter. Everything after PROGRAM goes to it\n"
    "untouched, even arguments that look like ddprun's options; \"--\" before PROGRAM\n"
    "ends ddprun's options explicitly. TORCHELASTIC_ENABLE_FILE_TIMER=1 serves torch's\n"
    "worker watchdog (FileTimerClient) on TORCHELASTIC_TIMER_FILE.\n"
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

/* The head, the option table's listing, the tail: made once. */
const char *config_usage(void) {
    static char *text;
    if (text) return text;
    agent_config dummy;
    memset(&dummy, 0, sizeof dummy);
    parse_state st = {.cfg = &dummy};
    opts_opt table[OPTS_MAX];
    opts_spec spec = {.prog = "ddprun", .opts = table, .nopts = option_table(&st, table),
                      .help_col = HELP_COL};
    size_t head = strlen(usage_head), list = opts_format_help(&spec, NULL, 0);
    char *t = malloc(head + list + sizeof usage_tail);
    if (!t) return usage_head; /* (out of memory: the head alone) */
    memcpy(t, usage_head, head);
    opts_format_help(&spec, t + head, list + 1);
    memcpy(t + head + list, usage_tail, sizeof usage_tail);
    return text = t;
}
