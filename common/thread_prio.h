/* A control-plane thread ahead of the node's other work. */
#ifndef DDPRUN_COMMON_THREAD_PRIO_H
#define DDPRUN_COMMON_THREAD_PRIO_H

/* The nice value the heartbeat's thread takes (rdzv.c). */
#define THREAD_PRIO_CONTROL (-10)

/* Sets the calling thread's nice value (Linux: per thread) where the
 * process may (root, or CAP_SYS_NICE); 0, or -errno and nothing changed.
 * A heartbeat's renewal takes microseconds of CPU, and on a node whose
 * cores are all busy (data loaders, or a thousand agents on two cores)
 * waiting behind that work delayed it past the lease: a false loss. (The
 * store's loop at that priority too made it worse at 1,000 agents on two
 * cores: its stall allowance, which gives every lease back the time the
 * store did not run, stopped covering the agents' delays.) */
int thread_prio_raise(int nice);

#endif
