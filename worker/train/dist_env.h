/* Where this process stands in the job: rank, world size, local rank and
 * the store, read from whichever launcher started it — torchrun or ddprun
 * (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), mpirun
 * (OMPI_COMM_WORLD_*), srun (SLURM_*), or the legacy --local_rank
 * argument — and, when no agent provides a store, rank 0 hosting one at
 * MASTER_ADDR:MASTER_PORT as PyTorch's env:// does. */
#ifndef DDPRUN_WORKER_TRAIN_DIST_ENV_H
#define DDPRUN_WORKER_TRAIN_DIST_ENV_H

#include <stddef.h>

typedef struct {
    int rank, world;
    int local_rank, local_world;
    char master_addr[256];
    int master_port;
    int restart_count;   /* TORCHELASTIC_RESTART_COUNT, 0 without an agent */
    int agent_store;     /* 1: the launcher's agent serves the store */
    const char *launcher; /* "torchrun", "mpirun", "srun" or "single process" */
    /* The GPUs CUDA_VISIBLE_DEVICES names (entries in its list), -1 when it
     * is unset: a launcher that gives each rank its own GPU (ddprun's
     * --virtual-local-rank, srun --gpus-per-task=1, a one-GPU pod) says so
     * by naming one. */
    int visible_gpus_named;
    /* Where master_addr and master_port came from when not from MASTER_ADDR
     * and MASTER_PORT (srun: node 0 of the step's node list, a port from
     * the job and step ids), for the log; empty otherwise. */
    char master_from[160];
} dist_env;

/* Reads the environment (envp: NULL for the process's own). legacy_local_rank
 * is --local_rank's value or -1. -EINVAL with a message naming the variable
 * for a missing or inconsistent value. */
int dist_env_read(char **envp, int legacy_local_rank, dist_env *out, char *err, size_t errlen);

/* The first host of a Slurm node list ("node[3-5,9],gpu1" -> "node3";
 * common/hostlist.h). 0 or -EINVAL. */
int slurm_first_host(const char *nodelist, char *out, size_t len);

#endif
