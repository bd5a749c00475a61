/* The rendezvous backends, by name: what --rdzv-backend takes, how to
 * reach where a backend keeps the job's keys, and what differs between
 * backends, as flags. Nothing outside rendezvous/ tests a backend's name:
 * it asks for a flag. Adding a backend is its client, its rdzv_kv_*.c, a
 * row in rdzv_backend.c's table, tests and docs. */
#ifndef DDPRUN_RENDEZVOUS_RDZV_BACKEND_H
#define DDPRUN_RENDEZVOUS_RDZV_BACKEND_H

#include <stddef.h>

#include "rendezvous/rdzv_kv.h"

/* Where a backend's keys are. */
typedef struct {
    const char *host;      /* a store: its address and port */
    int port;
    const char *endpoints; /* a cluster: every member, "h1:p1,h2:p2" */
    const char *cacert, *cert, *key, *user, *password; /* its TLS and authentication */
    int connect_timeout_ms; /* a store: connecting */
    int request_timeout_ms; /* a cluster: each request (a member that does not answer */
                            /* in time is passed over) */
} rdzv_endpoint;

/* What differs between backends. */
enum {
    /* The rendezvous meets in the job's TCPStore, which one agent hosts,
     * and the workers use it too. Without: the keys are elsewhere, every
     * agent hosts a store for its own workers, and the round names node
     * rank 0's as theirs (MASTER_ADDR:MASTER_PORT). */
    RDZV_IN_JOB_STORE = 1u << 0,
    /* Node ranks are given (--node-rank) and the node count is fixed. */
    RDZV_FIXED_RANKS = 1u << 1,
    /* --rdzv-endpoint may list several members. */
    RDZV_MANY_ENDPOINTS = 1u << 2,
};

typedef struct {
    const char *name;        /* as --rdzv-backend takes it */
    const char *aliases;     /* torchrun's other spellings, "a,b" ("": none) */
    const char *alias_says;  /* said when one is used: "<alias_says> <endpoint> (<alias_why>)" */
    const char *alias_why;
    const char *endpoint;    /* what --rdzv-endpoint gives it, for messages */
    unsigned flags;          /* RDZV_* */
    /* One handle on where the keys are, or -errno with err naming the
     * place and why. `quiet`: another handle has just found it there, so
     * do not ask again. */
    int (*open)(const rdzv_endpoint *e, int quiet, rdzv_kv **kv, char *err, size_t errlen);
} rdzv_backend;

/* The backend called name (or one of its aliases: *alias set to 1), or
 * NULL. */
const rdzv_backend *rdzv_backend_find(const char *name, int *alias);
/* Every backend's name into out, for messages: "static, c10d or etcd-v3". */
void rdzv_backend_names(char *out, size_t len);
/* The same joined by sep, for usage texts: "static|c10d|etcd-v3". */
void rdzv_backend_names_joined(char *out, size_t len, const char *sep);

#endif
