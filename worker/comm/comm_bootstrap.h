/* How the ranks of a communicator find each other: each publishes, under
 * the attempt's key prefix in the job's store, the address it listens on,
 * its pid and an identity of its host (ranks with the same identity share
 * memory), then waits for everyone's and reads them all. */
#ifndef DDPRUN_WORKER_COMM_COMM_BOOTSTRAP_H
#define DDPRUN_WORKER_COMM_COMM_BOOTSTRAP_H

#include <stddef.h>
#include <sys/types.h>

#include "store/store_client.h"
#include "worker/comm/comm_call.h"

typedef struct {
    int world;
    char **addr;   /* "host:port" or "[v6]:port" each rank listens on */
    char **hostid; /* equal strings: the ranks can share memory */
    pid_t *pid;
} comm_peers;

/* This process's host identity: host name, boot id, and the IPC, PID and
 * /dev/shm namespaces, so that two containers on one machine that cannot
 * see each other's shared memory or pids count as two hosts.
 * $DDPRUN_COMM_HOST_ID, when set, replaces it (tests use it to make
 * several "hosts" on one machine). */
void comm_bootstrap_hostid(char *buf, size_t len);
/* "host:port" for the address this host reaches the store from (the
 * interface other hosts can reach it on) and the given port. */
int comm_bootstrap_addr(store_client *st, int port, char *buf, size_t len, comm_call *k);
/* Publishes this rank's entry under prefix + "addr/<rank>" and reads
 * everyone's into *out (free with comm_peers_free). */
int comm_bootstrap_exchange(store_client *st, const char *prefix, int rank, int world,
                            const char *addr, const char *hostid, comm_peers *out,
                            comm_call *k);
void comm_peers_free(comm_peers *p);

#endif
