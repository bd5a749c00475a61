/* See worker_env.h. */
#include "agent/worker_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/stacks.h"
#include "common/ddprun_env.h"

const char *worker_env_gpu(const char *cvd, int local_rank, char *out, size_t len) {
    snprintf(out, len, "%d", local_rank);
    for (int i = 0; cvd && *cvd; i++) {
        size_t n = strcspn(cvd, ",");
        if (i == local_rank) {
            snprintf(out, len, "%.*s", (int)n, cvd);
            break;
        }
        cvd += n + (cvd[n] == ',');
    }
    return out;
}

int worker_finished_file(const char *error_file, char *out, size_t len) {
    const char *slash = strrchr(error_file, '/');
    int dir = slash ? (int)(slash - error_file) : 1;
    int n = snprintf(out, len, "%.*s/finished", dir, slash ? error_file : ".");
    return n > 0 && (size_t)n < len ? 0 : -ENAMETOOLONG;
}

int worker_env_vars(const worker_env_ctx *x, int local_rank, const char *error_file,
                    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN]) {
    const agent_config *c = x->cfg;
    const agent_env *env = &c->env;
    const rdzv_result *r = x->round;
    int rank = r->rank_offset + local_rank, n = 0;
#define VAR(...) snprintf(vars[n++], WORKER_ENV_LEN, __VA_ARGS__)
    VAR("LOCAL_RANK=%d", c->virtual_local_rank ? 0 : local_rank);
    if (c->virtual_local_rank) {
        char gpu[64];
        VAR("CUDA_VISIBLE_DEVICES=%s",
            worker_env_gpu(env->cuda_visible_devices, local_rank, gpu, sizeof gpu));
    }
    VAR("RANK=%d", rank);
    VAR("GROUP_RANK=%d", r->group_rank);
    VAR("ROLE_RANK=%d", rank);
    VAR("ROLE_NAME=%s", c->role);
    VAR("LOCAL_WORLD_SIZE=%d", c->nproc_per_node);
    VAR("WORLD_SIZE=%d", r->world_size);
    VAR("GROUP_WORLD_SIZE=%d", r->group_world_size);
    VAR("ROLE_WORLD_SIZE=%d", r->world_size);
    /* etcd-v3: the workers meet at node rank 0's own store */
    const char *colon = r->master_store[0] ? strrchr(r->master_store, ':') : NULL;
    if (x->proxy_port > 0 && !r->worker_hosted) {
        /* through this node's proxy; the job's store itself for scripts
         * that want it */
        VAR("MASTER_ADDR=127.0.0.1");
        VAR("MASTER_PORT=%d", x->proxy_port);
        if (colon) VAR(DDPRUN_ENV_JOB_STORE "=%s", r->master_store);
        else if (strchr(x->store_addr, ':'))
            VAR(DDPRUN_ENV_JOB_STORE "=[%s]:%d", x->store_addr, x->store_port);
        else VAR(DDPRUN_ENV_JOB_STORE "=%s:%d", x->store_addr, x->store_port);
    } else if (colon) {
        VAR("MASTER_ADDR=%.*s", (int)(colon - r->master_store), r->master_store);
        VAR("MASTER_PORT=%s", colon + 1);
    } else {
        VAR("MASTER_ADDR=%s", x->store_addr);
        VAR("MASTER_PORT=%d", x->store_port);
    }
    VAR("TORCHELASTIC_RESTART_COUNT=%d", r->restart_count);
    VAR("TORCHELASTIC_MAX_RESTARTS=%d", c->max_restarts);
    VAR("TORCHELASTIC_RUN_ID=%s", c->rdzv_id);
    /* With TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 on node rank 0, its rank 0
     * worker hosts their store at MASTER_ADDR:MASTER_PORT (above) */
    VAR("TORCHELASTIC_USE_AGENT_STORE=%s", r->worker_hosted ? "False" : "True");
    VAR("TORCHELASTIC_ERROR_FILE=%s", error_file);
    char finished[WORKER_ENV_LEN - 32]; /* (a longer path is not passed on: none is made) */
    if (worker_finished_file(error_file, finished, sizeof finished) == 0)
        VAR(DDPRUN_ENV_FINISHED_FILE "=%s", finished);
    /* Defaults only, as torchrun: a user's own value reaches the workers. */
    if (!env->torch_nccl_async_set) VAR("TORCH_NCCL_ASYNC_ERROR_HANDLING=1");
    if (!env->nccl_async_set) VAR("NCCL_ASYNC_ERROR_HANDLING=1");
    VAR(DDPRUN_ENV_AGENT_PID "=%d", x->agent_pid);
    VAR(DDPRUN_ENV_STACK_SIGNAL "=%d", stacks_signal());
    if (x->timer_file) VAR("TORCHELASTIC_TIMER_FILE=%s", x->timer_file);
    if (x->metrics_dir && x->metrics_dir[0]) VAR(DDPRUN_ENV_METRICS_DIR "=%s", x->metrics_dir);
    if (x->snapshot_dir && x->snapshot_dir[0]) VAR(DDPRUN_ENV_SNAPSHOT_DIR "=%s", x->snapshot_dir);
    if (x->coll_dir && x->coll_dir[0])
        VAR(DDPRUN_ENV_COLL_RECORD "=%s/local_rank_%d", x->coll_dir, local_rank);
    if (x->snapshot_disk_dir && x->snapshot_disk_dir[0])
        VAR(DDPRUN_ENV_SNAPSHOT_DISK_DIR "=%s", x->snapshot_disk_dir);
    if (x->numa && x->numa->n > local_rank && x->numa->this_system)
        VAR(NUMA_CPUS_VAR "=%s", x->numa->cpus[local_rank]);
    if (!env->omp_num_threads_set && c->nproc_per_node > 1) VAR("OMP_NUM_THREADS=1");
#undef VAR
    return n;
}

/* Whether "NAME=value" s sets the name that var ("NAME=...") sets. */
static int same_name(const char *s, const char *var) {
    size_t len = strcspn(var, "=");
    return strncmp(s, var, len + 1) == 0;
}

char **worker_env_build(char *const *base, char (*vars)[WORKER_ENV_LEN], int nvars) {
    int n = 0;
    while (base && base[n]) n++;
    const char **pick = calloc((size_t)(n + nvars) + 1, sizeof *pick);
    if (!pick) return NULL;
    int k = 0;
    for (int i = 0; i < n; i++) {
        int overridden = 0;
        for (int j = 0; j < nvars && !overridden; j++) overridden = same_name(base[i], vars[j]);
        if (!overridden) pick[k++] = base[i];
    }
    for (int j = 0; j < nvars; j++) pick[k++] = vars[j];
    size_t bytes = 0;
    for (int i = 0; i < k; i++) bytes += strlen(pick[i]) + 1;
    char **env = malloc((size_t)(k + 1) * sizeof *env + bytes);
    if (env) {
        char *p = (char *)(env + k + 1);
        for (int i = 0; i < k; i++) {
            size_t len = strlen(pick[i]) + 1;
            env[i] = memcpy(p, pick[i], len);
            p += len;
        }
        env[k] = NULL;
    }
    free(pick);
    return env;
}
