/* See agent_store.h. */
#include "agent/agent_store.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/store_client.h"

/* Whether host names this machine (a loopback address, or one of its own). */
static int is_local_address(const char *host) {
    char me[256];
    if (gethostname(me, sizeof me) == 0 && strcmp(me, host) == 0) return 1;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
    struct ifaddrs *ifs = NULL;
    getifaddrs(&ifs);
    int local = 0;
    for (struct addrinfo *ai = res; ai && !local; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            struct in_addr in = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
            local = (ntohl(in.s_addr) >> 24) == 127;
        } else if (ai->ai_family == AF_INET6) {
            local = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
        }
        for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != ai->ai_family) continue;
            if (ai->ai_family == AF_INET)
                local = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr ==
                        ((struct sockaddr_in *)ai->ai_addr)->sin_addr.s_addr;
            else
                local = memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                               &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, 16) == 0;
        }
    }
    freeifaddrs(ifs);
    freeaddrinfo(res);
    return local;
}

/* Whether a ddprun store answers on host:port: 1 yes; 0 something else
 * listens there; -1 nothing listens (connections refused for 2 s). Another
 * agent on this host that has just bound the port may not listen yet, so
 * a refused connection is tried again until then. */
static int probe_store(const char *host, int port) {
    store_client_opts o = {.host = host, .port = port, .connect_timeout_ms = 500,
                           .timeout_ms = 2000};
    int64_t give_up = clock_now_ms() + 2000;
    for (;;) {
        store_client *c = NULL;
        int rc = store_client_connect(&o, &c);
        if (rc == 0) {
            int ok = store_set_owned(c, "/ddprun/probe", "1", 1, 0) == 0;
            store_client_close(c);
            return ok;
        }
        if (clock_now_ms() >= give_up) return rc == -ECONNREFUSED ? -1 : 0;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* A single-node job that names no store (no --master-port, --master-addr
 * or --rdzv-endpoint) gets its own on a free port, as torch >= 2.12 does:
 * a fixed default port would let a second such job on the machine join
 * the first one's rendezvous as a spare. */
static int own_single_node_store(const agent_config *c) {
    return (c->rdzv_backend->flags & RDZV_FIXED_RANKS) && c->max_nodes == 1 && c->master_port < 0 &&
           !c->master_addr && !c->rdzv_host;
}

/* Hosts the store, or finds that another agent of this host does (1).
 * Two agents that listen on the port at the same moment can both be
 * refused (each sees the other listening): then nobody serves, and both
 * try again a random moment apart. */
static int store_start_or_find(const agent_config *c, const store_server_opts *so,
                               const char *addr, int port, store_thread **host, int *bound) {
    unsigned seed = (unsigned)getpid() ^ (unsigned)clock_now_ms(); /* apart from the other agent */
    for (int attempt = 0;; attempt++) {
        int rc = store_thread_start(so, host, bound);
        if (rc != UV_EADDRINUSE || c->standalone) return rc;
        int found = probe_store(addr, port);
        if (found > 0) return 1;
        if (found == 0 || attempt == 3) return rc; /* another program listens there */
        struct timespec ts = {0, (long)(10 + rand_r(&seed) % 200) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int agent_store_setup(const agent_config *c, const char *hostname, agent_store *s) {
    memset(s, 0, sizeof *s);
    int host_it, port;
    const char *addr;
    unsigned flags = c->rdzv_backend->flags;
    if (!(flags & RDZV_IN_JOB_STORE)) { /* the keys are elsewhere: a store for its workers */
        addr = hostname, port = 0, host_it = 1;
    } else if (c->standalone || own_single_node_store(c)) {
        addr = "127.0.0.1", port = 0, host_it = 1;
    } else if (flags & RDZV_FIXED_RANKS) {
        agent_config_store(c, &addr, &port);
        if (!addr) addr = "127.0.0.1";
        host_it = c->node_rank <= 0;
    } else {
        if (!c->rdzv_host) {
            log_error("--rdzv-backend=%s needs --rdzv-endpoint=%s", c->rdzv_backend->name,
                      c->rdzv_backend->endpoint);
            return -EINVAL;
        }
        addr = c->rdzv_host, port = c->rdzv_port;
        host_it = c->rdzv.is_host >= 0 ? c->rdzv.is_host : is_local_address(addr);
    }
    snprintf(s->addr, sizeof s->addr, "%s", addr);
    s->port = port;
    if (!host_it) return 0;
    int bound = 0;
    store_server_opts so = {.host = c->standalone || own_single_node_store(c) ? addr : NULL,
                            .port = port,
                            .token = c->env.store_token,
                            .stall_report_ms = (int)(c->env.store_stall_s * 1000)};
    int rc = store_start_or_find(c, &so, addr, port, &s->host, &bound);
    if (rc == 1) {
        log_debug("another agent on this host already serves the store on port %d", port);
        return 0;
    }
    if (rc == 0) {
        s->port = bound;
        if (!(flags & RDZV_IN_JOB_STORE))
            log_debug("this node's store for its workers is on port %d", bound);
        else if (own_single_node_store(c))
            log_info("a single-node job without --master-port: its store is on a free port, "
                     "%s:%d, so that no other job on this machine can join it", addr, bound);
        else if (c->standalone) /* (a port and an id drawn here: nobody else can know them) */
            log_info("--standalone: to see this job, ddprun status --rdzv-endpoint %s:%d "
                     "--rdzv-id %s", addr, bound, c->rdzv_id);
        else
            log_debug("hosting the rendezvous store on port %d", bound);
        return 0;
    }
    if (rc == UV_EADDRINUSE)
        log_error("port %d on this host is in use by another program (not a ddprun store); "
                  "choose another %s port",
                  port, flags & RDZV_FIXED_RANKS ? "--master-port" : "--rdzv-endpoint");
    else
        log_error("cannot host the rendezvous store on port %d: %s", port, uv_strerror(rc));
    return rc;
}

void agent_store_linger(const agent_store *s, const char *rdzv_id, const char *agent_id) {
    if (!s->host) return;
    store_client_opts o = {.host = "127.0.0.1", .port = s->port, .timeout_ms = 2000,
                           .connect_timeout_ms = 2000};
    store_client *c = NULL;
    if (store_client_connect(&o, &c) != 0) return;
    char prefix[300];
    snprintf(prefix, sizeof prefix, "/ddprun/%s/alive/", rdzv_id);
    for (int i = 0; i < 100; i++) {
        char **keys = NULL;
        size_t n = 0, others = 0;
        if (store_list_keys(c, &keys, &n) != 0) break;
        for (size_t k = 0; k < n; k++)
            others += strncmp(keys[k], prefix, strlen(prefix)) == 0 &&
                      !strstr(keys[k], agent_id);
        store_free_keys(keys, n);
        if (others == 0) break;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    store_client_close(c);
}


int agent_store_proxy_start(agent_store *s, const agent_config *c, uv_loop_t *loop) {
    if (!agent_config_store_proxy(c)) return 0;
    store_proxy_opts o = {.upstream_host = s->host ? "127.0.0.1" : s->addr,
                          .upstream_port = s->port, .token = c->env.store_token,
                          .stall_report_ms = (int)(c->env.store_stall_s * 1000)};
    int rc = store_proxy_start(loop, &o, &s->proxy);
    if (rc) {
        log_error("--store-proxy: cannot listen on 127.0.0.1 for this node's workers: %s",
                  strerror(-rc));
        return rc;
    }
    log_info("store proxy: this node's workers reach the job's store at %s:%d through "
             "127.0.0.1:%d, on one connection", s->addr, s->port, store_proxy_port(s->proxy));
    return 0;
}

int agent_store_proxy_round(agent_store *s, const rdzv_result *r) {
    if (!s->proxy || r->worker_hosted) return 0;
    char host[sizeof s->addr];
    int port = s->port;
    const char *colon = r->master_store[0] ? strrchr(r->master_store, ':') : NULL;
    if (colon) { /* etcd-v3: node rank 0's own store */
        snprintf(host, sizeof host, "%.*s", (int)(colon - r->master_store), r->master_store);
        port = atoi(colon + 1);
    } else {
        snprintf(host, sizeof host, "%s", s->host ? "127.0.0.1" : s->addr);
    }
    if (host[0] == '[') { /* "[v6]" */
        memmove(host, host + 1, strlen(host));
        host[strcspn(host, "]")] = 0;
    }
    int rc = store_proxy_retarget(s->proxy, host, port);
    if (rc) {
        log_warn("store proxy: %s; this round's workers reach the store directly", strerror(-rc));
        return 0;
    }
    return store_proxy_port(s->proxy);
}

void agent_store_stop(agent_store *s) {
    store_thread_stop(s->host);
    s->host = NULL;
    store_proxy_close(s->proxy, NULL, NULL);
    s->proxy = NULL;
}
