/* See algo_cache.h. */
#include "worker/backend/algo_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fs.h"

typedef struct {
    char key[ALGO_CACHE_KEY];
    int n;
    algo_choice v[ALGO_CACHE_MAX];
} entry;

struct algo_cache {
    char path[PATH_MAX];
    entry *e;
    int n, cap;
    int loaded;
};

static int key_ok(const char *key) {
    size_t len = strlen(key);
    return len > 0 && len < ALGO_CACHE_KEY && !strpbrk(key, "|\n");
}

static entry *find(const algo_cache *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (strcmp(c->e[i].key, key) == 0) return &c->e[i];
    return NULL;
}

/* In memory, unless the key is there already (the first line wins). */
static int keep(algo_cache *c, const char *key, const algo_choice *v, int n) {
    if (find(c, key)) return 0;
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 64;
        entry *e = realloc(c->e, (size_t)cap * sizeof *e);
        if (!e) return -ENOMEM;
        c->e = e, c->cap = cap;
    }
    entry *e = &c->e[c->n++];
    snprintf(e->key, sizeof e->key, "%s", key);
    e->n = n;
    memcpy(e->v, v, (size_t)n * sizeof *v);
    return 0;
}

/* One line, without its newline: 0 and the entry, or -1 when it does not
 * parse. */
static int parse(char *line, char **key, algo_choice *v, int *n) {
    char *bar = strchr(line, '|');
    if (!bar) return -1;
    *bar = 0;
    *key = line;
    if (!key_ok(line)) return -1;
    const char *p = bar + 1;
    int used = 0;
    if (sscanf(p, "%d%n", n, &used) != 1 || *n < 0 || *n > ALGO_CACHE_MAX) return -1;
    p += used;
    for (int i = 0; i < *n; i++) {
        algo_choice *a = &v[i];
        if (sscanf(p, " %d %d %d %d %" SCNu64 "%n", &a->algo, &a->status, &a->determinism,
                   &a->math, &a->memory, &used) != 5)
            return -1;
        p += used;
    }
    return *p == 0 ? 0 : -1;
}

static int load(algo_cache *c) {
    FILE *f = fopen(c->path, "re");
    if (!f) return errno == ENOENT ? 0 : -errno;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break; /* cut short: a writer died in it */
        line[len - 1] = 0;
        char *key;
        algo_choice v[ALGO_CACHE_MAX];
        int n;
        if (parse(line, &key, v, &n) != 0) continue;
        if ((rc = keep(c, key, v, n))) break;
    }
    if (ferror(f) && !rc) rc = -EIO;
    free(line);
    fclose(f);
    c->loaded = c->n;
    return rc;
}

int algo_cache_open(const char *dir, const char *name, algo_cache **out, char *why,
                    size_t len) {
    *out = NULL;
    algo_cache *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, len, "out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    if ((size_t)snprintf(c->path, sizeof c->path, "%s/%s", dir, name) >= sizeof c->path) {
        rc = -ENAMETOOLONG;
        snprintf(why, len, "%s/%s: the path is too long", dir, name);
    } else if ((rc = fs_mkdir_p(dir))) {
        snprintf(why, len, "cannot make %s: %s", dir, strerror(-rc));
    } else if ((rc = load(c))) {
        snprintf(why, len, "cannot read %s: %s", c->path, strerror(-rc));
    }
    if (rc) {
        algo_cache_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

int algo_cache_get(const algo_cache *c, const char *key, algo_choice *out, int max) {
    const entry *e = c ? find(c, key) : NULL;
    if (!e) return -1;
    int n = e->n < max ? e->n : max;
    memcpy(out, e->v, (size_t)n * sizeof *out);
    return n;
}

int algo_cache_put(algo_cache *c, const char *key, const algo_choice *v, int n, char *why,
                   size_t len) {
    if (!key_ok(key) || n < 0 || n > ALGO_CACHE_MAX) {
        snprintf(why, len, "cannot keep algorithms under '%s': not a valid key or count", key);
        return -EINVAL;
    }
    if (find(c, key)) return 0;
    int rc = keep(c, key, v, n);
    if (rc) {
        snprintf(why, len, "out of memory");
        return rc;
    }
    char line[ALGO_CACHE_KEY + 16 + ALGO_CACHE_MAX * 80];
    size_t at = (size_t)snprintf(line, sizeof line, "%s|%d", key, n);
    for (int i = 0; i < n; i++)
        at += (size_t)snprintf(line + at, sizeof line - at, " %d %d %d %d %" PRIu64, v[i].algo,
                               v[i].status, v[i].determinism, v[i].math, v[i].memory);
    at += (size_t)snprintf(line + at, sizeof line - at, "\n");
    int fd = fs_open_regular(c->path, O_WRONLY | O_CREAT | O_APPEND, NULL);
    if (fd < 0) {
        snprintf(why, len, "cannot write %s: %s", c->path, strerror(-fd));
        return fd;
    }
    ssize_t w = write(fd, line, at); /* one write: appended whole */
    rc = w == (ssize_t)at ? 0 : w < 0 ? -errno : -ENOSPC;
    if (close(fd) != 0 && !rc) rc = -errno;
    if (rc) snprintf(why, len, "cannot write %s: %s", c->path, strerror(-rc));
    return rc;
}

const char *algo_cache_path(const algo_cache *c) { return c->path; }
int algo_cache_loaded(const algo_cache *c) { return c->loaded; }

void algo_cache_close(algo_cache *c) {
    if (!c) return;
    free(c->e);
    free(c);
}
