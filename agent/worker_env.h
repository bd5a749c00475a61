/* The environment each worker starts with: torchrun's variables (ranks,
 * sizes, where the store is, restarts, the error file) set over the
 * environment ddprun was started in. A pure function of the configuration,
 * the round and where this node's services are, so that it can be tested
 * without starting anything. */
#ifndef DDPRUN_AGENT_WORKER_ENV_H
#define DDPRUN_AGENT_WORKER_ENV_H

#include "agent/agent_config.h"
#include "agent/numa_binding.h"
#include "rendezvous/rdzv.h"

/* The most variables worker_env_vars sets. */
#define WORKER_ENV_MAX 30
#define WORKER_ENV_LEN 512

typedef struct {
    const agent_config *cfg;
    const rdzv_result *round;
    const char *store_addr; /* where the workers meet, unless the round names a */
    int store_port;         /* master store (etcd-v3: node rank 0's) */
    int proxy_port;         /* > 0: the agent's store proxy on 127.0.0.1, which the workers */
                            /* use instead (unless their rank 0 hosts their store) */
    int agent_pid;          /* DDPRUN_AGENT_PID: the exec helper checks its parent */
    const char *timer_file; /* the watchdog's FIFO; NULL: no watchdog */
    const char *metrics_dir; /* where ranks write their metrics; NULL: none */
    const char *snapshot_dir; /* DDPRUN_SNAPSHOT_DIR; NULL: none */
    const char *coll_dir;     /* DDPRUN_COLL_RECORD is <coll_dir>/local_rank_<i>; NULL: none */
    const char *snapshot_disk_dir; /* DDPRUN_SNAPSHOT_DISK_DIR: for a full memory; NULL: none */
    const numa_plan *numa;  /* --numa-binding's CPUs per local rank; NULL: none */
} worker_env_ctx;

/* The GPU of local rank i: the i-th entry of cvd (the agent's own
 * CUDA_VISIBLE_DEVICES: the GPUs the scheduler gave this node) when it has
 * one, else "i". With --virtual-local-rank it is the one GPU the worker
 * sees, as device 0. */
const char *worker_env_gpu(const char *cvd, int local_rank, char *out, size_t len);

/* DDPRUN_FINISHED_FILE: beside the worker's error file, the file a worker
 * creates once its work is done and kept (ddp-train: its final state is
 * on some node's disk). A worker that fails after it made the file (it
 * hangs on its way out and the watchdog kills it, it crashes while it
 * exits) has still finished: the agent counts it as finished, with a
 * warning, rather than restart a job that is complete. 0, or
 * -ENAMETOOLONG. */
int worker_finished_file(const char *error_file, char *out, size_t len);

/* torchrun's variables for one local rank, "NAME=value" each, into vars;
 * returns how many. */
int worker_env_vars(const worker_env_ctx *x, int local_rank, const char *error_file,
                    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN]);

/* base ("NAME=value" strings, NULL-terminated) with vars set over it, as
 * one allocation (the pointers, then the strings) that free() releases
 * whole; NULL when out of memory. */
char **worker_env_build(char *const *base, char (*vars)[WORKER_ENV_LEN], int nvars);

#endif
