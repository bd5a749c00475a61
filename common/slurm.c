/* Slurm's step variables (see slurm.h). */
#include "common/slurm.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/opts.h"

int slurm_parse_id(const char *s, unsigned long *out) {
    size_t n = strlen(s);
    /* ten digits: any 32-bit id, Slurm's widest */
    if (n == 0 || n > 10 || strspn(s, "0123456789") != n) return -EINVAL;
    *out = strtoul(s, NULL, 10);
    return 0;
}

int slurm_step_port(unsigned long job, unsigned long step) {
    return 20000 + (int)((job % 12768 * 31 + step % 12768) % 12768);
}

/* One item of a tasks-per-node list, s[0..n): "N" or "N(xK)". */
static int parse_item(const char *s, size_t n, int *tasks, int *nodes) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return -EINVAL;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *paren = strchr(buf, '(');
    *nodes = 1;
    if (paren) {
        size_t len = strlen(paren);
        if (len < 4 || paren[1] != 'x' || paren[len - 1] != ')') return -EINVAL;
        paren[len - 1] = '\0';
        if (strspn(paren + 2, "0123456789") != strlen(paren + 2) ||
            opts_parse_int(paren + 2, 1, INT_MAX, nodes))
            return -EINVAL;
        *paren = '\0';
    }
    if (strspn(buf, "0123456789") != strlen(buf)) return -EINVAL;
    return opts_parse_int(buf, 0, INT_MAX, tasks) ? -EINVAL : 0;
}

int slurm_tasks_on_node(const char *spec, int node, int *out) {
    long first = 0; /* the first node of the current item */
    int found = 0;
    for (const char *p = spec;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        int tasks, nodes;
        if (parse_item(p, n, &tasks, &nodes)) return -EINVAL;
        if (!found && node >= first && node < first + nodes) *out = tasks, found = 1;
        first += nodes;
        if (!comma) break;
        p = comma + 1;
    }
    return found ? 0 : -ERANGE;
}
