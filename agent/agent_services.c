/* What the agent starts and stops around its workers (see
 * agent_internal.h), in order: the node's directories, the collective and
 * straggler watches (with the straggler watch's hooks), the reporter, the
 * metrics and health servers, NUMA binding, the worker watchdog, the job's
 * store, the note for `ddprun status`, and the rendezvous; and their stops
 * at the end. */
#include "agent/agent_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/free_ports.h"
#include "agent/local_jobs.h"
#include "agent/stacks.h"
#include "agent/tf_config.h"
#include "agent/worker_env.h"
#include "common/ddprun_env.h"
#include "common/fs.h"
#include "common/log.h"

int agent_note_local_job(agent *a) {
    const agent_config *c = a->cfg;
    local_job j = {.pid = getpid()};
    snprintf(j.backend, sizeof j.backend, "%s", c->rdzv_backend->name);
    if (c->rdzv_backend->flags & RDZV_MANY_ENDPOINTS)
        snprintf(j.endpoint, sizeof j.endpoint, "%s", c->rdzv_endpoints ? c->rdzv_endpoints : "");
    else
        snprintf(j.endpoint, sizeof j.endpoint, strchr(a->store.addr, ':') ? "[%s]:%d" : "%s:%d",
                 a->store.addr, a->store.port);
    snprintf(j.run_id, sizeof j.run_id, "%s", c->rdzv_id);
    snprintf(j.key_prefix, sizeof j.key_prefix, "%s", c->rdzv.key_prefix ? c->rdzv.key_prefix : "");
    node_dirs_note_job(a->dirs, &j);
    return 0; /* (the job runs on without it) */
}

/* The rendezvous renewed the heartbeat (on its thread). */
static void on_beat(void *ctx, int64_t now_ms) {
    metrics_heartbeat(((agent *)ctx)->metrics, (double)now_ms / 1000);
}

/* etcd-v3: node rank 0's own store serves the workers; what workers of an
 * earlier round left there goes before the rendezvous lets the other nodes
 * start theirs (on its thread; the c10d rendezvous does this for its store
 * itself). */
static int clear_own_store(void *ctx, size_t *cleared) {
    agent *a = ctx;
    rdzv_kv *kv = NULL;
    int rc = rdzv_kv_store_open("127.0.0.1", a->store.port, 2000, &kv);
    if (rc == 0) rc = rdzv_clear_worker_keys(kv, NULL, cleared);
    if (rc) log_warn("cannot clear the workers' keys of an earlier round: %s", strerror(-rc));
    kv_close(kv);
    return 0; /* the round goes on: a fresh store has nothing to clear */
}

/* TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, on node rank 0 of a round (on the
 * rendezvous' thread): where the round's rank 0 worker will host the
 * workers' store, a free port of this host, reachable as the other nodes
 * reach this one (a single-node job: loopback). */
static int worker_hosted_store(void *ctx, char *hostport, size_t len) {
    agent *a = ctx;
    char port[16], err[256];
    int rc = free_ports(1, "the workers' store (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)", port,
                        sizeof port, err, sizeof err);
    if (rc) {
        log_error("%s", err);
        return rc;
    }
    snprintf(hostport, len, "%s:%s", a->cfg->max_nodes == 1 ? "127.0.0.1" : a->hostname, port);
    log_info("TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: this round's rank 0 worker hosts the "
             "workers' store, on %s", hostport);
    return 0;
}

int agent_open_rendezvous(agent *a) {
    const agent_config *c = a->cfg;
    unsigned flags = c->rdzv_backend->flags;
    int fixed = (flags & RDZV_FIXED_RANKS) != 0, apart = !(flags & RDZV_IN_JOB_STORE);
    char own[300];
    snprintf(own, sizeof own, "%s:%d", a->store.addr, a->store.port);
    /* A cluster member that does not answer within half a heartbeat is
     * passed over before the leases notice. */
    int member_ms = (int)(c->rdzv.keep_alive_interval * 500);
    rdzv_opts o = {.backend = c->rdzv_backend,
                   .where = agent_config_rdzv_endpoint(c, (int)(c->rdzv.join_timeout * 1000),
                                                       member_ms > 1000 ? member_ms : 1000),
                   .key_prefix = c->rdzv.key_prefix, .store_addr = apart ? own : NULL,
                   .run_id = c->rdzv_id, .min_nodes = c->min_nodes, .max_nodes = c->max_nodes,
                   .node_rank = fixed && c->node_rank < 0 ? 0 : c->node_rank,
                   .strict_ranks = fixed,
                   .nproc = c->nproc_per_node, .hostname = a->hostname,
                   .join_timeout = c->rdzv.join_timeout,
                   .last_call_timeout = c->rdzv.last_call_timeout,
                   .heartbeat = c->rdzv.keep_alive_interval, .max_restarts = c->max_restarts,
                   .on_beat = on_beat,
                   .clear_own_store = apart && a->store.host ? clear_own_store : NULL,
                   .worker_hosted_store = c->env.workers_host_store ? worker_hosted_store : NULL,
                   .ctx = a};
    if (c->tf_config) { /* its workers' ports for TF_CONFIG, the same every round */
        char err[300];
        int rc = tf_config_ports(c->nproc_per_node, a->tf_ports, sizeof a->tf_ports, err,
                                 sizeof err);
        if (rc) {
            log_error("%s", err);
            return rc;
        }
        o.worker_ports = a->tf_ports;
    }
    if (!apart) { /* the job's store: this agent's own, or where it was found */
        o.where.host = a->store.host ? "127.0.0.1" : a->store.addr;
        o.where.port = a->store.port;
    }
    char err[512];
    int rc = rdzv_open(&o, &a->rd, err, sizeof err);
    if (rc) log_error("%s", err);
    else agent_report_rendezvous(a->report, a->rd);
    return rc;
}

/* --numa-binding: the CPUs of every local rank, chosen once (the machine
 * does not change between restarts) and said. */
int agent_plan_numa_binding(agent *a) {
    const agent_config *c = a->cfg;
    if (c->numa_binding == NUMA_NONE) return 0;
    int n = c->nproc_per_node, *gpu = calloc((size_t)n, sizeof *gpu);
    if (!gpu) return -ENOMEM;
    for (int i = 0; i < n; i++) { /* the GPU CUDA numbers as local rank i, if known */
        char g[64], *end;
        long v = strtol(worker_env_gpu(c->env.cuda_visible_devices, i, g, sizeof g), &end, 10);
        gpu[i] = *end || v < 0 ? -1 : (int)v;
    }
    char err[512];
    int rc = numa_plan_make(c->numa_binding, n, gpu, &a->numa, err, sizeof err);
    free(gpu);
    if (rc) {
        log_error("%s", err);
        return rc;
    }
    for (int i = 0; i < n; i++)
        log_info("--numa-binding %s: local rank %d on CPUs %s (%s)",
                 numa_mode_name(c->numa_binding), i, a->numa.cpus[i], a->numa.near[i]);
    if (!a->numa.this_system)
        log_warn("--numa-binding: the topology read is not this machine's (HWLOC_SYNTHETIC or "
                 "HWLOC_XMLFILE is set): the plan above is not applied");
    return 0;
}

/* The watchdog may signal a process only if it is one of this agent's
 * workers or something it started (its process group is the worker's). */
static int watchdog_owner(void *ctx, pid_t pid, char *name, size_t len) {
    agent *a = ctx;
    pid_t pg = getpgid(pid);
    for (int i = 0; a->wg && i < a->wg->n; i++) {
        const worker *w = &a->wg->w[i];
        if (w->running && w->pid > 0 && (pid == w->pid || pg == w->pid)) {
            snprintf(name, len, "local rank %d (rank %d, pid %d)", w->local_rank, w->global_rank,
                     (int)pid);
            return 1;
        }
    }
    return 0;
}

/* How long the workers have to write their stacks before the kill. */
#define STACK_GRACE_S 2.0

/* Before the watchdog kills a worker: every running worker's stack, from
 * those that catch the signal (agent/stacks.h); what each then writes on
 * its stderr is kept for its failure's traceback (on_worker_exit). */
static int ask_stacks(void *ctx) {
    agent *a = ctx;
    int n = 0;
    for (int i = 0; a->wg && i < a->wg->n; i++) {
        worker *w = &a->wg->w[i];
        if (!w->running || !stacks_ask(w->pid)) continue;
        worker_output_capture(&w->err);
        n++;
    }
    return n;
}

double agent_stacks_before_kill(worker_group *g) {
    return ask_stacks(g->data) > 0 ? STACK_GRACE_S : 0;
}

/* torchrun's TORCHELASTIC_ENABLE_FILE_TIMER=1: serve torch's FileTimer
 * requests on TORCHELASTIC_TIMER_FILE (or a new FIFO), which the workers
 * are told. */
int agent_start_watchdog(agent *a) {
    const agent_env *env = &a->cfg->env;
    if (!env->file_timer) return 0;
    if (env->timer_file)
        snprintf(a->watchdog_path, sizeof a->watchdog_path, "%s", env->timer_file);
    else
        snprintf(a->watchdog_path, sizeof a->watchdog_path, "%s/watchdog_timer_%d_%ld",
                 env->tmpdir, (int)getpid(), (long)time(NULL));
    char err[1300];
    a->watchdog = file_timer_start(a->loop, a->watchdog_path, watchdog_owner, a, err, sizeof err);
    if (!a->watchdog) {
        log_error("TORCHELASTIC_ENABLE_FILE_TIMER=1: %s", err);
        return -EIO;
    }
    file_timer_before_kill(a->watchdog, ask_stacks, STACK_GRACE_S);
    log_info("worker watchdog: serving torch's FileTimer requests on %s", a->watchdog_path);
    return 0;
}

/* --metrics-port and the health check port (--health-check-port or
 * torchrun's TORCHELASTIC_HEALTH_CHECK_PORT): the registry, the ranks'
 * directory, and one server, or two when the ports differ. */
int agent_start_metrics(agent *a) {
    const agent_config *c = a->cfg;
    if (c->metrics_port < 0 && c->health_port < 0) return 0;
    if (c->metrics_port >= 0) {
        if (snprintf(a->metrics_dir, sizeof a->metrics_dir, "%s/metrics", node_dirs_log_root(a->dirs)) >=
            (int)sizeof a->metrics_dir) {
            log_error("--metrics-port: the metrics directory under %s would be longer than %zu "
                      "characters; choose a shorter --log-dir", node_dirs_log_root(a->dirs),
                      sizeof a->metrics_dir - 1);
            return -ENAMETOOLONG;
        }
        int rc = fs_mkdir_p(a->metrics_dir);
        if (rc) {
            log_error("cannot create the metrics directory %s: %s", a->metrics_dir,
                      strerror(-rc));
            return rc;
        }
    }
    metrics_opts mo = {.run_id = c->rdzv_id, .role = c->role, .node = a->hostname,
                       .rank_dir = a->metrics_dir[0] ? a->metrics_dir : NULL,
                       .heartbeat_interval = c->rdzv.keep_alive_interval,
                       .max_restarts = c->max_restarts};
    if (!(a->metrics = metrics_new(&mo))) return -ENOMEM;
    agent_goodput_publish_to(a->gp, a->metrics);
    int shared = c->metrics_port > 0 && c->health_port == c->metrics_port;
    /* A port given without a host listens on loopback only: anyone who can
     * reach the port sees the job's state, so every interface (0.0.0.0 or
     * [::]) is something to ask for. The default lives here alone: the
     * launcher leaves the host NULL, and metrics_http takes what it is given. */
    const char *loopback = "127.0.0.1";
    metrics_http_opts o[2] = {
        {.setting = shared ? "--metrics-port (also the health check port)" : "--metrics-port",
         .host = c->metrics_host ? c->metrics_host : loopback, .port = c->metrics_port,
         .metrics = 1, .health = shared},
        {.setting = c->health_setting[0] ? c->health_setting : "--health-check-port",
         .host = c->health_host ? c->health_host : loopback, .port = c->health_port,
         .health = 1}};
    for (int i = 0; i < 2; i++) {
        if (o[i].port < 0 || (i == 1 && shared)) continue;
        char err[512];
        int port = 0, rc = metrics_http_start(&o[i], a->metrics, &a->http[i], &port, err,
                                              sizeof err);
        if (rc) {
            log_error("%s", err);
            return rc;
        }
        int v6 = strchr(o[i].host, ':') != NULL; /* a URL brackets an IPv6 address */
        log_info("%s: serving http://%s%s%s:%d/%s", o[i].setting, v6 ? "[" : "", o[i].host,
                 v6 ? "]" : "", port, i == 0 ? "metrics" : "health");
    }
    return 0;
}

/* The straggler watch, and what it tells the agent (its hooks). */
static void straggler_changed(void *ctx, const rank_speed *s, int slow, double compute,
                              double median) {
    agent *a = ctx;
    agent_report_event(a->report, "ddprun.agent.straggler", slow ? "SLOW" : "RECOVERED",
                       json_pack("{s:i, s:i, s:f, s:f, s:f}", "straggler_rank", s->rank,
                                 "local_rank", s->local_rank, "compute_s", compute, "median_s",
                                 median, "threshold_pct", a->cfg->straggler_pct));
    agent_report_again(a->report); /* `ddprun status` shows it */
}

static void straggler_leave(void *ctx, const char *why) {
    agent *a = ctx;
    snprintf(a->leave_why, sizeof a->leave_why, "%s", why); /* left at the wake */
    uv_async_send(&a->wake);
}

int agent_start_speed(agent *a) {
    const agent_config *c = a->cfg;
    agent_speed_opts o = {.side = a->side, .side_conn = AGENT_SIDE, .coll = a->coll,
                          .goodput = a->gp, .metrics = a->metrics, .hostname = a->hostname,
                          .nproc = c->nproc_per_node, .threshold_pct = c->straggler_pct,
                          .window_s = c->straggler_window, .replace = c->replace_stragglers,
                          .serves_job_store = a->store.host &&
                                              (c->rdzv_backend->flags & RDZV_IN_JOB_STORE),
                          .backend = c->rdzv_backend->name};
    agent_speed_hooks h = {.ctx = a, .changed = straggler_changed, .leave = straggler_leave};
    int rc = agent_speed_start(a->loop, &o, &h, &a->speed);
    if (rc) log_error("cannot start the straggler watch: %s", strerror(-rc));
    else agent_report_speed(a->report, a->speed);
    return rc;
}

/* The ranks of an earlier group wrote their metrics under their old
 * ranks: gone before the new group writes its own. */
void agent_clear_rank_metrics(agent *a) {
    if (!a->metrics_dir[0]) return;
    DIR *d = opendir(a->metrics_dir);
    struct dirent *e;
    char path[2600];
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "rank_", 5) == 0) {
            snprintf(path, sizeof path, "%s/%s", a->metrics_dir, e->d_name);
            unlink(path);
        }
    if (d) closedir(d);
}

/* Around the workers, in the order each needs the others: the node's
 * directories, the collective watch in the snapshot directory, the
 * reporter (status, events), metrics, NUMA binding, the watchdog, the job's store, the straggler
 * watch, the note for `ddprun status`, the rendezvous. */
int agent_start_services(agent *a) {
    const agent_config *c = a->cfg;
    if (node_dirs_make(c->log_dir, c->rdzv_id, c->env.shm_dir, &a->dirs)) return -1;
    if (agent_coll_start(a->loop, a->side, AGENT_SIDE, node_dirs_snapshots(a->dirs)->path,
                         a->hostname, c->nproc_per_node, &a->coll))
        return -ENOMEM;
    agent_report_opts ro = {.cfg = c, .hostname = a->hostname,
                            .log_root = node_dirs_log_root(a->dirs), .store = &a->store,
                            .gp = a->gp, .side = a->side, .side_conn = AGENT_SIDE};
    if (agent_report_start(a->loop, &ro, &a->report)) return -1;
    if (agent_start_metrics(a) || agent_plan_numa_binding(a) ||
        agent_start_watchdog(a) || agent_store_setup(c, a->hostname, &a->store) ||
        agent_store_proxy_start(&a->store, c, a->loop) ||
        agent_start_speed(a) || agent_note_local_job(a) || agent_open_rendezvous(a))
        return -1;
    return 0;
}

void agent_stop_services(agent *a) {
    /* First the side calls: their thread ends and their afters run (they
     * may still record an event or set a metric). A call the store holds
     * (its host lost) is let go after a second: the rendezvous' calls are
     * cancelled. */
    if (side_calls_stop(a->side, a->store_lost ? 0 : 1000) == -ETIMEDOUT) {
        rdzv_cancel(a->rd);
        if (side_calls_stop(a->side, 10000) == -ETIMEDOUT) {
            log_warn("a store call does not end: the agent leaves it to the process's end");
            return; /* (what it uses stays) */
        }
    }
    /* The rendezvous thread, joining or watching a round, lets go too. */
    rdzv_cancel(a->rd);
    rdzv_driver_stop(a->driver);
    metrics_http_stop(a->http[0]);
    metrics_http_stop(a->http[1]);
    node_dirs_close(a->dirs);
    agent_report_stop(a->report);
    agent_goodput_stop(a->gp);
    agent_speed_stop(a->speed);
    agent_coll_stop(a->coll);
    numa_plan_free(&a->numa);
    file_timer_stop(a->watchdog);
    rdzv_close(a->rd);
    metrics_free(a->metrics);
    agent_store_stop(&a->store);
}

static void on_handle_closed(uv_handle_t *h) { (void)h; }

/* The end of agent_run (see agent_internal.h). */
void agent_free(agent *a) {
    for (int i = 0; i < a->cfg->nsignals; i++) uv_close((uv_handle_t *)&a->sigs[i], on_handle_closed);
    uv_close((uv_handle_t *)&a->wake, on_handle_closed);
    uv_close((uv_handle_t *)&a->settle, on_handle_closed);
    uv_close((uv_handle_t *)&a->settle_limit, on_handle_closed);
    if (a->wg) worker_group_free(a->wg);
    uv_run(a->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(a->loop) != 0) {
        log_warn("the agent's loop still holds handles at its end: it is left");
        return;
    }
    for (int i = 0; i < a->nfails; i++) failure_free(&a->fails[i]);
    free(a->tf_cluster);
    free(a->pending_tf_cluster);
    free(a);
}
