/* See agent_goodput.h. */
#include "agent/agent_goodput.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/coll_record.h"
#include "common/log.h"

#define GOODPUT_METRICS_MS 1000

struct agent_goodput {
    goodput g;
    goodput_attempt attempt; /* the group running or last run */
    int running;             /* attempt is the running group's */
    double rdzv_since;       /* monotonic s: the rendezvous under way began (0: none) */
    char record[640];        /* the running group's local rank 0's record ("": none) */
    agent_metrics *metrics;
    uv_timer_t timer;        /* the metrics' figures, each second */
};

/* The group's figures so far, from local rank 0's record. */
static void read_attempt(const agent_goodput *g, goodput_attempt *at) {
    coll_view v;
    if (!g->record[0] || coll_record_read(g->record, &v) != 0) return;
    at->recorded = 1;
    at->first = v.first_step;
    at->first_step = v.first_step ? (double)v.first_step_ns * 1e-9 : 0;
    at->steps = v.steps;
    at->step_s = (double)v.step_ns * 1e-9;
    at->data_s = (double)v.data_ns * 1e-9;
    at->ckpt_s = (double)v.ckpt_ns * 1e-9;
}

void agent_goodput_view(agent_goodput *g, goodput_view *v) {
    goodput_attempt live = g->attempt;
    if (g->running) read_attempt(g, &live);
    goodput_now(&g->g, g->running ? &live : NULL, g->rdzv_since, clock_now_s(), v);
}

static void on_metrics(uv_timer_t *t) {
    agent_goodput *g = t->data;
    if (!g->metrics) return;
    goodput_view v;
    agent_goodput_view(g, &v);
    metrics_goodput(g->metrics, &v);
}

int agent_goodput_start(uv_loop_t *loop, agent_goodput **out) {
    agent_goodput *g = calloc(1, sizeof *g);
    if (!g) return -ENOMEM;
    g->g.start = g->rdzv_since = clock_now_s();
    uv_timer_init(loop, &g->timer);
    g->timer.data = g;
    uv_timer_start(&g->timer, on_metrics, GOODPUT_METRICS_MS, GOODPUT_METRICS_MS);
    *out = g;
    return 0;
}

void agent_goodput_publish_to(agent_goodput *g, agent_metrics *m) { g->metrics = m; }

void agent_goodput_rendezvous(agent_goodput *g, int on) {
    double now = clock_now_s();
    if (on && !g->rdzv_since) g->rdzv_since = now;
    if (!on && g->rdzv_since > 0) {
        g->g.rendezvous_s += now - g->rdzv_since;
        g->rdzv_since = 0;
    }
}

void agent_goodput_group_started(agent_goodput *g, const char *record) {
    snprintf(g->record, sizeof g->record, "%s", record);
    g->attempt = (goodput_attempt){.started = clock_now_s()};
    g->running = 1;
}

void agent_goodput_group_stopping(agent_goodput *g) {
    if (g->running && !g->attempt.ended) g->attempt.ended = clock_now_s();
}

void agent_goodput_group_gone(agent_goodput *g) {
    if (!g->running) return;
    read_attempt(g, &g->attempt);
    goodput_attempt_end(&g->g, &g->attempt, clock_now_s());
    g->running = 0;
}

void agent_goodput_stragglers(agent_goodput *g, double s) { g->g.straggler_s += s; }

void agent_goodput_report(agent_goodput *g) {
    goodput_view v;
    char line[512];
    agent_goodput_view(g, &v);
    goodput_line(&v, line, sizeof line);
    log_info("%s", line);
}

static void on_closed(uv_handle_t *h) { free(h->data); }

void agent_goodput_stop(agent_goodput *g) {
    if (!g) return;
    uv_timer_stop(&g->timer);
    uv_close((uv_handle_t *)&g->timer, on_closed);
}
