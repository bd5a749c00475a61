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
    unsigned flags; /* the kernel's PF_ flags: PROC_PF_EXITING */
} proc_stat;

/* Killed and on its way out (its letter still says R or D while it frees
 * its memory, which takes a GPU's process a quarter of a second). */
#define PROC_PF_EXITING 0x4u

/* 0, or -errno: -ENOENT when the process is gone, -EIO when unreadable. */
int proc_stat_read(pid_t pid, proc_stat *out);

#endif
