/* --numa-binding: which CPUs each local worker is bound to, chosen from the
 * machine's topology (hwloc), as torchrun 2.x's modes choose them:
 *
 *   node          the CPUs of the NUMA node(s) nearest the worker's GPU
 *   socket        the CPUs of the socket(s) holding those nodes
 *   exclusive     a share of those nodes' cores, apart from every other
 *                 worker's that has the same nodes (whole cores, split evenly)
 *   core-complex  one L3 cache domain of those nodes, its own while there
 *                 are as many domains as workers there
 *
 * A worker's GPU is the one CUDA numbers as its local rank (through the
 * agent's CUDA_VISIBLE_DEVICES when set), found among the NVIDIA PCI devices
 * in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID's numbering). Without
 * GPUs, or with fewer than workers, the workers share the NUMA nodes out
 * evenly instead: with 2 nodes and 4 workers, ranks 0-1 get node 0 and
 * ranks 2-3 node 1.
 *
 * The plan is made once, in the agent; the worker's exec helper applies its
 * line (sched_setaffinity) before it runs the program, so the program and
 * everything it starts inherit it. Memory follows the first touch, which
 * lands on the nodes of the CPUs the worker runs on. */
#ifndef DDPRUN_AGENT_NUMA_BINDING_H
#define DDPRUN_AGENT_NUMA_BINDING_H

#include <stddef.h>

#include "agent/agent_config.h"
#include "common/ddprun_env.h"

/* The variable through which the agent hands a worker its CPU list
 * ("0-7,16-23") to the exec helper, which removes it. */
#define NUMA_CPUS_VAR DDPRUN_ENV_BIND_CPUS

typedef struct {
    int n;
    char (*cpus)[256];   /* per local rank: a CPU list, as Linux writes them */
    char (*near)[96];    /* per local rank: why ("NUMA node 0, near GPU 0") */
    int this_system;     /* 0: the topology is not this machine's (HWLOC_SYNTHETIC, */
                         /* HWLOC_XMLFILE): the plan is only reported, never applied */
} numa_plan;

/* Makes the plan for nproc local workers. gpu[i] is local rank i's CUDA
 * device index, or -1 to decide from the local rank. 0, or a negative
 * errno with a message in err naming what is missing. */
int numa_plan_make(numa_mode mode, int nproc, const int *gpu, numa_plan *plan, char *err,
                   size_t errlen);
void numa_plan_free(numa_plan *plan);
const char *numa_mode_name(numa_mode mode);


#endif
