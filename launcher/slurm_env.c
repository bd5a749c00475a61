/* Defaults from a Slurm step's environment (see slurm_env.h). The facts
 * used, from Slurm's documentation of srun's output environment: every
 * task of a step has SLURM_JOB_ID, SLURM_STEP_ID, SLURM_STEP_NUM_NODES,
 * SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST (the step's nodes, in node id
 * order) and SLURM_NODEID (this node's index in that list); the batch
 * script and an salloc shell have SLURM_JOB_ID but no step id. The step's
 * values are preferred to the job's (SLURM_JOB_NODELIST, SLURM_NNODES),
 * because a step may run on fewer nodes than the job holds. */
#include "launcher/slurm_env.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostlist.h"
#include "common/err.h"
#include "common/log.h"
#include "common/opts.h"
#include "common/slurm.h"

/* The first variable of names[] that is set and not empty, and its name. */
static const char *env_first(char **env, const char *const *names, const char **which) {
    for (; *names; names++) {
        const char *v = opts_getenv(env, *names);
        if (v && *v) {
            if (which) *which = *names;
            return v;
        }
    }
    return NULL;
}

static int fail(slurm_env_args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int fail(slurm_env_args *a, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = err_vset(a->err, a->errlen, -EINVAL, fmt, ap);
    va_end(ap);
    return rc;
}

/* A whole number from Slurm: 0, 1 when unset, or -EINVAL with a message
 * naming the variable and the flag that would stand in for it. */
static int env_num(slurm_env_args *a, const char *name, int lo, int *out, const char *flag) {
    const char *v = opts_getenv(a->env, name);
    if (!v || !*v) return 1;
    if (opts_parse_int(v, lo, INT_MAX, out) == 0) return 0;
    return fail(a, "%s='%s' is not a whole number from %d (is this really a Slurm step?); "
                "pass %s instead", name, v, lo, flag);
}

/* One srun step's shape, as far as the decision needs it. */
typedef struct {
    const char *job, *step;
    int nodes, tasks;
} step_shape;

/* Says, where it matters, why nothing is taken from a Slurm job that is
 * not a one-task-per-node step. */
static void explain_nothing_taken(slurm_env_args *a, const step_shape *s) {
    static const char *const job_nodes[] = {"SLURM_JOB_NUM_NODES", "SLURM_NNODES", NULL};
    if (s->step && s->tasks != s->nodes) {
        log_warn("Slurm step %s.%s runs %d tasks on %d node%s, not one per node: nothing is "
                 "taken from Slurm, and each ddprun is a job of its own. Start ddprun once per "
                 "node (srun --ntasks-per-node=1) and its workers with --nproc-per-node",
                 s->job, s->step, s->tasks, s->nodes, s->nodes == 1 ? "" : "s");
        return;
    }
    const char *v = env_first(a->env, job_nodes, NULL);
    int n = 0;
    if (v && opts_parse_int(v, 1, INT_MAX, &n) == 0 && n > 1)
        log_warn("Slurm job %s has %d nodes, but ddprun runs outside a srun step (in the batch "
                 "script?), so on this node only: nothing is taken from Slurm. Start it on "
                 "every node with srun --ntasks-per-node=1 ddprun ...", s->job, n);
    else
        log_debug("Slurm job %s, but not a srun step: nothing taken from Slurm", s->job);
}

/* Reads the step's shape; s->step stays NULL outside a step. -1 when the
 * shape cannot be read, with a warning (no flag could stand in for it, so
 * it is no error). */
static int read_shape(slurm_env_args *a, step_shape *s) {
    static const char *const step_ids[] = {"SLURM_STEP_ID", "SLURM_STEPID", NULL};
    const char *step = env_first(a->env, step_ids, NULL);
    if (!step) return 0;
    const char *nodes = opts_getenv(a->env, "SLURM_STEP_NUM_NODES");
    const char *tasks = opts_getenv(a->env, "SLURM_STEP_NUM_TASKS");
    if (!nodes || !tasks) return 0; /* not srun's step environment */
    if (opts_parse_int(nodes, 1, INT_MAX, &s->nodes) || opts_parse_int(tasks, 1, INT_MAX, &s->tasks)) {
        log_warn("Slurm step %s.%s: SLURM_STEP_NUM_NODES='%s', SLURM_STEP_NUM_TASKS='%s' are "
                 "not numbers: nothing taken from Slurm", s->job, step, nodes, tasks);
        return -1;
    }
    s->step = step;
    return 0;
}

/* The text of the line that says what was taken. */
typedef struct {
    char buf[768];
    size_t len;
} took_line;

static void took(took_line *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void took(took_line *t, const char *fmt, ...) {
    if (t->len >= sizeof t->buf) return;
    if (t->len) t->len += (size_t)snprintf(t->buf + t->len, sizeof t->buf - t->len, ", ");
    if (t->len >= sizeof t->buf) return;
    va_list ap;
    va_start(ap, fmt);
    t->len += (size_t)vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
}

static int take_nodes(slurm_env_args *a, const step_shape *s, agent_config *cfg, took_line *t) {
    if (!(a->given & SLURM_GIVEN_NNODES)) {
        cfg->min_nodes = cfg->max_nodes = s->nodes;
        a->nnodes_src = "SLURM_STEP_NUM_NODES";
        took(t, "--nnodes %d (SLURM_STEP_NUM_NODES)", s->nodes);
    }
    if (!(a->given & SLURM_GIVEN_NODE_RANK)) {
        int rc = env_num(a, "SLURM_NODEID", 0, &cfg->node_rank, "--node-rank");
        if (rc < 0) return rc;
        if (rc == 1) return fail(a, "SLURM_NODEID is not set in Slurm step %s.%s; pass "
                                 "--node-rank", s->job, s->step);
        a->node_rank_src = "SLURM_NODEID";
        took(t, "--node-rank %d (SLURM_NODEID)", cfg->node_rank);
    }
    return 0;
}

/* The rendezvous endpoint: node 0, the first host of the step's list. */
static int take_endpoint(slurm_env_args *a, const step_shape *s, agent_config *cfg,
                         took_line *t) {
    static const char *const lists[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST",
                                        "SLURM_NODELIST", NULL};
    const char *which = NULL, *list = env_first(a->env, lists, &which);
    if (!list)
        return fail(a, "Slurm step %s.%s has no node list (SLURM_STEP_NODELIST, "
                    "SLURM_JOB_NODELIST): pass --rdzv-endpoint=HOST[:PORT]", s->job, s->step);
    char host[HOSTLIST_NAME_MAX + 1];
    int rc = hostlist_nth(list, 0, host, sizeof host);
    if (rc)
        return fail(a, "%s='%s' is not a Slurm host list (%s); pass --rdzv-endpoint=HOST[:PORT]",
                    which, list, rc == -E2BIG ? "too many hosts"
                                 : rc == -ENAMETOOLONG ? "a host name is too long" : "malformed");
    unsigned long job, step;
    if (slurm_parse_id(s->job, &job) || slurm_parse_id(s->step, &step))
        return fail(a, "Slurm job '%s', step '%s': not numbers, so no port can be derived from "
                    "them; pass --rdzv-endpoint=HOST:PORT", s->job, s->step);
    char *copy = strdup(host);
    if (!copy) return -ENOMEM;
    free(cfg->rdzv_host);
    cfg->rdzv_host = copy;
    cfg->rdzv_port = slurm_step_port(job, step);
    took(t, "--rdzv-endpoint %s:%d (the first host of %s; the port from the job and step ids)",
         host, cfg->rdzv_port, which);
    return 0;
}

/* --rdzv-id, and with several nodes the c10d rendezvous at node 0. The
 * static backend, if asked for, keeps --master-addr when it has one. */
static int take_rendezvous(slurm_env_args *a, const step_shape *s, agent_config *cfg,
                           took_line *t) {
    if (!(a->given & SLURM_GIVEN_RDZV_ID)) {
        char *copy = strdup(s->job);
        if (!copy) return -ENOMEM;
        free(cfg->rdzv_id);
        cfg->rdzv_id = copy;
        took(t, "--rdzv-id %s (SLURM_JOB_ID)", s->job);
    }
    if (cfg->max_nodes < 2) return 0;
    if (!(a->given & SLURM_GIVEN_RDZV_BACKEND)) {
        cfg->rdzv_backend = rdzv_backend_find("c10d", NULL);
        took(t, "--rdzv-backend c10d");
    }
    int static_with_master = (cfg->rdzv_backend->flags & RDZV_FIXED_RANKS) && cfg->master_addr;
    if (a->given & SLURM_GIVEN_RDZV_ENDPOINT || static_with_master) return 0;
    return take_endpoint(a, s, cfg, t);
}

int slurm_env_defaults(slurm_env_args *a, agent_config *cfg) {
    static const char *const job_ids[] = {"SLURM_JOB_ID", "SLURM_JOBID", NULL};
    a->nnodes_src = a->node_rank_src = NULL;
    step_shape s = {.job = env_first(a->env, job_ids, NULL)};
    if (!s.job) return 0;
    if (read_shape(a, &s)) return 0;
    if (!s.step || s.tasks != s.nodes) {
        explain_nothing_taken(a, &s);
        return 0;
    }
    took_line t = {.len = 0};
    int rc;
    if ((rc = take_nodes(a, &s, cfg, &t))) return rc;
    /* --standalone sets its own rendezvous (and needs one node, which its
     * check says naming SLURM_STEP_NUM_NODES). */
    if (!cfg->standalone && (rc = take_rendezvous(a, &s, cfg, &t))) return rc;
    if (t.len)
        log_info("Slurm job %s, step %s, %d node%s: took %s", s.job, s.step, s.nodes,
                 s.nodes == 1 ? "" : "s", t.buf);
    else
        log_info("Slurm job %s, step %s: nothing taken from Slurm (the options it could give "
                 "were all given)", s.job, s.step);
    return 0;
}
