/* Unit tests of the worker's console prefix (agent/worker_output.c):
 * torchrun's log line prefix template and its macros. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/worker_output.h"
#include "tests/unit/test.h"

static const worker_prefix_vars vars = {.role_name = "trainer", .local_rank = 1, .rank = 5,
                                        .hostname = "node7"};

/* Expands t and checks the result and the count of names left alone. */
static void check_prefix(const char *t, const char *want, int want_unknown) {
    char out[256], unknown[64] = "";
    int n = worker_output_prefix(t, &vars, out, sizeof out, unknown, sizeof unknown);
    CHECK_STR(out, want);
    CHECK_EQ(n, want_unknown);
}

TEST(prefix_template_macros) {
    check_prefix("[${role_name}${local_rank}]:", "[trainer1]:", 0);
    check_prefix("${hostname}:${rank}: ", "node7:5: ", 0);
    check_prefix("$hostname/$rank|", "node7/5|", 0);
    check_prefix("no macros", "no macros", 0);
    check_prefix("cost $$5 ${rank}", "cost $5 5", 0);
    check_prefix("", "", 0);
}

/* As Python's Template.safe_substitute: what is no macro stays as written. */
TEST(prefix_template_leaves_unknown_names) {
    char out[64], unknown[64];
    CHECK_EQ(worker_output_prefix("${rnk}-${rank}", &vars, out, sizeof out, unknown,
                                  sizeof unknown), 1);
    CHECK_STR(out, "${rnk}-5");
    CHECK_STR(unknown, "${rnk}");
    check_prefix("${rank", "${rank", 1);
    check_prefix("$ $5 $", "$ $5 $", 3);
    check_prefix("$ranks", "$ranks", 1); /* the name is "ranks", not "rank" + "s" */
}

TEST(prefix_template_cut_to_the_buffer) {
    char out[6];
    worker_output_prefix("[${hostname}]", &vars, out, sizeof out, NULL, 0);
    CHECK_STR(out, "[node");
}

/* A worker_output writing to a memory file as its console, prefix "p: ". */
static void console_output(worker_output *o) {
    memset(o, 0, sizeof *o);
    o->file_fd = o->dup_fd = -1;
    o->console_fd = memfd_create("console", 0);
    snprintf(o->prefix, sizeof o->prefix, "p: ");
}

/* What the console got, into out (NUL-terminated); the file is emptied. */
static size_t console_text(worker_output *o, char *out, size_t len) {
    off_t n = lseek(o->console_fd, 0, SEEK_CUR);
    ssize_t got = pread(o->console_fd, out, len - 1, 0);
    out[got > 0 ? got : 0] = '\0';
    CHECK_EQ(ftruncate(o->console_fd, 0), 0);
    lseek(o->console_fd, 0, SEEK_SET);
    return (size_t)n;
}

static void feed(worker_output *o, const char *s) { worker_output_feed(o, s, strlen(s)); }

TEST(output_lines_whole_across_reads) {
    worker_output o;
    char got[256];
    console_output(&o);
    feed(&o, "one\ntw");
    console_text(&o, got, sizeof got);
    CHECK_STR(got, "p: one\n");
    feed(&o, "o\r");
    feed(&o, "\nthree\n");
    console_text(&o, got, sizeof got);
    CHECK_STR(got, "p: two\r\np: three\n"); /* "\r\n" split across reads is one line end */
    feed(&o, "last");
    worker_output_flush(&o);
    console_text(&o, got, sizeof got);
    CHECK_STR(got, "p: last\n");
    buf_free(&o.partial);
    buf_free(&o.tail);
    close(o.console_fd);
}

/* A progress bar redrawn with '\r' is shown as it moves, each update in
 * place, not only when a newline finally comes. */
TEST(output_progress_updates_shown_in_place) {
    worker_output o;
    char got[256];
    console_output(&o);
    feed(&o, "\r 10%");
    feed(&o, "\r 20%");
    console_text(&o, got, sizeof got);
    CHECK_STR(got, "p:  10%\r");
    feed(&o, "\r100%\n");
    console_text(&o, got, sizeof got);
    CHECK_STR(got, "p:  20%\rp: 100%\n");
    buf_free(&o.partial);
    buf_free(&o.tail);
    close(o.console_fd);
}

/* A worker that never writes a newline costs the agent one line's worth
 * of memory: its output is cut into lines of WORKER_LINE_MAX bytes. */
TEST(output_line_without_newline_is_cut) {
    worker_output o;
    console_output(&o);
    size_t chunk = 10000, total = 0, want = 5 * WORKER_LINE_MAX / 2;
    char *b = malloc(chunk);
    memset(b, 'x', chunk);
    for (; total < want; total += chunk) worker_output_feed(&o, b, chunk);
    CHECK(o.partial.cap <= 2 * WORKER_LINE_MAX);
    worker_output_flush(&o);
    size_t len = (size_t)lseek(o.console_fd, 0, SEEK_END);
    char *all = malloc(len + 1);
    CHECK_EQ(pread(o.console_fd, all, len, 0), (ssize_t)len);
    all[len] = '\0';
    size_t lines = 0;
    for (char *p = all, *nl; (nl = strchr(p, '\n')) != NULL; p = nl + 1, lines++) {
        CHECK_EQ(strncmp(p, "p: ", 3), 0);
        CHECK((size_t)(nl - p) <= 3 + WORKER_LINE_MAX);
    }
    CHECK_EQ(lines, (total + WORKER_LINE_MAX - 1) / WORKER_LINE_MAX);
    CHECK_EQ(len, total + lines * 4); /* every byte, each line prefixed and ended */
    free(all), free(b);
    buf_free(&o.partial);
    buf_free(&o.tail);
    close(o.console_fd);
}

/* The last lines a worker wrote, for a failure summary without an error
 * file: the last N of them, whole, however much came before (the tail
 * stays within twice WORKER_TAIL_MAX). */
TEST(output_tail_keeps_the_last_lines) {
    worker_output o;
    console_output(&o);
    CHECK(worker_output_tail(&o, 3) == NULL);
    char line[64];
    for (int i = 0; i < 1000; i++) {
        snprintf(line, sizeof line, "line %d of the output\n", i);
        feed(&o, line);
    }
    feed(&o, "Traceback (most recent call last):\n  File \"x.py\", line 1\n");
    feed(&o, "ValueError: bad value\n");
    CHECK(o.tail.len <= 2 * WORKER_TAIL_MAX);
    char *t = worker_output_tail(&o, 3);
    CHECK_STR(t, "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                 "ValueError: bad value\n");
    free(t);
    t = worker_output_tail(&o, 4);
    CHECK_STR(t, "line 999 of the output\nTraceback (most recent call last):\n"
                 "  File \"x.py\", line 1\nValueError: bad value\n");
    free(t);
    t = worker_output_tail(&o, 100000); /* as many as WORKER_TAIL_MAX bytes hold, whole */
    CHECK(strlen(t) <= WORKER_TAIL_MAX && strncmp(t, "line ", 5) == 0);
    free(t);
    worker_output_close(&o, NULL);
    close(o.console_fd);
}

/* A worker that has exited may have left its last lines in the pipe, not
 * yet read by the agent's loop: drain passes them on at once, so that its
 * failure can quote them. */
TEST(output_drain_reads_what_the_pipe_holds) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    worker_output o;
    worker_output_opts opts = {.console_fd = -1};
    CHECK_EQ(worker_output_init(&o, &loop, &opts), 0);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(uv_pipe_open(&o.pipe, p[0]), 0);
    const char *said = "Traceback (most recent call last):\nValueError: no\n";
    CHECK_EQ(write(p[1], said, strlen(said)), (ssize_t)strlen(said));
    close(p[1]);
    worker_output_drain(&o);
    char *t = worker_output_tail(&o, 2);
    CHECK_STR(t, said);
    free(t);
    worker_output_close(&o, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}
