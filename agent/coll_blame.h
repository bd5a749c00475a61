/* Which rank a hung job waited for, from the ranks' collective records
 * (common/coll_record.h): this node's, read from their files, and the
 * other nodes', which their agents publish through the store once a rank
 * has stood still in its collectives for half a second (a hang in the
 * making; a job whose collectives come faster publishes nothing).
 *
 * Every rank issues the same collectives in the same order, so the n-th is
 * the same collective everywhere. When ranks waited in collective #n (for
 * a second or more: a crash's peers, who find out in milliseconds, are no
 * hang), the ranks that never entered it are the ones to blame; when every
 * rank entered it, the one whose last sign of life inside it came first,
 * a second or more before the others' (a rank stopped, or stuck, inside
 * the collective while the others' wait loops went on ticking). */
#ifndef DDPRUN_AGENT_COLL_BLAME_H
#define DDPRUN_AGENT_COLL_BLAME_H

#include <stddef.h>
#include <stdint.h>

#include "common/coll_record.h"

/* One rank's position, in wall-clock times so that nodes compare. */
typedef struct {
    int rank, local_rank, pid;
    char host[128];
    int64_t step;
    uint64_t entered, done;
    char op[COLL_OP_LEN];   /* the entered collective's */
    uint64_t bytes;
    double issued;          /* when it entered it (0: unknown) */
    double alive;           /* its last sign of life inside a collective */
    char state;             /* its process as /proc said when read ('T': stopped), '?' */
} coll_pos;

/* Reads the record at path, local rank local_rank's on host, into *p: 0,
 * or what coll_record_read said. */
int coll_pos_read(const char *path, const char *host, int local_rank, coll_pos *p);
/* The state to keep for a rank seen in `before` and now in `now`: a
 * process stopped or in an uninterruptible wait that is now dying or gone
 * (the watchdog's SIGKILL) keeps what it was, which explains its hang. */
char coll_state_seen(char before, char now);

/* A node's positions read at wall-clock time `at`, as one JSON object
 * (malloc'd; NULL out of memory), and back: appends up to max - *n of
 * them to ps, unless they were read before not_before (-ESTALE: they may
 * predate the hang, and say nothing of it). */
char *coll_pos_json(const coll_pos *ps, int n, double at);
int coll_pos_from_json(const char *json, double not_before, coll_pos *ps, int *n, int max);

typedef struct {
    uint64_t seq;          /* the collective */
    char op[COLL_OP_LEN];
    uint64_t bytes;
    coll_pos blamed[8];    /* the ranks to blame (the first 8) */
    int nblamed;
    int nblamed_all;
    double waited;         /* s: the longest any other rank waited in it */
    char text[1024];       /* the verdict in words */
} coll_verdict;

/* The verdict over n positions: 1 found, 0 none (no hang, or no rank
 * stands out). */
int coll_blame(const coll_pos *ps, int n, coll_verdict *v);
/* Whether rank is one v blames. */
int coll_verdict_blames(const coll_verdict *v, int rank);

#endif
