/* The node's goodput (see agent/goodput.h and agent_internal.h): the
 * agent's own timeline from its state changes, and each worker group's
 * steps from its local rank 0's collective record, read when the group is
 * gone (and, for the running one, whenever the figures are asked for:
 * `ddprun status`, the metrics each second, the last line at the end). */
#include "agent/agent_internal.h"

#include <stdio.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

#define GOODPUT_METRICS_MS 1000

/* The group's figures so far, from local rank 0's record. */
static void read_attempt(agent *a, goodput_attempt *at) {
    char path[sizeof a->coll_dir + 32];
    coll_view v;
    agent_coll_path(a, 0, path, sizeof path);
    if (!a->coll_dir[0] || coll_record_read(path, &v) != 0) return;
    at->recorded = 1;
    at->first = v.first_step;
    at->first_step = v.first_step ? (double)v.first_step_ns * 1e-9 : 0;
    at->steps = v.steps;
    at->step_s = (double)v.step_ns * 1e-9;
    at->data_s = (double)v.data_ns * 1e-9;
    at->ckpt_s = (double)v.ckpt_ns * 1e-9;
}

void agent_goodput_view(agent *a, goodput_view *v) {
    goodput_attempt live = a->gp.attempt;
    if (a->gp.running) read_attempt(a, &live);
    goodput_now(&a->gp.g, a->gp.running ? &live : NULL, a->gp.rdzv_since, clock_now_s(), v);
}

static void on_metrics(uv_timer_t *t) {
    agent *a = t->data;
    if (!a->metrics) return;
    goodput_view v;
    agent_goodput_view(a, &v);
    metrics_goodput(a->metrics, &v);
}

void agent_goodput_start(agent *a) {
    a->gp.g.start = a->gp.rdzv_since = clock_now_s(); /* (an agent begins by joining) */
    uv_timer_init(a->loop, &a->gp.timer);
    a->gp.timer.data = a;
    uv_timer_start(&a->gp.timer, on_metrics, GOODPUT_METRICS_MS, GOODPUT_METRICS_MS);
}

void agent_goodput_state(agent *a, int from, int to) {
    double now = clock_now_s();
    if (to == ST_RDZV && from != ST_RDZV) a->gp.rdzv_since = now;
    if (from == ST_RDZV && to != ST_RDZV && a->gp.rdzv_since > 0) {
        a->gp.g.rendezvous_s += now - a->gp.rdzv_since;
        a->gp.rdzv_since = 0;
    }
    if (from == ST_RUNNING && to != ST_RUNNING && a->gp.running && !a->gp.attempt.ended)
        a->gp.attempt.ended = now;
}

void agent_goodput_group_started(agent *a) {
    a->gp.attempt = (goodput_attempt){.started = clock_now_s()};
    a->gp.running = 1;
}

void agent_goodput_group_gone(agent *a) {
    if (!a->gp.running) return;
    read_attempt(a, &a->gp.attempt);
    goodput_attempt_end(&a->gp.g, &a->gp.attempt, clock_now_s());
    a->gp.running = 0;
}

void agent_goodput_report(agent *a) {
    goodput_view v;
    char line[512];
    agent_goodput_view(a, &v);
    goodput_line(&v, line, sizeof line);
    log_info("%s", line);
}
