/* Collectives among the ranks of one host through a POSIX shared-memory
 * segment: every rank copies into its own slot, and reads what it needs
 * from the others' slots once they are ready (a barrier for small
 * collectives; published per-round progress for large all-reduces, which
 * are pipelined: rank i sums the i-th share of each round; a buffer in a
 * shared window, which the ranks allocate together, is read in place by
 * the others instead of copied through the slots). Sums are taken
 * in local-rank order, so every rank gets the same bits on every run.
 *
 * The segment is created by the host's first rank under a name unique to
 * the job and unlinked as soon as every local rank has mapped it, so
 * nothing is left in /dev/shm even if the job is killed. A peer that dies
 * is noticed while waiting (its pid is checked every few milliseconds), so
 * the others fail with -ECONNRESET instead of hanging; a rank that fails
 * marks the segment aborted so that its peers fail at once too. */
#ifndef DDPRUN_WORKER_COMM_COMM_SHM_H
#define DDPRUN_WORKER_COMM_COMM_SHM_H

#include <stddef.h>
#include <sys/types.h>

#include "worker/comm/comm_call.h"

typedef struct comm_shm comm_shm;

#define COMM_SHM_MAX_LOCAL 256

/* The host's first rank (index 0) creates the segment; name_hint (the
 * job's key prefix) becomes part of the name, which is written to name
 * for the others. pids[i] is local rank i's process id (for liveness). */
int comm_shm_create(const char *name_hint, int nlocal, const pid_t *pids, comm_shm **out,
                    char *name, size_t namelen, comm_call *k);
/* The others map it by name. */
int comm_shm_attach(const char *name, int nlocal, int index, comm_shm **out, comm_call *k);
/* After every local rank has created or attached: waits for all of them,
 * then removes the name (index 0 does) so the segment dies with its last user. */
int comm_shm_ready(comm_shm *s, comm_call *k);
/* Unmaps (and unlinks the name if comm_shm_ready never did). NULL is fine. */
void comm_shm_destroy(comm_shm *s);

/* Shared windows: memory every local rank can read. Collective: every
 * local rank calls it with the same bytes. *mine is this rank's part,
 * zeroed and page-aligned. -ENOMEM (with a message) when the memory
 * cannot be had, on every rank alike; other errors break the segment. */
int comm_shm_window(comm_shm *s, size_t bytes, void **mine, comm_call *k);
/* Unmaps the window whose part this rank got as mine (not collective);
 * -EINVAL if mine is no such part. */
int comm_shm_window_free(comm_shm *s, void *mine);

/* A large all-reduce of a buffer in a window reads the peers' buffers in
 * place: every local rank must then pass its own part at the same offset
 * (a rank passing other memory, or another count, fails every rank with
 * -EINVAL and a message saying so). */
int comm_shm_allreduce(comm_shm *s, float *buf, size_t count, comm_call *k);
int comm_shm_broadcast(comm_shm *s, void *buf, size_t bytes, int root, comm_call *k);
/* recv (nlocal x bytes) gets every local rank's send, in local-rank order. */
int comm_shm_allgather(comm_shm *s, const void *send, void *recv, size_t bytes, comm_call *k);
int comm_shm_barrier(comm_shm *s, comm_call *k);
/* Tells the local peers this communicator is broken (they fail at once). */
void comm_shm_abort(comm_shm *s, int err);

#endif
