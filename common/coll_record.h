/* The collective record: where a rank stands in its sequence of
 * collectives, in a small file of shared memory that the agent reads
 * without asking the rank anything, so that it reads a rank that is
 * stopped, hung or dead as well as a live one.
 *
 * Every rank of a job issues the same collectives in the same order, so
 * the n-th one is the same collective on every rank. The record numbers
 * them from 1 (as they are issued, in the program's order) and keeps:
 * the last one entered and the last one finished, when this rank was last
 * seen alive inside one (its wait loops tick), its step, and a ring of the
 * last COLL_RING collectives (op, bytes, issued, finished, result); and,
 * for the straggler watch (agent/straggler.h), the steps it finished, their
 * time, and the time it spent blocked in collectives. After
 * a hang, the ranks that never entered collective #n are the ones the
 * others waited for; if every rank entered it, the one that stopped
 * ticking first inside it.
 *
 * The worker writes (ddp-train's host communicator, through
 * DDPRUN_COLL_RECORD, a path the agent gives each worker); the agent reads
 * (coll_record_read). Times are CLOCK_MONOTONIC, which the agent on the
 * same host shares. */
#ifndef DDPRUN_COMMON_COLL_RECORD_H
#define DDPRUN_COMMON_COLL_RECORD_H

#include <stddef.h>
#include <stdint.h>

#define COLL_RING 32
#define COLL_OP_LEN 16

typedef struct coll_record coll_record;

/* The writer's side. Each function does nothing with a NULL record. */

/* Creates (replacing) the record file at path for `rank`: 0, or -errno. */
int coll_record_open(const char *path, int rank, coll_record **out);
/* The record named by $DDPRUN_COLL_RECORD, or NULL (unset, or it cannot
 * be made: a warning on stderr once). */
coll_record *coll_record_from_env(int rank);
void coll_record_close(coll_record *r);
/* A collective issued: its number. */
uint64_t coll_record_enter(coll_record *r, const char *op, uint64_t bytes);
/* Collective seq finished with rc (0: done). */
void coll_record_leave(coll_record *r, uint64_t seq, int rc);
/* A wait loop inside a collective ran: the rank is alive. */
void coll_record_tick(coll_record *r);
/* The training step the rank is in, from now: the step before it ends
 * here (its time counted). */
void coll_record_step(coll_record *r, int64_t step);
/* The step under way (if any) ends here, and no other begins (the end of
 * an epoch: what follows, its evaluation, is no step). */
void coll_record_step_end(coll_record *r);
/* The rank waited ns for a collective (blocked: not computing). */
void coll_record_blocked(coll_record *r, int64_t ns);
/* Within its steps, the rank waited ns for its batch (data) or for a
 * checkpoint or snapshot to be handed over (ckpt). For the goodput
 * accounting (agent/goodput.h). */
void coll_record_data_wait(coll_record *r, int64_t ns);
void coll_record_ckpt_wait(coll_record *r, int64_t ns);
/* The last collective entered and the last finished (0, 0 with a NULL
 * record): atomic loads only, safe in a signal handler. */
void coll_record_position(const coll_record *r, uint64_t *entered, uint64_t *done);

/* One collective as the reader sees it. */
typedef struct {
    uint64_t seq;
    char op[COLL_OP_LEN];
    uint64_t bytes;
    int64_t issued_ns, ended_ns; /* ended 0: not finished */
    int rc;
} coll_entry_view;

/* A record read back. */
typedef struct {
    int rank, pid;
    int64_t step;
    uint64_t entered, done; /* the last entered, the last finished (0: none) */
    int64_t alive_ns;       /* the last sign of life inside a collective (or entering one) */
    int64_t steps, step_ns; /* steps finished in this process, and their time */
    int64_t blocked_ns;     /* time spent blocked in collectives (in steps or not) */
    int64_t data_ns, ckpt_ns; /* within steps: waits for data, for checkpoints */
    int64_t first_step;     /* the first step this process ran (0: none yet) */
    int64_t first_step_ns;  /* when it began (CLOCK_MONOTONIC) */
    int n;                  /* entries, oldest first */
    coll_entry_view ring[COLL_RING];
} coll_view;

/* Reads the record at path: 0, -ENOENT (none: the worker never made one),
 * or -EINVAL (not a record). */
int coll_record_read(const char *path, coll_view *out);
/* The entry for seq in v, or NULL when it is no longer in the ring. */
const coll_entry_view *coll_view_entry(const coll_view *v, uint64_t seq);

#endif
