/* See metrics_series.h. Each line is one JSON object; which kind it is
 * follows from its keys: "event" (start, done, stop), "loss" (a training
 * step) or "test_loss" (an evaluation). Unknown events are skipped, so
 * that a newer ddp-train's file still plots; anything else is an error
 * naming the line, since a plot of a file that is not what it seems would
 * mislead. */
#include "worker/plot/metrics_series.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/err.h"
#include "common/fs.h"

void metrics_series_free(metrics_series *s) {
    free(s->train);
    free(s->test);
    free(s->restarts);
    memset(s, 0, sizeof *s);
}

/* Makes room for one more element in *arr (n used of *cap). 0 or -ENOMEM. */
static int grow(void **arr, size_t n, size_t *cap, size_t elem) {
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : 256;
    void *p = realloc(*arr, c * elem);
    if (!p) return -ENOMEM;
    *arr = p, *cap = c;
    return 0;
}

/* The parse of one file: where it is, and what it has seen so far. */
typedef struct {
    metrics_series *s;
    const char *name;
    size_t line;
    const char *text; /* the line, for messages */
    size_t len;
    int64_t last_step; /* the last training step's global step, -1 before one */
    int seen_any;      /* a start or a training line came before */
    int segment;
    char *err;
    size_t errlen;
} parse_state;

static int fail(parse_state *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parse_state *p, const char *fmt, ...) {
    char what[256], shown[48];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    /* The start of the line, printable, so the reader sees what is there. */
    size_t n = 0;
    for (; n < p->len && n < 40; n++) {
        unsigned char c = (unsigned char)p->text[n];
        shown[n] = c >= 32 && c < 127 ? (char)c : '?';
    }
    shown[n] = 0;
    return err_set(p->err, p->errlen, -EINVAL,
                   "%s:%zu: %s: '%s%s' (is it a file ddp-train --metrics wrote?)", p->name,
                   p->line, what, shown, p->len > n ? "..." : "");
}

/* A number field: 0 with *out set (NAN for null), or the error. */
static int number(parse_state *p, json_t *o, const char *key, double *out) {
    json_t *v = json_object_get(o, key);
    if (json_is_null(v)) return *out = NAN, 0;
    if (!json_is_number(v))
        return fail(p, "\"%s\" is %s", key, v ? "not a number" : "missing");
    *out = json_number_value(v);
    return 0;
}

/* A global step: 0 with *out set, or the error (required only when
 * required; *out untouched when absent). */
static int step_field(parse_state *p, json_t *o, int required, int64_t *out) {
    json_t *v = json_object_get(o, "global_step");
    if (!v && !required) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return fail(p, "\"global_step\" is %s", v ? "not a whole number >= 0" : "missing");
    *out = json_integer_value(v);
    return 0;
}

static int int_field(json_t *o, const char *key, int dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

static int add_restart(parse_state *p, int64_t step, int restart, int world, int inferred) {
    metrics_series *s = p->s;
    if (grow((void **)&s->restarts, s->nrestarts, &s->cap_restarts, sizeof *s->restarts))
        return -ENOMEM;
    s->restarts[s->nrestarts++] = (series_restart){.step = step, .restart = restart,
                                                   .world = world, .line = p->line,
                                                   .inferred = inferred};
    p->segment++;
    return 0;
}

static int on_event(parse_state *p, json_t *o, const char *event) {
    metrics_series *s = p->s;
    if (strcmp(event, "start") == 0) {
        int64_t step = 0;
        int rc = step_field(p, o, 1, &step);
        if (rc) return rc;
        int world = int_field(o, "world_size", 0);
        /* A start after anything else is a restart (or a resumed job
         * appending to the same file): marked where it resumed. */
        if (p->seen_any && (rc = add_restart(p, step, int_field(o, "restart", 0), world, 0)))
            return rc;
        s->starts++, s->world = world, s->done = s->stopped = 0;
        p->seen_any = 1;
        /* The steps after it continue from here, not from before the restart. */
        p->last_step = step;
    } else if (strcmp(event, "done") == 0) {
        s->done = 1, s->stopped = 0;
    } else if (strcmp(event, "stop") == 0) {
        s->stopped = 1, s->done = 0;
    }
    return 0;
}

static int on_train(parse_state *p, json_t *o) {
    metrics_series *s = p->s;
    series_train t = {0};
    int rc = step_field(p, o, 1, &t.step);
    if (rc == 0) rc = number(p, o, "loss", &t.loss);
    if (rc == 0) rc = number(p, o, "acc", &t.acc);
    if (rc) return rc;
    /* A file from before "start" lines: a step that does not follow the
     * last one is where a restarted group resumed, from the step before. */
    if (p->last_step >= 0 && t.step <= p->last_step && (rc = add_restart(p, t.step - 1, -1, 0, 1)))
        return rc;
    t.epoch = int_field(o, "epoch", 0);
    t.segment = p->segment;
    if (grow((void **)&s->train, s->ntrain, &s->cap_train, sizeof *s->train)) return -ENOMEM;
    s->train[s->ntrain++] = t;
    p->last_step = t.step;
    p->seen_any = 1;
    return 0;
}

static int on_test(parse_state *p, json_t *o) {
    metrics_series *s = p->s;
    /* Files from before test lines had a global step: the last step's. */
    series_test t = {.step = p->last_step > 0 ? p->last_step : 0};
    int rc = step_field(p, o, 0, &t.step);
    if (rc == 0) rc = number(p, o, "test_loss", &t.loss);
    if (rc == 0) rc = number(p, o, "test_acc", &t.acc);
    if (rc) return rc;
    t.epoch = int_field(o, "epoch", 0);
    if (grow((void **)&s->test, s->ntest, &s->cap_test, sizeof *s->test)) return -ENOMEM;
    s->test[s->ntest++] = t;
    return 0;
}

static int parse_line(parse_state *p) {
    json_error_t jerr;
    json_t *o = json_loadb(p->text, p->len, 0, &jerr);
    int rc;
    if (!o) return fail(p, "not JSON (%s)", jerr.text);
    json_t *event = json_object_get(o, "event");
    if (!json_is_object(o))
        rc = fail(p, "not a JSON object");
    else if (event && !json_is_string(event))
        rc = fail(p, "\"event\" is not a string");
    else if (event)
        rc = on_event(p, o, json_string_value(event));
    else if (json_object_get(o, "loss"))
        rc = on_train(p, o);
    else if (json_object_get(o, "test_loss"))
        rc = on_test(p, o);
    else
        rc = fail(p, "a JSON object, but not a metrics line (no \"loss\", \"test_loss\" or "
                     "\"event\")");
    json_decref(o);
    return rc;
}

int metrics_series_parse(const char *text, size_t len, const char *name, metrics_series *s,
                         char *err, size_t errlen) {
    metrics_series_free(s);
    parse_state p = {.s = s, .name = name, .last_step = -1, .err = err, .errlen = errlen};
    const char *end = text + len;
    for (const char *at = text; at < end;) {
        const char *nl = memchr(at, '\n', (size_t)(end - at));
        if (!nl) { /* no newline yet: being written, or cut short */
            s->tail_partial = 1;
            break;
        }
        p.line++, s->lines++;
        p.text = at, p.len = (size_t)(nl - at);
        if (p.len && p.text[p.len - 1] == '\r') p.len--;
        at = nl + 1;
        size_t blank = strspn(p.text, " \t");
        if (blank >= p.len) continue; /* an empty line says nothing */
        int rc = parse_line(&p);
        if (rc) {
            if (rc == -ENOMEM) snprintf(err, errlen, "%s: out of memory", name);
            return rc;
        }
    }
    return 0;
}

/* The metrics file for reading; a FIFO or a device is refused at once
 * rather than waited on (an open of a FIFO waits for a writer). */
static FILE *open_metrics(const char *path, int *rc, char *err, size_t errlen) {
    const char *kind;
    int fd = fs_open_regular(path, O_RDONLY, &kind);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (f) return f;
    *rc = fd >= 0 ? -errno : fd;
    if (fd >= 0) close(fd);
    if (kind)
        snprintf(err, errlen, "cannot read metrics file %s: it is %s, not a regular file", path,
                 kind);
    else
        snprintf(err, errlen, "cannot read metrics file %s: %s%s", path, strerror(-*rc),
                 *rc == -ENOENT ? " (ddp-train --metrics FILE writes it)" : "");
    return NULL;
}

int metrics_series_read(const char *path, metrics_series *s, char *err, size_t errlen) {
    int rc = 0;
    FILE *f = open_metrics(path, &rc, err, errlen);
    if (!f) return rc;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            size_t c = cap ? cap * 2 : 1 << 16;
            char *b = realloc(buf, c);
            if (!b) {
                rc = -ENOMEM;
                snprintf(err, errlen, "%s: out of memory", path);
                break;
            }
            buf = b, cap = c;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            if (ferror(f)) {
                rc = -EIO;
                snprintf(err, errlen, "cannot read metrics file %s: %s", path, strerror(errno));
            }
            break;
        }
    }
    fclose(f);
    if (rc == 0) rc = metrics_series_parse(buf ? buf : "", len, path, s, err, errlen);
    free(buf);
    return rc;
}

int metrics_series_check(const metrics_series *s, const char *name, char *err, size_t errlen) {
    if (s->ntrain > 0) return 0;
    if (s->lines == 0 && !s->tail_partial)
        snprintf(err, errlen, "metrics file %s is empty: no training step to plot yet", name);
    else
        snprintf(err, errlen,
                 "metrics file %s has no training step to plot yet (%zu line%s, none with "
                 "\"loss\")",
                 name, s->lines, s->lines == 1 ? "" : "s");
    return -ENODATA;
}

size_t metrics_series_window(size_t n) {
    size_t w = n / 20;
    if (w > 201) w = 201;
    return w | 1;
}

void metrics_series_smooth(const double *v, const int *seg, size_t n, size_t window, double *out) {
    size_t half = window / 2;
    for (size_t i = 0; i < n; i++) {
        int my = seg ? seg[i] : 0;
        size_t lo = i > half ? i - half : 0, hi = i + half < n ? i + half : n - 1;
        double sum = 0;
        size_t count = 0;
        for (size_t j = lo; j <= hi; j++)
            if ((!seg || seg[j] == my) && isfinite(v[j])) sum += v[j], count++;
        out[i] = count ? sum / (double)count : NAN;
    }
}
