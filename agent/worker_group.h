/* The local worker group: spawning nproc_per_node processes, forwarding
 * their output, learning of each exit the moment it happens (libuv's exit
 * callback, no polling), and stopping them (SIGTERM to each process group,
 * SIGKILL after the grace period). Workers are started a few per turn of
 * the event loop, so signals and exits are handled while a large group
 * starts. When the group stops, whatever its workers left behind (a
 * daemon started with setsid) is ended too: the agent is their subreaper.
 * Knows nothing of rendezvous or ranks beyond what the agent hands it. */
#ifndef DDPRUN_AGENT_WORKER_GROUP_H
#define DDPRUN_AGENT_WORKER_GROUP_H

#include <limits.h>
#include <stdint.h>
#include <uv.h>

#include "agent/worker_output.h"

/* The most workers one agent starts, whatever the machine allows. */
#define WORKER_GROUP_MAX 4096

typedef struct worker_group worker_group;

typedef struct {
    worker_group *group;
    int local_rank;
    int global_rank;
    uv_process_t proc;
    int pid;
    int running;
    int64_t exit_status; /* valid once !running */
    int term_signal;     /* 0 if it exited normally */
    double exit_time;    /* wall clock, seconds */
    char **argv, **env;  /* until spawned; env is the group's to free */
    char error_file[PATH_MAX];
    worker_output out, err;
} worker;

/* What one worker is started with. */
typedef struct {
    char **argv;      /* program and arguments; must outlive the group */
    char **env;       /* complete environment, one malloc'ed block: the group takes it */
    int global_rank;
    char error_file[PATH_MAX];
    worker_output_opts out, err;
} worker_spec;

struct worker_group {
    uv_loop_t *loop;
    const char *exec_helper; /* ddprun-exec: runs the program with PR_SET_PDEATHSIG */
    int n;
    worker *w;
    int nstarted;      /* workers spawned so far (in local rank order) */
    int starting;      /* some are still to be spawned */
    uv_idle_t spawner; /* spawns the rest, a few per turn of the loop */
    int nrunning;      /* processes not yet exited */
    int noutputs;      /* output pipes not yet at EOF */
    int stopping;
    int idle;          /* on_idle has run */
    uv_timer_t kill_timer;  /* SIGKILL after the grace period */
    uv_timer_t drain_timer; /* stop waiting for output a while after the last exit */
    int nhandles;      /* handles to close, or whose close is under way */
    int freeing;       /* worker_group_free was called: the last close frees the group */
    void (*on_started)(worker_group *); /* once: every worker runs (not if stopped first) */
    void (*on_exit)(worker_group *, worker *); /* every exit, as it happens */
    void (*on_idle)(worker_group *); /* once: every worker exited and its output is written */
    /* NULL, or called once when the shutdown timeout has passed with workers
     * still running: the seconds to wait yet before SIGKILL (0: none), for
     * their stacks (the agent asks for them) */
    double (*before_kill)(worker_group *);
    int kill_delayed;  /* before_kill gave them time */
    void *data;
};

/* Whether this machine lets one process start n workers: at most
 * WORKER_GROUP_MAX, within RLIMIT_NPROC (unless root) and the descriptors
 * the agent may open (six per worker). 0, or -EAGAIN/-EMFILE/-E2BIG with
 * the limit and how to raise it in err. */
int worker_group_fits(int n, char *err, size_t errlen);

/* Allocates a group; set on_started, on_exit, on_idle and data, then start it. */
worker_group *worker_group_new(uv_loop_t *loop, const char *exec_helper);
/* Starts n workers: opens their log files and spawns the first few now,
 * the rest on the next turns of the loop (on_started follows the last).
 * A failure now stops the ones already started and returns a negative
 * errno with a message in err; a later spawn failure is logged and counts
 * as that worker's exit with code 127. The specs' environments are the
 * group's from this call on, whatever it returns. */
int worker_group_start(worker_group *g, int n, const worker_spec *specs, char *err,
                       size_t errlen);
/* Sends `sig` to every running worker's process group, then SIGKILL after
 * timeout_s; on_idle follows once all have exited. */
void worker_group_stop(worker_group *g, int sig, double timeout_s);
/* Closes the group's handles and frees it (after on_idle). */
void worker_group_free(worker_group *g);


#endif
