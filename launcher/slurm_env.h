/* ddprun started by srun, once per node: the options Slurm already knows
 * (the number of nodes, this node's rank, the job's id, and where node 0
 * is) become the defaults of those not given on the command line or in a
 * PET_ variable, so that `srun ddprun --nproc-per-node 4 train.py` in a
 * batch script needs no --nnodes, --node-rank or --rdzv-* flag. */
#ifndef DDPRUN_LAUNCHER_SLURM_ENV_H
#define DDPRUN_LAUNCHER_SLURM_ENV_H

#include <stddef.h>

#include "agent/agent_config.h"

/* The options Slurm can give, as bits: the parse sets one for each option
 * given by a flag or a PET_ variable, which then always wins. */
enum {
    SLURM_GIVEN_NNODES = 1 << 0,
    SLURM_GIVEN_NODE_RANK = 1 << 1,
    SLURM_GIVEN_RDZV_BACKEND = 1 << 2,
    SLURM_GIVEN_RDZV_ENDPOINT = 1 << 3,
    SLURM_GIVEN_RDZV_ID = 1 << 4,
};

/* What the parse passes in, and the names it reads back for its messages. */
typedef struct {
    char **env;                /* the environment (environ-style) */
    unsigned given;            /* SLURM_GIVEN_* */
    /* out: the variable --nnodes / --node-rank was taken from, or NULL */
    const char *nnodes_src, *node_rank_src;
    char *err;
    size_t errlen;
} slurm_env_args;

/* Inside a srun step that runs one task per node (SLURM_STEP_NUM_TASKS ==
 * SLURM_STEP_NUM_NODES), fills the options not given: --nnodes from
 * SLURM_STEP_NUM_NODES, --node-rank from SLURM_NODEID, --rdzv-id from
 * SLURM_JOB_ID, and with several nodes --rdzv-backend c10d and
 * --rdzv-endpoint at the first host of SLURM_STEP_NODELIST (else
 * SLURM_JOB_NODELIST), on a port derived from the job and step ids
 * (slurm_step_port, common/slurm.h). Logs one line saying what it took.
 * Elsewhere (no Slurm, the batch script itself, several tasks per node)
 * it takes nothing, and says why where that matters. Call it after the options are
 * applied and before the checks across them. 0, -EINVAL with a message
 * naming the Slurm variable that is malformed, or -ENOMEM. */
int slurm_env_defaults(slurm_env_args *a, agent_config *cfg);

#endif
