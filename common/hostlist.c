/* Slurm's compressed host lists (see hostlist.h). Two passes over the
 * text: the first checks it and counts its hosts (multiplying the sizes of
 * each name's bracket groups), the second expands the names one at a time
 * into a single buffer, so a list of a million hosts costs no memory and
 * its first host no time. */
#include "common/hostlist.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The widest number a range may hold: nine digits always fit a long. */
#define NUM_DIGITS_MAX 9

/* A character a host name may hold outside brackets: anything visible but
 * the list's own punctuation. */
static int name_char(char c) {
    return isgraph((unsigned char)c) && c != ',' && c != '[' && c != ']';
}

/* One number of a range, s[0..n): digits only, at most NUM_DIGITS_MAX. */
static int parse_num(const char *s, size_t n, long *out) {
    if (n == 0 || n > NUM_DIGITS_MAX) return -EINVAL;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -EINVAL;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

/* One item of a bracket group, s[0..n): "7" or "01-04". The width is the
 * first number's, so that its zero padding carries over to the others. */
static int parse_range(const char *s, size_t n, long *lo, long *hi, int *width) {
    const char *dash = memchr(s, '-', n);
    size_t first = dash ? (size_t)(dash - s) : n;
    if (parse_num(s, first, lo)) return -EINVAL;
    *hi = *lo;
    if (dash && parse_num(dash + 1, n - first - 1, hi)) return -EINVAL;
    *width = (int)first;
    return *lo <= *hi ? 0 : -EINVAL;
}

/* The next item of the bracket group whose items start at *p and end
 * before close: 1 with the item's range (and *p moved past it), 0 when the
 * group has no more, -EINVAL for a malformed item. */
static int next_range(const char **p, const char *close, long *lo, long *hi, int *width) {
    if (*p > close) return 0;
    const char *comma = memchr(*p, ',', (size_t)(close - *p));
    const char *end = comma ? comma : close;
    if (parse_range(*p, (size_t)(end - *p), lo, hi, width)) return -EINVAL;
    *p = end + 1;
    return 1;
}

/* Checks one name, s[0..n), and counts the hosts it stands for (more than
 * HOSTLIST_MAX_HOSTS counts as HOSTLIST_MAX_HOSTS + 1). */
static int check_name(const char *s, size_t n, long *count) {
    const char *end = s + n;
    *count = 1;
    if (n == 0) return -EINVAL;
    for (const char *p = s; p < end;) {
        if (*p != '[') {
            if (!name_char(*p++)) return -EINVAL;
            continue;
        }
        const char *close = memchr(p, ']', (size_t)(end - p));
        if (!close || memchr(p + 1, '[', (size_t)(close - p - 1))) return -EINVAL;
        long size = 0, lo, hi;
        int width, rc;
        for (const char *q = p + 1; (rc = next_range(&q, close, &lo, &hi, &width)) == 1;) {
            size += hi - lo + 1;
            if (size > HOSTLIST_MAX_HOSTS) size = HOSTLIST_MAX_HOSTS + 1;
        }
        if (rc) return -EINVAL;
        *count = *count > HOSTLIST_MAX_HOSTS / size ? HOSTLIST_MAX_HOSTS + 1 : *count * size;
        p = close + 1;
    }
    return 0;
}

/* The end of the name that starts at s: the first comma outside brackets,
 * or the end of the text. */
static const char *name_end(const char *s) {
    int depth = 0;
    for (; *s; s++) {
        if (*s == '[') depth++;
        if (*s == ']') depth--;
        if (*s == ',' && depth == 0) break;
    }
    return s;
}

int hostlist_count(const char *list, long *n) {
    long total = 0;
    for (const char *p = list;;) {
        const char *end = name_end(p);
        long count;
        if (check_name(p, (size_t)(end - p), &count)) return -EINVAL;
        total += count;
        if (total > HOSTLIST_MAX_HOSTS) return -E2BIG;
        if (!*end) break;
        p = end + 1;
    }
    *n = total;
    return 0;
}

/* ---- expanding ---- */

typedef struct {
    hostlist_fn fn;
    void *ctx;
    char name[HOSTLIST_NAME_MAX + 1];
} walk;

/* Expands s[0..end) behind the len characters already in w->name: the
 * text up to the next bracket group is copied, then each number of the
 * group in turn is put in place and the rest expanded behind it. */
static int expand(walk *w, const char *s, const char *end, size_t len) {
    while (s < end && *s != '[') {
        if (len >= HOSTLIST_NAME_MAX) return -ENAMETOOLONG;
        w->name[len++] = *s++;
    }
    if (s == end) {
        w->name[len] = '\0';
        return w->fn(w->name, w->ctx);
    }
    const char *close = memchr(s, ']', (size_t)(end - s)); /* checked already */
    long lo, hi;
    int width, rc;
    for (const char *q = s + 1; (rc = next_range(&q, close, &lo, &hi, &width)) == 1;) {
        for (long v = lo; v <= hi; v++) {
            int n = snprintf(w->name + len, sizeof w->name - len, "%0*ld", width, v);
            if (n < 0 || (size_t)n >= sizeof w->name - len) return -ENAMETOOLONG;
            if ((rc = expand(w, close + 1, end, len + (size_t)n))) return rc;
        }
    }
    return rc;
}

int hostlist_each(const char *list, hostlist_fn fn, void *ctx) {
    long n;
    int rc = hostlist_count(list, &n);
    if (rc) return rc;
    walk w = {.fn = fn, .ctx = ctx};
    for (const char *p = list;;) {
        const char *end = name_end(p);
        if ((rc = expand(&w, p, end, 0))) return rc;
        if (!*end) return 0;
        p = end + 1;
    }
}

typedef struct {
    long left;
    char *out;
    size_t len;
} nth_state;

static int take_nth(const char *host, void *ctx) {
    nth_state *st = ctx;
    if (st->left-- > 0) return 0;
    if (strlen(host) >= st->len) return -ENAMETOOLONG;
    memcpy(st->out, host, strlen(host) + 1);
    return 1;
}

int hostlist_nth(const char *list, long i, char *out, size_t len) {
    long n;
    int rc = hostlist_count(list, &n);
    if (rc) return rc;
    if (i < 0 || i >= n) return -ERANGE;
    nth_state st = {.left = i, .out = out, .len = len};
    rc = hostlist_each(list, take_nth, &st);
    return rc == 1 ? 0 : rc;
}
