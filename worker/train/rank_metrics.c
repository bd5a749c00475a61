/* See rank_metrics.h. A failed write is said once and ends the metrics
 * of this process: training goes on regardless. */
#include "worker/train/rank_metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/ddprun_env.h"
#include "common/log.h"

#define WRITE_EVERY_NS 1000000000LL

void rank_metrics_init(rank_metrics *rm, int rank, int local_rank) {
    memset(rm, 0, sizeof *rm);
    rm->rank = rank, rm->local_rank = local_rank;
    const char *dir = getenv(DDPRUN_ENV_METRICS_DIR);
    if (!dir || !*dir) return;
    if (snprintf(rm->path, sizeof rm->path, "%s/rank_%d.prom", dir, rank) >=
        (int)sizeof rm->path) {
        log_warn("rank %d: " DDPRUN_ENV_METRICS_DIR " is too long (%zu characters); no metrics",
                 rank, strlen(dir));
        rm->path[0] = '\0';
    }
}

typedef struct {
    const char *name, *type, *help;
} family;

static void series(FILE *f, const rank_metrics *rm, const family *fam, const char *suffix,
                   double v) {
    if (!suffix || !*suffix) fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", fam->name, fam->help,
                                     fam->name, fam->type);
    fprintf(f, "%s%s{rank=\"%d\",local_rank=\"%d\"} %.15g\n", fam->name, suffix ? suffix : "",
            rm->rank, rm->local_rank, v);
}

/* A summary without quantiles: its _sum and _count. */
static void summary(FILE *f, const rank_metrics *rm, const family *fam, double sum, double n) {
    fprintf(f, "# HELP %s %s\n# TYPE %s summary\n", fam->name, fam->help, fam->name);
    series(f, rm, fam, "_sum", sum);
    series(f, rm, fam, "_count", n);
}

static int write_series(FILE *f, const rank_metrics *rm) {
    static const family step = {"ddprun_train_step", "gauge",
                                "Global steps finished (the run's position, as checkpoints "
                                "count it)."},
        epoch = {"ddprun_train_epoch", "gauge", "The epoch being trained, from 1."},
        loss = {"ddprun_train_loss", "gauge", "This rank's last batch: mean training loss."},
        acc = {"ddprun_train_accuracy", "gauge", "This rank's last batch: accuracy, 0 to 1."},
        images = {"ddprun_train_images_total", "counter",
                  "Training images this rank processed since it started."},
        ips = {"ddprun_train_images_per_second", "gauge",
               "This rank's images per second over the last second or so."},
        step_s = {"ddprun_train_step_seconds", "summary",
                  "Training steps: their wall time on this rank (forward, backward, all-reduce, "
                  "optimizer, the loss's all-reduce)."},
        ar = {"ddprun_train_allreduce_wait_seconds", "summary",
              "Time this rank waited after backward for the gradients' all-reduce (the part "
              "backward did not hide), per step; not seen in steps replayed as CUDA graphs."},
        bytes = {"ddprun_train_allreduce_bytes_total", "counter",
                 "Gradient bytes this rank all-reduced."},
        ckpt = {"ddprun_train_checkpoint_seconds", "summary",
                "Checkpoints this rank wrote and the time each took."},
        stamp = {"ddprun_train_last_update_timestamp_seconds", "gauge",
                 "When this rank last wrote its metrics (Unix time)."};
    series(f, rm, &step, NULL, (double)rm->global_step);
    series(f, rm, &epoch, NULL, rm->epoch + 1);
    series(f, rm, &loss, NULL, rm->loss);
    series(f, rm, &acc, NULL, rm->acc);
    series(f, rm, &images, NULL, (double)rm->images);
    series(f, rm, &ips, NULL, rm->images_per_s);
    summary(f, rm, &step_s, rm->step_s, (double)rm->steps);
    summary(f, rm, &ar, (double)rm->allreduce_ns * 1e-9, (double)rm->allreduce_waits);
    series(f, rm, &bytes, NULL, (double)rm->allreduce_bytes);
    summary(f, rm, &ckpt, rm->ckpt_s, (double)rm->ckpts);
    series(f, rm, &stamp, NULL, clock_wall_s());
    return ferror(f) ? -EIO : 0;
}

void rank_metrics_flush(rank_metrics *rm, int64_t now_ns) {
    if (!rm->path[0]) return;
    /* The rate over the last interval; a write soon after the last (the
     * run's end) keeps the rate it had. */
    double dt = rm->last_write_ns ? (double)(now_ns - rm->last_write_ns) * 1e-9 : 0;
    if (dt >= 0.25) {
        rm->images_per_s = (double)(rm->images - rm->images_at_write) / dt;
        rm->images_at_write = rm->images;
        rm->last_write_ns = now_ns;
    } else if (!rm->last_write_ns) { /* the first: the rate starts here */
        rm->images_at_write = rm->images;
        rm->last_write_ns = now_ns;
    }
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp", rm->path);
    FILE *f = fopen(tmp, "w");
    int rc = f ? write_series(f, rm) : -errno;
    if (f && fclose(f) != 0 && rc == 0) rc = -errno;
    if (rc == 0 && rename(tmp, rm->path) != 0) rc = -errno;
    if (rc == 0) return;
    log_warn("rank %d: cannot write its metrics to %s: %s; no more metrics from this rank",
             rm->rank, rm->path, strerror(-rc));
    unlink(tmp);
    rm->path[0] = '\0';
}

void rank_metrics_step(rank_metrics *rm, int64_t now_ns, int64_t step_ns, const rank_step *s) {
    if (!rm->path[0]) return;
    rm->global_step = s->global_step;
    rm->epoch = s->epoch;
    rm->loss = s->loss, rm->acc = s->acc;
    rm->images += s->images;
    rm->steps++;
    rm->step_s += (double)step_ns * 1e-9;
    rm->allreduce_ns = s->allreduce_ns;
    rm->allreduce_waits = s->allreduce_waits;
    rm->allreduce_bytes += s->allreduce_bytes;
    if (!rm->last_write_ns || now_ns - rm->last_write_ns >= WRITE_EVERY_NS)
        rank_metrics_flush(rm, now_ns);
}

void rank_metrics_checkpoint(rank_metrics *rm, int64_t ns) {
    rm->ckpts++;
    rm->ckpt_s += (double)ns * 1e-9;
}
