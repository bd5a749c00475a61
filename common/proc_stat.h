/* A process's state from /proc/PID/stat ("pid (comm) state ppid pgrp
 * ..."): the command name may hold spaces and parentheses, so the last ')'
 * ends it. One reader for the agent (orphans, hang verdicts) and the
 * worker's shared-memory communicator (a peer's death). */
#ifndef DDPRUN_COMMON_PROC_STAT_H
#define DDPRUN_COMMON_PROC_STAT_H

#include <sys/types.h>

typedef struct {
    char state; /* 'R', 'S', 'D', 'T' (stopped), 'Z' (exited, not reaped), ... */
    pid_t ppid, pgid;
} proc_stat;

/* 0, or -errno: -ENOENT when the process is gone, -EIO when unreadable. */
int proc_stat_read(pid_t pid, proc_stat *out);

#endif
