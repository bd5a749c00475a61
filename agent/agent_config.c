/* The agent's configuration: the questions asked of it (which streams a
 * local rank's output goes to, where the job's store and keys are). */
#include "agent/agent_config.h"

int stream_for_rank(const stream_spec *spec, int local_rank) {
    for (int i = 0; i < spec->n; i++)
        if (spec->rank[i] == local_rank) return spec->value[i];
    return spec->dflt;
}

/* torchrun's default --master-port. */
#define MASTER_PORT_DEFAULT 29500

void agent_config_store(const agent_config *c, const char **host, int *port) {
    *host = c->rdzv_host;
    *port = c->rdzv_port;
    if (!(c->rdzv_backend->flags & RDZV_FIXED_RANKS)) return;
    if (c->master_addr) *host = c->master_addr;
    *port = c->master_port > 0 ? c->master_port : c->rdzv_host ? c->rdzv_port : MASTER_PORT_DEFAULT;
}

int agent_config_store_proxy(const agent_config *c) {
    if (c->store_proxy != STORE_PROXY_AUTO) return c->store_proxy == STORE_PROXY_ON;
    return c->max_nodes > 1 && (long)c->max_nodes * c->nproc_per_node >= STORE_PROXY_AUTO_RANKS;
}

rdzv_endpoint agent_config_rdzv_endpoint(const agent_config *c, int connect_timeout_ms,
                                         int request_timeout_ms) {
    rdzv_endpoint e = {.endpoints = c->rdzv_endpoints, .cacert = c->rdzv.cacert,
                       .cert = c->rdzv.cert, .key = c->rdzv.key, .user = c->rdzv.user,
                       .password = c->rdzv.password, .connect_timeout_ms = connect_timeout_ms,
                       .request_timeout_ms = request_timeout_ms};
    agent_config_store(c, &e.host, &e.port);
    return e;
}
