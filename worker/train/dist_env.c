/* See dist_env.h. */
#include "worker/train/dist_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostlist.h"
#include "common/opts.h"
#include "common/slurm.h"

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
    return hostlist_nth(nodelist, 0, out, len) ? -EINVAL : 0;
}

/* srun sets SLURM_NTASKS_PER_NODE only when it was asked for; every step
 * has SLURM_STEP_TASKS_PER_NODE ("2(x3),1"), which with this node's index
 * (SLURM_NODEID) gives the ranks on this node. */
static int srun_local_world(char **envp, dist_env *d, char *err, size_t errlen) {
    static const char *const vars[] = {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
    int node = 0;
    if (env_int(envp, "SLURM_NODEID", 0, &node, err, errlen) < 0) return -EINVAL;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = opts_getenv(envp, vars[i]);
        if (!v || !*v) continue;
        if (slurm_tasks_on_node(v, node, &d->local_world) == 0) return 0;
        snprintf(err, errlen, "%s='%s' does not say how many tasks node %d (SLURM_NODEID) runs",
                 vars[i], v, node);
        return -EINVAL;
    }
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

/* Without MASTER_ADDR: node 0 of the step (srun), else of the job. */
static const char *master_from_nodelist(char **envp, dist_env *d, char *host, size_t len) {
    static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"};
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        const char *nodes = opts_getenv(envp, lists[i]);
        if (!nodes || slurm_first_host(nodes, host, len)) continue;
        snprintf(d->master_from, sizeof d->master_from, "the first host of %s", lists[i]);
        return host;
    }
    return NULL;
}

/* Without MASTER_PORT, a srun step's ranks agree on a port made from the
 * job and step ids (common/slurm.h). 0, or 1 when not in a step. */
static int master_port_from_step(char **envp, dist_env *d) {
    const char *job = opts_getenv(envp, "SLURM_JOB_ID");
    const char *step = opts_getenv(envp, "SLURM_STEP_ID");
    unsigned long j, s;
    if (strcmp(d->launcher, "srun") != 0 || !job || !step || slurm_parse_id(job, &j) ||
        slurm_parse_id(step, &s))
        return 1;
    d->master_port = slurm_step_port(j, s);
    size_t n = strlen(d->master_from);
    snprintf(d->master_from + n, sizeof d->master_from - n,
             "%sa port from SLURM_JOB_ID and SLURM_STEP_ID", n ? ", " : "");
    return 0;
}

static int read_master(char **envp, dist_env *d, char *err, size_t errlen) {
    const char *addr = opts_getenv(envp, "MASTER_ADDR");
    char host[256] = "";
    if (!addr) addr = master_from_nodelist(envp, d, host, sizeof host);
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
    if (rc == 1 && d->world > 1 && master_port_from_step(envp, d)) {
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
    if (d->local_world < 0 && strcmp(d->launcher, "srun") == 0 &&
        (rc = srun_local_world(envp, d, err, errlen)))
        return rc;
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
    const char *cvd = opts_getenv(envp, "CUDA_VISIBLE_DEVICES");
    d->visible_gpus_named = -1;
    if (cvd) {
        d->visible_gpus_named = 0;
        for (const char *p = cvd; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] == ','))
            if (strcspn(p, ",") > 0) d->visible_gpus_named++;
    }
    const char *agent = opts_getenv(envp, "TORCHELASTIC_USE_AGENT_STORE");
    d->agent_store = agent && (strcmp(agent, "True") == 0 || strcmp(agent, "true") == 0 ||
                               strcmp(agent, "1") == 0);
    return 0;
}
