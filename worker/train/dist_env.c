/* See dist_env.h. */
#include "worker/train/dist_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/opts.h"

extern char **environ;

/* An integer variable: 0 found, 1 absent, -EINVAL malformed (message set). */
static int env_int(char **envp, const char *name, int lo, int *out, char *err, size_t errlen) {
    const char *s = opts_getenv(envp, name);
    if (!s || !*s) return 1;
    if (opts_parse_int(s, lo, 1 << 30, out)) {
        snprintf(err, errlen, "%s='%s' is not a valid number (expected an integer >= %d)", name,
                 s, lo);
        return -EINVAL;
    }
    return 0;
}

int slurm_first_host(const char *nodelist, char *out, size_t len) {
    size_t i = 0;
    while (nodelist[i] && nodelist[i] != ',' && nodelist[i] != '[') i++;
    if (i == 0 || i >= len) return -EINVAL;
    memcpy(out, nodelist, i);
    out[i] = 0;
    if (nodelist[i] != '[') return 0;
    /* the first number of the bracket, keeping its zero padding */
    const char *p = nodelist + i + 1;
    size_t j = 0;
    while (p[j] >= '0' && p[j] <= '9') j++;
    if (j == 0 || i + j >= len) return -EINVAL;
    memcpy(out + i, p, j);
    out[i + j] = 0;
    return 0;
}

/* Which launcher's variables are present, in order of precedence. */
static int read_ranks(char **envp, dist_env *d, char *err, size_t errlen) {
    static const struct {
        const char *name, *rank, *world, *local, *local_world;
    } kinds[] = {
        {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
        {"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
         "OMPI_COMM_WORLD_LOCAL_SIZE"},
        {"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        int rc = env_int(envp, kinds[k].rank, 0, &d->rank, err, errlen);
        if (rc < 0) return rc;
        if (rc == 1) continue;
        d->launcher = kinds[k].name;
        rc = env_int(envp, kinds[k].world, 1, &d->world, err, errlen);
        if (rc == 1)
            snprintf(err, errlen, "%s is set but %s is not (started by %s?)", kinds[k].rank,
                     kinds[k].world, kinds[k].name);
        if (rc) return -EINVAL;
        if (env_int(envp, kinds[k].local, 0, &d->local_rank, err, errlen) < 0) return -EINVAL;
        if (env_int(envp, kinds[k].local_world, 1, &d->local_world, err, errlen) < 0) return -EINVAL;
        return 0;
    }
    d->launcher = "single process";
    return 0;
}

static int read_master(char **envp, dist_env *d, char *err, size_t errlen) {
    const char *addr = opts_getenv(envp, "MASTER_ADDR");
    char host[256] = "";
    const char *nodes = opts_getenv(envp, "SLURM_JOB_NODELIST");
    if (!addr && nodes && slurm_first_host(nodes, host, sizeof host) == 0) addr = host;
    if (!addr && d->world == 1) addr = "127.0.0.1";
    if (!addr) {
        snprintf(err, errlen,
                 "MASTER_ADDR is not set: with %d ranks started by %s, give every rank "
                 "MASTER_ADDR and MASTER_PORT (e.g. mpirun -x MASTER_ADDR -x MASTER_PORT)",
                 d->world, d->launcher);
        return -EINVAL;
    }
    snprintf(d->master_addr, sizeof d->master_addr, "%s", addr);
    d->master_port = 29500;
    int rc = env_int(envp, "MASTER_PORT", 1, &d->master_port, err, errlen);
    if (rc < 0) return rc;
    if (rc == 1 && d->world > 1) {
        snprintf(err, errlen, "MASTER_PORT is not set (needed with %d ranks)", d->world);
        return -EINVAL;
    }
    return 0;
}

int dist_env_read(char **envp, int legacy_local_rank, dist_env *d, char *err, size_t errlen) {
    if (!envp) envp = environ;
    memset(d, 0, sizeof *d);
    d->world = 1;
    d->local_world = -1;
    int rc = read_ranks(envp, d, err, errlen);
    if (rc) return rc;
    if (legacy_local_rank >= 0) d->local_rank = legacy_local_rank;
    if (d->local_world < 0) d->local_world = d->world; /* one host unless told otherwise */
    if (d->rank >= d->world) {
        snprintf(err, errlen, "rank %d is not below the world size %d (check RANK and WORLD_SIZE)",
                 d->rank, d->world);
        return -EINVAL;
    }
    if (d->local_rank >= d->local_world || d->local_world > d->world) {
        snprintf(err, errlen, "local rank %d of %d does not fit a world of %d", d->local_rank,
                 d->local_world, d->world);
        return -EINVAL;
    }
    if ((rc = read_master(envp, d, err, errlen))) return rc;
    if (env_int(envp, "TORCHELASTIC_RESTART_COUNT", 0, &d->restart_count, err, errlen) < 0)
        return -EINVAL;
    const char *agent = opts_getenv(envp, "TORCHELASTIC_USE_AGENT_STORE");
    d->agent_store = agent && (strcmp(agent, "True") == 0 || strcmp(agent, "true") == 0 ||
                               strcmp(agent, "1") == 0);
    return 0;
}
