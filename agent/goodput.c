/* See goodput.h. */
#include "agent/goodput.h"

#include <stdio.h>

void goodput_attempt_end(goodput *g, const goodput_attempt *a, double gone) {
    double ended = a->ended > 0 ? a->ended : gone;
    /* starting up (to the first step; all of it when none came): the job's
     * start-up for the first group, a restart's for the others, which also
     * take the stopping of the group before them */
    double up = (a->first_step > 0 ? a->first_step : ended) - a->started;
    if (g->attempts == 0) g->startup_s += up;
    else g->restart_s += up + g->stop_s;
    g->stop_s = gone - ended;
    g->step_s += a->step_s, g->data_s += a->data_s, g->ckpt_s += a->ckpt_s;
    g->recorded |= a->recorded;
    g->run_s += gone - a->started;
    if (a->steps > 0) {
        int64_t last = a->first + a->steps - 1;
        if (a->first <= g->done_max) { /* resumed from before steps already done */
            int64_t again = g->done_max - a->first + 1;
            if (again > a->steps) again = a->steps;
            g->redone_steps += again;
            g->redone_s += (double)again * a->step_s / (double)a->steps;
        }
        if (last > g->done_max) g->done_max = last;
    }
    g->attempts++;
}

void goodput_now(const goodput *g, const goodput_attempt *live, double rdzv_since, double now,
                 goodput_view *v) {
    goodput t = *g;
    if (live) goodput_attempt_end(&t, live, now);
    if (rdzv_since > 0) t.rendezvous_s += now - rdzv_since, t.restart_s += t.stop_s;
    v->wall = now - t.start;
    v->redone = t.redone_s, v->redone_steps = t.redone_steps;
    v->rendezvous = t.rendezvous_s, v->startup = t.startup_s, v->restarts = t.restart_s;
    v->data = t.data_s, v->checkpoints = t.ckpt_s, v->stragglers = t.straggler_s;
    v->kept = t.step_s - t.redone_s - t.data_s - t.ckpt_s;
    if (v->kept < 0) v->kept = 0;
    v->other = v->wall - v->kept - v->redone - v->rendezvous - v->startup - v->restarts -
               v->data - v->checkpoints;
    if (v->other < 0) v->other = 0;
    v->ratio = v->wall > 0 ? v->kept / v->wall : 0;
    v->recorded = t.recorded, v->run = t.run_s, v->attempts = t.attempts;
}

void goodput_line(const goodput_view *v, char *out, size_t len) {
    if (!v->recorded) {
        int restarts = v->attempts > 0 ? v->attempts - 1 : 0;
        char rs[32] = "no restart";
        if (restarts) snprintf(rs, sizeof rs, "%d restart%s", restarts, restarts == 1 ? "" : "s");
        snprintf(out, len,
                 "goodput unknown (the workers keep no step record; ddp-train does): of %.2f s, "
                 "workers ran %.2f s in %d attempt%s (%s), rendezvous %.2f s",
                 v->wall, v->run, v->attempts, v->attempts == 1 ? "" : "s", rs, v->rendezvous);
        return;
    }
    snprintf(out, len,
             "goodput %.1f%% of %.2f s: steps kept %.2f s, redone %.2f s (%lld steps), "
             "rendezvous %.2f s, start-up %.2f s, restarts %.2f s, waiting for data %.2f s, "
             "for checkpoints %.2f s, other %.2f s; stragglers added %.2f s to the kept steps",
             v->ratio * 100, v->wall, v->kept, v->redone, (long long)v->redone_steps,
             v->rendezvous, v->startup, v->restarts, v->data, v->checkpoints, v->other,
             v->stragglers);
}
