/* A worker's stdout or stderr as the agent forwards it: read from a pipe,
 * cut into whole lines, and written to the worker's log file, to the
 * console, or both (torchrun's --redirects / --tee). Each console line is
 * one write(2), so lines of different workers never mix mid-line. */
#ifndef DDPRUN_AGENT_WORKER_OUTPUT_H
#define DDPRUN_AGENT_WORKER_OUTPUT_H

#include <uv.h>

#include "common/buf.h"

typedef struct {
    const char *file;   /* log file to append to, or NULL */
    int console_fd;     /* 1 or 2, or -1 for none */
    const char *prefix; /* put before each console line, or NULL */
    /* --duplicate-*-filters: console lines holding any of these strings
     * (NULL-terminated; NULL: none) are appended, prefixed, to dup_file,
     * which every worker of the attempt shares (one write per line). */
    const char *dup_file;
    char *const *dup_filters;
} worker_output_opts;

/* What a log line prefix template may name: torchrun's macros. */
typedef struct {
    const char *role_name;
    int local_rank, rank;
    const char *hostname;
} worker_prefix_vars;

/* Expands a log line prefix template (torchrun's
 * --log-line-prefix-template) into out: ${role_name}, ${local_rank},
 * ${rank} and ${hostname}, also written without braces, and $$ for a '$'.
 * Anything else after a '$' stays as written, as Python's
 * Template.safe_substitute leaves it; the first such name goes to unknown
 * (if not NULL) and the count of them is returned. */
int worker_output_prefix(const char *tmpl, const worker_prefix_vars *v, char *out, size_t outlen,
                         char *unknown, size_t unknownlen);

typedef struct worker_output {
    uv_pipe_t pipe;
    int open;       /* the pipe handle is initialised and not yet closed */
    int file_fd;
    int console_fd;
    char prefix[256];
    int dup_fd;               /* filtered_std*.log, or -1 */
    char *const *dup_filters;
    buf_t partial; /* the start of a line not yet ended */
    int eof;
    int capturing;  /* lines are also kept in capture (worker_output_capture) */
    buf_t capture;
    buf_t tail;     /* the last lines written (worker_output_tail) */
    void (*on_eof)(struct worker_output *); /* the pipe has ended (all output written) */
    void *owner;
} worker_output;

/* The longest line passed on whole: a longer one is cut into lines of this
 * many bytes (as journald does), so a worker that never writes a newline
 * costs the agent at most this much. */
#define WORKER_LINE_MAX (64 * 1024)

/* Cuts bytes read from the worker into lines and writes each out: a line
 * ends at '\n' ("\r\n" included); a '\r' not followed by '\n' ends a
 * progress update, written with its '\r' so that a console shows it in
 * place (a bar drawn with '\r' is seen as it moves, not at its end). */
void worker_output_feed(worker_output *o, const char *p, size_t n);
/* At EOF: what is left goes out as a last line, a '\n' added. */
void worker_output_flush(worker_output *o);

/* From now on, the lines are also kept (at most WORKER_CAPTURE_MAX bytes):
 * what a worker writes when asked for its stacks, for its failure. */
#define WORKER_CAPTURE_MAX (32 * 1024)
void worker_output_capture(worker_output *o);
/* What was kept, as a string (malloc'd; NULL: nothing), and the keeping
 * stops. */
char *worker_output_captured(worker_output *o);

/* The last lines the worker wrote (at most `lines` of them, and
 * WORKER_TAIL_MAX bytes), as a string (malloc'd; NULL: none): for a
 * failure summary whose worker left no error file. */
#define WORKER_TAIL_MAX 2048
char *worker_output_tail(const worker_output *o, int lines);

/* Passes on at once what the pipe holds now (its worker has exited: the
 * last lines it wrote, its traceback, are there before the agent's loop
 * reads them), at most 1 MiB. */
void worker_output_drain(worker_output *o);

/* Prepares the pipe (before spawning) and opens the log file. */
int worker_output_init(worker_output *o, uv_loop_t *loop, const worker_output_opts *opts);
/* Starts reading once the process runs. */
int worker_output_start(worker_output *o);
/* Closes the pipe and file; returns 1 if `on_closed` will run (when
 * libuv lets go of the pipe), 0 if there was no pipe to close. */
int worker_output_close(worker_output *o, uv_close_cb on_closed);

#endif
