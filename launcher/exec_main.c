/* ddprun-exec: how the agent starts each worker (agent/worker_exec.h),
 * linked with libc alone so that it starts at once. Not run by hand:
 *
 *   ddprun-exec __exec-worker PROGRAM [ARGS...]
 */
#include <stdio.h>
#include <string.h>

#include "agent/worker_exec.h"
#include "common/build_info.h"

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "__exec-worker") == 0) return worker_exec_helper(argv + 2);
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        printf("usage: ddprun-exec __exec-worker PROGRAM [ARGS...]\n\n"
               "How ddprun starts each worker: it sets the parent-death signal (the worker\n"
               "dies with its agent), binds the CPUs of --numa-binding, and execs PROGRAM.\n"
               "ddprun runs it from its own directory; it is not run by hand.\n");
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "--version") == 0)
        return build_info_print(stdout, "ddprun-exec");
    fprintf(stderr, "ddprun-exec: ddprun starts its workers through this program; it is not "
                    "run by hand (ddprun --help)\n");
    return 2;
}
