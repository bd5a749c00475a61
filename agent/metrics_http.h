/* The agent's HTTP endpoints: GET /metrics (Prometheus' text format, from
 * agent/metrics.c) on --metrics-port, and GET /health (and /) on
 * TORCHELASTIC_HEALTH_CHECK_PORT, torchrun's variable for its health check
 * server: 200 while the workers run and the heartbeat is fresh, else 503
 * with the reason. Any other path is 404, any method but GET and HEAD 405.
 *
 * The server is agent/http_server.c, on a thread of its own, so a slow or
 * stuck scraper never blocks the agent's loop; its deadline per connection
 * and its bounded table keep the port open to everyone while some clients
 * misbehave. The listening socket is bound here, so that a port in use is
 * reported naming the port and the setting that asked for it. */
#ifndef DDPRUN_AGENT_METRICS_HTTP_H
#define DDPRUN_AGENT_METRICS_HTTP_H

#include <stddef.h>

#include "agent/metrics.h"

typedef struct metrics_http metrics_http;

typedef struct {
    const char *setting; /* how messages name it: "--metrics-port" */
    const char *host;    /* the address to listen on ("127.0.0.1", "0.0.0.0", "::") */
    int port;            /* 0: a free port (see *bound) */
    int metrics;         /* serve /metrics */
    int health;          /* serve /health and / */
} metrics_http_opts;

/* Listens and serves m until metrics_http_stop. *bound gets the port.
 * 0, or -errno with a message naming the setting and the port in err. */
int metrics_http_start(const metrics_http_opts *o, agent_metrics *m, metrics_http **out,
                       int *bound, char *err, size_t errlen);
/* Stops the server's thread and closes its socket (NULL: nothing). */
void metrics_http_stop(metrics_http *h);

#endif
