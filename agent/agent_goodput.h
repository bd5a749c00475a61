/* The node's goodput, kept as the agent runs (the arithmetic: goodput.h):
 * the agent's own timeline (its rendezvous, its worker groups started and
 * gone) and each group's steps from its local rank 0's collective record,
 * read when the group is gone and, for the running one, whenever the
 * figures are asked for (`ddprun status`, the metrics each second, the
 * line at the end). A service of the agent's: it owns its state and its
 * timer. */
#ifndef DDPRUN_AGENT_AGENT_GOODPUT_H
#define DDPRUN_AGENT_AGENT_GOODPUT_H

#include <uv.h>

#include "agent/goodput.h"
#include "agent/metrics.h"

typedef struct agent_goodput agent_goodput;

/* At the agent's start (an agent begins by joining a rendezvous), on loop.
 * 0, or -ENOMEM. */
int agent_goodput_start(uv_loop_t *loop, agent_goodput **out);
/* Where the figures go each second (NULL: nowhere). */
void agent_goodput_publish_to(agent_goodput *g, agent_metrics *m);
/* A rendezvous begins (on 1) or ends (on 0). */
void agent_goodput_rendezvous(agent_goodput *g, int on);
/* A group starts; record: its local rank 0's collective record ("": none). */
void agent_goodput_group_started(agent_goodput *g, const char *record);
/* The running group begins to stop (a failure, a change, the end). */
void agent_goodput_group_stopping(agent_goodput *g);
/* It is gone. */
void agent_goodput_group_gone(agent_goodput *g);
/* What stragglers added to the kept steps (node rank 0's watch), s. */
void agent_goodput_stragglers(agent_goodput *g, double s);
/* The figures now. */
void agent_goodput_view(agent_goodput *g, goodput_view *v);
/* Its line in the log (at the end). */
void agent_goodput_report(agent_goodput *g);
/* Stops its timer; g is freed when the loop next runs its close
 * callbacks. NULL: nothing. */
void agent_goodput_stop(agent_goodput *g);

#endif
