/* --tf-config: TensorFlow's TF_CONFIG for every worker, as
 * tf.distribute.MultiWorkerMirroredStrategy reads it:
 * {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker",
 * "index": i}}, the round's workers in global rank order and i the
 * worker's global rank. Each agent picks a free port for each of its
 * workers once, at its start, and publishes them through the rendezvous
 * (rdzv_opts.worker_ports), so workers that share a machine never collide;
 * each round (a restart, nodes joining or leaving) gets its own list. */
#ifndef DDPRUN_AGENT_TF_CONFIG_H
#define DDPRUN_AGENT_TF_CONFIG_H

#include <stddef.h>

#include "rendezvous/rdzv.h"

/* n free TCP ports, "p1,p2,...", into out. 0, or -errno with err. */
int tf_config_ports(int n, char *out, size_t len, char *err, size_t errlen);

/* The cluster's worker list of a round, a JSON array (malloc'd); NULL with
 * err when a node published no ports, or too few, or out of memory. */
char *tf_config_cluster(const rdzv_result *round, char *err, size_t errlen);

/* "TF_CONFIG=..." for the worker of global rank `index` (malloc'd). */
char *tf_config_var(const char *cluster, int index);

#endif
