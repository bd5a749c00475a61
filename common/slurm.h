/* What Slurm's step environment says, read the same way by ddprun
 * (launcher/slurm_env.c) and by ddp-train started by srun without it
 * (worker/train/dist_env.c). Host lists are common/hostlist.h's. */
#ifndef DDPRUN_COMMON_SLURM_H
#define DDPRUN_COMMON_SLURM_H

/* A job or step id (SLURM_JOB_ID, SLURM_STEP_ID): digits only. 0 or -EINVAL. */
int slurm_parse_id(const char *s, unsigned long *out);

/* The port a job step meets at when no one names one: 20000 + (31 * job +
 * step) mod 12768. It stays below Linux's ephemeral ports (32768 on), so a
 * passing outgoing connection does not hold it, and it differs between jobs
 * and between steps that may share a first node, so that no job meets at
 * another's store. */
int slurm_step_port(unsigned long job, unsigned long step);

/* The tasks on node `node` (from 0) of a SLURM_STEP_TASKS_PER_NODE /
 * SLURM_TASKS_PER_NODE value: counts in node order, "N(xK)" for K nodes
 * with N each ("2(x3),1": 2 on nodes 0 to 2, 1 on node 3). 0, -EINVAL for
 * a malformed value, -ERANGE when it has no such node. */
int slurm_tasks_on_node(const char *spec, int node, int *out);

#endif
