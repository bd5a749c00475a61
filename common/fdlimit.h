/* Descriptor limits for the programs that hold many connections. */
#ifndef DDPRUN_COMMON_FDLIMIT_H
#define DDPRUN_COMMON_FDLIMIT_H

/* Thousands of connections need thousands of descriptors: raise the soft
 * RLIMIT_NOFILE to the hard limit rather than fail at the soft one (often
 * 1024). Best effort; nothing is reported. */
void fdlimit_raise(void);

#endif
