/* Every environment variable of ddprun's own (DDPRUN_*), named once. The
 * first group is the contract between the agent and its workers: the agent
 * sets them for each worker it starts (agent/worker_env.c), and ddp-train,
 * PyTorch scripts (examples/) or the agent's own child code read them.
 * The second group is read from the user's environment. torchrun's
 * variables (RANK, LOCAL_RANK, MASTER_ADDR, ...) are torchrun's contract:
 * agent/worker_env.c writes them and worker/train/dist_env.c reads them.
 * docs/cli.md describes each variable. */
#ifndef DDPRUN_COMMON_DDPRUN_ENV_H
#define DDPRUN_COMMON_DDPRUN_ENV_H

/* ---- Set by the agent for each worker ---- */

/* A file the worker creates once its work is done: an exit after it is
 * counted as finished, whatever the exit status. */
#define DDPRUN_ENV_FINISHED_FILE "DDPRUN_FINISHED_FILE"
/* The agent's pid (the worker's launcher; removed again by the child code
 * that starts the worker, which checks it is still its parent). */
#define DDPRUN_ENV_AGENT_PID "DDPRUN_AGENT_PID"
/* The signal the agent sends for a worker's stacks before it kills one. */
#define DDPRUN_ENV_STACK_SIGNAL "DDPRUN_STACK_SIGNAL"
/* Where each rank writes its metrics (--metrics-port). */
#define DDPRUN_ENV_METRICS_DIR "DDPRUN_METRICS_DIR"
/* This node's memory for snapshots (/dev/shm), and the disk for them when
 * the memory is full. */
#define DDPRUN_ENV_SNAPSHOT_DIR "DDPRUN_SNAPSHOT_DIR"
#define DDPRUN_ENV_SNAPSHOT_DISK_DIR "DDPRUN_SNAPSHOT_DISK_DIR"
/* The file of the worker's collective record (common/coll_record.h). */
#define DDPRUN_ENV_COLL_RECORD "DDPRUN_COLL_RECORD"
/* --numa-binding: the CPUs the worker's child code binds it to. */
#define DDPRUN_ENV_BIND_CPUS "DDPRUN_BIND_CPUS"
/* The store's shared secret (also read from the user's environment by
 * ddprun, ddprun-store and ddprun-store-cli). */
#define DDPRUN_ENV_STORE_TOKEN "DDPRUN_STORE_TOKEN"
/* With --store-proxy, where the job's store itself is ("host:port"):
 * MASTER_ADDR:MASTER_PORT is then this node's proxy. */
#define DDPRUN_ENV_JOB_STORE "DDPRUN_JOB_STORE"

/* ---- Read from the user's environment ---- */

#define DDPRUN_ENV_LOG_LEVEL "DDPRUN_LOG_LEVEL"           /* debug, info, warn, error */
#define DDPRUN_ENV_JOBS_DIR "DDPRUN_JOBS_DIR"             /* where `ddprun status` finds jobs */
#define DDPRUN_ENV_SHM_DIR "DDPRUN_SHM_DIR"               /* instead of /dev/shm */
#define DDPRUN_ENV_STORE_STALL_S "DDPRUN_STORE_STALL_S"   /* the store's stall report */
#define DDPRUN_ENV_STORE_PROTOCOL "DDPRUN_STORE_PROTOCOL" /* 1.13: torch 1.13's protocol */
#define DDPRUN_ENV_COMM_HOST_ID "DDPRUN_COMM_HOST_ID"     /* the collectives' host, for tests */

#endif
