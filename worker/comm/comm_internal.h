/* The communicator's state, shared by its files: comm.c (set-up, the
 * collectives across hosts, failure) and comm_async.c (the thread that runs
 * asynchronous requests). Nothing outside worker/comm*.c includes this. */
#ifndef DDPRUN_WORKER_COMM_COMM_INTERNAL_H
#define DDPRUN_WORKER_COMM_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "worker/comm/comm.h"
#include "worker/comm/comm_ring.h"
#include "worker/comm/comm_shm.h"

/* The queue of asynchronous all-reduces and the thread that runs them. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work queued, a request finished, or stop */
    comm_req *head, *tail;
    int busy;          /* the thread is running a request */
    int stop;
    int started;
    pthread_t thread;
} comm_async;

struct comm {
    int rank, world, timeout_ms;
    /* Hosts are numbered in the order of their lowest rank; "host-major"
     * order lists host 0's ranks, then host 1's, each host's in rank order. */
    int nhosts, host;   /* how many, and this rank's */
    int lindex, lsize;  /* this rank's place on its host, and the host's rank count */
    int *host_of;       /* [world] each rank's host */
    int *host_first;    /* [nhosts + 1] where each host starts in host-major order */
    int *hm_rank;       /* [world] the rank at each host-major position */
    int *hm_pos;        /* [world] each rank's host-major position */
    comm_shm *shm;      /* the ranks of this host (NULL when alone on it) */
    comm_ring ring;     /* the hosts' first ranks (used when nhosts > 1) */
    atomic_int broken;  /* 0, or the error that made the communicator unusable */
    comm_stop stop;     /* comm_destroy and comm_abort_at: in-flight calls give up */
    char err[512];
    comm_async async;
};

/* Runs an all-reduce now, on the calling thread (the async thread calls it
 * for queued requests). Marks the communicator broken on failure. */
int comm_exec_allreduce(comm *c, float *buf, size_t count);

void comm_async_init(comm *c);
/* Returns once every queued request has finished. */
void comm_async_drain(comm *c);
/* Finishes (or cancels) what is queued and joins the thread. */
void comm_async_stop(comm *c);

#endif
