/* Rank discovery: torchrun's, mpirun's and srun's variables, the legacy
 * --local_rank, Slurm node lists, and clear errors for inconsistent ones. */
#include <errno.h>

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
    CHECK_EQ(slurm_first_host("[1-2]", out, sizeof out), -EINVAL);
}
