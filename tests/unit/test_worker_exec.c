/* agent/worker_exec.c: which helper starts the workers (ddprun-exec beside
 * ddprun, else ddprun's own entry), and that the helper binds the CPUs it
 * is given and execs the program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/worker_exec.h"
#include "tests/unit/test.h"

TEST(worker_exec_program_is_ddprun_exec_beside_ddprun_else_ddprun) {
    char cwd[900], self[1024], buf[1100];
    if (!getcwd(cwd, sizeof cwd)) test_fail(__FILE__, __LINE__, "getcwd");
    snprintf(self, sizeof self, "%s/build/bin/ddprun", cwd);
    snprintf(buf, sizeof buf, "%s/build/bin/ddprun-exec", cwd);
    if (access(buf, X_OK) != 0) test_skip("build/bin/ddprun-exec is not built (run make)");
    char out[1100];
    CHECK_STR(worker_exec_program(self, out, sizeof out), buf);
    const char *lone = "/nonexistent/dir/ddprun";
    CHECK(worker_exec_program(lone, out, sizeof out) == lone);
}

TEST(worker_exec_helper_binds_the_cpus_then_execs) {
    char cwd[900], helper[1024];
    if (!getcwd(cwd, sizeof cwd)) test_fail(__FILE__, __LINE__, "getcwd");
    snprintf(helper, sizeof helper, "%s/build/bin/ddprun-exec", cwd);
    if (access(helper, X_OK) != 0) test_skip("build/bin/ddprun-exec is not built (run make)");
    const char *out = test_path("affinity");
    char cmd[2200];
    /* CPU 0 alone, as --numa-binding would give one; the program sees the
     * binding and no longer the variable */
    snprintf(cmd, sizeof cmd,
             "DDPRUN_BIND_CPUS=0 %s __exec-worker /bin/sh -c "
             "'grep Cpus_allowed_list /proc/self/status; echo \"var=${DDPRUN_BIND_CPUS:-}\"' > %s",
             helper, out);
    CHECK_EQ(system(cmd), 0);
    FILE *f = fopen(out, "r");
    CHECK(f != NULL);
    char line[256] = "", var[64] = "";
    CHECK(fgets(line, sizeof line, f) != NULL);
    CHECK(fgets(var, sizeof var, f) != NULL);
    fclose(f);
    CHECK(strstr(line, "\t0\n") != NULL);
    CHECK_STR(var, "var=\n");
    snprintf(cmd, sizeof cmd, "%s __exec-worker /nonexistent/program 2>/dev/null", helper);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 127);
}
