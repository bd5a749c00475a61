/* Rank discovery: torchrun's, mpirun's and srun's variables, the legacy
 * --local_rank, Slurm node lists, and clear errors for inconsistent ones. */
#include <errno.h>

#include "common/slurm.h"
#include "tests/unit/test.h"
#include "worker/train/dist_env.h"

static int read_env(char **envp, int legacy, dist_env *d, char *err) {
    return dist_env_read(envp, legacy, d, err, 256);
}

TEST(dist_env_torchrun) {
    char *env[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                   "MASTER_ADDR=node1", "MASTER_PORT=29500", "TORCHELASTIC_RESTART_COUNT=2",
                   "TORCHELASTIC_USE_AGENT_STORE=True", NULL};
    dist_env d;
    char err[256];
    CHECK_EQ(read_env(env, -1, &d, err), 0);
    CHECK_EQ(d.rank, 3); CHECK_EQ(d.world, 4); CHECK_EQ(d.local_rank, 1); CHECK_EQ(d.local_world, 2);
    CHECK_STR(d.master_addr, "node1");
    CHECK_EQ(d.master_port, 29500);
    CHECK_EQ(d.restart_count, 2);
    CHECK_EQ(d.agent_store, 1);
    CHECK_STR(d.launcher, "torchrun");
}

TEST(dist_env_mpirun_and_srun) {
    char *mpi[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=1",
                   "OMPI_COMM_WORLD_LOCAL_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1234", NULL};
    dist_env d;
    char err[256];
    CHECK_EQ(read_env(mpi, -1, &d, err), 0);
    CHECK_STR(d.launcher, "mpirun");
    CHECK_EQ(d.rank, 1); CHECK_EQ(d.agent_store, 0);
    char *slurm[] = {"SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1",
                     "SLURM_NTASKS_PER_NODE=4", "SLURM_JOB_NODELIST=gpu[007-009],cpu1",
                     "MASTER_PORT=2000", NULL};
    CHECK_EQ(read_env(slurm, -1, &d, err), 0);
    CHECK_STR(d.launcher, "srun");
    CHECK_STR(d.master_addr, "gpu007");
    CHECK_EQ(d.rank, 5); CHECK_EQ(d.local_world, 4);
}

TEST(dist_env_single_process_and_legacy_local_rank) {
    char *none[] = {NULL};
    dist_env d;
    char err[256];
    CHECK_EQ(read_env(none, -1, &d, err), 0);
    CHECK_EQ(d.rank, 0); CHECK_EQ(d.world, 1);
    CHECK_STR(d.launcher, "single process");
    char *launch[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    CHECK_EQ(read_env(launch, 1, &d, err), 0);
    CHECK_EQ(d.local_rank, 1);
}

TEST(dist_env_refuses_inconsistent_values) {
    dist_env d;
    char err[256];
    char *over[] = {"RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", NULL};
    CHECK_EQ(read_env(over, -1, &d, err), -EINVAL);
    CHECK(strstr(err, "rank 2 is not below the world size 2") != NULL);
    char *noworld[] = {"RANK=0", NULL};
    CHECK_EQ(read_env(noworld, -1, &d, err), -EINVAL);
    CHECK(strstr(err, "WORLD_SIZE is not") != NULL);
    char *bad[] = {"RANK=x", NULL};
    CHECK_EQ(read_env(bad, -1, &d, err), -EINVAL);
    CHECK(strstr(err, "RANK='x'") != NULL);
    char *nomaster[] = {"RANK=0", "WORLD_SIZE=2", NULL};
    CHECK_EQ(read_env(nomaster, -1, &d, err), -EINVAL);
    CHECK(strstr(err, "MASTER_ADDR is not set") != NULL);
}

TEST(dist_env_slurm_node_lists) {
    char out[64];
    CHECK_EQ(slurm_first_host("node[3-5,9],gpu1", out, sizeof out), 0);
    CHECK_STR(out, "node3");
    CHECK_EQ(slurm_first_host("login2", out, sizeof out), 0);
    CHECK_STR(out, "login2");
    CHECK_EQ(slurm_first_host("a,b", out, sizeof out), 0);
    CHECK_STR(out, "a");
    /* text after a bracket group belongs to the name */
    CHECK_EQ(slurm_first_host("rack[1-2]-n[01-02]", out, sizeof out), 0);
    CHECK_STR(out, "rack1-n01");
    CHECK_EQ(slurm_first_host("node[1-", out, sizeof out), -EINVAL);
}

/* srun -N3 -n6 ddp-train, as rank 3 sees it: no MASTER_ADDR or MASTER_PORT,
 * and no SLURM_NTASKS_PER_NODE (srun sets it only when given). */
#define SRUN_RANK_3                                                                          \
    "SLURM_JOB_ID=41", "SLURM_STEP_ID=2", "SLURM_PROCID=3", "SLURM_NTASKS=6",                 \
        "SLURM_LOCALID=1", "SLURM_NODEID=1", "SLURM_STEP_TASKS_PER_NODE=2(x3)",               \
        "SLURM_TASKS_PER_NODE=4(x3)", "SLURM_STEP_NODELIST=gpu[07-09]",                       \
        "SLURM_JOB_NODELIST=gpu[01-09]"

TEST(dist_env_srun_derives_the_store_and_the_node_size) {
    char *env[] = {SRUN_RANK_3, NULL};
    dist_env d;
    char err[256];
    CHECK_EQ(read_env(env, -1, &d, err), 0);
    CHECK_STR(d.launcher, "srun");
    CHECK_EQ(d.rank, 3); CHECK_EQ(d.world, 6); CHECK_EQ(d.local_rank, 1);
    CHECK_EQ(d.local_world, 2); /* this node's count in the step, not the world */
    /* node 0 of the step, which may be fewer nodes than the job's */
    CHECK_STR(d.master_addr, "gpu07");
    CHECK_EQ(d.master_port, slurm_step_port(41, 2));
    CHECK(strstr(d.master_from, "SLURM_STEP_NODELIST") != NULL);
    /* uneven nodes */
    char *uneven[] = {"SLURM_JOB_ID=41", "SLURM_STEP_ID=0", "SLURM_PROCID=6", "SLURM_NTASKS=10",
                      "SLURM_LOCALID=0", "SLURM_NODEID=2", "SLURM_STEP_TASKS_PER_NODE=4,3(x2)",
                      "SLURM_STEP_NODELIST=n[1-3]", NULL};
    CHECK_EQ(read_env(uneven, -1, &d, err), 0);
    CHECK_EQ(d.local_world, 3);
}

TEST(dist_env_srun_given_values_win) {
    char *env[] = {SRUN_RANK_3, "SLURM_NTASKS_PER_NODE=3", "MASTER_ADDR=head",
                   "MASTER_PORT=1234", NULL};
    dist_env d;
    char err[256];
    CHECK_EQ(read_env(env, -1, &d, err), 0);
    CHECK_EQ(d.local_world, 3);
    CHECK_STR(d.master_addr, "head");
    CHECK_EQ(d.master_port, 1234);
    CHECK_EQ(d.master_from[0], 0);
    /* Outside a step (no SLURM_STEP_ID) no port is made up. */
    char *nostep[] = {"SLURM_JOB_ID=41", "SLURM_PROCID=0", "SLURM_NTASKS=2",
                      "SLURM_JOB_NODELIST=a", NULL};
    CHECK_EQ(read_env(nostep, -1, &d, err), -EINVAL);
    CHECK(strstr(err, "MASTER_PORT is not set") != NULL);
    /* A malformed tasks-per-node list is named. */
    char *bad[] = {"SLURM_STEP_TASKS_PER_NODE=2(x", SRUN_RANK_3, NULL}; /* the first wins */
    CHECK_EQ(read_env(bad, -1, &d, err), -EINVAL);
    CHECK(strstr(err, "SLURM_STEP_TASKS_PER_NODE='2(x'") != NULL);
}

/* CUDA_VISIBLE_DEVICES is counted, not interpreted: how many GPUs the
 * launcher named for this rank (device_choice.c trusts one as its own). */
TEST(dist_env_counts_visible_gpus) {
    dist_env d;
    char err[256];
    char *none[] = {NULL};
    CHECK_EQ(read_env(none, -1, &d, err), 0);
    CHECK_EQ(d.visible_gpus_named, -1);
    char *one[] = {"CUDA_VISIBLE_DEVICES=GPU-8f3a", NULL};
    CHECK_EQ(read_env(one, -1, &d, err), 0);
    CHECK_EQ(d.visible_gpus_named, 1);
    char *three[] = {"CUDA_VISIBLE_DEVICES=0,2,,5", NULL};
    CHECK_EQ(read_env(three, -1, &d, err), 0);
    CHECK_EQ(d.visible_gpus_named, 3);
    char *empty[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    CHECK_EQ(read_env(empty, -1, &d, err), 0);
    CHECK_EQ(d.visible_gpus_named, 0);
}
