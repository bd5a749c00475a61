/* Collectives over a ring of TCP connections: each member sends to the
 * next and receives from the previous, so every link carries the same load
 * and bandwidth does not fall as the ring grows. All-reduce is a
 * reduce-scatter then an all-gather (2(n-1) steps of 1/n of the buffer),
 * pipelined: a step forwards each piece as soon as it has been received
 * and added, while the rest of the step is still arriving. Each piece of
 * the result is summed in ring order starting from a fixed member, so a
 * given ring size always gives the same bits.
 *
 * A member that dies closes its sockets (the kernel does it), so its
 * neighbours see EOF or a reset and fail with -ECONNRESET; a member that
 * fails shuts its own sockets down (comm_ring_shutdown), so the failure
 * travels round the ring instead of leaving the others to time out. */
#ifndef DDPRUN_WORKER_COMM_COMM_RING_H
#define DDPRUN_WORKER_COMM_COMM_RING_H

#include <stddef.h>
#include <stdint.h>

#include "worker/comm/comm_call.h"

typedef struct {
    int n, pos;          /* ring size, this member's position */
    int next_rank, prev_rank; /* global ranks, for messages */
    int send_fd, recv_fd; /* to the next member, from the previous one */
    float *stage;        /* where a piece to be added is received */
    size_t stage_bytes;
} comm_ring;

/* Sets the fields to "no ring" (fds -1) so that comm_ring_close is safe. */
void comm_ring_clear(comm_ring *r);
/* A listening socket on every address and a free port (IPv6 and IPv4 where
 * the host has both). */
int comm_ring_listen(int *fd, int *port, comm_call *k);
/* Connects to the next member (next_addr "host:port" or "[v6]:port") and
 * accepts the previous one's connection on listen_fd. job identifies the
 * communicator so that a stray connection from another job is refused. */
int comm_ring_connect(comm_ring *r, int listen_fd, const char *next_addr, int my_rank,
                      uint64_t job, comm_call *k);
void comm_ring_close(comm_ring *r);
/* Stops both connections at once so that the neighbours fail too. */
void comm_ring_shutdown(comm_ring *r);

int comm_ring_allreduce(comm_ring *r, float *buf, size_t count, comm_call *k);
int comm_ring_broadcast(comm_ring *r, void *buf, size_t bytes, int root_pos, comm_call *k);
/* buf holds every member's block (block i at offs[i], lens[i] bytes); this
 * member's own block is filled in, the others are received. */
int comm_ring_allgatherv(comm_ring *r, void *buf, const size_t *offs, const size_t *lens,
                         comm_call *k);
int comm_ring_barrier(comm_ring *r, comm_call *k);

#endif
