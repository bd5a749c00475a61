/* Each local rank's worker of a round, as the worker group starts it
 * (worker_group.h's worker_spec): the program, torchrun's environment
 * (worker_env.h) and with --tf-config its TF_CONFIG; its log directory
 * <log root>/attempt_<restart count>/<local rank>, made, with a stale error
 * or finished file of an earlier attempt removed (it would be blamed for,
 * or excuse, this one); where its streams go (--redirects, --tee,
 * --local-ranks-filter, the line prefix template, --duplicate-*-filters).
 * A function of its inputs: no agent state. */
#ifndef DDPRUN_AGENT_WORKER_SPECS_H
#define DDPRUN_AGENT_WORKER_SPECS_H

#include "agent/agent_config.h"
#include "agent/worker_env.h"
#include "agent/worker_group.h"
#include "rendezvous/rdzv.h"

typedef struct {
    const agent_config *cfg;
    const rdzv_result *round;
    const worker_env_ctx *env; /* torchrun's environment's inputs */
    const char *log_root;
    const char *hostname;      /* ${hostname} in the prefix template */
    const char *tf_cluster;    /* --tf-config: the round's workers (tf_config.h); NULL: none */
} worker_specs_opts;

typedef struct worker_specs worker_specs;

/* cfg->nproc_per_node specs. 0, or -errno after logging why. */
int worker_specs_make(const worker_specs_opts *o, worker_specs **out);
/* The specs, for worker_group_start (which takes their environments). */
worker_spec *worker_specs_get(worker_specs *s);
/* Frees them; their environments too unless a worker group took them. NULL:
 * nothing. */
void worker_specs_free(worker_specs *s, int envs_taken);

#endif
