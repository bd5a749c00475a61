/* rank-leaves: a rank 0 that takes part in a ddp-train job's set-up and
 * then goes away in the middle of resuming, for the tests of what the
 * other ranks do when a peer is lost at that point:
 *
 *   rank-leaves HEADER_LEN
 *
 * Read like ddp-train reads it from the environment (RANK=0, WORLD_SIZE,
 * LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), it hosts the
 * job's store as ddp-train's rank 0 does, joins the host communicator
 * under ddp-train's key prefix over TCP only (as ddp-train --no-shm),
 * offers a checkpoint of step 5 from its disk when the ranks agree on what
 * to resume from (so that it is the holder), broadcasts HEADER_LEN as the
 * length of its header (so the other ranks expect the header next) and
 * exits without sending it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/store_thread.h"
#include "worker/comm/comm.h"
#include "worker/train/dist_env.h"
#include "worker/train/resume.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: rank-leaves HEADER_LEN\n");
        return 2;
    }
    uint64_t header_len = strtoull(argv[1], NULL, 10);
    char err[1024];
    dist_env env;
    if (dist_env_read(NULL, -1, &env, err, sizeof err) || env.rank != 0) {
        fprintf(stderr, "rank-leaves: %s\n", env.rank ? "must be rank 0" : err);
        return 2;
    }
    store_thread *store = NULL;
    int port;
    store_server_opts so = {.port = env.master_port};
    if (store_thread_start(&so, &store, &port)) {
        fprintf(stderr, "rank-leaves: cannot host the store on port %d\n", env.master_port);
        return 1;
    }
    comm_opts co = {.store_host = env.master_addr, .store_port = env.master_port, .rank = 0,
                    .world = env.world, .local_rank = env.local_rank,
                    .local_world = env.local_world, .prefix = "/worker/attempt_0/ddp-train/",
                    .timeout_ms = 30000, .no_shm = 1};
    comm *c = NULL;
    int rc = comm_init(&co, &c, err, sizeof err);
    resume_offer mine = {.step = 5, .rank = 0, .in_memory = 0, .host = "rank-leaves"};
    resume_offer *all = calloc((size_t)env.world, sizeof *all);
    if (rc == 0) rc = all ? comm_allgather(c, &mine, all, sizeof mine) : -1;
    free(all);
    if (rc == 0) rc = comm_broadcast(c, &header_len, sizeof header_len, 0);
    if (rc) fprintf(stderr, "rank-leaves: %s\n", err[0] ? err : comm_error(c));
    else fprintf(stderr, "rank-leaves: sent a header length of %llu, leaving\n",
                 (unsigned long long)header_len);
    /* Leave at once, as a rank that dies would: no goodbye to the peers. */
    _exit(rc ? 1 : 0);
}
