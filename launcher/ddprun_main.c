/* ddprun: torchrun's command line in front of ddprun's elastic agent.
 *
 *   ddprun [options] PROGRAM [ARGS...]      (see --help)
 *   ddprun status [--json] [--watch [S]] RENDEZVOUS-FLAGS   (launcher/status_cli.h)
 *
 * Exit status: 0 when every worker succeeded, 1 when the job failed
 * (restarts spent, rendezvous error), 2 for a bad command line, 128+N when
 * stopped by signal N. The binary has one hidden entry, `__exec-worker`,
 * through which the agent starts each worker when ddprun-exec is not
 * beside it (see agent/worker_exec.h). */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/worker_exec.h"
#include "common/log.h"
#include "common/opts.h"
#include "launcher/config.h"
#include "launcher/status_cli.h"

extern char **environ;

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "__exec-worker") == 0) return worker_exec_helper(argv + 2);
    log_init("ddprun");
    if (argc >= 2 && strcmp(argv[1], "status") == 0) return status_main(argc, argv, environ);
    agent_config cfg;
    char err[1024];
    int rc = config_parse(argc, argv, environ, &cfg, err, sizeof err);
    if (rc == OPTS_HELP_GIVEN) return 0; /* printed */
    if (rc) {
        fprintf(stderr, "ddprun: %s\n", err);
        return 2;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
        fprintf(stderr, "ddprun: cannot find its own executable (/proc/self/exe)\n");
        config_free(&cfg);
        return 1;
    }
    exe[n] = 0;
    int code = agent_run(&cfg, exe);
    config_free(&cfg);
    return code;
}
