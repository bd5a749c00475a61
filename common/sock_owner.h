/* Which process on this host holds the other end of a TCP connection, and
 * which rank it says it is: for naming the clients of a store by rank
 * (the store sees only addresses). Reads /proc; nothing found is 0 or -1,
 * never an error: a remote client, or one gone meanwhile, stays an address. */
#ifndef DDPRUN_COMMON_SOCK_OWNER_H
#define DDPRUN_COMMON_SOCK_OWNER_H

#include <sys/types.h>

/* The pid holding the TCP socket whose local port is local_port and whose
 * peer's port is remote_port (IPv4 or IPv6), or 0. */
pid_t sock_owner_pid(int local_port, int remote_port);
/* The integer value of variable name in pid's environment, or -1. */
int sock_owner_env_int(pid_t pid, const char *name);
/* Names the local process at the other end of a connection to local_port
 * from peer_port: "rank R (pid P" or "pid P", then ", addr)" or ")" with
 * addr NULL; just addr (or "") where no process of this host holds it. */
void sock_owner_name(int local_port, int peer_port, const char *addr, char *out, size_t len);

#endif
