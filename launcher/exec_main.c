/* ddprun-exec: how the agent starts each worker (agent/worker_exec.h),
 * linked with libc alone so that it starts at once. Not run by hand:
 *
 *   ddprun-exec __exec-worker PROGRAM [ARGS...]
 */
#include <stdio.h>
#include <string.h>

#include "agent/worker_exec.h"

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "__exec-worker") == 0) return worker_exec_helper(argv + 2);
    fprintf(stderr, "ddprun-exec: ddprun starts its workers through this program; it is not "
                    "run by hand (ddprun --help)\n");
    return 2;
}
