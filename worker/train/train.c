/* One rank's training run (see train.h): set up the job (trainer.c),
 * resume from the newest valid checkpoint (snapshot.c), then train epoch
 * by epoch (step.c): every rank's loss summed for rank 0's progress lines
 * (progress.c), an evaluation and a checkpoint at each epoch's end, one
 * every --ckpt-every steps, and a clean stop on SIGTERM.
 *
 * Determinism: data order and augmentation are functions of (seed, epoch,
 * sample), kernels reduce in a fixed order, and the collectives too, so a
 * run resumed from a checkpoint at the same world size continues bit for
 * bit as if it had never stopped. */
#include "worker/train/train.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ddprun_env.h"
#include "common/log.h"
#include "worker/data/sampler.h"
#include "worker/train/error_file.h"
#include "worker/train/progress.h"
#include "worker/train/resume.h"
#include "worker/train/snapshot.h"
#include "worker/train/stacks.h"
#include "worker/train/step.h"
#include "worker/train/trainer.h"

/* SIGTERM (or SIGUSR1/SIGUSR2, which schedulers send before preempting a
 * job: Slurm's --signal): every rank stops after the step they all finish,
 * and saves it.
 * A peer that is gone (a host lost without a word) never finishes it, so
 * the communicator is also told to abort once the step has had time to
 * finish: 1.5 times the last step's time, at least STOP_GRACE_MIN_NS. */
#define STOP_GRACE_MIN_NS 250000000LL
static _Atomic int64_t stop_grace_ns = STOP_GRACE_MIN_NS;
/* Once every rank has agreed to stop (they all were alive to agree), the
 * save that follows gets this long: its collectives (rank 0's batch-norm
 * statistics to all) start after the first grace may have passed. */
#define STOP_SAVE_GRACE_NS 10000000000LL

static void on_sigterm(int sig) {
    trainer_stop_requested = sig;
    int64_t zero = 0;
    atomic_compare_exchange_strong(&trainer_abort_at_ns, &zero,
                                   clock_now_ns() + atomic_load(&stop_grace_ns));
}

/* The watchdog's scope: a step, an evaluation, a checkpoint, the set-up. */
#define WATCHED "ddp-train step"

static void time_step(int64_t t0, int64_t t1) {
    int64_t grace = (t1 - t0) * 3 / 2;
    atomic_store(&stop_grace_ns, grace > STOP_GRACE_MIN_NS ? grace : STOP_GRACE_MIN_NS);
}

/* The position after the step just finished, and its number within its
 * epoch (1-based; the last step of an epoch may be short). */
static int64_t advance(trainer *t) {
    train_position *at = &t->at;
    at->pos += at->global_batch;
    at->global_step++;
    progress_count(t);
    if (at->pos > t->n) return t->steps_per_epoch;
    return (at->pos + at->global_batch - 1) / at->global_batch;
}

/* The step for this rank's metrics (rank_metrics.h). */
static void count_step(trainer *t, rank_step *s, int64_t now_ns, int64_t step_ns) {
    s->global_step = t->at.global_step;
    s->epoch = t->at.epoch;
    ddp_stats(t->ddp, &s->allreduce_ns, &s->allreduce_waits);
    s->allreduce_bytes = t->env.world > 1 ? t->m->nparam * sizeof(float) : 0;
    rank_metrics_step(&t->rm, now_ns, step_ns, s);
}

/* A checkpoint with the position at the next epoch's start, where the
 * epoch just finished. */
static int save_at_epoch_end(trainer *t) {
    int epoch = t->at.epoch;
    int64_t pos = t->at.pos;
    t->at.epoch++, t->at.pos = 0;
    int rc = snapshot_save(t);
    if (rc == 0) rc = snapshot_keep(t);
    t->at.epoch = epoch, t->at.pos = pos;
    return rc;
}

/* Every rank, once all agreed to stop (after a step, or instead of an
 * evaluation): a checkpoint, then stop. At an epoch's end its evaluation is
 * still to run, so the checkpoint holds the epoch's end (pos = its size):
 * the resumed run evaluates first, then goes on; without evaluation it
 * holds the next epoch's start. */
static int stop_on_signal(trainer *t) {
    atomic_store(&trainer_abort_at_ns, clock_now_ns() + STOP_SAVE_GRACE_NS);
    if (t->at.pos >= t->n && !t->test) t->at.epoch++, t->at.pos = 0;
    progress_bar_clear(&t->progress);
    if (trainer_stop_requested)
        log_info("rank %d: stopping on SIG%s after step %lld", t->env.rank,
                 sigabbrev_np(trainer_stop_requested), (long long)t->at.global_step);
    else
        log_info("rank %d: stopping after step %lld (another rank was told to stop)",
                 t->env.rank, (long long)t->at.global_step);
    int rc = snapshot_save(t);
    if (rc == 0) rc = snapshot_keep(t);
    snapshot_keep_flush(t);
    int flushed = snapshot_save_flush(t); /* on disk before the process ends */
    return rc ? rc : flushed;
}

/* Rank 0 says, after this process's first step, where its start-up went:
 * what a restart costs before training goes on (on a GPU: the context,
 * cuDNN's libraries and algorithm choices, NCCL's set-up). */
static void startup_report(trainer *t, int64_t first_step_end) {
    train_startup *s = &t->startup;
    if (s->said || t->env.rank != 0) return;
    s->said = 1;
    progress_bar_clear(&t->progress);
#define SECS(from, to) ((double)((to) - (from)) * 1e-9)
    log_info("first step done %.2f s after start: the job and its data %.2f s, the backend %.2f "
             "s, the model %.2f s, communicators %.2f s (host %.2f s), the state %.2f s "
             "(resumed in %.2f s, then drawn or broadcast), the first step %.2f s",
             SECS(s->begin, first_step_end), SECS(s->begin, s->data), SECS(s->data, s->backend),
             SECS(s->backend, s->model), SECS(s->model, s->comm), SECS(s->model, s->host_comm),
             SECS(s->comm, s->ready), SECS(s->comm, s->resumed), SECS(s->ready, first_step_end));
#undef SECS
}

/* One epoch's steps from t->at.pos on. 1 when the run stops early
 * (--max-steps or SIGTERM), 0 at the epoch's end, or -errno. */
static int run_epoch(trainer *t) {
    const train_config *c = t->cfg;
    train_position *at = &t->at;
    while (at->pos < t->n) {
        if (c->max_steps > 0 && at->global_step >= c->max_steps)
            return 1; /* (save_final writes the last step unless it is on disk already) */
        float stats[5];
        int64_t t0 = clock_now_ns();
        watchdog_arm(&t->wd, WATCHED);
        stacks_note_step(t->at.global_step + 1);
        coll_record_step(t->coll, t->at.global_step + 1);
        int rc = step_train(t, stats);
        if (rc) return rc;
        /* Rank 0 decides when the nodes keep a snapshot, and the step's
         * all-reduce tells the others: every node's is of the same step. */
        stats[4] = t->env.rank == 0 && snapshot_due(t, clock_now_ns() - t0) ? 1.0f : 0.0f;
        rank_step mine = {.images = t->batch, .loss = stats[0] / stats[2],
                          .acc = stats[1] / stats[2]}; /* before the sum over ranks */
        if ((rc = step_allreduce_small(t, stats, 5)))
            return trainer_fail(t, rc, "all-reduce of the step's loss failed: %s",
                                trainer_why(comm_error(t->comm), rc));
        int64_t t1 = clock_now_ns();
        time_step(t0, t1);
        int64_t step_in_epoch = advance(t);
        count_step(t, &mine, t1, t1 - t0);
        /* The snapshot is handed over before the step is reported: once
         * "step N" shows, the one before it is kept (with --snapshot-every;
         * snapshot_keep waits for it), so a failure then costs step N alone. */
        int64_t k0 = clock_now_ns();
        if (stats[4] > 0 && at->pos < t->n && (rc = snapshot_keep(t)))
            return rc;
        if (t->env.rank == 0)
            progress_step(t, stats[0] / stats[2], stats[1] / stats[2], step_lr(t), step_in_epoch);
        startup_report(t, t1);
        if (stats[3] > 0) { /* a stop signal somewhere: every rank stops here */
            rc = stop_on_signal(t);
            return rc ? rc : 1;
        }
        if (c->ckpt_every > 0 && at->global_step % c->ckpt_every == 0 && at->pos < t->n &&
            (rc = snapshot_save(t)))
            return rc;
        if ((rc = snapshot_save_report(t))) return rc;
        coll_record_ckpt_wait(t->coll, clock_now_ns() - k0); /* (the progress line's too: little) */
    }
    return 0;
}

/* --skip-bad-images: how many samples every rank skipped in the epoch
 * (training) and its evaluation, said by rank 0. Draws are counted: an
 * image drawn twice (the last batch's wrap-around, a batch built again
 * after a resume) counts twice. */
static int report_skipped(trainer *t) {
    if (!t->cfg->skip_bad) return 0;
    float n[2] = {(float)dataset_take_skipped(t->train, t->at.epoch),
                  t->test ? (float)dataset_take_skipped(t->test, 0) : 0.0f};
    int rc = step_allreduce_small(t, n, 2);
    if (rc)
        return trainer_fail(t, rc, "all-reduce of the skipped images' count failed: %s",
                            trainer_why(comm_error(t->comm), rc));
    if (t->env.rank == 0 && (n[0] > 0 || n[1] > 0)) {
        progress_bar_clear(&t->progress);
        log_warn("epoch %d: %.0f draw%s of bad training images and %.0f of bad test images "
                 "skipped (--skip-bad-images)",
                 t->at.epoch + 1, n[0], n[0] == 1 ? "" : "s", n[1]);
    }
    return 0;
}

static int run_epochs(trainer *t) {
    for (; t->at.epoch < t->cfg->epochs; t->at.epoch++, t->at.pos = 0) {
        int rc = run_epoch(t);
        if (rc >= 0) coll_record_step_end(t->coll); /* (not its evaluation's; a failed step: not done) */
        if (rc) return rc > 0 ? 0 : rc;
        watchdog_arm(&t->wd, WATCHED);
        if ((rc = step_evaluate(t)) == 1) return stop_on_signal(t);
        if (rc || (rc = report_skipped(t))) return rc;
        watchdog_arm(&t->wd, WATCHED);
        t->rec.recorded = 0, t->rec.eager_steps = 0; /* every rank: see step_run */
        if ((rc = save_at_epoch_end(t))) return rc;
    }
    return 0;
}

/* Set-up through the first step: the job, the resumed or fresh weights on
 * every rank, the batch, the progress output. */
static int start(trainer *t) {
    int rc = trainer_setup(t);
    if (rc == 0) rc = snapshot_lock(t);
    int root = -1; /* whose weights (the newest state's holder, or rank 0's fresh ones) */
    if (rc == 0) rc = resume_newest(t, &root);
    t->startup.resumed = clock_now_ns();
    if (rc == 0 && root < 0) { /* a fresh start: rank 0 draws them (trainer.c's setup_model) */
        root = 0;
        if (t->env.rank == 0 && (rc = model_draw_weights(t->m, t->cfg->seed)))
            rc = trainer_fail(t, rc, "drawing the initial weights failed: %s", strerror(-rc));
    }
    if (rc == 0 && (rc = ddp_broadcast_model(t->ddp, root)))
        rc = trainer_fail(t, rc, "broadcasting the weights from rank %d failed: %s", root,
                          trainer_why(devcomm_error(t->dcomm), rc));
    if (rc == 0) snapshot_keep_start(t);
    if (rc == 0) rc = trainer_setup_batch(t);
    if (rc == 0) rc = progress_start(t);
    if (rc == 0) rank_metrics_init(&t->rm, t->env.rank, t->env.local_rank);
    char err[1300];
    if (rc == 0 && (rc = sample_log_open(&t->samples, t->cfg->sample_log, t->env.rank, err,
                                         sizeof err)))
        rc = trainer_fail(t, rc, "%s", err);
    t->startup.ready = clock_now_ns();
    if (rc == 0 && t->env.rank == 0) {
        const train_config *c = t->cfg;
        size_t big;
        int nb = ddp_buckets(t->ddp, &big);
        log_info("%s: %zu parameters, %d ranks (%s), %d per rank, global batch %d, %d "
                 "gradient buckets%s%s, %s",
                 c->model, t->m->nparam, t->env.world, t->env.launcher, t->batch,
                 t->at.global_batch, nb, ddp_grad_memory(t->ddp)[0] ? ", " : "",
                 ddp_grad_memory(t->ddp), t->be->ops->name);
    }
    return rc;
}

/* The end of the training: its last state must be in every node's
 * --ckpt-dir, whichever process got there. A group that resumed from memory
 * at the last step (its predecessor died, or failed to write, while saving
 * the last checkpoint) has trained nothing and handed nothing to the disk:
 * it writes the last state now, or fails saying why, rather than saying
 * "done" with the final weights nowhere (the agent drops the memory
 * snapshots when it exits). Every rank takes part (the save is collective):
 * the nodes agree whether any lacks it. */
static int save_final(trainer *t) {
    if (!t->cfg->ckpt_dir[0]) return 0;
    int64_t step = t->at.global_step;
    float lacks = t->env.local_rank == 0 && !t->disk.foreign && t->disk.handed != step &&
                  t->disk.found != step;
    int rc = step_allreduce_small(t, &lacks, 1);
    if (rc)
        return trainer_fail(t, rc, "agreeing on the final checkpoint failed: %s",
                            trainer_why(comm_error(t->comm), rc));
    if (lacks == 0) return 0;
    if (t->env.rank == 0 && t->disk.handed < 0) /* (not a --max-steps run's own last save) */
        log_info("the final state (step %lld) is not on every node's disk yet: writing it",
                 (long long)step);
    return snapshot_save(t);
}

/* The launcher's DDPRUN_FINISHED_FILE (ddprun's agent): the run's work is
 * done and its final state on some node's disk, so a failure from here on
 * (a hang on the way out, killed by the watchdog) does not make the agent
 * restart a job that is complete. */
static void say_finished(const trainer *t) {
    const char *path = getenv(DDPRUN_ENV_FINISHED_FILE);
    if (!path || !path[0]) return;
    FILE *f = fopen(path, "w");
    if (!f) {
        log_warn("cannot write " DDPRUN_ENV_FINISHED_FILE " %s: %s", path, strerror(errno));
        return;
    }
    fprintf(f, "step %lld\n", (long long)t->at.global_step);
    fclose(f);
}

/* A rank that stopped with NCCL's abort still under way (nccl_comm.c's
 * nc_abort): what is on disk or in files is finished, and the device is
 * left to the process's end, which frees it whatever runs there; tearing
 * it down here would wait for the abort. */
static _Noreturn void leave_now(trainer *t, int code) {
    snapshot_writer_stop(t->mem.w);
    snapshot_writer_stop(t->disk.w);
    if (t->progress.metrics) fclose(t->progress.metrics);
    dir_lock_release(&t->ckpt_lock);
    fflush(NULL);
    _exit(code);
}

int train_run(const train_config *c) {
    trainer t = {.cfg = c, .disk.step = -1, .disk.handed = -1, .disk.written = -1,
                 .disk.found = -1, .buffers_step = -1, .samples.fd = -1,
                 .startup.begin = clock_now_ns()};
    watchdog_init(&t.wd, getenv("TORCHELASTIC_TIMER_FILE"), c->step_timeout_s);
    watchdog_arm(&t.wd, WATCHED); /* the set-up too */
    signal(SIGTERM, on_sigterm);
    signal(SIGUSR1, on_sigterm);
    signal(SIGUSR2, on_sigterm);
    signal(SIGINT, on_sigterm); /* Ctrl-C at a terminal: saved, as SIGTERM */
    signal(SIGPIPE, SIG_IGN);
    error_file_install_crash_handlers();
    stacks_install(getenv("RANK") ? atoi(getenv("RANK")) : 0);
    int rc = start(&t);
    if (rc == 0) rc = run_epochs(&t);
    if (rc == 0 && !t.stopped && !trainer_stop_requested) rc = save_final(&t);
    int flushed = snapshot_save_flush(&t); /* the last checkpoint, on disk before "done" */
    if (rc == 0) rc = flushed;
    /* and on some node's disk at least: else the run did not keep its result */
    if (rc == 0 && !t.stopped && !trainer_stop_requested)
        rc = snapshot_keepers(&t, t.at.global_step);
    if (t.env.rank == 0) progress_bar_clear(&t.progress);
    if (rc == 0 && t.env.rank == 0) progress_done(&t);
    if (rc == 0 && !t.stopped && !trainer_stop_requested) say_finished(&t);
    snapshot_keep_flush(&t);
    if (rc == 0) snapshot_keep_report(&t, clock_now_s() - t.progress.t_start);
    rank_metrics_flush(&t.rm, clock_now_ns()); /* the last step, whatever the second */
    /* The convention (trainer.h) says the failure was reported; if a path
     * forgot, the agent still gets a reason rather than a bare exit 1. */
    if (rc && !t.err[0]) trainer_fail(&t, rc, "training failed: %s", strerror(-rc));
    /* The watch stays on through the clean-up, and the process's end drops
     * it: a rank that hangs on its way out (stopped, or stuck closing a
     * peer's connection) after its last step is killed like one that hangs
     * in a step, and its job does not wait for it for ever. */
    watchdog_arm(&t.wd, WATCHED);
    sample_log_close(&t.samples);
    int code = rc == 0 ? 0 : t.stopped ? 128 + (int)trainer_stop_requested : 1;
    if (devcomm_nccl_abort_unfinished()) leave_now(&t, code);
    trainer_cleanup(&t);
    return code;
}
