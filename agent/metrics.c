/* See metrics.h. The registry is a handful of numbers behind one mutex:
 * the agent records at its events (a few per restart, one a second from
 * the heartbeat), and a scrape renders them into a buffer; nothing here
 * runs per training step. The ranks' files are read at scrape time, by
 * the thread that serves the scrape. */
#include "agent/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/build_info.h"

#define MAX_CAUSES 32
#define CAUSE_LEN 48
#define LABELS_LEN 1024

/* Rendezvous durations, s: from an instant round to the default join
 * timeout. */
static const double round_bounds[] = {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
#define NBOUNDS (sizeof round_bounds / sizeof round_bounds[0])

static const char *state_names[] = {"rendezvous", "running", "stopping", "finished",
                                    "shutdown"};
static const char *worker_state_names[] = {"running", "succeeded", "failed", "terminated"};
#define NSTATES (sizeof state_names / sizeof state_names[0])
#define NWSTATES (sizeof worker_state_names / sizeof worker_state_names[0])

struct agent_metrics {
    pthread_mutex_t mu;
    char labels[LABELS_LEN]; /* run_id="..",role="..",node=".." */
    char *rank_dir;
    double hb_interval;
    int max_restarts;
    metrics_state state;
    unsigned long long starts; /* worker groups started */
    int round, world_size, nodes, restart_count;
    struct {
        char cause[CAUSE_LEN];
        unsigned long long n;
    } fails[MAX_CAUSES];
    int nfails;
    unsigned long long rounds;
    unsigned long long round_le[NBOUNDS]; /* cumulative, as Prometheus has them */
    double round_sum, round_last;
    double hb_last; /* monotonic s; 0: never */
    int nworkers;
    metrics_worker_state *workers;
    goodput_view gp;
    int have_gp;
    struct worker_speed {
        int rank;        /* -1: no window yet */
        double compute;  /* s per step */
        int straggler;
    } *speed;            /* per local rank */
};

/* A label value as the text format wants it: \, " and newline escaped. */
static void escape(char *out, size_t len, const char *s) {
    size_t k = 0;
    for (; s && *s && k + 3 < len; s++) {
        if (*s == '\\' || *s == '"') out[k++] = '\\', out[k++] = *s;
        else if (*s == '\n') out[k++] = '\\', out[k++] = 'n';
        else out[k++] = *s;
    }
    out[k] = '\0';
}

agent_metrics *metrics_new(const metrics_opts *o) {
    agent_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    char run[300], role[300], node[300];
    escape(run, sizeof run, o->run_id);
    escape(role, sizeof role, o->role);
    escape(node, sizeof node, o->node);
    snprintf(m->labels, sizeof m->labels, "run_id=\"%s\",role=\"%s\",node=\"%s\"", run, role,
             node);
    m->hb_interval = o->heartbeat_interval;
    m->max_restarts = o->max_restarts;
    if (o->rank_dir && !(m->rank_dir = strdup(o->rank_dir))) {
        free(m);
        return NULL;
    }
    return m;
}

void metrics_free(agent_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->rank_dir);
    free(m->workers);
    free(m->speed);
    free(m);
}

void metrics_set_state(agent_metrics *m, metrics_state s) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->state = s;
    pthread_mutex_unlock(&m->mu);
}

void metrics_group_started(agent_metrics *m, int n, int round, int world_size, int nodes,
                           int restart_count) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    metrics_worker_state *w = realloc(m->workers, (size_t)(n > 0 ? n : 1) * sizeof *w);
    struct worker_speed *sp = realloc(m->speed, (size_t)(n > 0 ? n : 1) * sizeof *sp);
    if (sp) m->speed = sp;
    if (w && sp) {
        m->workers = w;
        m->nworkers = n;
        for (int i = 0; i < n; i++) w[i] = METRICS_W_RUNNING, sp[i] = (struct worker_speed){-1, 0, 0};
    } else if (w) {
        m->workers = w;
    }
    m->starts++;
    m->round = round, m->world_size = world_size, m->nodes = nodes;
    m->restart_count = restart_count;
    pthread_mutex_unlock(&m->mu);
}

void metrics_worker_exited(agent_metrics *m, int local_rank, metrics_worker_state s) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (local_rank >= 0 && local_rank < m->nworkers) m->workers[local_rank] = s;
    pthread_mutex_unlock(&m->mu);
}

void metrics_worker_speed(agent_metrics *m, int local_rank, int rank, double compute,
                          int straggler) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (local_rank >= 0 && local_rank < m->nworkers)
        m->speed[local_rank] = (struct worker_speed){rank, compute, straggler};
    pthread_mutex_unlock(&m->mu);
}

void metrics_goodput(agent_metrics *m, const goodput_view *v) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->gp = *v, m->have_gp = 1;
    pthread_mutex_unlock(&m->mu);
}

void metrics_worker_failed(agent_metrics *m, int exitcode, int watchdog) {
    if (!m) return;
    char cause[CAUSE_LEN];
    const char *sig = exitcode < 0 ? sigabbrev_np(-exitcode) : NULL;
    if (watchdog) snprintf(cause, sizeof cause, "watchdog");
    else if (exitcode < 0 && sig) snprintf(cause, sizeof cause, "SIG%s", sig);
    else if (exitcode < 0) snprintf(cause, sizeof cause, "signal_%d", -exitcode);
    else snprintf(cause, sizeof cause, "exit_code_%d", exitcode);
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->nfails && strcmp(m->fails[i].cause, cause) != 0) i++;
    if (i == m->nfails && i >= MAX_CAUSES - 1) { /* the last slot gathers the rest */
        snprintf(cause, sizeof cause, "other");
        for (i = 0; i < m->nfails && strcmp(m->fails[i].cause, cause) != 0;) i++;
    }
    if (i == m->nfails) snprintf(m->fails[m->nfails++].cause, CAUSE_LEN, "%s", cause);
    m->fails[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_round(agent_metrics *m, double seconds) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->rounds++;
    m->round_sum += seconds;
    m->round_last = seconds;
    for (size_t i = 0; i < NBOUNDS; i++) m->round_le[i] += seconds <= round_bounds[i];
    pthread_mutex_unlock(&m->mu);
}

void metrics_heartbeat(agent_metrics *m, double now) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->hb_last = now;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---- */

typedef struct {
    buf_t *out;
    int rc;
} writer;

static void put(writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(writer *w, const char *fmt, ...) {
    if (w->rc) return;
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = sizeof line - 1;
    w->rc = buf_append(w->out, line, (size_t)n);
}

static void family(writer *w, const char *name, const char *type, const char *help) {
    put(w, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A number as the format spells it (integers without a fraction). */
static const char *num(char *b, size_t len, double v) {
    if (isnan(v)) return "NaN";
    if (v == floor(v) && fabs(v) < 1e15) snprintf(b, len, "%.0f", v);
    else snprintf(b, len, "%.9g", v);
    return b;
}

static void sample(writer *w, const agent_metrics *m, const char *name, const char *extra,
                   double v) {
    char b[64];
    put(w, "%s{%s%s%s} %s\n", name, m->labels, extra && *extra ? "," : "", extra ? extra : "",
        num(b, sizeof b, v));
}

static void render_rendezvous(writer *w, const agent_metrics *m) {
    family(w, "ddprun_rendezvous_rounds_total", "counter",
           "Rendezvous rounds this agent joined (its first and every re-formed group).");
    sample(w, m, "ddprun_rendezvous_rounds_total", NULL, (double)m->rounds);
    family(w, "ddprun_rendezvous_round", "gauge", "The round the current workers belong to.");
    sample(w, m, "ddprun_rendezvous_round", NULL, m->round);
    family(w, "ddprun_rendezvous_last_duration_seconds", "gauge",
           "How long this agent's last rendezvous took, from joining to the round closing.");
    sample(w, m, "ddprun_rendezvous_last_duration_seconds", NULL, m->round_last);
    family(w, "ddprun_rendezvous_duration_seconds", "histogram",
           "How long this agent's rendezvous rounds took, from joining to the round closing.");
    char le[64], b[32];
    for (size_t i = 0; i < NBOUNDS; i++) {
        snprintf(le, sizeof le, "le=\"%s\"", num(b, sizeof b, round_bounds[i]));
        sample(w, m, "ddprun_rendezvous_duration_seconds_bucket", le, (double)m->round_le[i]);
    }
    sample(w, m, "ddprun_rendezvous_duration_seconds_bucket", "le=\"+Inf\"", (double)m->rounds);
    sample(w, m, "ddprun_rendezvous_duration_seconds_sum", NULL, m->round_sum);
    sample(w, m, "ddprun_rendezvous_duration_seconds_count", NULL, (double)m->rounds);
}

static void render_workers(writer *w, const agent_metrics *m) {
    int count[NWSTATES] = {0};
    for (int i = 0; i < m->nworkers; i++) count[m->workers[i]]++;
    family(w, "ddprun_workers_up", "gauge", "This node's worker processes running now.");
    sample(w, m, "ddprun_workers_up", NULL, count[METRICS_W_RUNNING]);
    family(w, "ddprun_workers", "gauge",
           "This node's workers of the current group by state (running, succeeded, failed, "
           "terminated: stopped by the agent).");
    char st[64];
    for (size_t i = 0; i < NWSTATES; i++) {
        snprintf(st, sizeof st, "state=\"%s\"", worker_state_names[i]);
        sample(w, m, "ddprun_workers", st, count[i]);
    }
    family(w, "ddprun_worker_failures_total", "counter",
           "Worker failures on this node by cause: exit_code_N, the signal's name (SIGKILL), "
           "or watchdog (killed by the worker watchdog).");
    char c[CAUSE_LEN + 16];
    for (int i = 0; i < m->nfails; i++) {
        snprintf(c, sizeof c, "cause=\"%s\"", m->fails[i].cause);
        sample(w, m, "ddprun_worker_failures_total", c, (double)m->fails[i].n);
    }
    int any = 0;
    for (int i = 0; i < m->nworkers; i++) any |= m->speed[i].rank >= 0;
    if (!any) return;
    char r[64];
    family(w, "ddprun_worker_compute_seconds", "gauge",
           "Each worker's compute per step over the straggler watch's last window: its "
           "steps' time less its time blocked in collectives (ddp-train's).");
    for (int i = 0; i < m->nworkers; i++) {
        if (m->speed[i].rank < 0) continue;
        snprintf(r, sizeof r, "local_rank=\"%d\",rank=\"%d\"", i, m->speed[i].rank);
        sample(w, m, "ddprun_worker_compute_seconds", r, m->speed[i].compute);
    }
    family(w, "ddprun_worker_straggler", "gauge",
           "1 for a worker whose compute per step is slower than the job's median by more "
           "than --straggler-threshold, window after window.");
    for (int i = 0; i < m->nworkers; i++) {
        if (m->speed[i].rank < 0) continue;
        snprintf(r, sizeof r, "local_rank=\"%d\",rank=\"%d\"", i, m->speed[i].rank);
        sample(w, m, "ddprun_worker_straggler", r, m->speed[i].straggler);
    }
}

/* Without a step record (a script, not ddp-train) the steps are not
 * known: no ratio, and of the parts only wall, run (the workers' lives)
 * and rendezvous, rather than a goodput of 0 and every second "restarts". */
static void render_goodput(writer *w, const agent_metrics *m) {
    if (!m->have_gp) return;
    const goodput_view *v = &m->gp;
    if (v->recorded) {
        family(w, "ddprun_goodput_ratio", "gauge",
               "The share of this node's wall time since its agent started spent in training "
               "steps that were kept (neither redone after a restart nor waiting for data or "
               "checkpoints); absent where the workers keep no step record.");
        sample(w, m, "ddprun_goodput_ratio", NULL, v->ratio);
    }
    family(w, "ddprun_goodput_seconds", "gauge",
           "Where this node's wall time went, s: wall, kept, redone, rendezvous, startup, "
           "restarts, data, checkpoints, other; stragglers: what stragglers added to the kept steps; "
           "where the workers keep no step record, only wall, run (the workers' lives) and "
           "rendezvous.");
    typedef struct {
        const char *part;
        double s;
    } part;
    const part all[] = {{"wall", v->wall},       {"kept", v->kept},        {"redone", v->redone},
                        {"rendezvous", v->rendezvous}, {"startup", v->startup},
                        {"restarts", v->restarts},
                        {"data", v->data},       {"checkpoints", v->checkpoints},
                        {"other", v->other},     {"stragglers", v->stragglers}},
               known[] = {{"wall", v->wall}, {"run", v->run}, {"rendezvous", v->rendezvous}};
    const part *parts = v->recorded ? all : known;
    size_t nparts = v->recorded ? sizeof all / sizeof all[0] : sizeof known / sizeof known[0];
    char l[48];
    for (size_t i = 0; i < nparts; i++) {
        snprintf(l, sizeof l, "part=\"%s\"", parts[i].part);
        sample(w, m, "ddprun_goodput_seconds", l, parts[i].s);
    }
}

/* Prometheus' convention for what a program is (its *_build_info): a
 * gauge of 1 whose labels say it, so that a dashboard can tell the nodes
 * that run another build. */
static void render_build(writer *w, const agent_metrics *m) {
    build_libs l;
    build_libs_get(&l);
    char labels[256], version[96];
    escape(version, sizeof version, build_version());
    snprintf(labels, sizeof labels,
             "version=\"%s\",cuda=\"%s\",cudnn=\"%s\",nccl=\"%s\",onednn=\"%s\"", version,
             l.cuda, l.cudnn, l.nccl, l.onednn);
    family(w, "ddprun_build_info", "gauge",
           "1, labelled with ddprun's version and the libraries it was built against (empty: "
           "a build without CUDA).");
    sample(w, m, "ddprun_build_info", labels, 1);
}

static void render_agent(writer *w, const agent_metrics *m, double now) {
    render_build(w, m);
    family(w, "ddprun_agent_state", "gauge",
           "1 for what the agent is doing now (rendezvous, running, stopping, finished: "
           "waiting for the other nodes, shutdown), 0 for the rest.");
    char st[64];
    for (size_t i = 0; i < NSTATES; i++) {
        snprintf(st, sizeof st, "state=\"%s\"", state_names[i]);
        sample(w, m, "ddprun_agent_state", st, m->state == (metrics_state)i);
    }
    family(w, "ddprun_restarts_total", "counter",
           "Times this agent restarted its worker group (after a failure anywhere or a "
           "change of membership).");
    sample(w, m, "ddprun_restarts_total", NULL, m->starts > 0 ? (double)(m->starts - 1) : 0);
    family(w, "ddprun_failure_restarts", "gauge",
           "Failure restarts the job has spent (TORCHELASTIC_RESTART_COUNT of the current "
           "workers).");
    sample(w, m, "ddprun_failure_restarts", NULL, m->restart_count);
    family(w, "ddprun_max_restarts", "gauge", "--max-restarts.");
    sample(w, m, "ddprun_max_restarts", NULL, m->max_restarts);
    family(w, "ddprun_world_size", "gauge", "Workers in the current round, on every node.");
    sample(w, m, "ddprun_world_size", NULL, m->world_size);
    family(w, "ddprun_nodes", "gauge", "Nodes in the current round.");
    sample(w, m, "ddprun_nodes", NULL, m->nodes);
    if (m->hb_last > 0) {
        family(w, "ddprun_heartbeat_age_seconds", "gauge",
               "Seconds since this agent last saw its rendezvous heartbeat renewed (while the "
               "workers run, about every second).");
        sample(w, m, "ddprun_heartbeat_age_seconds", NULL, now - m->hb_last);
    }
}

/* ---- the ranks' files ---- */

/* One metric family gathered from every rank's file. */
typedef struct {
    char name[128];
    int have_help, have_type;
    buf_t head, samples;
} rank_family;

typedef struct {
    rank_family *f;
    int n, cap;
} family_set;

/* The family's index in s, added if new; -1 when out of memory. */
static int family_get(family_set *s, const char *name, size_t len) {
    if (len == 0 || len >= sizeof s->f[0].name) return -1;
    for (int i = 0; i < s->n; i++)
        if (strlen(s->f[i].name) == len && memcmp(s->f[i].name, name, len) == 0) return i;
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        rank_family *f = realloc(s->f, (size_t)cap * sizeof *f);
        if (!f) return -1;
        s->f = f, s->cap = cap;
    }
    rank_family *f = &s->f[s->n];
    memset(f, 0, sizeof *f);
    memcpy(f->name, name, len);
    return s->n++;
}

static size_t name_len(const char *s) { return strcspn(s, "{ \t"); }

/* One line of a rank's file into its family (cur: the family the last
 * HELP or TYPE line named); a sample gets this agent's labels added. */
static int take_line(family_set *s, int *cur, const char *line, size_t len,
                     const char *labels) {
    if (len == 0) return 0;
    if (line[0] == '#') {
        int help = len > 7 && strncmp(line, "# HELP ", 7) == 0;
        int type = len > 7 && strncmp(line, "# TYPE ", 7) == 0;
        if (!help && !type) return 0;
        int i = family_get(s, line + 7, name_len(line + 7));
        if (i < 0) return 0;
        *cur = i;
        rank_family *f = &s->f[i];
        int *have = help ? &f->have_help : &f->have_type;
        if (*have) return 0;
        *have = 1;
        int rc = buf_append(&f->head, line, len);
        return rc ? rc : buf_append(&f->head, "\n", 1);
    }
    size_t n = name_len(line);
    int i = *cur;
    /* _sum, _count and _bucket belong to the family the TYPE line named */
    if (i < 0 || strncmp(line, s->f[i].name, strlen(s->f[i].name)) != 0)
        i = family_get(s, line, n);
    if (i < 0 || n >= len) return 0;
    buf_t *out = &s->f[i].samples;
    int rc = buf_append(out, line, n);
    if (rc == 0) rc = buf_append(out, "{", 1);
    if (rc == 0) rc = buf_append(out, labels, strlen(labels));
    const char *rest = line + n;
    if (rc == 0 && *rest == '{') {
        rest++;
        if (*rest != '}') rc = buf_append(out, ",", 1);
    } else if (rc == 0) {
        rc = buf_append(out, "}", 1);
    }
    if (rc == 0) rc = buf_append(out, rest, len - (size_t)(rest - line));
    return rc ? rc : buf_append(out, "\n", 1);
}

static int read_rank_file(family_set *s, const char *path, const char *labels) {
    FILE *f = fopen(path, "r");
    if (!f) return 0; /* replaced or removed since the listing */
    char line[4096];
    int cur = -1, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        rc = take_line(s, &cur, line, len, labels);
    }
    fclose(f);
    return rc;
}

static int is_rank_file(const struct dirent *e) {
    size_t n = strlen(e->d_name);
    return strncmp(e->d_name, "rank_", 5) == 0 && n > 10 &&
           strcmp(e->d_name + n - 5, ".prom") == 0;
}

static int render_ranks(const agent_metrics *m, buf_t *out) {
    if (!m->rank_dir) return 0;
    struct dirent **names = NULL;
    int n = scandir(m->rank_dir, &names, is_rank_file, versionsort);
    if (n < 0) return 0; /* no rank has written yet */
    family_set s = {0};
    int rc = 0;
    char path[4096];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", m->rank_dir, names[i]->d_name);
        if (rc == 0) rc = read_rank_file(&s, path, m->labels);
        free(names[i]);
    }
    free(names);
    for (int i = 0; i < s.n; i++) {
        if (rc == 0 && s.f[i].samples.len) {
            rc = buf_append(out, s.f[i].head.data, s.f[i].head.len);
            if (rc == 0) rc = buf_append(out, s.f[i].samples.data, s.f[i].samples.len);
        }
        buf_free(&s.f[i].head);
        buf_free(&s.f[i].samples);
    }
    free(s.f);
    return rc;
}

int metrics_render(agent_metrics *m, double now, buf_t *out) {
    writer w = {.out = out};
    pthread_mutex_lock(&m->mu);
    render_agent(&w, m, now);
    render_rendezvous(&w, m);
    render_workers(&w, m);
    render_goodput(&w, m);
    pthread_mutex_unlock(&m->mu);
    return w.rc ? w.rc : render_ranks(m, out);
}

int metrics_health(agent_metrics *m, double now, char *body, size_t len) {
    pthread_mutex_lock(&m->mu);
    metrics_state st = m->state;
    double age = m->hb_last > 0 ? now - m->hb_last : -1;
    int up = 0;
    for (int i = 0; i < m->nworkers; i++) up += m->workers[i] == METRICS_W_RUNNING;
    double limit = m->hb_interval;
    pthread_mutex_unlock(&m->mu);
    char why[160] = "";
    if (st == METRICS_RENDEZVOUS) snprintf(why, sizeof why, "rendezvous in progress");
    else if (st == METRICS_STOPPING) snprintf(why, sizeof why, "workers stopping");
    else if (st == METRICS_FINISHED)
        snprintf(why, sizeof why, "workers finished; waiting for the other nodes");
    else if (st == METRICS_SHUTDOWN) snprintf(why, sizeof why, "agent shutting down");
    else if (age < 0) snprintf(why, sizeof why, "no heartbeat yet");
    else if (age > limit)
        snprintf(why, sizeof why, "heartbeat stale for %.0f s (interval %g s)", age, limit);
    int ok = why[0] == '\0';
    snprintf(body, len,
             "{\"status\":\"%s\",\"state\":\"%s\",\"workers_up\":%d,\"heartbeat_age_s\":%.3f%s%s%s}"
             "\n",
             ok ? "ok" : "unavailable", state_names[st], up, age < 0 ? -1.0 : age,
             ok ? "" : ",\"reason\":\"", why, ok ? "" : "\"");
    return ok ? 200 : 503;
}
