/* The agent (see agent.h): a state machine (joining a round, running its
 * workers, stopping them, at the exit barrier, shutting down) on a libuv
 * loop, composing services that own their state: the rendezvous thread
 * (rdzv_driver.h: it makes the blocking store calls, joins a round, watches
 * it, and brings what it learns back as events), the worker group, the side
 * calls, goodput, the collective and straggler watches, the node's
 * directories (started and stopped in agent_services.c). The main thread
 * runs the loop: signals, the worker processes and their output, and the
 * decisions below.
 *
 * A local worker failure is announced by the main thread itself (one
 * COMPARE_SET on its own store connection) so that the other agents hear
 * of it within a round trip; the rendezvous thread sees the same key and
 * starts the next round while the main thread is still stopping workers. */
#include "agent/agent_internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/worker_env.h"
#include "agent/worker_exec.h"
#include "agent/worker_failure.h"
#include "agent/worker_specs.h"
#include "common/clock.h"
#include "common/ddprun_env.h"
#include "common/fdlimit.h"
#include "common/log.h"
#include "common/proc_stat.h"


/* Every change of the agent's state goes through here: the metrics'
 * ddprun_agent_state and the health check follow it. */
static void set_state(agent *a, agent_state st) {
    static const metrics_state as_metrics[] = {
        [ST_RDZV] = METRICS_RENDEZVOUS, [ST_RUNNING] = METRICS_RUNNING,
        [ST_STOPPING] = METRICS_STOPPING, [ST_BARRIER] = METRICS_FINISHED,
        [ST_SHUTDOWN] = METRICS_SHUTDOWN};
    if ((st == ST_RDZV) != (a->state == ST_RDZV)) agent_goodput_rendezvous(a->gp, st == ST_RDZV);
    if (a->state == ST_RUNNING && st != ST_RUNNING) {
        agent_goodput_group_stopping(a->gp);
        agent_speed_group_stopping(a->speed);
    }
    a->state = st;
    agent_report_standing(a->report, st != ST_RDZV, st == ST_RUNNING);
    metrics_set_state(a->metrics, as_metrics[st]);
}


/* ---- workers --------------------------------------------------------------- */

static void on_workers_started(worker_group *g);
static void on_worker_exit(worker_group *g, worker *w);
static void on_group_idle(worker_group *g);

static int start_workers(agent *a) {
    const agent_config *c = a->cfg;
    int n = c->nproc_per_node;
    agent_clear_rank_metrics(a);
    worker_env_ctx env = {.cfg = c, .round = &a->cur, .store_addr = a->store.addr,
                          .store_port = a->store.port,
                          .proxy_port = agent_store_proxy_round(&a->store, &a->cur),
                          .agent_pid = (int)getpid(),
                          .timer_file = a->watchdog ? a->watchdog_path : NULL,
                          .metrics_dir = a->metrics_dir, .numa = &a->numa,
                          .snapshot_dir = node_dirs_snapshots(a->dirs)->path,
                          .snapshot_disk_dir = node_dirs_snapshots(a->dirs)->disk,
                          .coll_dir = agent_coll_dir(a->coll)};
    worker_specs_opts so = {.cfg = c, .round = &a->cur, .env = &env,
                            .log_root = node_dirs_log_root(a->dirs), .hostname = a->hostname,
                            .tf_cluster = a->tf_cluster};
    worker_specs *specs;
    int rc = worker_specs_make(&so, &specs);
    if (rc) return rc;
    if (!(a->wg = worker_group_new(a->loop, a->exe))) {
        log_error("out of memory starting the workers");
        worker_specs_free(specs, 0);
        return -ENOMEM;
    }
    a->wg->on_started = on_workers_started;
    a->wg->on_exit = on_worker_exit;
    a->wg->on_idle = on_group_idle;
    a->wg->before_kill = agent_stacks_before_kill;
    a->wg->data = a;
    set_state(a, ST_RUNNING); /* before the first exit can be seen */
    for (int i = 0; i < a->nfails; i++) failure_free(&a->fails[i]);
    a->nfails = 0;
    metrics_group_started(a->metrics, n, a->cur.round, a->cur.world_size,
                          a->cur.group_world_size, a->cur.restart_count);
    agent_report_group(a->report, a->wg, clock_wall_s());
    agent_coll_group_started(a->coll, a->rd, &a->cur);
    agent_speed_group_started(a->speed, a->rd, &a->cur);
    char record[640] = "", err[512] = "";
    if (agent_coll_dir(a->coll)[0]) agent_coll_path(a->coll, 0, record, sizeof record);
    agent_goodput_group_started(a->gp, record);
    rc = worker_group_start(a->wg, n, worker_specs_get(specs), err, sizeof err);
    if (rc) log_error("%s", err);
    worker_specs_free(specs, 1); /* (the group took the environments) */
    return rc;
}

/* Every worker of the group runs (a large group starts over several turns
 * of the loop). */
static void on_workers_started(worker_group *g) {
    agent *a = g->data;
    const agent_config *c = a->cfg;
    int n = g->n;
    log_info("started %d worker%s on %s: node rank %d of %d, global ranks %d-%d of %d, "
             "restart %d of %d (round %d)",
             n, n == 1 ? "" : "s", a->hostname, a->cur.group_rank, a->cur.group_world_size,
             a->cur.rank_offset, a->cur.rank_offset + n - 1, a->cur.world_size,
             a->cur.restart_count, c->max_restarts, a->cur.round);
    json_t *pids = json_array();
    for (int i = 0; i < n; i++) {
        json_array_append_new(pids, json_integer(g->w[i].pid));
        node_dirs_track(a->dirs, g->w[i].pid, 1); /* (its own group: UV_PROCESS_DETACHED) */
    }
    agent_report_event(a->report, "ddprun.agent.workers_started", "RUNNING",
                json_pack("{s:i, s:i, s:i, s:o}", "local_world_size", n, "first_global_rank",
                          a->cur.rank_offset, "world_size", a->cur.world_size, "pids", pids));
    if (a->state == ST_RUNNING) agent_report_tell(a->report, "running");
    else agent_report_again(a->report);
}

/* ---- what the agent tells: `ddprun status` and the event log ----------------- */


/* ---- decisions --------------------------------------------------------------- */


static void finish(agent *a, int code) {
    /* The summary comes last, once every worker has stopped, so that it
     * is not lost among what the stopping workers and the agent say. */
    agent_goodput_report(a->gp); /* (before the summary, which is the job's last word) */
    node_dirs_tell_kept_logs(a->dirs);
    if (a->spent_restarts)
        agent_report_exhausted(a->report, a->spent_restarts, a->fails, a->nfails);
    const char *how = code == 0 ? "succeeded" : code >= 128 ? "stopped" : "failed";
    agent_report_tell(a->report, how);
    agent_report_publish(a->report); /* the last word, at once */
    agent_report_event(a->report, "ddprun.agent.shutdown", code == 0 ? "SUCCEEDED" : "FAILED",
                json_pack("{s:i, s:s}", "exit_code", code, "outcome", how));
    a->exit_code = code;
    uv_stop(a->loop);
}


static void stop_workers(agent *a, int sig) {
    if (a->wg && !a->wg->idle) worker_group_stop(a->wg, sig, a->cfg->shutdown_timeout);
}

static void round_formed(agent *a) {
    const rdzv_result *r = &a->cur;
    agent_report_event(a->report, "ddprun.rendezvous.round_formed", "RUNNING",
                json_pack("{s:i, s:i, s:f}", "group_world_size", r->group_world_size,
                          "world_size", r->world_size, "duration_s",
                          clock_wall_s() - agent_report_joining_since(a->report)));
    if (a->prev_group_size && a->prev_group_size != r->group_world_size)
        agent_report_event(a->report, "ddprun.agent.scale", "RUNNING",
                    json_pack("{s:i, s:i}", "from_nodes", a->prev_group_size, "to_nodes",
                              r->group_world_size));
    a->prev_group_size = r->group_world_size;
}

static void on_round(agent *a, rdzv_driver_event *e) {
    if (e->rc == RDZV_RESTARTS_SPENT) {
        a->spent_restarts = e->res.restart_count > 0 ? e->res.restart_count : 1;
        /* the workers still stopping get their grace period, then the agent ends */
        set_state(a, ST_SHUTDOWN);
        a->shutdown_signal = 0;
        a->exit_code = 1;
        if (!a->wg || a->wg->idle) finish(a, 1);
        return;
    }
    if (e->rc == RDZV_JOB_KEPT) { /* this node failed after the job's end elsewhere */
        log_warn("%s", e->err);
        agent_report_event(a->report, "ddprun.agent.after_end", "SUCCEEDED",
                           json_pack("{s:s}", "why", e->err));
        set_state(a, ST_SHUTDOWN);
        a->shutdown_signal = 0;
        a->exit_code = 0;
        if (!a->wg || a->wg->idle) finish(a, 0);
        return;
    }
    if (e->rc == RDZV_NOT_NEEDED) { /* a spare whose job is done: nothing failed */
        log_info("%s", e->err);
        set_state(a, ST_SHUTDOWN);
        finish(a, 0);
        return;
    }
    if (e->rc) {
        log_error("%s", e->err);
        stop_workers(a, SIGTERM);
        set_state(a, ST_SHUTDOWN);
        a->shutdown_signal = 0;
        a->exit_code = 1;
        if (!a->wg || a->wg->idle) finish(a, 1);
        return;
    }
    if (a->wg && !a->wg->idle) { /* the old group is still stopping */
        a->pending = e->res;
        a->have_pending = 1;
        free(a->pending_tf_cluster);
        a->pending_tf_cluster = e->tf_cluster, e->tf_cluster = NULL;
        return;
    }
    a->cur = e->res;
    agent_report_round(a->report, &a->cur);
    free(a->tf_cluster);
    a->tf_cluster = e->tf_cluster, e->tf_cluster = NULL;
    round_formed(a);
    if (start_workers(a) != 0) finish(a, 1);
}

static void on_restart(agent *a, rdzv_event why) {
    if (a->state != ST_RUNNING) return; /* already stopping for our own failure */
    log_info("%s; stopping the local workers and re-forming the group",
             why == RDZV_EV_FAILURE ? "a worker failed on another node"
                                    : "the group's membership changed");
    set_state(a, ST_STOPPING);
    agent_report_event(a->report, "ddprun.agent.restart", "RUNNING",
                json_pack("{s:s}", "why", why == RDZV_EV_FAILURE ? "a worker failed on another node"
                                                                 : "the membership changed"));
    agent_report_tell(a->report, "stopping");
    stop_workers(a, SIGTERM);
}

static void on_barrier(agent *a, int rc) {
    if (rc == RDZV_ANOTHER_FAILED)
        log_warn("another node failed after this node's workers finished; leaving anyway");
    else if (rc)
        log_warn("exit barrier: not every node finished in time (%s); leaving anyway",
                 strerror(-rc));
    finish(a, 0);
}

/* --replace-stragglers (agent_speed.c asks, through leave_why): this node
 * leaves the job, its round ended for the others to re-form it with a
 * spare; the agent exits 0 once its workers have stopped. */
static void leave(agent *a, const char *why) {
    if (a->state != ST_RUNNING) return;
    log_warn("%s: this node leaves the job, for the spare to take its place", why);
    agent_report_event(a->report, "ddprun.agent.leave", "LEAVING", json_pack("{s:s}", "why", why));
    set_state(a, ST_SHUTDOWN); /* exits 0 once its workers have stopped */
    agent_report_tell(a->report, "leaving");
    rdzv_driver_leave(a->driver);
    int rc = rdzv_end_round(a->rd, 0, RDZV_EV_MEMBERSHIP); /* the others restart at once */
    if (rc) log_error("cannot tell the other nodes that this one leaves: %s", strerror(-rc));
    stop_workers(a, SIGTERM);
}

/* The agent's own wake: --replace-stragglers asked this node to leave. */
static void on_wake(uv_async_t *h) {
    agent *a = h->data;
    if (a->leave_why[0]) {
        leave(a, a->leave_why);
        a->leave_why[0] = 0;
    }
}

/* What the rendezvous thread learnt, on the loop. */
static void on_rdzv_event(void *ctx, rdzv_driver_event *e) {
    agent *a = ctx;
    if (a->state == ST_SHUTDOWN && e->kind != RDZV_DRIVER_ROUND) return;
    switch (e->kind) {
    case RDZV_DRIVER_ROUND:
        if (a->state != ST_SHUTDOWN) on_round(a, e);
        break;
    case RDZV_DRIVER_RESTART: on_restart(a, e->why); break;
    case RDZV_DRIVER_BARRIER: on_barrier(a, e->rc); break;
    case RDZV_DRIVER_LOST:
        log_error("%s", e->err);
        a->store_lost = 1;
        agent_report_store_lost(a->report);
        agent_coll_store_lost(a->coll);
        agent_speed_store_lost(a->speed);
        set_state(a, ST_SHUTDOWN);
        a->exit_code = 1;
        stop_workers(a, SIGTERM);
        if (!a->wg || a->wg->idle) finish(a, 1);
        break;
    }
}

/* The failures of one turn of the loop are settled: the root cause among
 * them (one worker's kill -9 and its peer's exit on the lost connection are
 * often reaped together, and the peer's comes first as often as not) is
 * counted, logged and recorded as the cause of the restart; the others are
 * recorded beside it for the summary. */
static void settle_failures(agent *a) {
    if (!uv_is_active((uv_handle_t *)&a->settle)) return;
    uv_check_stop(&a->settle);
    uv_timer_stop(&a->settle_limit);
    a->ndying = 0;
    failure *fs = a->fails + a->settle_from;
    int n = a->nfails - a->settle_from;
    coll_verdict hang;
    int hung = n > 0 && agent_coll_verdict(a->coll, &hang);
    if (hung) {
        int added = worker_failures_hung(a->fails + a->nfails, MAX_FAILURES - a->nfails, fs, n,
                                         &hang, a->wg, a->cur.rank_offset, a->hostname,
                                         a->cur.round);
        a->nfails += added, n += added;
    }
    for (int i = 0; hung && i < n; i++) fs[i].hung = coll_verdict_blames(&hang, fs[i].rank);
    int root = failure_root_cause(fs, n);
    if (root < 0) return;
    failure *f = &fs[root];
    if (hung) {
        log_error("hang in collective #%llu: %s", (unsigned long long)hang.seq, hang.text);
        worker_failure_note_hang(f, &hang);
    }
    metrics_worker_failed(a->metrics, f->exitcode, f->watchdog);
    log_error("local rank %d (rank %d, pid %d) failed: %s; stopping the group", f->local_rank,
              f->rank, f->pid, f->message);
    for (int i = 0; i < n; i++)
        if (i != root)
            log_warn("local rank %d (rank %d, pid %d) failed with it: %s", fs[i].local_rank,
                     fs[i].rank, fs[i].pid, fs[i].message);
    agent_report_event(a->report, "ddprun.agent.restart", "FAILED",
                       json_pack("{s:s, s:i, s:i, s:s?}", "why", f->message, "failed_rank",
                                 f->rank, "failed_pid", f->pid, "hang",
                                 hung ? hang.text : NULL));
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        char *json = failure_to_json(&fs[i]);
        rc = json ? rdzv_record_failure(a->rd, 0, json) : -ENOMEM;
        free(json);
    }
    if (rc == 0) rc = rdzv_end_round(a->rd, 0, RDZV_EV_FAILURE);
    if (rc) log_error("cannot tell the other nodes about the failure: %s", strerror(-rc));
}

/* How long a failure's settling waits for workers that were dying before
 * the group's stop (a GPU process takes a quarter of a second to exit). */
#define SETTLE_LIMIT_MS 500

/* At the end of each turn after the first failure: settled unless a
 * worker that was dying before the group's stop is still to be reaped. */
static void on_settle(uv_check_t *c) {
    agent *a = c->data;
    a->settle_waited = 1;
    for (int i = 0; i < a->ndying; i++)
        if (a->dying[i]) return; /* (its SIGCHLD wakes the loop; settle_limit bounds it) */
    settle_failures(a);
}

static void on_settle_limit(uv_timer_t *t) { settle_failures(t->data); }

/* The group's other workers that are already on their way out (killed,
 * exiting, or dead and not yet reaped) as the first failure is reaped. */
static void note_dying(agent *a, const worker *first) {
    a->ndying = 0, a->settle_waited = 0;
    for (int i = 0; a->wg && i < a->wg->n && a->ndying < (int)(sizeof a->dying / sizeof *a->dying);
         i++) {
        const worker *w = &a->wg->w[i];
        proc_stat st;
        if (w == first || w->pid <= 0 || !w->running || proc_stat_read(w->pid, &st) != 0) continue;
        if (st.state == 'Z' || (st.flags & PROC_PF_EXITING)) a->dying[a->ndying++] = w->pid;
    }
}

/* Whether pid was noted dying (and now reaped: struck off). */
static int was_dying(agent *a, int pid) {
    for (int i = 0; i < a->ndying; i++)
        if (a->dying[i] == pid) return a->dying[i] = 0, 1;
    return 0;
}

static void on_worker_exit(worker_group *g, worker *w) {
    agent *a = g->data;
    int failed = (w->term_signal != 0 || w->exit_status != 0) && !worker_finished_first(w);
    char scope[256]; /* (asked at every exit: a kill the group's stop overtook is cleared) */
    int by_watchdog = file_timer_killed(a->watchdog, w->pid, scope, sizeof scope);
    /* A failure while running, one reaped in the same turn as that one, or
     * later one of those that were dying already (not ended by our stop). */
    int dying = was_dying(a, w->pid);
    int cause = failed && (a->state == ST_RUNNING ||
                           (uv_is_active((uv_handle_t *)&a->settle) && (!a->settle_waited || dying)));
    agent_report_note_exit(a->report, w);
    metrics_worker_exited(a->metrics, w->local_rank,
                          cause                      ? METRICS_W_FAILED
                          : a->state != ST_RUNNING   ? METRICS_W_TERMINATED
                                                     : METRICS_W_SUCCEEDED);
    if (!cause) {
        agent_report_worker_event(a->report, w, a->state == ST_RUNNING ? "SUCCEEDED" : "TERMINATED", NULL);
        agent_report_again(a->report);
        return;
    }
    if (a->state == ST_RUNNING) { /* the first: the cause is judged at the end of the turn */
        a->settle_from = a->nfails < MAX_FAILURES ? a->nfails : MAX_FAILURES - 1;
        uv_check_start(&a->settle, on_settle);
        note_dying(a, w);
        if (a->ndying) uv_timer_start(&a->settle_limit, on_settle_limit, SETTLE_LIMIT_MS, 0);
    }
    node_dirs_keep_logs(a->dirs);
    failure *f = &a->fails[a->nfails < MAX_FAILURES ? a->nfails++ : MAX_FAILURES - 1];
    worker_failure(f, w, a->hostname, a->cur.round, by_watchdog ? scope : NULL);
    agent_report_worker_event(a->report, w, "FAILED", f->message);
    if (a->state == ST_RUNNING) { /* stop the others now (the last exit makes the group idle) */
        set_state(a, ST_STOPPING);
        agent_report_tell(a->report, "stopping");
        stop_workers(a, SIGTERM);
    }
}

static void on_group_idle(worker_group *g) {
    agent *a = g->data;
    for (int i = 0; i < g->n; i++) node_dirs_track(a->dirs, g->w[i].pid, 0);
    settle_failures(a); /* before the group and its round are gone */
    agent_coll_group_stopped(a->coll);
    agent_speed_group_stopped(a->speed);
    agent_goodput_group_gone(a->gp);
    if (a->state == ST_SHUTDOWN) {
        finish(a, a->shutdown_signal ? 128 + a->shutdown_signal : a->exit_code);
        return;
    }
    if (a->state == ST_RUNNING) { /* every worker exited 0 */
        if (a->cur.group_world_size > 1)
            log_info("all %d local workers finished; waiting for the other nodes", g->n);
        /* One rank's word that the result is kept covers the job: its
         * ranks hold one state (rdzv_exit_barrier). */
        int kept = 0;
        for (int i = 0; i < g->n; i++) kept |= worker_said_finished(&g->w[i]);
        set_state(a, ST_BARRIER);
        agent_report_tell(a->report, "finishing");
        rdzv_driver_barrier(a->driver, kept);
        return;
    }
    if (a->state != ST_STOPPING) return;
    agent_report_group(a->report, NULL, 0);
    worker_group_free(a->wg);
    a->wg = NULL;
    set_state(a, ST_RDZV);
    agent_report_joining(a->report);
    if (a->have_pending) {
        a->have_pending = 0;
        a->cur = a->pending;
        agent_report_round(a->report, &a->cur);
        free(a->tf_cluster);
        a->tf_cluster = a->pending_tf_cluster, a->pending_tf_cluster = NULL;
        round_formed(a);
        if (start_workers(a) != 0) finish(a, 1);
    }
}

static void on_signal(uv_signal_t *s, int signum) {
    agent *a = s->data;
    if (a->state == ST_SHUTDOWN && a->shutdown_signal) {
        log_warn("SIG%s again: killing the workers now", sigabbrev_np(signum));
        stop_workers(a, SIGKILL);
        return;
    }
    log_info("SIG%s received: forwarding it to the workers (SIGKILL after %g s)",
             sigabbrev_np(signum), a->cfg->shutdown_timeout);
    set_state(a, ST_SHUTDOWN);
    a->shutdown_signal = signum;
    if (!a->wg || a->wg->idle) {
        finish(a, 128 + signum);
        return;
    }
    stop_workers(a, signum);
}

/* ---- run ------------------------------------------------------------------------- */

int agent_run(const agent_config *cfg, const char *self_exe) {
    agent *a = calloc(1, sizeof *a);
    if (!a || uv_loop_init(&a->own_loop) != 0) {
        log_error("cannot set up the agent: out of memory");
        free(a);
        return 1;
    }
    a->cfg = cfg;
    a->exe = worker_exec_program(self_exe, a->exe_buf, sizeof a->exe_buf);
    a->loop = &a->own_loop;

    /* --local-addr names this node as the others know it: in the
     * rendezvous (host order, ranks) and in failure reports. */
    if (cfg->local_addr)
        snprintf(a->hostname, sizeof a->hostname, "%s", cfg->local_addr);
    else
        gethostname(a->hostname, sizeof a->hostname);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 0; i < cfg->nsignals; i++) {
        uv_signal_init(a->loop, &a->sigs[i]);
        a->sigs[i].data = a;
        uv_signal_start(&a->sigs[i], on_signal, cfg->signals[i]);
    }
    uv_async_init(a->loop, &a->wake, on_wake);
    a->wake.data = a;
    uv_check_init(a->loop, &a->settle);
    a->settle.data = a;
    uv_timer_init(a->loop, &a->settle_limit);
    a->settle_limit.data = a;
    int code = 1;
    char why[256];
    if (side_calls_start(a->loop, a, &a->side) || agent_goodput_start(a->loop, &a->gp)) {
        log_error("cannot set up the agent: out of memory");
        goto out;
    }
    fdlimit_raise(); /* the workers' pipes and logs, and the store's connections */
    if (worker_group_fits(cfg->nproc_per_node, why, sizeof why) != 0) {
        log_error("--nproc-per-node %d: %s", cfg->nproc_per_node, why);
        goto out;
    }
    if (agent_start_services(a)) goto out;
    if (cfg->nproc_per_node > 1 && !cfg->env.omp_num_threads_set)
        log_info("setting OMP_NUM_THREADS=1 for each worker (set it yourself to tune)");
    set_state(a, ST_RDZV);
    agent_report_joining(a->report);
    rdzv_driver_opts ro = {.metrics = a->metrics, .tf_config = cfg->tf_config,
                           .barrier_timeout_s = cfg->rdzv.join_timeout, .ctx = a,
                           .event = on_rdzv_event};
    if (rdzv_driver_start(a->loop, a->rd, &ro, &a->driver)) {
        log_error("cannot start the rendezvous thread");
        goto out;
    }
    uv_run(a->loop, UV_RUN_DEFAULT);
    code = a->exit_code;
    if (code < 128) /* not when a signal asked us to stop */
        agent_store_linger(&a->store, cfg->rdzv_id, rdzv_agent_id(a->rd));
out:
    fflush(stdout);
    agent_stop_services(a);
    agent_free(a);
    return code;
}
