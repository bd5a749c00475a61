/* See worker_exec.h. Only libc here: ddprun-exec links nothing else, so
 * that it starts in a fraction of a millisecond (ddprun itself loads
 * libuv, hwloc and the rest, paid for every worker of every restart). */
#include "agent/worker_exec.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "common/ddprun_env.h"

/* Reads a Linux CPU list ("0-3,8,10-11") into set. */
static int parse_cpu_list(const char *s, cpu_set_t *set) {
    CPU_ZERO(set);
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0) return -EINVAL;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s || b < a) return -EINVAL;
        }
        if (b >= CPU_SETSIZE) return -ERANGE;
        for (long c = a; c <= b; c++) CPU_SET((int)c, set);
        if (*end == ',') end++;
        else if (*end) return -EINVAL;
        s = end;
    }
    return CPU_COUNT(set) ? 0 : -EINVAL;
}

/* --numa-binding: binds the calling process to the CPU list the agent put
 * in DDPRUN_ENV_BIND_CPUS, if there is one, and removes the variable. 0,
 * or a negative errno with a message in err. (The plan: numa_binding.c.) */
static int bind_from_env(char *err, size_t errlen) {
    const char *v = getenv(DDPRUN_ENV_BIND_CPUS);
    if (!v) return 0;
    cpu_set_t set;
    int rc = parse_cpu_list(v, &set);
    if (rc == 0 && sched_setaffinity(0, sizeof set, &set) != 0) rc = -errno;
    if (rc) snprintf(err, errlen, "cannot bind to CPUs %s: %s", v, strerror(-rc));
    unsetenv(DDPRUN_ENV_BIND_CPUS);
    return rc;
}

int worker_exec_helper(char **argv) {
    /* Dies with the agent; if the agent is already gone, do not start. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const char *agent = getenv(DDPRUN_ENV_AGENT_PID);
    if (agent && getppid() != (pid_t)atoi(agent)) return 1;
    unsetenv(DDPRUN_ENV_AGENT_PID);
    char why[300];
    if (bind_from_env(why, sizeof why)) /* run unbound rather than not at all */
        fprintf(stderr, "ddprun: warning: --numa-binding: %s; running unbound\n", why);
    execvp(argv[0], argv);
    int e = errno;
    fprintf(stderr, "ddprun: cannot run '%s': %s\n", argv[0], strerror(e));
    return e == ENOENT ? 127 : 126;
}

const char *worker_exec_program(const char *self_exe, char *buf, size_t len) {
    const char *slash = strrchr(self_exe, '/');
    if (slash && snprintf(buf, len, "%.*s/" WORKER_EXEC_PROGRAM, (int)(slash - self_exe),
                          self_exe) < (int)len && access(buf, X_OK) == 0)
        return buf;
    return self_exe;
}
