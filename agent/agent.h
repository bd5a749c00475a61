/* The per-node elastic agent: hosts or finds the rendezvous store, joins
 * rounds, runs the local worker group with torchrun's environment, and
 * restarts the whole group on a failure anywhere or a membership change,
 * until the workers succeed, restarts run out, or a signal stops it. */
#ifndef DDPRUN_AGENT_AGENT_H
#define DDPRUN_AGENT_AGENT_H

#include "agent/agent_config.h"

/* Runs the job on this node; returns the process exit code: 0 success,
 * 1 failure (restarts exhausted, rendezvous error), 128+N on signal N. */
int agent_run(const agent_config *cfg, const char *self_exe);

#endif
