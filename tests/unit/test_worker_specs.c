/* agent/worker_specs.c: each local rank's worker of a round, from the
 * command line alone: its log directory made under attempt_<restart> (a
 * stale error file of an earlier attempt removed), its streams where
 * --redirects, --tee and --local-ranks-filter send them (the prefix from
 * the template), and torchrun's environment with its global rank. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/worker_specs.h"
#include "launcher/config.h"
#include "tests/unit/test.h"

/* NAME's value in env ("" when missing, so that a check fails plainly). */
static const char *env_of(char **env, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; env && env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=') return env[i] + n + 1;
    return "";
}

TEST(worker_specs_follow_the_command_line) {
    char *argv[] = {"ddprun", "--nproc-per-node", "3", "--tee", "0:3,1:1", "--redirects",
                    "2:2", "--local-ranks-filter", "0,1", "--role", "trainer",
                    "--log-line-prefix-template", "[${role_name}${rank}@${hostname}]",
                    "--no-python", "/bin/true", NULL};
    char *env[] = {NULL};
    agent_config c;
    char err[512];
    if (config_parse(15, argv, env, &c, err, sizeof err)) test_fail(__FILE__, __LINE__, "%s", err);
    rdzv_result round = {.restart_count = 2, .rank_offset = 6, .world_size = 9,
                         .group_world_size = 3, .group_rank = 2};
    worker_env_ctx ex = {.cfg = &c, .round = &round, .store_addr = "10.0.0.1", .store_port = 29400,
                         .agent_pid = 1};
    const char *root = test_path("logs");
    /* a stale error file of an earlier run of the same attempt */
    char stale[1024];
    CHECK_EQ(mkdir(root, 0700), 0);
    snprintf(stale, sizeof stale, "%s/attempt_2", root);
    CHECK_EQ(mkdir(stale, 0700), 0);
    snprintf(stale, sizeof stale, "%s/attempt_2/1", root);
    CHECK_EQ(mkdir(stale, 0700), 0);
    snprintf(stale, sizeof stale, "%s/attempt_2/1/error.json", root);
    close(open(stale, O_CREAT | O_WRONLY, 0600));
    worker_specs_opts o = {.cfg = &c, .round = &round, .env = &ex, .log_root = root,
                           .hostname = "node7"};
    worker_specs *s;
    CHECK_EQ(worker_specs_make(&o, &s), 0);
    worker_spec *w = worker_specs_get(s);
    CHECK(access(stale, F_OK) != 0); /* removed: it would be blamed for this attempt */
    for (int i = 0; i < 3; i++) {
        char dir[1100], want[1200];
        snprintf(dir, sizeof dir, "%s/attempt_2/%d", root, i);
        struct stat st;
        CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
        snprintf(want, sizeof want, "%s/error.json", dir);
        CHECK_STR(w[i].error_file, want);
        CHECK_EQ(w[i].global_rank, 6 + i);
        char rank[8];
        snprintf(rank, sizeof rank, "%d", 6 + i);
        CHECK_STR(env_of(w[i].env, "RANK"), rank);
        CHECK_EQ(atoi(env_of(w[i].env, "LOCAL_RANK")), i);
        CHECK_STR(env_of(w[i].env, "WORLD_SIZE"), "9");
        CHECK_STR(env_of(w[i].env, "TORCHELASTIC_RESTART_COUNT"), "2");
    }
    /* rank 0: --tee 3, both streams to file and console, prefixed */
    CHECK(w[0].out.file && strstr(w[0].out.file, "attempt_2/0/stdout.log"));
    CHECK(w[0].err.file && strstr(w[0].err.file, "attempt_2/0/stderr.log"));
    CHECK_EQ(w[0].out.console_fd, 1);
    CHECK_EQ(w[0].err.console_fd, 2);
    CHECK(w[0].out.prefix != NULL);
    CHECK_STR(w[0].out.prefix, "[trainer6@node7]");
    CHECK(w[0].out.dup_file && strstr(w[0].out.dup_file, "attempt_2/filtered_stdout.log"));
    /* rank 1: --tee 1, stdout tee'd, stderr to the console alone */
    CHECK(w[1].out.file != NULL && w[1].err.file == NULL);
    CHECK_EQ(w[1].err.console_fd, 2);
    CHECK(w[1].err.prefix == NULL);
    /* rank 2: --redirects 2 (stderr to its file alone), and filtered off the console */
    CHECK(w[2].err.file != NULL && w[2].out.file == NULL);
    CHECK_EQ(w[2].err.console_fd, -1);
    CHECK_EQ(w[2].out.console_fd, -1);
    worker_specs_free(s, 0);
    config_free(&c);
}
