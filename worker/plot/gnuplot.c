/* See gnuplot.h. The picture: two panels sharing the x axis (the global
 * step), loss above and accuracy below; training as light dots, one per
 * step, under a moving mean that breaks at each restart; evaluations as
 * points joined by a line; each restart a dashed vertical line at the step
 * the group resumed from, labelled with its count and world size. */
#include "worker/plot/gnuplot.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fs.h"

extern char **environ;

/* More dots than this are thinned (every k-th step): a page is a few
 * thousand pixels wide, and gnuplot slows down with millions of points.
 * The moving mean still uses every step. */
#define MAX_DOTS 20000
/* Restart markers get a label each up to this many; more would pile up. */
#define MAX_LABELS 12

#define C_TRAIN_DOT "#aec7e8"
#define C_TRAIN "#1f77b4"
#define C_TEST "#ff7f0e"
#define C_RESTART "#d62728"

/* A gnuplot single-quoted string: no escapes inside but '' for a quote;
 * control characters (a newline would end the command) become spaces. */
static void put_quoted(FILE *out, const char *s) {
    fputc('\'', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'') fputs("''", out);
        else fputc(c < 32 || c == 127 ? ' ' : c, out);
    }
    fputc('\'', out);
}

/* A value in a data block; "?" is missing (set datafile missing). */
static void put_value(FILE *out, double v) {
    if (isfinite(v)) fprintf(out, " %.9g", v);
    else fputs(" ?", out);
}

static int smooth_block(const metrics_series *s, size_t window, FILE *out) {
    size_t n = s->ntrain;
    double *v = malloc(n * sizeof *v), *loss = malloc(n * sizeof *loss),
           *acc = malloc(n * sizeof *acc);
    int *seg = malloc(n * sizeof *seg);
    if (!v || !loss || !acc || !seg) {
        free(v), free(loss), free(acc), free(seg);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) v[i] = s->train[i].loss, seg[i] = s->train[i].segment;
    metrics_series_smooth(v, seg, n, window, loss);
    for (size_t i = 0; i < n; i++) v[i] = s->train[i].acc;
    metrics_series_smooth(v, seg, n, window, acc);
    fputs("$SMOOTH << EOD\n", out);
    for (size_t i = 0; i < n; i++) {
        /* A blank line breaks the curve: each restart starts a new one. */
        if (i > 0 && seg[i] != seg[i - 1]) fputc('\n', out);
        fprintf(out, "%lld", (long long)s->train[i].step);
        put_value(out, loss[i]);
        put_value(out, 100 * acc[i]);
        fputc('\n', out);
    }
    fputs("EOD\n", out);
    free(v), free(loss), free(acc), free(seg);
    return 0;
}

static void data_blocks(const metrics_series *s, FILE *out) {
    size_t stride = s->ntrain > MAX_DOTS ? (s->ntrain + MAX_DOTS - 1) / MAX_DOTS : 1;
    fputs("$TRAIN << EOD\n", out);
    for (size_t i = 0; i < s->ntrain; i += stride) {
        fprintf(out, "%lld", (long long)s->train[i].step);
        put_value(out, s->train[i].loss);
        put_value(out, 100 * s->train[i].acc);
        fputc('\n', out);
    }
    fputs("EOD\n$TEST << EOD\n", out);
    for (size_t i = 0; i < s->ntest; i++) {
        fprintf(out, "%lld", (long long)s->test[i].step);
        put_value(out, s->test[i].loss);
        put_value(out, 100 * s->test[i].acc);
        fputc('\n', out);
    }
    fputs("EOD\n", out);
}

/* The x range every panel shares, so the panels line up step for step. */
static void x_range(const metrics_series *s, long long *lo, long long *hi) {
    *lo = *hi = s->train[0].step;
    for (size_t i = 0; i < s->ntrain; i++) {
        if (s->train[i].step < *lo) *lo = s->train[i].step;
        if (s->train[i].step > *hi) *hi = s->train[i].step;
    }
    for (size_t i = 0; i < s->ntest; i++) {
        if (s->test[i].step < *lo) *lo = s->test[i].step;
        if (s->test[i].step > *hi) *hi = s->test[i].step;
    }
    for (size_t i = 0; i < s->nrestarts; i++)
        if (s->restarts[i].step < *lo) *lo = s->restarts[i].step;
    if (*lo > 0 && *lo <= *hi / 10) *lo = 0; /* a run from the start: from 0 */
    if (*hi == *lo) (*lo)--, (*hi)++;
}

/* The restarts, as dashed lines on the current panel (labelled when asked). */
static void restart_marks(const metrics_series *s, FILE *out, int labels) {
    fputs("unset arrow\nunset label\n", out);
    for (size_t i = 0; i < s->nrestarts; i++) {
        const series_restart *r = &s->restarts[i];
        fprintf(out,
                "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt 2 lw 1.5 "
                "lc rgb '" C_RESTART "' front\n",
                (long long)r->step, (long long)r->step);
        if (!labels || s->nrestarts > MAX_LABELS) continue;
        char text[96];
        if (r->inferred)
            snprintf(text, sizeof text, "restart (step went back)");
        else if (r->world > 0)
            snprintf(text, sizeof text, "restart %d (%d rank%s)", r->restart, r->world,
                     r->world == 1 ? "" : "s");
        else
            snprintf(text, sizeof text, "restart %d", r->restart);
        fprintf(out,
                "set label '%s' at %lld, graph 0.97 right rotate by 90 offset char -0.9,0 "
                "tc rgb '" C_RESTART "' boxed front\n",
                text, (long long)r->step);
    }
}

/* One panel's plot command: column is 2 (loss) or 3 (accuracy, in %). */
static void panel_plot(const metrics_series *s, size_t window, int column, FILE *out) {
    fputs("plot ", out);
    if (window > 1)
        fprintf(out,
                "$TRAIN using 1:%d with points pt 7 ps 0.45 lc rgb '" C_TRAIN_DOT
                "' title 'train, each step', \\\n"
                "     $SMOOTH using 1:%d with lines lw 2 lc rgb '" C_TRAIN
                "' title 'train, mean of %zu steps'",
                column, column, window);
    else
        fprintf(out,
                "$TRAIN using 1:%d with linespoints pt 7 ps 0.5 lw 1.5 lc rgb '" C_TRAIN
                "' title 'train'",
                column);
    if (s->ntest > 0)
        fprintf(out,
                ", \\\n     $TEST using 1:%d with linespoints pt 7 ps 1.2 lw 2 lc rgb '" C_TEST
                "' title 'test'",
                column);
    if (s->nrestarts > 0)
        fputs(", \\\n     keyentry with lines dt 2 lw 1.5 lc rgb '" C_RESTART
              "' title 'restart (from a checkpoint)'",
              out);
    fputc('\n', out);
}

/* What the panels hold, in a line under the title: the last step, the
 * steps trained again after restarts, evaluations, restarts, the end. */
static void subtitle(const metrics_series *s, FILE *out) {
    long long last = s->train[0].step, top = s->train[0].step;
    size_t redone = 0;
    for (size_t i = 1; i < s->ntrain; i++) {
        if (s->train[i].step <= top) redone++;
        if (s->train[i].step > top) top = s->train[i].step;
        last = s->train[i].step;
    }
    fprintf(out, "%zu steps to step %lld", s->ntrain, last);
    if (redone) fprintf(out, " (%zu trained again)", redone);
    fprintf(out, ", %zu evaluation%s, %zu restart%s", s->ntest, s->ntest == 1 ? "" : "s",
            s->nrestarts, s->nrestarts == 1 ? "" : "s");
    if (s->world > 0) fprintf(out, ", %d rank%s", s->world, s->world == 1 ? "" : "s");
    fputs(s->done ? ", done" : s->stopped ? ", stopped on a signal" : "", out);
}

int plot_write_script(const metrics_series *s, const plot_opts *o, FILE *out) {
    size_t window = metrics_series_window(s->ntrain);
    int scale = o->height / 70 < o->width / 100 ? o->height / 70 : o->width / 100;
    int font = scale > 8 ? scale : 8;
    fprintf(out, "set terminal pngcairo size %d,%d noenhanced font 'sans,%d'\n", o->width,
            o->height, font);
    fputs("set output\nset datafile missing '?'\n", out);
    data_blocks(s, out);
    if (smooth_block(s, window, out)) return -ENOMEM;
    long long lo, hi;
    x_range(s, &lo, &hi);
    fputs("set multiplot layout 2,1 title ", out);
    put_quoted(out, o->title);
    fprintf(out, " font ',%d'\n", font + 2);
    fprintf(out, "set xrange [%lld:%lld]\nset lmargin 11\nset rmargin 4\n", lo, hi);
    fputs("set style textbox opaque noborder\n", out);
    fputs("set grid lc rgb '#dddddd'\nset border lc rgb '#555555'\nset key opaque box "
          "lc rgb '#cccccc' samplen 2\nset format x '%.0f'\n",
          out);
    /* What the panels show, in a line under the title. */
    fputs("set title '", out);
    subtitle(s, out);
    fprintf(out, "' font ',%d'\n", font);
    fputs("set key top right\nset ylabel 'loss'\nset xlabel ''\nset yrange [0<*:*]\n", out);
    restart_marks(s, out, 1);
    panel_plot(s, window, 2, out);
    fputs("unset title\nset key bottom right\nset ylabel 'accuracy (%)'\n"
          "set xlabel 'global step'\nset yrange [0<*:*<100]\n",
          out);
    restart_marks(s, out, 0);
    panel_plot(s, window, 3, out);
    fputs("unset multiplot\n", out);
    return ferror(out) ? -EIO : 0;
}

/* ---- running gnuplot ---- */

/* The temporary file beside path: ".NAME.XXXXXX" in path's directory. */
static int make_temp(const char *path, char *tmp, size_t size, char *err, size_t errlen) {
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    if (snprintf(tmp, size, "%.*s.%s.XXXXXX", dirlen, path, slash ? slash + 1 : path) >=
        (int)size) {
        snprintf(err, errlen, "cannot write %s: the path is too long", path);
        return -ENAMETOOLONG;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        /* The directory without its last slash (but "/" stays "/"). */
        int shown = dirlen > 1 ? dirlen - 1 : dirlen;
        snprintf(err, errlen, "cannot write %s: cannot create a file in %.*s: %s", path,
                 shown ? shown : 1, shown ? path : ".", strerror(e));
        return -e;
    }
    /* mkstemp makes it 0600; the picture is an ordinary file. */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    return fd;
}

typedef struct {
    pid_t pid;
    int in, errfd; /* our ends: gnuplot's stdin and stderr */
    char msg[2048]; /* the end of what gnuplot said on stderr (> a read's 1024) */
    size_t msglen;
} child;

static int spawn(const plot_opts *o, int out_fd, child *c, char *err, size_t errlen) {
    int in[2] = {-1, -1}, er[2] = {-1, -1}, rc = 0;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    if (pipe2(in, O_CLOEXEC) || pipe2(er, O_CLOEXEC)) {
        rc = -errno;
        snprintf(err, errlen, "cannot start gnuplot: pipe: %s", strerror(errno));
        goto out;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, er[1], 2);
    posix_spawnattr_init(&attr);
    sigset_t none, dflt;
    sigemptyset(&none);
    sigemptyset(&dflt);
    sigaddset(&dflt, SIGINT), sigaddset(&dflt, SIGTERM), sigaddset(&dflt, SIGHUP);
    sigaddset(&dflt, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dflt);
    /* Its own process group: a Ctrl-C at the terminal reaches us, and we
     * decide (finish this picture, or stop gnuplot and write nothing). */
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    char *argv[] = {(char *)o->program, NULL};
    int e = posix_spawnp(&c->pid, o->program, &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (e) {
        rc = -e;
        if (e == ENOENT)
            snprintf(err, errlen, "%s is not installed (not found on PATH): install gnuplot "
                     "with its pngcairo terminal (Debian: apt-get install gnuplot-nox)",
                     o->program);
        else
            snprintf(err, errlen, "cannot run %s: %s", o->program, strerror(e));
        goto out;
    }
    c->in = in[1], in[1] = -1;
    c->errfd = er[0], er[0] = -1;
    fcntl(c->in, F_SETFL, O_NONBLOCK);
out:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0) close(in[i]);
        if (er[i] >= 0) close(er[i]);
    }
    return rc;
}

/* Keeps the last part of what gnuplot writes on stderr. */
static void keep_stderr(child *c) {
    char buf[1024];
    ssize_t n = read(c->errfd, buf, sizeof buf);
    if (n <= 0) {
        if (n == 0 || (errno != EINTR && errno != EAGAIN)) close(c->errfd), c->errfd = -1;
        return;
    }
    size_t room = sizeof c->msg - 1; /* more than one read's worth */
    if (c->msglen + (size_t)n > room) {
        size_t drop = c->msglen + (size_t)n - room;
        memmove(c->msg, c->msg + drop, c->msglen - drop);
        c->msglen -= drop;
    }
    memcpy(c->msg + c->msglen, buf, (size_t)n);
    c->msglen += (size_t)n;
    c->msg[c->msglen] = 0;
}

/* The signal that asked to stop, 0 before (or without a stop flag). */
static int stop_signal(const plot_opts *o) { return o->stop ? *o->stop : 0; }

/* How often a wait on gnuplot looks at the stop flag: a signal that comes
 * just before a wait starts does not interrupt it. */
#define STOP_POLL_MS 100

/* Feeds the script and gathers stderr until gnuplot closes it; polled,
 * so neither side can block the other, and a stop signal is seen within
 * a tenth of a second. 0, or -EINTR. */
static int talk(const plot_opts *o, child *c, const char *script, size_t len) {
    size_t sent = 0;
    while (c->errfd >= 0) {
        if (stop_signal(o)) return -EINTR;
        struct pollfd p[2] = {{.fd = c->errfd, .events = POLLIN}, {.fd = c->in, .events = POLLOUT}};
        if (poll(p, c->in >= 0 ? 2 : 1, STOP_POLL_MS) < 0 && errno != EINTR) return -errno;
        if (p[0].revents) keep_stderr(c);
        if (c->in >= 0 && p[1].revents) {
            ssize_t n = (p[1].revents & POLLOUT) ? write(c->in, script + sent, len - sent) : -1;
            if (n > 0) sent += (size_t)n;
            /* Done, or gnuplot stopped reading (it failed: its status says why). */
            if (sent == len || (n < 0 && errno != EAGAIN && errno != EINTR))
                close(c->in), c->in = -1;
        }
    }
    return 0;
}

/* The end of gnuplot's message, as one line for ours. */
static const char *last_words(child *c) {
    char *m = c->msg;
    while (c->msglen && (m[c->msglen - 1] == '\n' || m[c->msglen - 1] == ' ')) m[--c->msglen] = 0;
    for (char *p = m; *p; p++)
        if (*p == '\n') *p = ' ';
    while (*m == ' ') m++;
    return *m ? m : "(it said nothing)";
}

/* Stops gnuplot: it is ours, and its picture is not wanted now. */
static void kill_child(const child *c) {
    kill(-c->pid, SIGKILL); /* its process group (spawn made one): all of it */
}

/* Waits for gnuplot's exit, which may come well after it closed its pipes
 * (or never, from a stand-in that lingers), so the stop flag is looked at
 * meanwhile, at growing intervals up to STOP_POLL_MS: -EINTR once it is set
 * (gnuplot killed, then reaped), else 0 with its status, or -errno from
 * waitpid. */
static int reap(const plot_opts *o, const child *c, int *status) {
    int rc = 0, pause_ms = 1;
    for (;;) {
        pid_t r = waitpid(c->pid, status, WNOHANG);
        if (r == c->pid) return rc;
        if (r < 0 && errno != EINTR) return rc ? rc : -errno;
        if (rc == 0 && stop_signal(o)) kill_child(c), rc = -EINTR;
        poll(NULL, 0, pause_ms);
        if (pause_ms < STOP_POLL_MS) pause_ms *= 2;
    }
}

static int run_gnuplot(const plot_opts *o, const char *script, size_t len, int out_fd,
                       char *err, size_t errlen) {
    child c = {.pid = -1, .in = -1, .errfd = -1};
    int rc = spawn(o, out_fd, &c, err, errlen);
    if (rc) return rc;
    rc = talk(o, &c, script, len);
    if (rc) kill_child(&c);
    if (c.in >= 0) close(c.in);
    if (c.errfd >= 0) close(c.errfd);
    int status = 0, reaped = reap(o, &c, &status);
    if (rc == 0) rc = reaped;
    if (rc == -EINTR) {
        int sig = stop_signal(o);
        snprintf(err, errlen, "interrupted by SIG%s: nothing written",
                 sig && sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    } else if (rc) {
        snprintf(err, errlen, "cannot run %s: %s", o->program, strerror(-rc));
    }
    if (rc) return rc;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFEXITED(status))
        snprintf(err, errlen, "%s failed (exit status %d): %s", o->program, WEXITSTATUS(status),
                 last_words(&c));
    else
        snprintf(err, errlen, "%s was killed by SIG%s: %s", o->program,
                 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?",
                 last_words(&c));
    return -EIO;
}

/* gnuplot's output is a PNG: its signature is there (a gnuplot without
 * the pngcairo terminal fails, but one that wrote something else, or
 * nothing, would otherwise be renamed into place). */
static int check_png(int fd, const char *program, char *err, size_t errlen) {
    static const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8];
    ssize_t n = pread(fd, head, sizeof head, 0);
    if (n == (ssize_t)sizeof head && memcmp(head, sig, sizeof sig) == 0) return 0;
    snprintf(err, errlen, "%s exited 0 but wrote %s", program,
             n <= 0 ? "nothing" : "something that is not a PNG");
    return -EIO;
}

/* Syncs the finished temporary file and renames it over path. */
static int commit(int fd, const char *tmp, const char *path, char *err, size_t errlen) {
    if (fsync(fd) < 0 && errno != EINVAL) {
        int e = errno;
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
        return -e;
    }
    if (rename(tmp, path) < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot write %s: %s", path, strerror(e));
        return -e;
    }
    return 0;
}

int plot_render(const metrics_series *s, const plot_opts *o, const char *path, char *err,
                size_t errlen) {
    /* The PNG is renamed into place: over a device or a FIFO that would
     * replace the node itself (as root, -o /dev/full became a PNG file). */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "cannot write %s: it is %s, not a file (-o names the PNG file "
                              "to write or replace)", path, fs_kind(st.st_mode));
        return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
    }
    char *script = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&script, &len);
    if (!mem) return snprintf(err, errlen, "out of memory"), -ENOMEM;
    int rc = plot_write_script(s, o, mem);
    if (fclose(mem) && rc == 0) rc = -ENOMEM;
    if (rc) {
        free(script);
        snprintf(err, errlen, "out of memory writing the gnuplot script");
        return rc;
    }
    char tmp[PATH_MAX + 16];
    int fd = make_temp(path, tmp, sizeof tmp, err, errlen);
    if (fd < 0) {
        free(script);
        return fd;
    }
    rc = run_gnuplot(o, script, len, fd, err, errlen);
    free(script);
    if (rc == 0) rc = check_png(fd, o->program, err, errlen);
    if (rc == 0) rc = commit(fd, tmp, path, err, errlen);
    close(fd);
    if (rc) unlink(tmp);
    return rc;
}
