/* See node_status.h. */
#include "agent/node_status.h"

#include <jansson.h>
#include <stdlib.h>

#include "common/build_info.h"
#include "common/clock.h"

static const char *worker_state(const worker *w, const worker_group *g) {
    if (w->running) return g->stopping ? "stopping" : "running";
    if (w->term_signal == 0 && w->exit_status == 0) return "succeeded";
    return g->stopping ? "stopped" : "failed";
}

char *node_status_json(const node_status *s) {
    json_t *workers = json_array();
    for (int i = 0; s->wg && workers && i < s->wg->n; i++) {
        const worker *w = &s->wg->w[i];
        json_t *o = json_pack("{s:i, s:i, s:i, s:s, s:s}", "local_rank", w->local_rank, "rank",
                              w->global_rank, "pid", w->pid, "state", worker_state(w, s->wg),
                              "last_exit", s->last_exit ? s->last_exit[i] : "");
        if (o && !w->running)
            json_object_set_new(o, w->term_signal ? "signal" : "exit_code",
                                json_integer(w->term_signal ? w->term_signal : w->exit_status));
        if (o && s->slow && s->slow[i].straggler)
            json_object_set_new(o, "straggler",
                                json_pack("{s:f, s:f}", "compute_s", s->slow[i].compute,
                                          "median_s", s->slow[i].median));
        json_array_append_new(workers, o);
    }
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:o}",
        "agent_id", s->agent_id, "host", s->host, "role", s->role, "state", s->state, "pid",
        s->pid, "node_rank", s->node_rank, "round", s->round, "group_world_size",
        s->group_world_size, "world_size", s->world_size, "restart_count", s->restart_count,
        "max_restarts", s->max_restarts, "nproc", s->nproc, "min_nodes", s->min_nodes,
        "max_nodes", s->max_nodes, "since", s->since, "updated", clock_wall_s(), "workers",
        workers ? workers : json_array());
    if (o) json_object_set_new(o, "version", json_string(build_version()));
    const goodput_view *g = s->goodput;
    if (o && g && g->recorded)
        json_object_set_new(
            o, "goodput",
            json_pack("{s:b, s:f, s:f, s:f, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "known",
                      1, "ratio", g->ratio, "wall_s", g->wall, "kept_s", g->kept, "redone_s",
                      g->redone, "redone_steps", (json_int_t)g->redone_steps, "rendezvous_s",
                      g->rendezvous, "startup_s", g->startup, "restarts_s", g->restarts,
                      "data_s", g->data,
                      "checkpoints_s", g->checkpoints, "other_s", g->other, "stragglers_s",
                      g->stragglers));
    else if (o && g) /* no step record (a script): what is known */
        json_object_set_new(o, "goodput",
                            json_pack("{s:b, s:f, s:f, s:f, s:i}", "known", 0, "wall_s", g->wall,
                                      "run_s", g->run, "rendezvous_s", g->rendezvous,
                                      "attempts", g->attempts));
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}
