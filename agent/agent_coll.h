/* Where the workers stand in their collectives (agent/coll_blame.h): each
 * worker's record is a file in the agent's directory in memory, named in
 * its DDPRUN_COLL_RECORD. Four times a second while the group runs, the
 * agent looks at them; while one has stood still for half a second or
 * more (a hang in the making, or a long step) it publishes the node's
 * positions to the other agents, every half second (so that what the
 * others read of a rank waiting in a hang is at most that old), and a job
 * whose collectives come faster writes nothing to the store. When a
 * worker fails, the verdict comes from this node's records, read then, and
 * the other nodes' last published positions. A service of the agent's: it
 * owns its state and its timer. */
#ifndef DDPRUN_AGENT_AGENT_COLL_H
#define DDPRUN_AGENT_AGENT_COLL_H

#include <stddef.h>
#include <uv.h>

#include "agent/coll_blame.h"
#include "agent/side_calls.h"
#include "rendezvous/rdzv.h"

typedef struct agent_coll agent_coll;

/* The records' directory in shm_dir (the workers' snapshot directory; ""
 * or one that cannot be made: no records, a warning) for nproc local
 * ranks of this host; positions go out through side (rendezvous side
 * connection `side_conn`). 0, or -ENOMEM. */
int agent_coll_start(uv_loop_t *loop, side_calls *side, int side_conn, const char *shm_dir,
                     const char *hostname, int nproc, agent_coll **out);
/* The directory ("": none). */
const char *agent_coll_dir(const agent_coll *c);
/* Local rank's record file (what its DDPRUN_COLL_RECORD names). */
void agent_coll_path(const agent_coll *c, int local_rank, char *out, size_t len);
/* A group of round `round` starts (the last one's records are removed),
 * its positions published through rd; it has stopped. */
void agent_coll_group_started(agent_coll *c, rdzv *rd, const rdzv_result *round);
void agent_coll_group_stopped(agent_coll *c);
/* The rendezvous is gone: nothing more is published or read from it. */
void agent_coll_store_lost(agent_coll *c);
/* After a failure: which rank the others waited for, from this node's
 * records and the other nodes' published positions; 1 when one is found. */
int agent_coll_verdict(agent_coll *c, coll_verdict *v);
/* Stops its timer; c is freed when the loop next runs its close callbacks
 * and no publication is under way (else when it ends). NULL: nothing. */
void agent_coll_stop(agent_coll *c);

#endif
