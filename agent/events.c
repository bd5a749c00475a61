/* See events.h. */
#include "agent/events.h"

#include "common/clock.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void event_worker_status(FILE *out, const worker_event *e) {
    char name[96];
    snprintf(name, sizeof name, "torchelastic.worker.status.%s", e->state);
    json_t *extra = json_pack("{s:i}", "exit_code", e->exit_code);
    char *extra_s = extra ? json_dumps(extra, JSON_COMPACT) : NULL;
    json_t *md = json_pack(
        "{s:s, s:i, s:i, s:i, s:s, s:s, s:s, s:i, s:s, s:s?, s:s?, s:i}", "run_id", e->run_id,
        "global_rank", e->global_rank, "group_rank", e->group_rank, "worker_id", e->pid, "role",
        e->role, "hostname", e->hostname, "state", e->state, "total_run_time",
        (int)(e->run_time_s + 0.5), "rdzv_backend", e->rdzv_backend, "raw_error", e->raw_error,
        "metadata", extra_s, "agent_restarts", e->agent_restarts);
    json_t *ev = md ? json_pack("{s:s, s:s, s:I, s:o}", "name", name, "source", "WORKER",
                                "timestamp", (json_int_t)(clock_wall_s() * 1000), "metadata", md)
                    : NULL;
    char *line = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
    if (line) {
        fprintf(out, "%s\n", line);
        fflush(out);
    }
    free(line);
    free(extra_s);
    json_decref(ev);
    json_decref(extra);
}
