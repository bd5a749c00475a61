/* See status_cli.h. The rendezvous flags are torchrun's and mean what they
 * mean to `ddprun` itself (launcher/config.c reads them, PET_* variables
 * included), so the line that started a job, with `status` in front,
 * shows it. */
#include "launcher/status_cli.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/opts.h"
#include "agent/local_jobs.h"
#include "launcher/config.h"
#include "rendezvous/rdzv_backend.h"
#include "rendezvous/rdzv_inspect.h"

static const char USAGE[] =
    "usage: ddprun status [--json] [--watch [SECONDS]] [--rdzv-endpoint HOST:PORT --rdzv-id ID]\n"
    "                     [--rdzv-backend %s] [--rdzv-conf K=V,...]\n"
    "\n"
    "Shows a running (or stuck, or finished) job from its rendezvous: the round, every node\n"
    "(node rank, host, state, heartbeat age), every worker (rank, pid, state, restarts, last\n"
    "exit), the failures with their root cause, and what the job waits for. Any machine that\n"
    "reaches the store (or etcd) can ask; the rendezvous flags are ddprun's own (PET_*\n"
    "variables too), so the command line that started the job, with `status` after ddprun,\n"
    "works. Without --rdzv-endpoint: the job whose agent runs on this machine (of several,\n"
    "the one --rdzv-id names).\n"
    "\n"
    "  --json             one JSON object (with --watch: one a line, each refresh)\n"
    "  --watch [SECONDS]  refresh every SECONDS (default 2) until interrupted\n"
    "\n"
    "Exit status: 0 shown, 1 the store cannot be reached or holds no such job, 2 a bad\n"
    "command line.\n";

static volatile sig_atomic_t stop;
static void on_stop(int sig) {
    (void)sig;
    stop = 1;
}

static const char *str(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}
static long num(json_t *o, const char *k) { return (long)json_integer_value(json_object_get(o, k)); }

/* The agents' ddprun versions: one line when they agree, each node's
 * where they differ (nodes installed at different times). */
static void print_versions(FILE *out, json_t *nodes) {
    const char *first = NULL;
    int differ = 0;
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        const char *v = str(json_object_get(n, "status"), "version");
        if (!v[0]) continue;
        if (!first) first = v;
        else differ |= strcmp(first, v) != 0;
    }
    if (!first) return;
    if (!differ) {
        fprintf(out, "ddprun %s on every node\n", first);
        return;
    }
    fprintf(out, "the nodes run different ddprun builds:");
    json_array_foreach(nodes, i, n) {
        const char *v = str(json_object_get(n, "status"), "version");
        if (v[0]) fprintf(out, " node %ld (%s) %s;", num(n, "node_rank"), str(n, "host"), v);
    }
    fputc('\n', out);
}

static void print_nodes(FILE *out, json_t *nodes) {
    fprintf(out, "\n%-5s %-20s %-11s %-12s %-22s %s\n", "NODE", "HOST", "STATE", "HEARTBEAT",
            "WORKERS", "AGENT");
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        json_t *st = json_object_get(n, "status");
        char rank[16] = "-", beat[32] = "never", workers[64] = "-";
        if (json_is_true(json_object_get(n, "member")) && num(n, "node_rank") >= 0)
            snprintf(rank, sizeof rank, "%ld", num(n, "node_rank"));
        json_t *age = json_object_get(n, "heartbeat_age_s");
        if (json_is_number(age))
            snprintf(beat, sizeof beat, "%.1f s ago%s", json_number_value(age),
                     json_is_true(json_object_get(n, "alive")) ? "" : "!");
        else if (st && !json_is_true(json_object_get(n, "alive")))
            snprintf(beat, sizeof beat, "gone!"); /* etcd: its lease, and its age, went */
        const char *state = st ? str(st, "state") : "?";
        if (!json_is_true(json_object_get(n, "alive")) && st &&
            (strcmp(state, "running") == 0 || strcmp(state, "rendezvous") == 0 ||
             strcmp(state, "stopping") == 0 || strcmp(state, "finishing") == 0))
            state = "lost"; /* it said it ran, and its heartbeat is gone */
        json_t *ws = json_object_get(st, "workers");
        if (json_array_size(ws)) {
            int run = 0, ok = 0, bad = 0;
            size_t k;
            json_t *w;
            json_array_foreach(ws, k, w) {
                const char *s = str(w, "state");
                run += strcmp(s, "running") == 0, ok += strcmp(s, "succeeded") == 0;
                bad += strcmp(s, "failed") == 0;
            }
            snprintf(workers, sizeof workers, "%d running", run);
            if (ok) snprintf(workers + strlen(workers), sizeof workers - strlen(workers), ", %d done", ok);
            if (bad) snprintf(workers + strlen(workers), sizeof workers - strlen(workers), ", %d failed", bad);
        }
        fprintf(out, "%-5s %-20s %-11s %-12s %-22s %s\n", rank, str(n, "host"), state, beat,
                workers, str(n, "agent_id"));
    }
    print_versions(out, nodes);
    json_array_foreach(nodes, i, n) { /* where each node's time went */
        json_t *g = json_object_get(json_object_get(n, "status"), "goodput");
        if (!g) continue;
#define S(k) json_number_value(json_object_get(g, k))
        if (json_is_false(json_object_get(g, "known"))) {
            fprintf(out,
                    "goodput of %s: unknown (the workers keep no step record; ddp-train does): "
                    "of %.0f s, workers ran %.1f s in %ld attempt%s, rendezvous %.1f s\n",
                    str(n, "host"), S("wall_s"), S("run_s"), num(g, "attempts"),
                    num(g, "attempts") == 1 ? "" : "s", S("rendezvous_s"));
            continue;
        }
        fprintf(out,
                "goodput of %s: %.1f%% of %.0f s in steps kept; redone %.1f s, rendezvous %.1f "
                "s, start-up %.1f s, restarts %.1f s, data %.1f s, checkpoints %.1f s, other "
                "%.1f s; stragglers %.1f s\n",
                str(n, "host"), S("ratio") * 100, S("wall_s"), S("redone_s"), S("rendezvous_s"),
                S("startup_s"), S("restarts_s"), S("data_s"), S("checkpoints_s"), S("other_s"),
                S("stragglers_s"));
#undef S
    }
}

static void print_workers(FILE *out, json_t *nodes) {
    int header = 0;
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        json_t *st = json_object_get(n, "status");
        size_t k;
        json_t *w;
        json_array_foreach(json_object_get(st, "workers"), k, w) {
            if (!header++)
                fprintf(out, "\n%-6s %-6s %-20s %-8s %-10s %-9s %s\n", "RANK", "LOCAL", "HOST",
                        "PID", "STATE", "RESTARTS", "LAST EXIT");
            const char *last = str(w, "last_exit");
            /* the group restarts as one: a worker's restarts are its group's */
            fprintf(out, "%-6ld %-6ld %-20s %-8ld %-10s %-9ld %s\n", num(w, "rank"),
                    num(w, "local_rank"), str(n, "host"), num(w, "pid"), str(w, "state"),
                    num(st, "restart_count"), last[0] ? last : "-");
        }
    }
    json_array_foreach(nodes, i, n) {
        size_t k;
        json_t *w, *slow;
        json_array_foreach(json_object_get(json_object_get(n, "status"), "workers"), k, w) {
            if (!(slow = json_object_get(w, "straggler"))) continue;
            double c = json_real_value(json_object_get(slow, "compute_s")),
                   m = json_real_value(json_object_get(slow, "median_s"));
            fprintf(out, "straggler: rank %ld on %s computes %.1f ms a step, the median %.1f ms "
                         "(%+.0f%%)\n",
                    num(w, "rank"), str(n, "host"), c * 1e3, m * 1e3, m > 0 ? (c / m - 1) * 100 : 0);
        }
    }
}

static void print_failures(FILE *out, json_t *fails) {
    size_t n = json_array_size(fails), from = n > 8 ? n - 8 : 0;
    if (!n) return;
    fprintf(out, "\nfailures (%zu%s, oldest first):\n", n, from ? ", the last 8" : "");
    for (size_t i = from; i < n; i++) {
        json_t *f = json_array_get(fails, i);
        const char *msg = str(f, "message");
        fprintf(out, "  round %ld: rank %ld (local rank %ld) on %s, pid %ld: %s%s\n",
                num(f, "round"), num(f, "rank"), num(f, "local_rank"), str(f, "host"),
                num(f, "pid"), msg[0] ? msg : "failed",
                json_is_true(json_object_get(f, "root_cause")) ? "  <- root cause" : "");
    }
}

static void print_text(FILE *out, json_t *j) {
    long min = num(j, "min_nodes"), max = num(j, "max_nodes");
    fprintf(out, "job '%s' (%s): round %ld, %s", str(j, "run_id"), str(j, "where"),
            num(j, "round"), str(j, "phase"));
    json_t *any = json_array_get(json_object_get(j, "nodes"), 0);
    json_t *st = json_object_get(any, "status");
    fprintf(out, "; restarts %ld", num(j, "restart_count"));
    if (st) fprintf(out, " of %ld", num(st, "max_restarts"));
    if (min > 0) fprintf(out, "; nodes %ld:%ld", min, max);
    fprintf(out, "\n");
    const char *why = str(j, "waiting_for");
    fprintf(out, "waiting for: %s\n", why[0] ? why : "nothing");
    print_nodes(out, json_object_get(j, "nodes"));
    print_workers(out, json_object_get(j, "nodes"));
    print_failures(out, json_object_get(j, "failures"));
}

/* Splits status' own flags from the rendezvous flags. */
static int own_flags(int argc, char **argv, int *json, double *watch, char **rest, int *nrest) {
    *nrest = 0;
    rest[(*nrest)++] = "ddprun";
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            *json = 1;
        } else if (strcmp(a, "--watch") == 0 || strncmp(a, "--watch=", 8) == 0) {
            const char *v = a[7] == '=' ? a + 8 : (i + 1 < argc && argv[i + 1][0] != '-') ? argv[++i] : "2";
            char *end;
            *watch = strtod(v, &end);
            if (*end || !(*watch > 0) || *watch > 86400) {
                fprintf(stderr, "ddprun status: --watch takes a number of seconds (> 0), not '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            char backends[128];
            rdzv_backend_names_joined(backends, sizeof backends, "|");
            printf(USAGE, backends);
            return OPTS_HELP_GIVEN;
        } else {
            rest[(*nrest)++] = argv[i];
        }
    }
    rest[(*nrest)++] = "--no-python";
    rest[(*nrest)++] = "true"; /* the program config_parse wants; nothing runs */
    rest[*nrest] = NULL;
    return 0;
}

/* No endpoint given: the job whose agent runs on this machine (of those,
 * the one --rdzv-id names, if given) into *job. 0, or the exit status: 1
 * none runs here, 2 several (listed: which one?). */
static int find_local_job(const char *want_id, local_job *job) {
    local_job *js = NULL;
    size_t n = 0, pick = 0, matching = 0;
    int rc = local_jobs_list(&js, &n);
    int any_id = strcmp(want_id, "none") == 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (any_id || strcmp(js[i].run_id, want_id) == 0) pick = matching++ ? pick : i;
    if (rc || matching == 0) {
        fprintf(stderr, "ddprun status: which job? no ddprun%s%s%s runs on this machine; give "
                        "--rdzv-endpoint HOST:PORT (the store, or etcd's members) and "
                        "--rdzv-id\n",
                any_id ? "" : " of job '", any_id ? "" : want_id, any_id ? "" : "'");
        free(js);
        return 1;
    }
    if (matching > 1) {
        fprintf(stderr, "ddprun status: %zu jobs run on this machine; say which with --rdzv-id "
                        "(and --rdzv-endpoint):\n", matching);
        for (size_t i = 0; i < n; i++)
            if (any_id || strcmp(js[i].run_id, want_id) == 0)
                fprintf(stderr, "  --rdzv-backend %s --rdzv-endpoint %s --rdzv-id %s  (ddprun pid "
                                "%d)\n", js[i].backend, js[i].endpoint, js[i].run_id, (int)js[i].pid);
        free(js);
        return 2;
    }
    *job = js[pick];
    free(js);
    return 0;
}

int status_main(int argc, char **argv, char **environ_) {
    int json = 0;
    double watch = 0;
    char **rest = calloc((size_t)argc + 10, sizeof *rest); /* (+ a local job's 6 flags) */
    int nrest = 0;
    if (!rest) return 1;
    int rc = own_flags(argc, argv, &json, &watch, rest, &nrest);
    if (rc) {
        free(rest);
        return rc == OPTS_HELP_GIVEN ? 0 : 2;
    }
    agent_config cfg;
    char err[1024];
    rc = config_parse(nrest, rest, environ_, &cfg, err, sizeof err);
    local_job job;
    if (rc == 0 && !cfg.rdzv_endpoints && !cfg.master_addr) { /* which job: one that runs here? */
        int found = find_local_job(cfg.rdzv_id, &job);
        config_free(&cfg);
        if (found) {
            free(rest);
            return found;
        }
        /* its rendezvous flags, as if given (before the program's two) */
        const char *more[] = {"--rdzv-backend", job.backend, "--rdzv-endpoint", job.endpoint,
                              "--rdzv-id",      job.run_id,  "--no-python",     "true"};
        nrest -= 2;
        for (size_t i = 0; i < sizeof more / sizeof *more; i++) rest[nrest++] = (char *)more[i];
        rest[nrest] = NULL;
        rc = config_parse(nrest, rest, environ_, &cfg, err, sizeof err);
        if (rc == 0 && job.key_prefix[0])
            free(cfg.rdzv.key_prefix), cfg.rdzv.key_prefix = strdup(job.key_prefix);
    }
    free(rest);
    if (rc) {
        if (rc != OPTS_HELP_GIVEN) fprintf(stderr, "ddprun status: %s\n", err);
        return rc == OPTS_HELP_GIVEN ? 0 : 2;
    }
    rdzv_endpoint where = agent_config_rdzv_endpoint(&cfg, 3000, 3000);
    int cluster = (cfg.rdzv_backend->flags & RDZV_MANY_ENDPOINTS) != 0;
    if (!where.host || (!cluster && where.port <= 0)) {
        fprintf(stderr, "ddprun status: which job? give --rdzv-endpoint HOST:PORT (the store, "
                        "or etcd's members) and --rdzv-id\n");
        config_free(&cfg);
        return 2;
    }
    rdzv_inspect_opts io = {.backend = cfg.rdzv_backend, .where = where,
                            .key_prefix = cfg.rdzv.key_prefix, .run_id = cfg.rdzv_id};
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    int tty = isatty(STDOUT_FILENO), code = 0;
    do {
        json_t *j = NULL;
        rc = rdzv_inspect(&io, &j, err, sizeof err);
        if (rc) {
            fprintf(stderr, "ddprun status: %s\n", err);
            code = 1;
        } else if (!json_is_true(json_object_get(j, "found"))) {
            fprintf(stderr, "ddprun status: no job '%s' at %s (is --rdzv-id right?)\n",
                    cfg.rdzv_id, str(j, "where"));
            code = 1;
        } else {
            code = 0;
            if (json) {
                json_dumpf(j, stdout, JSON_COMPACT);
                fputc('\n', stdout);
            } else {
                if (watch > 0 && tty) fputs("\033[H\033[2J", stdout);
                else if (watch > 0) fputs("----\n", stdout);
                print_text(stdout, j);
            }
            fflush(stdout);
        }
        json_decref(j);
        for (double t = 0; watch > 0 && !stop && t < watch; t += 0.1) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
        }
    } while (watch > 0 && !stop);
    config_free(&cfg);
    return code;
}
