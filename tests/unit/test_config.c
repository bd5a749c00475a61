/* Unit tests of ddprun's command line (launcher/config.c): torchrun's flags
 * in both spellings and both value forms, PET_ environment defaults, every
 * value's checks and messages, --standalone, and the worker's command.
 * Each test passes its own environment array, so the real environment of
 * whoever runs the tests cannot change the outcome. */
#include "launcher/config.h"
#include "tests/unit/test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

/* A command line: ARGS("--nnodes", "2", "train.py") is ddprun's argv. */
#define ARGS(...) ((char *[]){"ddprun", __VA_ARGS__, NULL})

static char *no_env[] = {NULL};
static char err[512];

static int parse_in(char **env, char **argv, agent_config *cfg) {
    int argc = 0;
    while (argv[argc]) argc++;
    memset(err, 0, sizeof err);
    return config_parse(argc, argv, env, cfg, err, sizeof err);
}

static int parse(char **argv, agent_config *cfg) { return parse_in(no_env, argv, cfg); }

/* Parses a command line that must fail, and checks that the message holds
 * the given text. */
static void check_fails(char **env, char **argv, const char *want) {
    agent_config cfg;
    CHECK_EQ(parse_in(env, argv, &cfg), -EINVAL);
    if (!strstr(err, want)) test_fail(__FILE__, __LINE__, "message '%s' lacks '%s'", err, want);
    CHECK(cfg.argv == NULL && cfg.role == NULL && cfg.rdzv_id == NULL);
}

static void check_argv(const agent_config *cfg, char **want) {
    int n = 0;
    while (want[n]) n++;
    CHECK_EQ(cfg->argc, n);
    for (int i = 0; i < n; i++) CHECK_STR(cfg->argv[i], want[i]);
    CHECK(cfg->argv[n] == NULL);
}

TEST(config_defaults) {
    agent_config c;
    CHECK_EQ(parse(ARGS("train.py"), &c), 0);
    CHECK_EQ(c.min_nodes, 1);
    CHECK_EQ(c.max_nodes, 1);
    CHECK_EQ(c.nproc_mode, NPROC_NUMBER);
    CHECK_EQ(c.nproc_per_node, 1);
    CHECK_EQ(c.node_rank, -1);
    CHECK_STR(c.rdzv_backend->name, "static");
    CHECK(c.rdzv_host == NULL);
    CHECK_EQ(c.rdzv_port, 29400);
    CHECK_STR(c.rdzv_id, "none");
    CHECK(c.rdzv.join_timeout == 600 && c.rdzv.last_call_timeout == 30);
    CHECK(c.rdzv.close_timeout == 30 && c.rdzv.keep_alive_interval == 2);
    CHECK_EQ(c.rdzv.keep_alive_max_attempt, 3);
    CHECK(c.rdzv.read_timeout == 60);
    CHECK_EQ(c.rdzv.is_host, -1);
    CHECK_EQ(c.standalone, 0);
    CHECK_EQ(c.max_restarts, 0);
    CHECK(c.monitor_interval == 0.1);
    CHECK_STR(c.role, "default");
    CHECK(c.log_dir == NULL && c.master_addr == NULL && c.local_addr == NULL);
    CHECK_EQ(c.redirects.dflt, STREAM_NONE);
    CHECK_EQ(c.tee.n, 0);
    CHECK(c.local_ranks_filter == NULL);
    CHECK_EQ(c.master_port, -1);
    CHECK(c.shutdown_timeout == 30);
    CHECK_EQ(c.run_module + c.no_python, 0);
    check_argv(&c, (char *[]){"python3", "-u", "train.py", NULL});
    config_free(&c);
}

TEST(config_accepts_hyphen_and_underscore_spellings) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--nproc_per_node", "2", "--max_restarts=3", "--rdzv_backend",
                        "c10d", "--rdzv_endpoint", "h1", "--rdzv-id", "j1", "x.py"), &c), 0);
    CHECK_EQ(c.nproc_per_node, 2);
    CHECK_EQ(c.max_restarts, 3);
    CHECK_STR(c.rdzv_backend->name, "c10d");
    CHECK_STR(c.rdzv_id, "j1");
    config_free(&c);
    CHECK_EQ(parse(ARGS("--nproc-per-node", "2", "--max-restarts=3", "--rdzv_id=j2", "x.py"),
                   &c), 0);
    CHECK_EQ(c.nproc_per_node, 2);
    CHECK_EQ(c.max_restarts, 3);
    CHECK_STR(c.rdzv_id, "j2");
    config_free(&c);
}

TEST(config_accepts_equals_and_space_forms) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--role=trainer", "--log-dir", "/tmp/l", "--master-addr=10.0.0.1",
                        "--master-port", "1234", "--local-addr=node7", "x.py"), &c), 0);
    CHECK_STR(c.role, "trainer");
    CHECK_STR(c.log_dir, "/tmp/l");
    CHECK_STR(c.master_addr, "10.0.0.1");
    CHECK_EQ(c.master_port, 1234);
    CHECK_STR(c.local_addr, "node7");
    config_free(&c);
}

TEST(config_short_options_take_values_in_every_form) {
    agent_config c;
    CHECK_EQ(parse(ARGS("-r3", "-t=2", "-m", "pkg.train"), &c), 0);
    CHECK_EQ(c.redirects.dflt, 3);
    CHECK_EQ(c.tee.dflt, 2);
    CHECK_EQ(c.run_module, 1);
    config_free(&c);
    CHECK_EQ(parse(ARGS("-r", "1", "-t", "0", "x.py"), &c), 0);
    CHECK_EQ(c.redirects.dflt, 1);
    CHECK_EQ(c.tee.dflt, 0);
    config_free(&c);
}

TEST(config_pet_environment_gives_defaults) {
    char *env[] = {"PET_NPROC_PER_NODE=3", "PET_MAX_RESTARTS=2", "PET_RDZV_BACKEND=c10d",
                   "PET_RDZV_ENDPOINT=head:1234", "PET_NNODES=1:4", "PET_RDZV_ID=job",
                   "PET_REDIRECTS=3", "PET_MONITOR_INTERVAL=2.5", "OTHER=1", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("x.py"), &c), 0);
    CHECK_EQ(c.nproc_per_node, 3);
    CHECK_EQ(c.max_restarts, 2);
    CHECK_STR(c.rdzv_backend->name, "c10d");
    CHECK_STR(c.rdzv_host, "head");
    CHECK_EQ(c.rdzv_port, 1234);
    CHECK_EQ(c.max_nodes, 4);
    CHECK_STR(c.rdzv_id, "job");
    CHECK_EQ(c.redirects.dflt, 3);
    CHECK(c.monitor_interval == 2.5);
    config_free(&c);
}

TEST(config_command_line_beats_environment) {
    char *env[] = {"PET_NPROC_PER_NODE=3", "PET_MAX_RESTARTS=not-a-number", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("--nproc-per-node=5", "--max-restarts", "1", "x.py"), &c), 0);
    CHECK_EQ(c.nproc_per_node, 5);
    CHECK_EQ(c.max_restarts, 1);
    config_free(&c);
}

TEST(config_bad_environment_value_names_the_variable) {
    char *env[] = {"PET_MAX_RESTARTS=x", NULL};
    check_fails(env, ARGS("x.py"), "PET_MAX_RESTARTS: 'x' is not a non-negative integer");
}

TEST(config_empty_environment_value_counts_as_unset) {
    char *env[] = {"PET_NNODES=", "PET_ROLE=", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("x.py"), &c), 0);
    CHECK_EQ(c.max_nodes, 1);
    CHECK_STR(c.role, "default");
    config_free(&c);
}

TEST(config_pet_flags_are_integers) {
    char *on[] = {"PET_STANDALONE=1", "PET_NO_PYTHON=1", NULL};
    char *off[] = {"PET_STANDALONE=0", "PET_MODULE=0", NULL};
    char *bad[] = {"PET_STANDALONE=yes", NULL};
    agent_config c;
    CHECK_EQ(parse_in(on, ARGS("./a.out"), &c), 0);
    CHECK_EQ(c.standalone, 1);
    CHECK_EQ(c.no_python, 1);
    config_free(&c);
    CHECK_EQ(parse_in(off, ARGS("x.py"), &c), 0);
    CHECK_EQ(c.standalone + c.run_module, 0);
    config_free(&c);
    check_fails(bad, ARGS("x.py"), "PET_STANDALONE: 'yes' is not 0 or 1");
}

TEST(config_nnodes_fixed_and_range) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h1",
                        "x.py"), &c), 0);
    CHECK_EQ(c.min_nodes, 1);
    CHECK_EQ(c.max_nodes, 4);
    config_free(&c);
    CHECK_EQ(parse(ARGS("--nnodes=3", "--rdzv-backend=c10d", "--rdzv-endpoint=h", "x.py"), &c), 0);
    CHECK_EQ(c.min_nodes, 3);
    CHECK_EQ(c.max_nodes, 3);
    config_free(&c);
}

TEST(config_nnodes_bad_forms) {
    check_fails(no_env, ARGS("--nnodes", "3:2", "--rdzv-backend=c10d", "x.py"),
                "--nnodes: '3:2' has MIN greater than MAX");
    check_fails(no_env, ARGS("--nnodes", "0", "x.py"), "--nnodes: '0'");
    check_fails(no_env, ARGS("--nnodes", "two", "x.py"), "--nnodes: 'two'");
    check_fails(no_env, ARGS("--nnodes", "1:2:3", "x.py"), "'1:2:3' is not N or MIN:MAX");
    check_fails(no_env, ARGS("--nnodes", "2:", "x.py"), "--nnodes: '2:'");
    check_fails(no_env, ARGS("--nnodes=", "x.py"), "--nnodes: ''");
}

TEST(config_static_refuses_a_node_range) {
    check_fails(no_env, ARGS("--nnodes", "1:4", "x.py"),
                "--nnodes: static rendezvous needs a fixed number of nodes, got 1:4 "
                "(use --rdzv-backend=c10d)");
}

TEST(config_static_with_several_nodes_needs_rank_and_master) {
    check_fails(no_env, ARGS("--nnodes", "2", "--master-addr", "h", "x.py"), "--node-rank");
    check_fails(no_env, ARGS("--nnodes", "2", "--node-rank", "1", "x.py"), "--master-addr");
    char *env[] = {"PET_NODE_RANK=1", "PET_MASTER_ADDR=head", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("--nnodes", "2", "x.py"), &c), 0);
    CHECK_EQ(c.node_rank, 1);
    CHECK_STR(c.master_addr, "head");
    config_free(&c);
    CHECK_EQ(parse(ARGS("--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:5", "x.py"),
                   &c), 0);
    config_free(&c);
}

TEST(config_node_rank_must_be_below_nnodes) {
    check_fails(no_env, ARGS("--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "x.py"),
                "--node-rank: 2 is not below the number of nodes (2)");
    check_fails(no_env, ARGS("--node-rank", "-1", "x.py"), "--node-rank: '-1'");
}

TEST(config_nproc_cpu_counts_online_cpus) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--nproc-per-node", "cpu", "x.py"), &c), 0);
    CHECK_EQ(c.nproc_mode, NPROC_CPU);
    CHECK_EQ(c.nproc_per_node, sysconf(_SC_NPROCESSORS_ONLN));
    config_free(&c);
}

TEST(config_nproc_gpu_counts_cuda_visible_devices) {
    char *three[] = {"CUDA_VISIBLE_DEVICES=0,1,3", NULL};
    char *hidden[] = {"CUDA_VISIBLE_DEVICES=-1", NULL};
    agent_config c;
    CHECK_EQ(parse_in(three, ARGS("--nproc-per-node", "gpu", "x.py"), &c), 0);
    CHECK_EQ(c.nproc_mode, NPROC_GPU);
    CHECK_EQ(c.nproc_per_node, 3);
    config_free(&c);
    CHECK_EQ(parse_in(three, ARGS("--nproc-per-node", "auto", "x.py"), &c), 0);
    CHECK_EQ(c.nproc_mode, NPROC_AUTO);
    CHECK_EQ(c.nproc_per_node, 3);
    config_free(&c);
    CHECK_EQ(parse_in(hidden, ARGS("--nproc-per-node", "auto", "x.py"), &c), 0);
    CHECK_EQ(c.nproc_per_node, sysconf(_SC_NPROCESSORS_ONLN));
    config_free(&c);
}

TEST(config_nproc_gpu_without_gpus_is_an_error) {
    char *none[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    check_fails(none, ARGS("--nproc-per-node", "gpu", "x.py"), "--nproc-per-node: 'gpu'");
}

TEST(config_nproc_bad_values) {
    check_fails(no_env, ARGS("--nproc-per-node", "0", "x.py"),
                "--nproc-per-node: '0' is not a positive integer, cpu, gpu or auto");
    check_fails(no_env, ARGS("--nproc-per-node", "tpu", "x.py"), "'tpu'");
}

TEST(config_endpoint_host_and_port_forms) {
    struct {
        const char *in, *host;
        int port;
    } cases[] = {
        {"node1", "node1", 29400},       {"node1:1234", "node1", 1234},
        {"10.0.0.1:0", "10.0.0.1", 0},   {"[::1]:29401", "::1", 29401},
        {"[::1]", "::1", 29400},         {"::1", "::1", 29400},
        {"fe80::1%eth0", "fe80::1%eth0", 29400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "--rdzv-endpoint=%s", cases[i].in);
        agent_config c;
        CHECK_EQ(parse(ARGS("--rdzv-backend=c10d", arg, "x.py"), &c), 0);
        CHECK_STR(c.rdzv_host, cases[i].host);
        CHECK_EQ(c.rdzv_port, cases[i].port);
        config_free(&c);
    }
}

TEST(config_endpoint_bad_forms) {
    const char *bad[] = {"host:", "host:x", "host:70000", "[::1", "[::1]x", "a b:1", ":80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char arg[64];
        snprintf(arg, sizeof arg, "--rdzv-endpoint=%s", bad[i]);
        check_fails(no_env, ARGS("--rdzv-backend=c10d", arg, "x.py"), "--rdzv-endpoint: '");
    }
}

TEST(config_rdzv_conf_sets_every_key) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--rdzv-conf", "join_timeout=900, last_call_timeout=5,close_timeout=7,"
                        "keep_alive_interval=2,keep_alive_max_attempt=4,read_timeout=9,"
                        "is_host=false", "x.py"), &c), 0);
    CHECK(c.rdzv.join_timeout == 900 && c.rdzv.last_call_timeout == 5);
    CHECK(c.rdzv.close_timeout == 7 && c.rdzv.keep_alive_interval == 2);
    CHECK_EQ(c.rdzv.keep_alive_max_attempt, 4);
    CHECK(c.rdzv.read_timeout == 9);
    CHECK_EQ(c.rdzv.is_host, 0);
    config_free(&c);
    CHECK_EQ(parse(ARGS("--rdzv_conf=heartbeat=1.5,is_host=1,timeout=60", "x.py"), &c), 0);
    CHECK(c.rdzv.keep_alive_interval == 1.5);
    CHECK_EQ(c.rdzv.is_host, 1);
    CHECK(c.rdzv.join_timeout == 60);
    config_free(&c);
}

/* torchrun ignores keys it does not know (Kubeflow passes the user's
 * rdzvConf as it is): so do we, with a warning (integration/agent_torchrun_surface). */
TEST(config_rdzv_conf_unknown_key_is_not_an_error) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--rdzv-conf", "join_timeout=5,store_kind=tcp", "x.py"), &c), 0);
    CHECK(c.rdzv.join_timeout == 5);
    config_free(&c);
}

TEST(config_rdzv_conf_takes_torch_2_keys) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--rdzv-conf",
                        "heartbeat_timeout=12,store_type=TCP,use_libuv=1,cas_backoff_max_seconds=3",
                        "x.py"), &c), 0);
    CHECK(c.rdzv.keep_alive_interval == 12);
    config_free(&c);
    check_fails(no_env, ARGS("--rdzv-conf", "store_type=file", "x.py"),
                "store_type='file' cannot be");
}

TEST(config_role_may_be_empty) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--role", "", "x.py"), &c), 0);
    CHECK_STR(c.role, "");
    config_free(&c);
}

TEST(config_rdzv_conf_bad_items) {
    check_fails(no_env, ARGS("--rdzv-conf", "join_timeout=soon", "x.py"),
                "join_timeout='soon' is not a positive number of seconds");
    check_fails(no_env, ARGS("--rdzv-conf", "join_timeout=", "x.py"), "'join_timeout' has no");
    check_fails(no_env, ARGS("--rdzv-conf", "join_timeout", "x.py"), "is not key=value");
    check_fails(no_env, ARGS("--rdzv-conf", "join_timeout=1,,read_timeout=2", "x.py"),
                "is not key=value");
    check_fails(no_env, ARGS("--rdzv-conf", "is_host=maybe", "x.py"), "is not true or false");
    check_fails(no_env, ARGS("--rdzv-conf", "keep_alive_max_attempt=0", "x.py"),
                "is not a positive integer");
}

/* etcd-v3 takes every member; torchrun's etcd spellings mean it too. */
TEST(config_rdzv_backend_etcd) {
    agent_config c;
    check_fails(no_env, ARGS("--rdzv-backend", "etcd", "x.py"),
                "--rdzv-backend=etcd-v3 needs --rdzv-endpoint=HOST:PORT[,HOST:PORT...]");
    check_fails(no_env, ARGS("--rdzv-backend", "zk", "x.py"), "expected static, c10d or etcd-v3");
    check_fails(no_env, ARGS("--rdzv-backend", "c10d", "--rdzv-endpoint", "a:1,b:2", "x.py"),
                "lists several members, which the c10d backend does not take");
    CHECK_EQ(parse(ARGS("--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "e1:2379,e2:2379",
                        "--rdzv-conf", "cacert=/ca.pem,user=u,password=p,key_prefix=/jobs/",
                        "x.py"), &c), 0);
    CHECK_STR(c.rdzv_backend->name, "etcd-v3");
    CHECK_STR(c.rdzv_endpoints, "e1:2379,e2:2379");
    CHECK_STR(c.rdzv_host, "e1");
    CHECK_STR(c.rdzv.cacert, "/ca.pem");
    CHECK_STR(c.rdzv.user, "u");
    CHECK_STR(c.rdzv.password, "p");
    CHECK_STR(c.rdzv.key_prefix, "/jobs/");
    config_free(&c);
}

TEST(config_redirects_and_tee_numbers) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--redirects", "3", "--tee=1", "x.py"), &c), 0);
    CHECK_EQ(c.redirects.dflt, STREAM_BOTH);
    CHECK_EQ(c.redirects.n, 0);
    CHECK_EQ(stream_for_rank(&c.redirects, 7), STREAM_BOTH);
    CHECK_EQ(stream_for_rank(&c.tee, 0), STREAM_OUT);
    config_free(&c);
}

TEST(config_redirects_per_rank_maps) {
    agent_config c;
    CHECK_EQ(parse(ARGS("-r", "0:1,1:2,12:3,1:3", "-t", "2:2", "x.py"), &c), 0);
    CHECK_EQ(c.redirects.n, 3);
    CHECK_EQ(stream_for_rank(&c.redirects, 0), STREAM_OUT);
    CHECK_EQ(stream_for_rank(&c.redirects, 1), STREAM_BOTH); /* the last entry wins */
    CHECK_EQ(stream_for_rank(&c.redirects, 12), STREAM_BOTH);
    CHECK_EQ(stream_for_rank(&c.redirects, 5), STREAM_NONE);
    CHECK_EQ(stream_for_rank(&c.tee, 2), STREAM_ERR);
    CHECK_EQ(stream_for_rank(&c.tee, 0), STREAM_NONE);
    config_free(&c);
}

TEST(config_redirects_bad_values) {
    const char *bad[] = {"4", "-1", "x", "0:4", "0:1,", "1:", ":1", "0=1", "01:1x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char arg[32];
        snprintf(arg, sizeof arg, "--redirects=%s", bad[i]);
        check_fails(no_env, ARGS(arg, "x.py"), "--redirects: '");
    }
    check_fails(no_env, ARGS("--tee", "9", "x.py"), "--tee: '9' is not 0-3 or a map");
}

TEST(config_local_ranks_filter) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--local-ranks-filter", "0,2", "x.py"), &c), 0);
    CHECK_EQ(c.n_local_ranks_filter, 2);
    CHECK_EQ(c.local_ranks_filter[0], 0);
    CHECK_EQ(c.local_ranks_filter[1], 2);
    config_free(&c);
    CHECK_EQ(parse(ARGS("--local_ranks_filter=3", "x.py"), &c), 0);
    CHECK_EQ(c.n_local_ranks_filter, 1);
    CHECK_EQ(c.local_ranks_filter[0], 3);
    config_free(&c);
    check_fails(no_env, ARGS("--local-ranks-filter", "0,,2", "x.py"), "--local-ranks-filter");
    check_fails(no_env, ARGS("--local-ranks-filter", "a", "x.py"), "like 0,2");
}

TEST(config_standalone_sets_its_own_rendezvous) {
    agent_config c, d;
    CHECK_EQ(parse(ARGS("--standalone", "--rdzv-endpoint", "elsewhere:5", "--rdzv-id", "mine",
                        "--nproc-per-node", "4", "x.py"), &c), 0);
    CHECK_EQ(c.standalone, 1);
    CHECK_STR(c.rdzv_backend->name, "c10d");
    CHECK_STR(c.rdzv_host, "localhost");
    CHECK_EQ(c.rdzv_port, 0);
    CHECK_EQ(strlen(c.rdzv_id), 36);
    CHECK(c.rdzv_id[8] == '-' && c.rdzv_id[13] == '-' && c.rdzv_id[14] == '4');
    CHECK(c.rdzv_id[18] == '-' && c.rdzv_id[23] == '-');
    CHECK_EQ(parse(ARGS("--standalone", "x.py"), &d), 0);
    CHECK(strcmp(c.rdzv_id, d.rdzv_id) != 0);
    config_free(&c);
    config_free(&d);
}

TEST(config_standalone_needs_one_node) {
    check_fails(no_env, ARGS("--standalone", "--nnodes", "2", "x.py"),
                "--standalone runs a single node, but --nnodes is 2:2");
}

TEST(config_module_runs_python_m) {
    char *env[] = {"PYTHON_EXEC=/opt/py/bin/python", NULL};
    agent_config c;
    CHECK_EQ(parse(ARGS("-m", "pkg.train", "--lr", "0.1"), &c), 0);
    check_argv(&c, (char *[]){"python3", "-u", "-m", "pkg.train", "--lr", "0.1", NULL});
    config_free(&c);
    CHECK_EQ(parse_in(env, ARGS("--module", "pkg.train"), &c), 0);
    check_argv(&c, (char *[]){"/opt/py/bin/python", "-u", "-m", "pkg.train", NULL});
    config_free(&c);
}

TEST(config_no_python_runs_program_itself) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--no-python", "./build/bin/ddp-train", "--epochs", "2"), &c), 0);
    check_argv(&c, (char *[]){"./build/bin/ddp-train", "--epochs", "2", NULL});
    config_free(&c);
}

TEST(config_module_and_no_python_conflict) {
    check_fails(no_env, ARGS("-m", "--no-python", "pkg"),
                "-m/--module and --no-python cannot be used together");
}

TEST(config_py_and_other_programs_run_under_python) {
    char *env[] = {"PYTHON_EXEC=pypy3", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("train.py", "a"), &c), 0);
    check_argv(&c, (char *[]){"pypy3", "-u", "train.py", "a", NULL});
    config_free(&c);
    /* torchrun runs a PROGRAM without --no-python under Python, .py or not. */
    CHECK_EQ(parse(ARGS("./a.out"), &c), 0);
    check_argv(&c, (char *[]){"python3", "-u", "./a.out", NULL});
    config_free(&c);
}

TEST(config_program_arguments_pass_through_untouched) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--nnodes", "1", "train.py", "--nnodes", "5", "--lr", "0.1", "-m",
                        "--", "--help", "--bogus=1"), &c), 0);
    CHECK_EQ(c.max_nodes, 1);
    CHECK_EQ(c.run_module, 0);
    check_argv(&c, (char *[]){"python3", "-u", "train.py", "--nnodes", "5", "--lr", "0.1",
                              "-m", "--", "--help", "--bogus=1", NULL});
    config_free(&c);
}

TEST(config_double_dash_ends_options) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--no-python", "--", "-weird", "--x"), &c), 0);
    check_argv(&c, (char *[]){"-weird", "--x", NULL});
    config_free(&c);
}

TEST(config_missing_program) {
    const char *want = "no training program given (usage: ddprun [options] PROGRAM [ARGS...])";
    check_fails(no_env, (char *[]){"ddprun", NULL}, want);
    check_fails(no_env, ARGS("--nproc-per-node", "2"), want);
    check_fails(no_env, ARGS("--standalone", "--"), want);
    agent_config c;
    CHECK_EQ(parse(ARGS("train.py"), &c), 0);
    CHECK_STR(err, "");
    config_free(&c);
}

TEST(config_unknown_option_suggests_the_likely_one) {
    check_fails(no_env, ARGS("--nprocs", "4", "x.py"),
                "unknown option '--nprocs' (did you mean --nproc-per-node?)");
    check_fails(no_env, ARGS("--stanalone", "x.py"), "(did you mean --standalone?)");
    check_fails(no_env, ARGS("--rdzv_end_point=h", "x.py"),
                "unknown option '--rdzv_end_point' (did you mean --rdzv-endpoint?)");
    check_fails(no_env, ARGS("-nnodes", "2", "x.py"), "(did you mean --nnodes?)");
    check_fails(no_env, ARGS("--xyzzy", "x.py"), "unknown option '--xyzzy' (see ddprun --help)");
}

TEST(config_unique_prefixes_abbreviate_like_argparse) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--nproc=4", "--max_rest", "2", "x.py"), &c), 0);
    CHECK_EQ(c.nproc_per_node, 4);
    CHECK_EQ(c.max_restarts, 2);
    config_free(&c);
    check_fails(no_env, ARGS("--ma", "1", "x.py"),
                "option '--ma' is ambiguous: it could be --master-addr, --master-port, "
                "--max-restarts");
}

TEST(config_option_values_are_checked) {
    check_fails(no_env, ARGS("--max-restarts", "x", "x.py"),
                "--max-restarts: 'x' is not a non-negative integer");
    check_fails(no_env, ARGS("--max-restarts", "-1", "x.py"), "--max-restarts: '-1'");
    check_fails(no_env, ARGS("--monitor-interval", "0", "x.py"), "--monitor-interval: '0'");
    check_fails(no_env, ARGS("--monitor-interval", "nan", "x.py"), "--monitor-interval");
    check_fails(no_env, ARGS("--shutdown-timeout", "-1", "x.py"), "--shutdown-timeout: '-1'");
    check_fails(no_env, ARGS("--master-port", "70000", "x.py"), "--master-port: '70000'");
    check_fails(no_env, ARGS("--start-method", "thread", "x.py"), "--start-method: 'thread'");
    agent_config c;
    CHECK_EQ(parse(ARGS("--shutdown-timeout", "0", "--start_method=fork", "x.py"), &c), 0);
    CHECK(c.shutdown_timeout == 0);
    config_free(&c);
}

TEST(config_missing_value_does_not_swallow_the_next_flag) {
    check_fails(no_env, ARGS("--log-dir", "--nnodes", "2", "x.py"), "--log-dir expects a value");
    check_fails(no_env, (char *[]){"ddprun", "--nnodes", NULL}, "--nnodes expects a value");
    check_fails(no_env, ARGS("--standalone=1", "x.py"), "--standalone takes no value");
}

TEST(config_refuses_use_env) {
    check_fails(no_env, ARGS("--use_env", "x.py"), "--use-env is deprecated");
}

TEST(config_help_prints_usage_and_returns_1) {
    char path[512];
    snprintf(path, sizeof path, "%s/help.txt", test_tmpdir());
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600), saved = dup(1);
    CHECK(fd >= 0 && saved >= 0);
    fflush(stdout);
    dup2(fd, 1);
    agent_config c;
    int rc1 = parse(ARGS("--nnodes", "2", "--help", "--bogus"), &c);
    config_free(&c);
    int rc2 = parse(ARGS("-h"), &c);
    config_free(&c);
    fflush(stdout);
    dup2(saved, 1);
    close(fd);
    CHECK_EQ(rc1, 1);
    CHECK_EQ(rc2, 1);
    static char text[65536]; /* twice the help text, with room */
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    CHECK_EQ(n, 2 * strlen(config_usage()));
    CHECK(strncmp(text, "usage: ddprun [options] PROGRAM [ARGS...]", 41) == 0);
}

TEST(config_usage_documents_every_flag_and_its_environment_form) {
    const char *u = config_usage();
    const char *flags[] = {"nnodes", "nproc-per-node", "node-rank", "rdzv-backend",
                           "rdzv-endpoint", "rdzv-id", "rdzv-conf", "standalone",
                           "max-restarts", "monitor-interval", "role", "log-dir", "redirects",
                           "tee", "local-ranks-filter", "master-addr", "master-port",
                           "local-addr", "shutdown-timeout", "module", "no-python",
                           "start-method", "virtual-local-rank"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char flag[64], env[64];
        snprintf(flag, sizeof flag, "--%s", flags[i]);
        snprintf(env, sizeof env, "PET_");
        for (size_t j = 0; flags[i][j]; j++)
            env[4 + j] = flags[i][j] == '-' ? '_' : (char)(flags[i][j] - 'a' + 'A');
        env[4 + strlen(flags[i])] = '\0';
        if (!strstr(u, flag)) test_fail(__FILE__, __LINE__, "usage lacks %s", flag);
        if (!strstr(u, env)) test_fail(__FILE__, __LINE__, "usage lacks %s", env);
    }
    CHECK(strstr(u, "Examples:") != NULL);
}

TEST(config_free_is_safe_on_zeroed_and_freed_structs) {
    agent_config c;
    memset(&c, 0, sizeof c);
    config_free(&c);
    CHECK_EQ(parse(ARGS("--log-dir", "/l", "--local-ranks-filter", "1", "x.py"), &c), 0);
    config_free(&c);
    config_free(&c);
    CHECK(c.argv == NULL && c.log_dir == NULL && c.local_ranks_filter == NULL);
    config_free(NULL);
}

TEST(config_failure_after_allocations_leaves_nothing_to_free) {
    /* The leak checker of the sanitizer build is what makes this test bite. */
    agent_config c;
    CHECK_EQ(parse(ARGS("--log-dir", "/l", "--role", "r", "--master-addr", "m",
                        "--local-ranks-filter", "0,1", "--standalone"), &c), -EINVAL);
    CHECK(c.log_dir == NULL && c.role == NULL && c.master_addr == NULL);
    CHECK(c.local_ranks_filter == NULL && c.rdzv_host == NULL && c.rdzv_id == NULL);
}

TEST(config_c10d_needs_an_endpoint) {
    char *argv[] = {"ddprun", "--rdzv-backend=c10d", "--nnodes=2", "train.py", NULL};
    char *env[] = {NULL};
    agent_config cfg;
    char err[512];
    CHECK_EQ(config_parse(4, argv, env, &cfg, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "needs --rdzv-endpoint") != NULL);
}

/* torchrun's TORCH_ELASTIC_SHUTDOWN_TIMEOUT gives --shutdown-timeout's
 * default; the flag (or PET_SHUTDOWN_TIMEOUT) wins, even over a bad one. */
TEST(config_shutdown_timeout_from_torch_elastic_variable) {
    char *env[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=7", NULL};
    char *both[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon", "PET_SHUTDOWN_TIMEOUT=4", NULL};
    char *bad[] = {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("x.py"), &c), 0);
    CHECK(c.shutdown_timeout == 7);
    config_free(&c);
    CHECK_EQ(parse_in(env, ARGS("--shutdown-timeout", "2", "x.py"), &c), 0);
    CHECK(c.shutdown_timeout == 2);
    config_free(&c);
    CHECK_EQ(parse_in(both, ARGS("x.py"), &c), 0);
    CHECK(c.shutdown_timeout == 4);
    config_free(&c);
    check_fails(bad, ARGS("x.py"), "TORCH_ELASTIC_SHUTDOWN_TIMEOUT: 'soon' is not a number");
}

TEST(config_virtual_local_rank_is_a_flag) {
    agent_config c;
    CHECK_EQ(parse(ARGS("x.py"), &c), 0);
    CHECK_EQ(c.virtual_local_rank, 0);
    config_free(&c);
    CHECK_EQ(parse(ARGS("--virtual_local_rank", "x.py"), &c), 0);
    CHECK_EQ(c.virtual_local_rank, 1);
    config_free(&c);
}

/* torchrun takes the prefix template from TORCHELASTIC_LOG_LINE_PREFIX_
 * TEMPLATE; ddprun also from --log-line-prefix-template, which wins. */
TEST(config_log_line_prefix_template) {
    char *env[] = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=${hostname}:${rank}: ", NULL};
    agent_config c;
    CHECK_EQ(parse(ARGS("x.py"), &c), 0);
    CHECK(c.log_line_prefix_template == NULL);
    config_free(&c);
    CHECK_EQ(parse_in(env, ARGS("x.py"), &c), 0);
    CHECK_STR(c.log_line_prefix_template, "${hostname}:${rank}: ");
    config_free(&c);
    CHECK_EQ(parse_in(env, ARGS("--log-line-prefix-template", "<${local_rank}>", "x.py"), &c), 0);
    CHECK_STR(c.log_line_prefix_template, "<${local_rank}>");
    config_free(&c);
}

/* torchrun's comma_separated_list: ",," is a comma inside an item. */
TEST(config_duplicate_filters) {
    agent_config c;
    CHECK_EQ(parse(ARGS("--duplicate-stdout-filters", "apple,orange", "--duplicate_stderr_filters",
                        "a,,b,c,", "x.py"), &c), 0);
    CHECK_EQ(c.dup_filters[0].n, 2);
    CHECK_STR(c.dup_filters[0].items[0], "apple");
    CHECK_STR(c.dup_filters[0].items[1], "orange");
    CHECK(c.dup_filters[0].items[2] == NULL);
    CHECK_EQ(c.dup_filters[1].n, 2);
    CHECK_STR(c.dup_filters[1].items[0], "a,b");
    CHECK_STR(c.dup_filters[1].items[1], "c");
    config_free(&c);
    CHECK_EQ(parse(ARGS("--duplicate-stdout-filters", "", "x.py"), &c), 0);
    CHECK_EQ(c.dup_filters[0].n, 0);
    config_free(&c);
}

TEST(config_signals_to_handle) {
    char *env[] = {"TORCHELASTIC_SIGNALS_TO_HANDLE=SIGUSR2", NULL};
    agent_config c;
    CHECK_EQ(parse(ARGS("x.py"), &c), 0);
    CHECK_EQ(c.nsignals, 4);
    CHECK(c.signals[0] == SIGTERM && c.signals[1] == SIGINT && c.signals[2] == SIGHUP &&
          c.signals[3] == SIGQUIT);
    config_free(&c);
    CHECK_EQ(parse(ARGS("--signals-to-handle", "SIGTERM, usr1,SIGUSR1", "x.py"), &c), 0);
    CHECK_EQ(c.nsignals, 2);
    CHECK(c.signals[0] == SIGTERM && c.signals[1] == SIGUSR1);
    config_free(&c);
    CHECK_EQ(parse_in(env, ARGS("x.py"), &c), 0);
    CHECK(c.nsignals == 1 && c.signals[0] == SIGUSR2);
    config_free(&c);
    CHECK_EQ(parse_in(env, ARGS("--signals-to-handle", "SIGINT", "x.py"), &c), 0);
    CHECK(c.nsignals == 1 && c.signals[0] == SIGINT);
    config_free(&c);
    check_fails(no_env, ARGS("--signals-to-handle", "SIGTERM,SIGKILL", "x.py"),
                "--signals-to-handle: 'SIGKILL' is not a signal ddprun can handle");
    check_fails(no_env, ARGS("--signals-to-handle", "TERM,", "x.py"), "'' is not a signal");
}

/* What only a Python torchrun can do is refused by name, or mapped. */
TEST(config_python_only_flags) {
    agent_config c;
    check_fails(no_env, ARGS("--nproc-per-node", "xpu", "x.py"), "'xpu' (one worker per Intel GPU)");
    check_fails(no_env, ARGS("--logs-specs", "mine", "x.py"),
                "--logs-specs names a Python plug-in");
    check_fails(no_env, ARGS("--numa-binding", "cores", "x.py"), "--numa-binding");
    check_fails(no_env, ARGS("--event-log-handler", "kafka", "x.py"), "--event-log-handler");
    CHECK_EQ(parse(ARGS("--numa-binding", "core-complex", "--event-log-handler", "console",
                        "x.py"), &c), 0);
    CHECK_EQ(c.numa_binding, NUMA_CORE_COMPLEX);
    CHECK_EQ(c.event_log_console, 1);
    config_free(&c);
    /* --run-path runs the script under Python, whatever --no-python says */
    CHECK_EQ(parse(ARGS("--run-path", "--no-python", "/abs/train.py", "--lr", "1"), &c), 0);
    check_argv(&c, (char *[]){"python3", "-u", "/abs/train.py", "--lr", "1", NULL});
    config_free(&c);
}

/* --metrics-port and --health-check-port: [HOST:]PORT, off by default;
 * torchrun's TORCHELASTIC_HEALTH_CHECK_PORT gives the health port. */
TEST(config_metrics_and_health_ports) {
    agent_config c;
    CHECK_EQ(parse(ARGS("x.py"), &c), 0);
    CHECK_EQ(c.metrics_port, -1);
    CHECK_EQ(c.health_port, -1);
    config_free(&c);
    char *env[] = {"TORCHELASTIC_HEALTH_CHECK_PORT=9401", "PET_METRICS_PORT=[::1]:0", NULL};
    CHECK_EQ(parse_in(env, ARGS("x.py"), &c), 0);
    CHECK_EQ(c.health_port, 9401);
    CHECK(c.health_host == NULL);
    CHECK_EQ(c.metrics_port, 0);
    CHECK_STR(c.metrics_host, "::1");
    config_free(&c);
    CHECK_EQ(parse_in(env, ARGS("--metrics-port", "127.0.0.1:9400", "--health-check-port", "",
                                "x.py"), &c), 0);
    CHECK_EQ(c.metrics_port, 9400);
    CHECK_STR(c.metrics_host, "127.0.0.1");
    CHECK_EQ(c.health_port, -1);
    config_free(&c);
    check_fails(no_env, ARGS("--metrics-port", "70000", "x.py"),
                "--metrics-port: '70000' is not PORT or HOST:PORT, with a port from 0 to 65535 "
                "(0: a free one)");
    char *bad[] = {"TORCHELASTIC_HEALTH_CHECK_PORT=yes", NULL};
    check_fails(bad, ARGS("x.py"),
                "TORCHELASTIC_HEALTH_CHECK_PORT: 'yes' is not PORT or HOST:PORT, with a port "
                "from 0 to 65535 (0: a free one)");
}

/* The agent reads no environment itself: what it needs is read here. */
TEST(config_reads_what_the_agent_needs_of_the_environment) {
    char *env[] = {"OMP_NUM_THREADS=4", "CUDA_VISIBLE_DEVICES=2,3", "DDPRUN_STORE_TOKEN=s3",
                   "TORCHELASTIC_ENABLE_FILE_TIMER=1", "TORCHELASTIC_TIMER_FILE=",
                   "TMPDIR=/scratch", "NCCL_ASYNC_ERROR_HANDLING=0",
                   "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", NULL};
    agent_config c;
    CHECK_EQ(parse_in(env, ARGS("x.py"), &c), 0);
    CHECK(c.env.omp_num_threads_set && c.env.nccl_async_set && c.env.file_timer);
    CHECK(c.env.workers_host_store);
    CHECK(!c.env.torch_nccl_async_set);
    CHECK_STR(c.env.cuda_visible_devices, "2,3");
    CHECK_STR(c.env.store_token, "s3");
    CHECK(c.env.timer_file == NULL); /* empty: a new FIFO */
    CHECK_STR(c.env.tmpdir, "/scratch");
    config_free(&c);
    CHECK_EQ(parse(ARGS("x.py"), &c), 0);
    CHECK(!c.env.omp_num_threads_set && !c.env.file_timer && !c.env.cuda_visible_devices);
    CHECK(!c.env.workers_host_store);
    CHECK_STR(c.env.tmpdir, "/tmp");
    config_free(&c);
}
