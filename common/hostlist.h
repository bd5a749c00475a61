/* Slurm's compressed host lists, as in SLURM_JOB_NODELIST: names separated
 * by commas, where a bracket group stands for a set of numbers
 * ("node[01-04,07],gpu-a[1-2]" is node01 to node04, node07, gpu-a1 and
 * gpu-a2). A range keeps the zero padding of its first number ([08-10]:
 * 08, 09, 10); a name may hold several groups, the leftmost varying
 * slowest (rack[1-2]-n[1-2]: rack1-n1, rack1-n2, rack2-n1, rack2-n2), and
 * text after a group (n[1-2]-ib). Hosts come in the list's order, which is
 * the order of Slurm's node ids. A list is checked as a whole before any
 * host is given out: a malformed one is -EINVAL even where its first host
 * looks fine. */
#ifndef DDPRUN_COMMON_HOSTLIST_H
#define DDPRUN_COMMON_HOSTLIST_H

#include <stddef.h>

/* The longest host name given out, and the most hosts a list may name (a
 * bound that keeps counting from overflowing; clusters are far smaller). */
#define HOSTLIST_NAME_MAX 255
#define HOSTLIST_MAX_HOSTS 1000000000L

/* Called once per host, in order; a nonzero return stops the walk and is
 * returned by hostlist_each. */
typedef int (*hostlist_fn)(const char *host, void *ctx);

/* 0 after every host; fn's nonzero value; -EINVAL for a malformed list;
 * -E2BIG for more than HOSTLIST_MAX_HOSTS hosts; -ENAMETOOLONG for a host
 * longer than HOSTLIST_NAME_MAX. */
int hostlist_each(const char *list, hostlist_fn fn, void *ctx);
/* The number of hosts, without expanding them. 0, -EINVAL or -E2BIG. */
int hostlist_count(const char *list, long *n);
/* Host i (from 0) into out. 0, -EINVAL, -E2BIG, -ERANGE when the list has
 * no host i, or -ENAMETOOLONG when it does not fit in len bytes. */
int hostlist_nth(const char *list, long i, char *out, size_t len);

#endif
