/* The command-line option engine (see common/opts.h for the rules): finding
 * an option by what the user typed, gathering the values from argv and
 * the environment, applying them to typed targets or callbacks, the
 * messages, the help listing, and the number parsers every program uses. */
#include "common/opts.h"

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"

/* What one parse gathers before anything is applied: each option's last
 * value, and whether that came from the environment. */
typedef struct {
    const opts_spec *spec;
    const char *val[OPTS_MAX];
    unsigned char from_env[OPTS_MAX];
    char *err;
    size_t errlen;
} scan;

static int scan_fail(scan *sc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int scan_fail(scan *sc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = err_vset(sc->err, sc->errlen, -EINVAL, fmt, ap);
    va_end(ap);
    return rc;
}

int opts_fail(const opts_arg *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = err_vset(a->err, a->errlen, -EINVAL, fmt, ap);
    va_end(ap);
    return rc;
}

int opts_bad(const opts_arg *a, const char *want) {
    return opts_fail(a, "%s: '%s' is not %s", a->src, a->val, want);
}

/* ---- the number parsers ---- */

int opts_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end) return -EINVAL;
    if (errno == ERANGE || v < lo || v > hi) return -ERANGE;
    if (errno) return -EINVAL;
    *out = v;
    return 0;
}

int opts_parse_int(const char *s, int lo, int hi, int *out) {
    int64_t v;
    int rc = opts_parse_i64(s, lo, hi, &v);
    if (rc == 0) *out = (int)v;
    return rc;
}

int opts_parse_double(const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end) return -EINVAL;
    if (errno == ERANGE) return -ERANGE;
    if (errno || !isfinite(v)) return -EINVAL;
    if (v < lo || v > hi) return -ERANGE;
    *out = v;
    return 0;
}

int opts_parse_seconds(const char *s, int positive, double *out) {
    double v;
    int rc = opts_parse_double(s, 0, DBL_MAX, &v);
    if (rc == 0 && positive && v == 0) rc = -ERANGE;
    if (rc == 0) *out = v;
    return rc;
}

/* The multiplier of a size's unit letter; 1 when c is none. */
static double size_unit(char c) {
    switch (c) {
    case 'k': case 'K': return 1024.0;
    case 'm': case 'M': return 1048576.0;
    case 'g': case 'G': return 1073741824.0;
    default: return 1.0;
    }
}

int opts_parse_size(const char *s, size_t lo, size_t hi, size_t *out) {
    while (isspace((unsigned char)*s)) s++;
    size_t digits = strspn(s, "0123456789.");
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (digits == 0 || end != s + digits || errno) return -EINVAL;
    double mul = size_unit(*end);
    if (mul > 1) end++;
    if (*end == 'B' || *end == 'b') end++;
    double bytes = v * mul;
    if (*end || bytes != floor(bytes)) return -EINVAL;
    if (bytes >= 18446744073709551616.0 || (size_t)bytes < lo || (size_t)bytes > hi)
        return -ERANGE;
    *out = (size_t)bytes;
    return 0;
}

/* ---- what a valid value is, for messages ---- */

/* A table's double bound as an integer of a type whose range is
 * [tmin, tmax]; lo and hi both 0 stand for the whole range. */
static void int_bounds(const opts_opt *o, int64_t tmin, int64_t tmax, int64_t *lo,
                       int64_t *hi) {
    int whole = o->lo == 0 && o->hi == 0;
    double l = whole ? (double)tmin : o->lo, h = whole ? (double)tmax : o->hi;
    *lo = l <= (double)tmin ? tmin : l >= (double)tmax ? tmax : (int64_t)l;
    *hi = h <= (double)tmin ? tmin : h >= (double)tmax ? tmax : (int64_t)h;
}

static void size_bounds(const opts_opt *o, size_t *lo, size_t *hi) {
    int whole = o->lo == 0 && o->hi == 0;
    *lo = o->lo <= 0 ? 0 : (size_t)o->lo;
    *hi = whole || o->hi >= (double)SIZE_MAX ? SIZE_MAX : o->hi <= 0 ? 0 : (size_t)o->hi;
}

static void double_bounds(const opts_opt *o, double *lo, double *hi) {
    int whole = o->lo == 0 && o->hi == 0;
    *lo = whole ? -DBL_MAX : o->lo;
    *hi = whole ? DBL_MAX : o->hi;
}

static const char *describe_int(const opts_opt *o, int64_t tmin, int64_t tmax, char *buf,
                                size_t n) {
    int64_t lo, hi;
    int_bounds(o, tmin, tmax, &lo, &hi);
    if (hi < tmax)
        snprintf(buf, n, "a whole number from %lld to %lld", (long long)lo, (long long)hi);
    else if (lo == tmin) snprintf(buf, n, "an integer");
    else if (lo == 0) snprintf(buf, n, "a non-negative integer");
    else if (lo == 1) snprintf(buf, n, "a positive integer");
    else snprintf(buf, n, "an integer of at least %lld", (long long)lo);
    return buf;
}

static const char *describe_size(const opts_opt *o, char *buf, size_t n) {
    size_t lo, hi;
    size_bounds(o, &lo, &hi);
    if (hi < SIZE_MAX)
        snprintf(buf, n, "a size from %zu to %zu bytes (K, M or G may follow)", lo, hi);
    else if (lo > 0)
        snprintf(buf, n, "a size of at least %zu bytes (K, M or G may follow)", lo);
    else
        snprintf(buf, n, "a size in bytes (K, M or G may follow)");
    return buf;
}

static const char *describe_double(const opts_opt *o, char *buf, size_t n) {
    double lo, hi;
    double_bounds(o, &lo, &hi);
    if (hi < DBL_MAX) snprintf(buf, n, "a number from %g to %g", lo, hi);
    else if (lo > -DBL_MAX) snprintf(buf, n, "a number of at least %g", lo);
    else snprintf(buf, n, "a number");
    return buf;
}

/* "a, b or c" */
static const char *describe_choices(const opts_choice *c, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; c[i].name && used < n; i++) {
        const char *sep = i == 0 ? "" : c[i + 1].name ? ", " : " or ";
        used += (size_t)snprintf(buf + used, n - used, "%s%s", sep, c[i].name);
    }
    return buf;
}

/* What the option's values must be, as the end of "'x' is not ...". */
static const char *describe(const opts_opt *o, char *buf, size_t n) {
    if (o->want) return o->want;
    if (o->choices) return describe_choices(o->choices, buf, n);
    switch (o->type) {
    case OPTS_INT: return describe_int(o, INT_MIN, INT_MAX, buf, n);
    case OPTS_I64: return describe_int(o, INT64_MIN, INT64_MAX, buf, n);
    case OPTS_SIZE: return describe_size(o, buf, n);
    case OPTS_DOUBLE: return describe_double(o, buf, n);
    case OPTS_SECONDS:
        return o->positive ? "a positive number of seconds" : "a non-negative number of seconds";
    default: return "valid";
    }
}

static int bad_value(const opts_arg *a) {
    char want[256];
    return opts_bad(a, describe(a->opt, want, sizeof want));
}

/* ---- applying a value to its typed target ---- */

static int apply_flag(const opts_arg *a) {
    int64_t v;
    if (opts_parse_i64(a->val, INT64_MIN, INT64_MAX, &v)) return opts_bad(a, "0 or 1");
    *(int *)a->opt->target = (v != 0) != (a->opt->type == OPTS_FLAG_CLEAR);
    return 0;
}

static int apply_int(const opts_arg *a) {
    int64_t lo, hi;
    int_bounds(a->opt, INT_MIN, INT_MAX, &lo, &hi);
    return opts_parse_int(a->val, (int)lo, (int)hi, a->opt->target) ? bad_value(a) : 0;
}

static int apply_i64(const opts_arg *a) {
    int64_t lo, hi;
    int_bounds(a->opt, INT64_MIN, INT64_MAX, &lo, &hi);
    return opts_parse_i64(a->val, lo, hi, a->opt->target) ? bad_value(a) : 0;
}

static int apply_size(const opts_arg *a) {
    size_t lo, hi;
    size_bounds(a->opt, &lo, &hi);
    return opts_parse_size(a->val, lo, hi, a->opt->target) ? bad_value(a) : 0;
}

static int apply_double(const opts_arg *a) {
    double lo, hi;
    double_bounds(a->opt, &lo, &hi);
    return opts_parse_double(a->val, lo, hi, a->opt->target) ? bad_value(a) : 0;
}

static int apply_seconds(const opts_arg *a) {
    return opts_parse_seconds(a->val, a->opt->positive, a->opt->target) ? bad_value(a) : 0;
}

/* The entry of a->opt->choices named a->val, or NULL. */
static const opts_choice *find_choice(const opts_arg *a) {
    for (const opts_choice *c = a->opt->choices; c && c->name; c++)
        if (strcmp(c->name, a->val) == 0) return c;
    return NULL;
}

static int apply_choice(const opts_arg *a) {
    const opts_choice *c = find_choice(a);
    if (!c) return bad_value(a);
    *(int *)a->opt->target = c->value;
    return 0;
}

static int apply_str(const opts_arg *a) {
    if (a->opt->choices && !find_choice(a)) return bad_value(a);
    *(const char **)a->opt->target = a->val;
    return 0;
}

static int apply_buf(const opts_arg *a) {
    if (a->opt->choices && !find_choice(a)) return bad_value(a);
    size_t n = strlen(a->val);
    if (n >= a->opt->size)
        return opts_fail(a, "%s: '%.40s%s' is too long (at most %zu characters)", a->src, a->val,
                         n > 40 ? "..." : "", a->opt->size - 1);
    memcpy(a->opt->target, a->val, n + 1);
    return 0;
}

static const opts_apply_fn typed_apply[] = {
    [OPTS_FLAG] = apply_flag,     [OPTS_FLAG_CLEAR] = apply_flag, [OPTS_INT] = apply_int,
    [OPTS_I64] = apply_i64,       [OPTS_SIZE] = apply_size,       [OPTS_DOUBLE] = apply_double,
    [OPTS_SECONDS] = apply_seconds, [OPTS_STR] = apply_str,       [OPTS_BUF] = apply_buf,
    [OPTS_CHOICE] = apply_choice,
};

/* How an option's value is applied; NULL for options that have none. */
static opts_apply_fn apply_fn(const opts_opt *o) {
    if (o->type == OPTS_CALL) return o->apply;
    return (size_t)o->type < sizeof typed_apply / sizeof typed_apply[0] ? typed_apply[o->type]
                                                                         : NULL;
}

static int is_flag(const opts_opt *o) { return o->type == OPTS_FLAG || o->type == OPTS_FLAG_CLEAR; }

static int takes_value(const opts_opt *o) { return o->type >= OPTS_INT && o->type <= OPTS_CALL; }

/* ---- finding an option by what the user typed ---- */

/* Edit distance counting an insertion, a deletion, a substitution or a
 * swap of two neighbours as one edit ("optimal string alignment"), for
 * suggesting the option that was meant: "--prot" is one edit from --port. */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > OPTS_NAME_MAX || lb > OPTS_NAME_MAX) return INT_MAX / 2;
    int rows[3][OPTS_NAME_MAX + 1]; /* rows i-2, i-1 and i, by i mod 3 */
    for (size_t j = 0; j <= lb; j++) rows[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int *cur = rows[i % 3], *up = rows[(i - 1) % 3], *up2 = rows[(i + 1) % 3];
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int best = up[j - 1] + (a[i - 1] != b[j - 1]);
            if (up[j] + 1 < best) best = up[j] + 1;
            if (cur[j - 1] + 1 < best) best = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                up2[j - 2] + 1 < best)
                best = up2[j - 2] + 1;
            cur[j] = best;
        }
    }
    return rows[la % 3][lb];
}

static size_t common_prefix(const char *a, const char *b) {
    size_t n = 0;
    while (a[n] && a[n] == b[n]) n++;
    return n;
}

/* The option the user most likely meant: a near-typo (one edit) first,
 * then one that starts the same way ("--nprocs" -> --nproc-per-node, or
 * "--ep" -> --epochs where abbreviations are not taken), then a farther
 * typo of a name long enough for two edits to leave it recognizable. NULL
 * when nothing is close. */
static const char *suggest(const opts_spec *spec, const char *name) {
    int best_ed = INT_MAX, ed_i = -1, lcp_i = -1;
    size_t best_lcp = 0, len = strlen(name);
    for (size_t i = 0; i < spec->nopts; i++) {
        int ed = edit_distance(name, spec->opts[i].name);
        size_t lcp = common_prefix(name, spec->opts[i].name);
        if (ed < best_ed) best_ed = ed, ed_i = (int)i;
        if (lcp > best_lcp) best_lcp = lcp, lcp_i = (int)i;
    }
    if (best_ed <= 1) return spec->opts[ed_i].name;
    if (best_lcp >= 4 || (best_lcp >= 2 && best_lcp == len)) return spec->opts[lcp_i].name;
    if (best_ed <= 2 && len > 4) return spec->opts[ed_i].name;
    return NULL;
}

static int unknown_option(scan *sc, const char *typed, size_t n, const char *name) {
    const char *s = suggest(sc->spec, name);
    if (s) return scan_fail(sc, "unknown option '%.*s' (did you mean --%s?)", (int)n, typed, s);
    const char *prog = sc->spec->prog;
    return scan_fail(sc, "unknown option '%.*s' (see %s%s--help)", (int)n, typed,
                     prog ? prog : "", prog ? " " : "");
}

/* Lists the options that start with name, for an ambiguous abbreviation. */
static int ambiguous_option(scan *sc, const char *typed, size_t n, const char *name) {
    char list[512] = "";
    size_t used = 0, len = strlen(name);
    for (size_t i = 0; i < sc->spec->nopts && used < sizeof list; i++)
        if (strncmp(sc->spec->opts[i].name, name, len) == 0)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s--%s",
                                     used ? ", " : "", sc->spec->opts[i].name);
    return scan_fail(sc, "option '%.*s' is ambiguous: it could be %s", (int)n, typed, list);
}

/* An option by its exact name or, where the program allows, a unique
 * prefix of one (argparse's rule, so that "--nproc=4" works in ddprun). */
static int find_long(scan *sc, const char *typed, size_t n, const char *name) {
    int found = -1, matches = 0;
    size_t len = strlen(name);
    for (size_t i = 0; i < sc->spec->nopts; i++) {
        if (strcmp(sc->spec->opts[i].name, name) == 0) return (int)i;
        if (len && strncmp(sc->spec->opts[i].name, name, len) == 0) found = (int)i, matches++;
    }
    if (matches == 1 && sc->spec->abbrev) return found;
    if (matches > 1 && sc->spec->abbrev) return ambiguous_option(sc, typed, n, name);
    return unknown_option(sc, typed, n, name);
}

/* Copies the name part of an option (after the dashes, before any '=') with
 * '_' turned into '-', so that both spellings match. */
static void normalize_name(char *dst, const char *s, size_t n) {
    if (n > OPTS_NAME_MAX) n = OPTS_NAME_MAX;
    for (size_t i = 0; i < n; i++) dst[i] = s[i] == '_' ? '-' : s[i];
    dst[n] = '\0';
}

/* "--name", "--name=value": returns the option's index and sets *inline_val
 * to what follows '=' (NULL when nothing does). */
static int lookup_long(scan *sc, const char *arg, const char **inline_val) {
    const char *body = arg + 2, *eq = strchr(body, '=');
    size_t n = eq ? (size_t)(eq - body) : strlen(body);
    char name[OPTS_NAME_MAX + 1];
    *inline_val = eq ? eq + 1 : NULL;
    if (n > OPTS_NAME_MAX) return unknown_option(sc, arg, n + 2, "");
    normalize_name(name, body, n);
    return find_long(sc, arg, n + 2, name);
}

/* "-r 3", "-r3", "-r=3", "-m", "-h". Anything else that starts with one dash
 * ("-nnodes") is reported as unknown with the long option it resembles. */
static int lookup_short(scan *sc, const char *arg, const char **inline_val) {
    *inline_val = NULL;
    for (size_t i = 0; i < sc->spec->nopts; i++) {
        const opts_opt *o = &sc->spec->opts[i];
        if (o->short_name != arg[1]) continue;
        if (arg[2] == '\0') return (int)i;
        if (!takes_value(o)) break;
        *inline_val = arg[2] == '=' ? arg + 3 : arg + 2;
        return (int)i;
    }
    char name[OPTS_NAME_MAX + 1];
    size_t n = strlen(arg + 1);
    normalize_name(name, arg + 1, n);
    return unknown_option(sc, arg, strlen(arg), n > OPTS_NAME_MAX ? "" : name);
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

static int take_value(scan *sc, int argc, char **argv, int *i, const opts_opt *o) {
    if (*i + 1 < argc && !looks_like_option(argv[*i + 1])) return ++*i, 0;
    if (*i + 1 >= argc) return scan_fail(sc, "--%s expects a value", o->name);
    return scan_fail(sc, "--%s expects a value (write --%s=VALUE for a value that starts with "
                     "'-')", o->name, o->name);
}

/* Reads the option at argv[*i] (and its value), advancing *i past both. */
static int scan_option(scan *sc, int argc, char **argv, int *i) {
    const char *arg = argv[*i], *val = NULL;
    int idx = arg[1] == '-' ? lookup_long(sc, arg, &val) : lookup_short(sc, arg, &val);
    if (idx < 0) return idx;
    const opts_opt *o = &sc->spec->opts[idx];
    if (o->type == OPTS_HELP) return OPTS_HELP_GIVEN;
    if (o->type == OPTS_VERSION) return OPTS_VERSION_GIVEN;
    if (o->type == OPTS_REFUSED) return scan_fail(sc, "%s", o->help);
    if (!takes_value(o) && val)
        return scan_fail(sc, "--%s takes no value (got '%s')", o->name, val);
    if (!takes_value(o)) val = "1";
    if (!val) {
        int rc = take_value(sc, argc, argv, i, o);
        if (rc) return rc;
        val = argv[*i];
    }
    sc->val[idx] = val;
    sc->from_env[idx] = 0;
    return 0;
}

/* Walks the command line up to the first operand, or past "--". */
static int scan_args(scan *sc, int argc, char **argv, int *next) {
    int i;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0') break;
        int rc = scan_option(sc, argc, argv, &i);
        if (rc) return rc;
    }
    *next = i;
    return 0;
}

/* PREFIX<NAME>: the long name in upper case with '_' for '-'. 0, or -1 if
 * it does not fit. */
static int env_name(const opts_spec *spec, const opts_opt *o, char *var, size_t cap) {
    size_t n = (size_t)snprintf(var, cap, "%s", spec->env_prefix);
    for (const char *p = o->name; *p && n < cap; p++)
        var[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
    if (n >= cap) return -1;
    var[n] = '\0';
    return 0;
}

const char *opts_getenv(char **env, const char *name) {
    size_t n = strlen(name);
    for (char **e = env; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

/* The environment's defaults (PREFIX<NAME>, else env_also); an empty
 * variable counts as unset. from_env: 1 the first, 2 the second. */
static void scan_env(scan *sc) {
    const opts_spec *spec = sc->spec;
    char var[OPTS_NAME_MAX + 32];
    if (!spec->env) return;
    for (size_t i = 0; i < spec->nopts; i++) {
        const opts_opt *o = &spec->opts[i];
        if (!takes_value(o) && !is_flag(o)) continue;
        const char *v = NULL;
        if (spec->env_prefix && env_name(spec, o, var, sizeof var) == 0)
            v = opts_getenv(spec->env, var);
        if (v && *v) {
            sc->val[i] = v, sc->from_env[i] = 1;
        } else if (o->env_also && (v = opts_getenv(spec->env, o->env_also)) && *v) {
            sc->val[i] = v, sc->from_env[i] = 2;
        }
    }
}

static int apply_all(scan *sc) {
    const opts_spec *spec = sc->spec;
    char src[OPTS_NAME_MAX + 32];
    for (size_t i = 0; i < spec->nopts; i++) {
        const opts_opt *o = &spec->opts[i];
        if (!sc->val[i]) continue;
        if (sc->from_env[i] == 2)
            snprintf(src, sizeof src, "%s", o->env_also);
        else if (!sc->from_env[i] || env_name(spec, o, src, sizeof src))
            snprintf(src, sizeof src, "--%s", o->name);
        opts_arg a = {o, src, sc->val[i], spec->ctx, sc->err, sc->errlen};
        opts_apply_fn fn = apply_fn(o);
        int rc = fn ? fn(&a) : 0;
        if (rc) return rc;
    }
    return 0;
}

int opts_parse(const opts_spec *spec, int argc, char **argv, int *next, char *err,
               size_t errlen) {
    scan sc = {.spec = spec, .err = err, .errlen = errlen};
    if (err && errlen) err[0] = '\0';
    *next = argc;
    if (spec->nopts > OPTS_MAX)
        return scan_fail(&sc, "%zu options are more than the %d the option engine holds",
                         spec->nopts, OPTS_MAX);
    scan_env(&sc);
    int rc = scan_args(&sc, argc, argv, next);
    if (rc == 0 && spec->no_operands && *next < argc)
        rc = scan_fail(&sc, "unexpected argument '%s' (see %s%s--help)", argv[*next],
                       spec->prog ? spec->prog : "", spec->prog ? " " : "");
    return rc ? rc : apply_all(&sc);
}

/* ---- the help listing ---- */

/* Appends to a fixed buffer as snprintf would, counting what did not fit. */
typedef struct {
    char *buf;
    size_t size, len;
} help_out;

static void help_add(help_out *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void help_add(help_out *h, const char *fmt, ...) {
    size_t room = h->len < h->size ? h->size - h->len : 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(room ? h->buf + h->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) h->len += (size_t)n;
}

/* "-r, --redirects V" */
static size_t help_syntax(const opts_opt *o, char *buf, size_t n) {
    char dash[8] = "";
    if (o->short_name) snprintf(dash, sizeof dash, "-%c, ", o->short_name);
    int len = snprintf(buf, n, "%s--%s%s%s", dash, o->name, o->metavar ? " " : "",
                       o->metavar ? o->metavar : "");
    return len < 0 ? 0 : (size_t)len < n ? (size_t)len : n - 1;
}

/* Longer forms than this go on a line of their own. */
#define HELP_SYNTAX_MAX 26

static int help_column(const opts_spec *spec) {
    if (spec->help_col > 0) return spec->help_col;
    size_t widest = 0;
    char syn[128];
    for (size_t i = 0; i < spec->nopts; i++) {
        size_t n = help_syntax(&spec->opts[i], syn, sizeof syn);
        if (spec->opts[i].help && n > widest && n <= HELP_SYNTAX_MAX) widest = n;
    }
    return (int)widest + 4;
}

static void help_option(help_out *h, const opts_opt *o, int col) {
    char syn[128];
    size_t n = help_syntax(o, syn, sizeof syn);
    if (o->section) help_add(h, "%s%s\n", h->len ? "\n" : "", o->section);
    if ((int)n + 4 > col) help_add(h, "  %s\n%*s", syn, col, "");
    else help_add(h, "  %-*s", col - 2, syn);
    for (const char *p = o->help; *p; p++) {
        if (*p == '\n') help_add(h, "\n%*s", col, "");
        else help_add(h, "%c", *p);
    }
    help_add(h, "\n");
}

size_t opts_format_help(const opts_spec *spec, char *buf, size_t size) {
    help_out h = {buf, size, 0};
    int col = help_column(spec);
    if (size) buf[0] = '\0';
    for (size_t i = 0; i < spec->nopts; i++)
        if (spec->opts[i].help && spec->opts[i].type != OPTS_REFUSED)
            help_option(&h, &spec->opts[i], col);
    return h.len;
}

int opts_print_help(const opts_spec *spec, const char *head, const char *tail, FILE *out) {
    size_t n = opts_format_help(spec, NULL, 0) + 1;
    char *text = malloc(n);
    if (!text) return -ENOMEM;
    opts_format_help(spec, text, n);
    fprintf(out, "%s%s%s", head ? head : "", text, tail ? tail : "");
    free(text);
    return 0;
}

/* The shell function's name: _PROG with anything but letters, digits and
 * '_' as '_'. */
static void completion_fn(const char *prog, char *out, size_t len) {
    size_t k = 0;
    if (len < 2) return;
    out[k++] = '_';
    for (const char *p = prog; *p && k + 1 < len; p++)
        out[k++] = isalnum((unsigned char)*p) ? *p : '_';
    out[k] = '\0';
}

int opts_print_completion(const opts_spec *spec, const char *shell, FILE *out) {
    int zsh = strcmp(shell, "zsh") == 0;
    if (!zsh && strcmp(shell, "bash") != 0) return -EINVAL;
    char fn[OPTS_NAME_MAX + 8];
    completion_fn(spec->prog, fn, sizeof fn);
    fprintf(out, "# %s completion for %s: eval \"$(%s --print-completion %s)\"\n", shell,
            spec->prog, spec->prog, shell);
    if (zsh) fprintf(out, "autoload -U +X bashcompinit && bashcompinit\n");
    fprintf(out, "%s() {\n    local cur=${COMP_WORDS[COMP_CWORD]} "
                 "prev=${COMP_WORDS[COMP_CWORD-1]}\n    case $prev in\n", fn);
    for (size_t i = 0; i < spec->nopts; i++) {
        const opts_opt *o = &spec->opts[i];
        if (!o->choices || o->type == OPTS_REFUSED) continue;
        fprintf(out, "        --%s", o->name);
        if (o->short_name) fprintf(out, "|-%c", o->short_name);
        fprintf(out, ") COMPREPLY=($(compgen -W \"");
        for (const opts_choice *c = o->choices; c->name; c++)
            fprintf(out, "%s%s", c == o->choices ? "" : " ", c->name);
        fprintf(out, "\" -- \"$cur\")); return ;;\n");
    }
    fprintf(out, "    esac\n    if [[ $cur == -* ]]; then\n        COMPREPLY=($(compgen -W \"");
    int first = 1;
    for (size_t i = 0; i < spec->nopts; i++) {
        const opts_opt *o = &spec->opts[i];
        if (o->type == OPTS_REFUSED) continue;
        fprintf(out, "%s--%s", first ? "" : " ", o->name);
        if (o->short_name) fprintf(out, " -%c", o->short_name);
        first = 0;
    }
    fprintf(out, "\" -- \"$cur\"))\n        return\n    fi\n"
                 "    COMPREPLY=($(compgen -f -- \"$cur\"))\n}\n"
                 "complete -o default -F %s %s\n", fn, spec->prog);
    return 0;
}
