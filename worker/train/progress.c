/* See progress.h. */
#include "worker/train/progress.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"

int progress_start(trainer *t) {
    train_progress *p = &t->progress;
    const char *path = t->cfg->metrics;
    if (path[0] && t->env.rank == 0 && !(p->metrics = fopen(path, "a")))
        return trainer_fail(t, -errno, "cannot open --metrics %s: %s", path, strerror(errno));
    if (p->metrics) {
        /* Whole lines only, each as soon as it is complete: `ddp-train plot
         * --refresh` reads the file while it grows, and a rank killed with
         * SIGKILL must not leave half a line for its restarted group to
         * append to. */
        setvbuf(p->metrics, NULL, _IOLBF, 0);
        /* Where this (re)start of training begins: the plot marks restarts
         * with it, at the step the group resumed from. */
        fprintf(p->metrics,
                "{\"event\":\"start\",\"global_step\":%lld,\"epoch\":%d,\"restart\":%d,"
                "\"world_size\":%d,\"global_batch\":%d,\"unix_time\":%.3f}\n",
                (long long)t->at.global_step, t->at.epoch + 1, t->env.restart_count,
                t->env.world, t->at.global_batch, clock_wall_s());
    }
    p->tty = isatty(STDOUT_FILENO);
    p->t_start = p->t_measure = clock_now_s();
    p->measure_from_step = t->at.global_step + t->cfg->warmup_steps;
    return 0;
}

void progress_count(trainer *t) {
    train_progress *p = &t->progress;
    if (t->at.global_step == p->measure_from_step)
        p->t_measure = clock_now_s(), p->measured_images = 0;
    else
        p->measured_images += t->at.global_batch;
    p->images += t->at.global_batch;
}

void progress_bar_clear(train_progress *p) {
    if (!p->bar_shown) return;
    fputs("\r\033[K", stdout);
    p->bar_shown = 0;
}

static void bar_draw(trainer *t, int64_t step_in_epoch, double loss, double ips, double eta) {
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int64_t per_epoch = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
    int full = (int)(WIDTH * step_in_epoch / per_epoch);
    for (int i = 0; i < WIDTH; i++) bar[i] = i < full ? '#' : '.';
    bar[WIDTH] = 0;
    printf("\r\033[Kepoch %d/%d [%s] %lld/%lld loss %.4f %.0f img/s ETA %dm%02ds",
           t->at.epoch + 1, t->cfg->epochs, bar, (long long)step_in_epoch,
           (long long)t->steps_per_epoch, loss, ips, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
    t->progress.bar_shown = 1;
}

/* Seconds left at ips images per second. */
static double eta_s(const trainer *t, int64_t step_in_epoch, double ips) {
    const train_config *c = t->cfg;
    double left_steps = (double)(c->epochs - t->at.epoch - 1) * t->steps_per_epoch +
                        (double)(t->steps_per_epoch - step_in_epoch);
    if (c->max_steps > 0 && left_steps > c->max_steps - t->at.global_step)
        left_steps = (double)(c->max_steps - t->at.global_step);
    return ips > 0 ? left_steps * t->at.global_batch / ips : 0;
}

/* A number for a metrics line: printf's "nan" or "inf" is not JSON (a
 * diverged run would make its file unreadable), so those are null. */
static const char *json_num(char buf[32], double v) {
    if (!isfinite(v)) return "null";
    snprintf(buf, 32, "%.6f", v);
    return buf;
}

void progress_step(trainer *t, double loss, double acc, double lr, int64_t step_in_epoch) {
    train_progress *p = &t->progress;
    double now = clock_now_s(), elapsed = now - p->t_measure;
    double ips = elapsed > 0 && p->measured_images > 0 ? p->measured_images / elapsed : 0;
    char lb[32], ab[32];
    if (p->metrics)
        fprintf(p->metrics,
                "{\"epoch\":%d,\"step\":%lld,\"global_step\":%lld,\"loss\":%s,\"acc\":%s,"
                "\"lr\":%.6g,\"img_per_s\":%.1f,\"time\":%.3f}\n",
                t->at.epoch + 1, (long long)step_in_epoch, (long long)t->at.global_step,
                json_num(lb, loss), json_num(ab, acc), lr, ips, now - p->t_start);
    double eta = eta_s(t, step_in_epoch, ips);
    int every = t->cfg->log_every > 0 ? t->cfg->log_every : 50;
    if (t->at.global_step % every != 0 && step_in_epoch != t->steps_per_epoch) {
        if (p->tty) bar_draw(t, step_in_epoch, loss, ips, eta);
        return;
    }
    progress_bar_clear(p);
    printf("epoch %d/%d step %lld/%lld loss %.4f acc %.2f%% lr %.4g %.0f img/s ETA %dm%02ds\n",
           t->at.epoch + 1, t->cfg->epochs, (long long)step_in_epoch,
           (long long)t->steps_per_epoch, loss, 100 * acc, lr, ips, (int)eta / 60, (int)eta % 60);
    fflush(stdout);
}

void progress_test(trainer *t, double loss, double acc, int64_t images) {
    char lb[32], ab[32];
    progress_bar_clear(&t->progress);
    printf("epoch %d test: loss %.4f accuracy %.2f%% (%lld images)\n", t->at.epoch + 1, loss,
           100.0 * acc, (long long)images);
    fflush(stdout);
    if (t->progress.metrics)
        fprintf(t->progress.metrics,
                "{\"epoch\":%d,\"global_step\":%lld,\"test_loss\":%s,\"test_acc\":%s}\n",
                t->at.epoch + 1, (long long)t->at.global_step, json_num(lb, loss),
                json_num(ab, acc));
}

void progress_done(trainer *t) {
    const train_progress *p = &t->progress;
    /* After the warm-up steps; a run too short for that counts them all. */
    double now = clock_now_s(), ips = 0;
    if (p->measured_images > 0 && now > p->t_measure)
        ips = p->measured_images / (now - p->t_measure);
    else if (p->images > 0 && now > p->t_start)
        ips = p->images / (now - p->t_start);
    printf("done: %lld steps, img/s=%.1f\n", (long long)t->at.global_step, ips);
    fflush(stdout);
    if (p->metrics) {
        /* "done" only when the job's training is over (its epochs, or
         * --max-steps); a stop on a signal is "stop", since a preempted job
         * is usually resumed and appends to the same file. */
        const train_config *c = t->cfg;
        int over = t->at.epoch >= c->epochs ||
                   (c->max_steps > 0 && t->at.global_step >= c->max_steps);
        fprintf(p->metrics, "{\"event\":\"%s\",\"global_step\":%lld,\"img_per_s\":%.1f,"
                "\"unix_time\":%.3f}\n",
                over ? "done" : "stop", (long long)t->at.global_step, ips, clock_wall_s());
    }
}
