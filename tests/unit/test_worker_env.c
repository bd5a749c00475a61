/* Unit tests of the workers' environment (agent/worker_env.c): torchrun's
 * variables from the configuration and the round, and how they are set
 * over the environment ddprun was started in. */
#include <stdlib.h>
#include <string.h>

#include "agent/worker_env.h"
#include "tests/unit/test.h"

/* The value of NAME in vars[0..n), or NULL. */
static const char *var(char (*vars)[WORKER_ENV_LEN], int n, const char *name) {
    size_t len = strlen(name);
    for (int i = 0; i < n; i++)
        if (strncmp(vars[i], name, len) == 0 && vars[i][len] == '=') return vars[i] + len + 1;
    return NULL;
}

static agent_config config(int nproc) {
    static char role[] = "trainer", id[] = "job7";
    return (agent_config){.nproc_per_node = nproc, .role = role, .rdzv_id = id,
                          .max_restarts = 3};
}

/* Node rank 1 of 2, 4 workers each: local rank 2 is global rank 6. */
TEST(worker_env_ranks_sizes_and_store) {
    agent_config c = config(4);
    rdzv_result r = {.group_rank = 1, .group_world_size = 2, .world_size = 8, .rank_offset = 4,
                     .restart_count = 2};
    worker_env_ctx x = {.cfg = &c, .round = &r, .store_addr = "10.0.0.1", .store_port = 29400,
                        .agent_pid = 4242};
    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN];
    int n = worker_env_vars(&x, 2, "/logs/2/error.json", vars);
    CHECK_STR(var(vars, n, "LOCAL_RANK"), "2");
    CHECK_STR(var(vars, n, "RANK"), "6");
    CHECK_STR(var(vars, n, "GROUP_RANK"), "1");
    CHECK_STR(var(vars, n, "LOCAL_WORLD_SIZE"), "4");
    CHECK_STR(var(vars, n, "WORLD_SIZE"), "8");
    CHECK_STR(var(vars, n, "GROUP_WORLD_SIZE"), "2");
    CHECK_STR(var(vars, n, "ROLE_NAME"), "trainer");
    CHECK_STR(var(vars, n, "MASTER_ADDR"), "10.0.0.1");
    CHECK_STR(var(vars, n, "MASTER_PORT"), "29400");
    CHECK_STR(var(vars, n, "TORCHELASTIC_RESTART_COUNT"), "2");
    CHECK_STR(var(vars, n, "TORCHELASTIC_MAX_RESTARTS"), "3");
    CHECK_STR(var(vars, n, "TORCHELASTIC_RUN_ID"), "job7");
    CHECK_STR(var(vars, n, "TORCHELASTIC_ERROR_FILE"), "/logs/2/error.json");
    CHECK_STR(var(vars, n, "DDPRUN_AGENT_PID"), "4242");
    CHECK_STR(var(vars, n, "OMP_NUM_THREADS"), "1"); /* several workers, the user set none */
    CHECK_STR(var(vars, n, "NCCL_ASYNC_ERROR_HANDLING"), "1");
    CHECK(var(vars, n, "TORCHELASTIC_TIMER_FILE") == NULL);
    CHECK(var(vars, n, "DDPRUN_METRICS_DIR") == NULL);
    CHECK(n <= WORKER_ENV_MAX);
}

/* etcd-v3: the workers meet at node rank 0's store, which the round names. */
TEST(worker_env_master_store_of_the_round) {
    agent_config c = config(1);
    rdzv_result r = {.world_size = 1};
    snprintf(r.master_store, sizeof r.master_store, "[fd00::1]:40001");
    worker_env_ctx x = {.cfg = &c, .round = &r, .store_addr = "127.0.0.1", .store_port = 1};
    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN];
    int n = worker_env_vars(&x, 0, "e", vars);
    CHECK_STR(var(vars, n, "MASTER_ADDR"), "[fd00::1]");
    CHECK_STR(var(vars, n, "MASTER_PORT"), "40001");
    CHECK_STR(var(vars, n, "TORCHELASTIC_USE_AGENT_STORE"), "True"); /* an agent serves it */
    CHECK(var(vars, n, "OMP_NUM_THREADS") == NULL); /* one worker: left alone */
}

/* TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 on node rank 0: the round names
 * where its rank 0 worker hosts the workers' store, and no agent does. */
TEST(worker_env_store_hosted_by_the_workers) {
    agent_config c = config(2);
    rdzv_result r = {.world_size = 2, .worker_hosted = 1};
    snprintf(r.master_store, sizeof r.master_store, "node0:23456");
    worker_env_ctx x = {.cfg = &c, .round = &r, .store_addr = "127.0.0.1", .store_port = 1};
    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN];
    int n = worker_env_vars(&x, 1, "e", vars);
    CHECK_STR(var(vars, n, "MASTER_ADDR"), "node0");
    CHECK_STR(var(vars, n, "MASTER_PORT"), "23456");
    CHECK_STR(var(vars, n, "TORCHELASTIC_USE_AGENT_STORE"), "False");
}

/* What the user set is theirs; --virtual-local-rank gives each worker one GPU. */
TEST(worker_env_user_settings_and_virtual_local_rank) {
    agent_config c = config(2);
    char cvd[] = "3,5";
    c.virtual_local_rank = 1;
    c.env = (agent_env){.cuda_visible_devices = cvd, .omp_num_threads_set = 1,
                        .nccl_async_set = 1, .torch_nccl_async_set = 1};
    rdzv_result r = {.world_size = 2};
    worker_env_ctx x = {.cfg = &c, .round = &r, .store_addr = "h", .store_port = 2,
                        .timer_file = "/tmp/fifo", .metrics_dir = "/logs/metrics"};
    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN];
    int n = worker_env_vars(&x, 1, "e", vars);
    CHECK_STR(var(vars, n, "LOCAL_RANK"), "0");
    CHECK_STR(var(vars, n, "RANK"), "1");
    CHECK_STR(var(vars, n, "CUDA_VISIBLE_DEVICES"), "5");
    CHECK(var(vars, n, "OMP_NUM_THREADS") == NULL);
    CHECK(var(vars, n, "NCCL_ASYNC_ERROR_HANDLING") == NULL);
    CHECK(var(vars, n, "TORCH_NCCL_ASYNC_ERROR_HANDLING") == NULL);
    CHECK_STR(var(vars, n, "TORCHELASTIC_TIMER_FILE"), "/tmp/fifo");
    CHECK_STR(var(vars, n, "DDPRUN_METRICS_DIR"), "/logs/metrics");
    char g[16];
    CHECK_STR(worker_env_gpu(NULL, 3, g, sizeof g), "3");
    CHECK_STR(worker_env_gpu("7", 1, g, sizeof g), "1"); /* fewer entries than ranks */
}

/* The variables replace the same names in the base; the rest is kept, in
 * one block that free() releases. */
TEST(worker_env_build_sets_over_the_base) {
    char *base[] = {"PATH=/bin", "RANK=99", "HOME=/root", "RANKING=x", NULL};
    char vars[2][WORKER_ENV_LEN] = {"RANK=3", "LOCAL_RANK=1"};
    char **env = worker_env_build(base, vars, 2);
    CHECK(env != NULL);
    const char *want[] = {"PATH=/bin", "HOME=/root", "RANKING=x", "RANK=3", "LOCAL_RANK=1", NULL};
    for (int i = 0; want[i]; i++) CHECK_STR(env[i], want[i]);
    CHECK(env[5] == NULL);
    free(env);
}

/* --store-proxy: the workers reach the store through their node's agent
 * (127.0.0.1 and the proxy's port), the job's store itself named apart;
 * not when their rank 0 hosts their store (torch's own server). */
TEST(worker_env_through_the_store_proxy) {
    agent_config c = config(2);
    rdzv_result r = {.world_size = 4, .group_world_size = 2};
    worker_env_ctx x = {.cfg = &c, .round = &r, .store_addr = "node0", .store_port = 29400,
                        .proxy_port = 41000};
    char vars[WORKER_ENV_MAX][WORKER_ENV_LEN];
    int n = worker_env_vars(&x, 0, "/logs/0/error.json", vars);
    CHECK_STR(var(vars, n, "MASTER_ADDR"), "127.0.0.1");
    CHECK_STR(var(vars, n, "MASTER_PORT"), "41000");
    CHECK_STR(var(vars, n, "DDPRUN_JOB_STORE"), "node0:29400");
    CHECK_STR(var(vars, n, "TORCHELASTIC_USE_AGENT_STORE"), "True");
    x.store_addr = "fd00::1";
    n = worker_env_vars(&x, 0, "/logs/0/error.json", vars);
    CHECK_STR(var(vars, n, "DDPRUN_JOB_STORE"), "[fd00::1]:29400");
    snprintf(r.master_store, sizeof r.master_store, "10.0.0.9:40001"); /* etcd-v3 */
    n = worker_env_vars(&x, 0, "/logs/0/error.json", vars);
    CHECK_STR(var(vars, n, "MASTER_PORT"), "41000");
    CHECK_STR(var(vars, n, "DDPRUN_JOB_STORE"), "10.0.0.9:40001");
    r.worker_hosted = 1; /* rank 0 hosts the workers' store at master_store */
    n = worker_env_vars(&x, 0, "/logs/0/error.json", vars);
    CHECK_STR(var(vars, n, "MASTER_ADDR"), "10.0.0.9");
    CHECK_STR(var(vars, n, "MASTER_PORT"), "40001");
    CHECK(var(vars, n, "DDPRUN_JOB_STORE") == NULL);
}

/* --store-proxy auto: on for a job of several nodes that may reach
 * STORE_PROXY_AUTO_RANKS ranks; on and off as said. */
TEST(worker_env_store_proxy_auto_is_for_large_jobs) {
    agent_config c = config(8);
    c.min_nodes = 2, c.max_nodes = 2047;
    CHECK_EQ(agent_config_store_proxy(&c), 0); /* 16376 ranks */
    c.max_nodes = 2048;
    CHECK_EQ(agent_config_store_proxy(&c), 1); /* 16384 */
    c.store_proxy = STORE_PROXY_OFF;
    CHECK_EQ(agent_config_store_proxy(&c), 0);
    c.store_proxy = STORE_PROXY_ON, c.max_nodes = 1, c.nproc_per_node = 1;
    CHECK_EQ(agent_config_store_proxy(&c), 1);
    c.store_proxy = STORE_PROXY_AUTO, c.nproc_per_node = 4096;
    CHECK_EQ(agent_config_store_proxy(&c), 0); /* one node: its workers are all local anyway */
}
