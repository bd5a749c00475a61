/* Free TCP ports on this host for others to listen on later: TF_CONFIG's
 * workers (tf_config.c) and, with TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1,
 * the store a round's rank 0 worker hosts. Drawn at random below the
 * kernel's ephemeral range (32768 and up by default), each free when drawn.
 * Not bind(0)'s port: the kernel hands a port just closed to the next
 * process that asks, and two agents on one machine then publish the same
 * one. A port is free when drawn, not reserved: whoever listens on it later
 * may still find it taken (as under torchrun). */
#ifndef DDPRUN_AGENT_FREE_PORTS_H
#define DDPRUN_AGENT_FREE_PORTS_H

#include <stddef.h>

/* n different free ports as "p1,p2,..." in out: 0, or -errno with err
 * saying why (what names what they are for, in the message). */
int free_ports(int n, const char *what, char *out, size_t len, char *err, size_t errlen);

#endif
