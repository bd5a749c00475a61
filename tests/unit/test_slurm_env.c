/* Unit tests of ddprun's defaults from Slurm (launcher/slurm_env.c), through
 * the whole command line (config_parse): what a srun step with one task per
 * node gives, that a flag or a PET_ variable always wins, that the batch
 * script and steps with several tasks per node take nothing, and the
 * messages naming Slurm's variables. Each test passes its own environment,
 * as srun would set it. */
#include <errno.h>

#include "common/slurm.h"
#include "launcher/config.h"
#include "tests/unit/test.h"

#define ARGS(...) ((char *[]){"ddprun", __VA_ARGS__, NULL})
#define TRAIN "--no-python", "ddp-train"

static char err[512];

static int parse_in(char **env, char **argv, agent_config *cfg) {
    int argc = 0;
    while (argv[argc]) argc++;
    memset(err, 0, sizeof err);
    return config_parse(argc, argv, env, cfg, err, sizeof err);
}

/* Node 2 of a four-node step of job 77 (srun -N4 --ntasks-per-node=1). */
#define STEP_4_NODES                                                                       \
    "SLURM_JOB_ID=77", "SLURM_JOBID=77", "SLURM_STEP_ID=0", "SLURM_STEPID=0",              \
        "SLURM_STEP_NUM_NODES=4", "SLURM_STEP_NUM_TASKS=4", "SLURM_NNODES=4",               \
        "SLURM_JOB_NUM_NODES=4", "SLURM_NODEID=2", "SLURM_PROCID=2", "SLURM_LOCALID=0",     \
        "SLURM_STEP_NODELIST=node[01-04]", "SLURM_JOB_NODELIST=node[01-04]"

static void check_fails(char **env, char **argv, const char *want) {
    agent_config cfg;
    CHECK_EQ(parse_in(env, argv, &cfg), -EINVAL);
    if (!strstr(err, want)) test_fail(__FILE__, __LINE__, "message '%s' lacks '%s'", err, want);
}

TEST(slurm_env_several_nodes_meet_at_the_first_host) {
    char *env[] = {STEP_4_NODES, NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("--nproc-per-node", "2", TRAIN), &c), 0);
    CHECK_EQ(c.min_nodes, 4);
    CHECK_EQ(c.max_nodes, 4);
    CHECK_EQ(c.node_rank, 2);
    CHECK_STR(c.rdzv_id, "77");
    CHECK_STR(c.rdzv_backend->name, "c10d");
    CHECK_STR(c.rdzv_host, "node01");
    CHECK_EQ(c.rdzv_port, slurm_step_port(77, 0));
    CHECK_EQ(c.nproc_per_node, 2);
    config_free(&c);
}

TEST(slurm_env_one_node_keeps_its_own_store) {
    char *env[] = {"SLURM_JOB_ID=5", "SLURM_STEP_ID=3", "SLURM_STEP_NUM_NODES=1",
                   "SLURM_STEP_NUM_TASKS=1", "SLURM_NODEID=0", "SLURM_STEP_NODELIST=vm", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS(TRAIN), &c), 0);
    CHECK_EQ(c.max_nodes, 1);
    CHECK_EQ(c.node_rank, 0);
    CHECK_STR(c.rdzv_id, "5");
    /* static and no endpoint: the agent hosts a store on a free port */
    CHECK_STR(c.rdzv_backend->name, "static");
    CHECK(c.rdzv_host == NULL);
    config_free(&c);
}

TEST(slurm_env_flags_win) {
    char *env[] = {STEP_4_NODES, NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("--nnodes", "1:8", "--node-rank", "0", "--rdzv-id", "mine",
                                "--rdzv-endpoint", "head:1234", TRAIN), &c), 0);
    CHECK_EQ(c.min_nodes, 1);
    CHECK_EQ(c.max_nodes, 8);
    CHECK_EQ(c.node_rank, 0);
    CHECK_STR(c.rdzv_id, "mine");
    CHECK_STR(c.rdzv_host, "head");
    CHECK_EQ(c.rdzv_port, 1234);
    CHECK_STR(c.rdzv_backend->name, "c10d"); /* not given: Slurm's, since 8 nodes may come */
    config_free(&c);
    /* An explicit static backend stays, and meets at --master-addr. */
    CHECK_EQ(parse_in(env, ARGS("--rdzv-backend", "static", "--master-addr", "10.0.0.9", TRAIN),
                      &c), 0);
    CHECK_STR(c.rdzv_backend->name, "static");
    CHECK(c.rdzv_host == NULL);
    CHECK_EQ(c.node_rank, 2);
    CHECK_EQ(c.max_nodes, 4);
    config_free(&c);
    /* Without one, the static backend meets at the first host too. */
    CHECK_EQ(parse_in(env, ARGS("--rdzv-backend", "static", TRAIN), &c), 0);
    CHECK_STR(c.rdzv_backend->name, "static");
    CHECK_STR(c.rdzv_host, "node01");
    config_free(&c);
}

TEST(slurm_env_pet_variables_win) {
    char *env[] = {STEP_4_NODES, "PET_NNODES=2:4", "PET_RDZV_ENDPOINT=other:29400",
                   "PET_RDZV_ID=pet", "PET_NODE_RANK=1", "PET_RDZV_BACKEND=c10d", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS(TRAIN), &c), 0);
    CHECK_EQ(c.min_nodes, 2);
    CHECK_EQ(c.max_nodes, 4);
    CHECK_EQ(c.node_rank, 1);
    CHECK_STR(c.rdzv_id, "pet");
    CHECK_STR(c.rdzv_host, "other");
    CHECK_EQ(c.rdzv_port, 29400);
    config_free(&c);
}

TEST(slurm_env_batch_script_and_several_tasks_per_node_take_nothing) {
    /* The batch script: a job id and the job's nodes, but no step. */
    char *batch[] = {"SLURM_JOB_ID=77", "SLURM_NNODES=4", "SLURM_NODEID=0", "SLURM_PROCID=0",
                     "SLURM_JOB_NODELIST=node[01-04]", NULL};
    /* srun -n 8 ddprun on 4 nodes: two ddprun a node. */
    char *two_a_node[] = {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=4",
                          "SLURM_STEP_NUM_TASKS=8", "SLURM_NODEID=2",
                          "SLURM_STEP_NODELIST=node[01-04]", NULL};
    /* a step whose shape is not numbers */
    char *odd[] = {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=four",
                   "SLURM_STEP_NUM_TASKS=4", "SLURM_NODEID=2", NULL};
    char **envs[] = {batch, two_a_node, odd};
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        agent_config c;
        CHECK_EQ(parse_in(envs[i], ARGS(TRAIN), &c), 0);
        CHECK_EQ(c.max_nodes, 1);
        CHECK_EQ(c.node_rank, -1);
        CHECK_STR(c.rdzv_id, "none");
        CHECK_STR(c.rdzv_backend->name, "static");
        CHECK(c.rdzv_host == NULL);
        config_free(&c);
    }
}

TEST(slurm_env_falls_back_to_the_job_node_list) {
    char *env[] = {"SLURM_JOB_ID=9", "SLURM_STEP_ID=1", "SLURM_STEP_NUM_NODES=2",
                   "SLURM_STEP_NUM_TASKS=2", "SLURM_NODEID=1",
                   "SLURM_JOB_NODELIST=gpu-a[7-8],cpu1", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS(TRAIN), &c), 0);
    CHECK_STR(c.rdzv_host, "gpu-a7");
    CHECK_EQ(c.rdzv_port, slurm_step_port(9, 1));
    config_free(&c);
}

TEST(slurm_env_messages_name_the_slurm_variables) {
    char *bad_list[] = {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=2",
                        "SLURM_STEP_NUM_TASKS=2", "SLURM_NODEID=0",
                        "SLURM_STEP_NODELIST=node[01-", NULL};
    check_fails(bad_list, ARGS(TRAIN), "SLURM_STEP_NODELIST='node[01-' is not a Slurm host list");
    /* ... which an explicit endpoint makes irrelevant */
    agent_config c;
    CHECK_EQ(parse_in(bad_list, ARGS("--rdzv-endpoint", "h", TRAIN), &c), 0);
    config_free(&c);
    char *no_list[] = {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=2",
                       "SLURM_STEP_NUM_TASKS=2", "SLURM_NODEID=0", NULL};
    check_fails(no_list, ARGS(TRAIN), "no node list");
    char *bad_id[] = {"SLURM_JOB_ID=77", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=4",
                      "SLURM_STEP_NUM_TASKS=4", "SLURM_NODEID=two",
                      "SLURM_STEP_NODELIST=node[01-04]", NULL};
    check_fails(bad_id, ARGS(TRAIN), "SLURM_NODEID='two' is not a whole number");
    CHECK_EQ(parse_in(bad_id, ARGS("--node-rank", "1", TRAIN), &c), 0);
    config_free(&c);
    /* --nnodes given smaller than the step: the node id does not fit. */
    char *env[] = {STEP_4_NODES, NULL};
    check_fails(env, ARGS("--nnodes", "2", TRAIN),
                "SLURM_NODEID: 2 is not below the number of nodes (2)");
    /* --standalone needs one node; Slurm's count says why not. */
    check_fails(env, ARGS("--standalone", TRAIN), "SLURM_STEP_NUM_NODES is 4:4");
}

TEST(slurm_env_standalone_on_one_node_keeps_its_own_id) {
    char *env[] = {"SLURM_JOB_ID=5", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_NODES=1",
                   "SLURM_STEP_NUM_TASKS=1", "SLURM_NODEID=0", "SLURM_STEP_NODELIST=vm", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("--standalone", TRAIN), &c), 0);
    CHECK_STR(c.rdzv_backend->name, "c10d");
    CHECK_STR(c.rdzv_host, "localhost");
    CHECK(strcmp(c.rdzv_id, "5") != 0 && strlen(c.rdzv_id) == 36);
    config_free(&c);
}

TEST(slurm_env_nothing_without_slurm) {
    char *env[] = {"SLURM_STEP_NUM_NODES=4", "SLURM_NODEID=1", NULL}; /* no job id */
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS(TRAIN), &c), 0);
    CHECK_EQ(c.max_nodes, 1);
    CHECK_EQ(c.node_rank, -1);
    config_free(&c);
}
