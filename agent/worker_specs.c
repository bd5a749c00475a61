/* See worker_specs.h. */
#include "agent/worker_specs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/tf_config.h"
#include "agent/worker_output.h"
#include "common/fs.h"
#include "common/log.h"

extern char **environ;

struct worker_specs {
    int n;
    worker_spec *spec;
    /* what the specs' stream options point into */
    char (*out_file)[3200], (*err_file)[3200], (*prefix)[256];
    char dup_file[2][3200];
};

static int console_shown(const agent_config *c, int local_rank) {
    if (!c->local_ranks_filter) return 1;
    for (int i = 0; i < c->n_local_ranks_filter; i++)
        if (c->local_ranks_filter[i] == local_rank) return 1;
    return 0;
}

/* Where one stream of one worker goes: --redirects sends it to its file
 * only, --tee to the file and the console (prefixed, and the lines that
 * match --duplicate-*-filters to the attempt's filtered_*.log too),
 * neither to the console alone. */
static void stream_opts(const agent_config *c, int local_rank, int which, const char *file,
                        char *prefix, const char *dup_file, worker_output_opts *o) {
    int redirect = stream_for_rank(&c->redirects, local_rank) & which;
    int tee = stream_for_rank(&c->tee, local_rank) & which;
    o->file = redirect || tee ? file : NULL;
    o->console_fd = (redirect && !tee) || !console_shown(c, local_rank)
                        ? -1
                        : (which == STREAM_OUT ? 1 : 2);
    o->prefix = tee ? prefix : NULL;
    o->dup_filters = c->dup_filters[which == STREAM_OUT ? 0 : 1].items;
    o->dup_file = tee ? dup_file : NULL;
}

/* A worker's console prefix: torchrun's template, default
 * "[${role_name}${local_rank}]:". */
static void line_prefix(const worker_specs_opts *o, int local_rank, char *out, size_t len) {
    const agent_config *c = o->cfg;
    worker_prefix_vars v = {.role_name = c->role, .local_rank = local_rank,
                            .rank = o->round->rank_offset + local_rank, .hostname = o->hostname};
    const char *t = c->log_line_prefix_template ? c->log_line_prefix_template
                                                : "[${role_name}${local_rank}]:";
    worker_output_prefix(t, &v, out, len, NULL, 0);
}

/* A worker's environment: the agent's, its variables over it, and with
 * --tf-config its TF_CONFIG (too long for a variable of vars). */
static char **with_tf_config(const worker_specs_opts *o, int local_rank,
                             char (*vars)[WORKER_ENV_LEN], int nv) {
    if (!o->cfg->tf_config || !o->tf_cluster) return worker_env_build(environ, vars, nv);
    int n = 0;
    while (environ[n]) n++;
    char **base = calloc((size_t)n + 2, sizeof *base);
    char *tf = tf_config_var(o->tf_cluster, o->round->rank_offset + local_rank);
    char **env = NULL;
    if (base && tf) {
        int k = 0;
        for (int i = 0; i < n; i++) /* a TF_CONFIG of the agent's own is replaced */
            if (strncmp(environ[i], "TF_CONFIG=", 10) != 0) base[k++] = environ[i];
        base[k] = tf;
        env = worker_env_build(base, vars, nv);
    }
    free(tf);
    free(base);
    return env;
}

int worker_specs_make(const worker_specs_opts *o, worker_specs **out) {
    const agent_config *c = o->cfg;
    const rdzv_result *r = o->round;
    int n = c->nproc_per_node, rc = 0;
    worker_specs *s = calloc(1, sizeof *s);
    if (s) {
        s->n = n;
        s->spec = calloc((size_t)n, sizeof *s->spec);
        s->out_file = calloc((size_t)n, sizeof *s->out_file);
        s->err_file = calloc((size_t)n, sizeof *s->err_file);
        s->prefix = calloc((size_t)n, sizeof *s->prefix);
    }
    if (!s || !s->spec || !s->out_file || !s->err_file || !s->prefix) {
        log_error("out of memory starting the workers");
        worker_specs_free(s, 0);
        return -ENOMEM;
    }
    for (int k = 0; k < 2; k++)
        snprintf(s->dup_file[k], sizeof s->dup_file[k], "%s/attempt_%d/filtered_%s.log",
                 o->log_root, r->restart_count, k == 0 ? "stdout" : "stderr");
    char dir[3072], vars[WORKER_ENV_MAX][WORKER_ENV_LEN];
    for (int i = 0; rc == 0 && i < n; i++) {
        worker_spec *w = &s->spec[i];
        snprintf(dir, sizeof dir, "%s/attempt_%d/%d", o->log_root, r->restart_count, i);
        if ((rc = fs_mkdir_p(dir))) {
            log_error("cannot create the log directory %s: %s", dir, strerror(-rc));
            break;
        }
        snprintf(w->error_file, sizeof w->error_file, "%s/error.json", dir);
        unlink(w->error_file); /* a stale one would be blamed for this attempt */
        char finished[PATH_MAX];
        if (worker_finished_file(w->error_file, finished, sizeof finished) == 0)
            unlink(finished); /* nor may a stale one excuse a failure */
        snprintf(s->out_file[i], sizeof s->out_file[i], "%s/stdout.log", dir);
        snprintf(s->err_file[i], sizeof s->err_file[i], "%s/stderr.log", dir);
        line_prefix(o, i, s->prefix[i], sizeof s->prefix[i]);
        stream_opts(c, i, STREAM_OUT, s->out_file[i], s->prefix[i], s->dup_file[0], &w->out);
        stream_opts(c, i, STREAM_ERR, s->err_file[i], s->prefix[i], s->dup_file[1], &w->err);
        int nv = worker_env_vars(o->env, i, w->error_file, vars);
        w->env = with_tf_config(o, i, vars, nv);
        w->argv = c->argv;
        w->global_rank = r->rank_offset + i;
        if (!w->env) {
            log_error("out of memory starting the workers");
            rc = -ENOMEM;
        }
    }
    if (rc) {
        worker_specs_free(s, 0);
        return rc;
    }
    *out = s;
    return 0;
}

worker_spec *worker_specs_get(worker_specs *s) { return s->spec; }

void worker_specs_free(worker_specs *s, int envs_taken) {
    if (!s) return;
    for (int i = 0; !envs_taken && s->spec && i < s->n; i++) free(s->spec[i].env);
    free(s->spec);
    free(s->out_file);
    free(s->err_file);
    free(s->prefix);
    free(s);
}
