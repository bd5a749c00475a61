/* agent/metrics.c: the text the agent's /metrics serves (Prometheus'
 * exposition format 0.0.4), the ranks' files merged into it, and the
 * health verdict. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/metrics.h"
#include "common/build_info.h"
#include "tests/unit/test.h"

static agent_metrics *make(const char *rank_dir) {
    metrics_opts o = {.run_id = "job\"1", .role = "trainer", .node = "n1",
                      .rank_dir = rank_dir, .heartbeat_interval = 5, .max_restarts = 3};
    return metrics_new(&o);
}

/* The rendered text, NUL-terminated (the caller frees it). */
static char *render(agent_metrics *m, double now) {
    buf_t b = BUF_INIT;
    CHECK_EQ(metrics_render(m, now, &b), 0);
    buf_append(&b, "", 1);
    return (char *)b.data;
}

static int has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0')) return 1;
    return 0;
}

#define L "run_id=\"job\\\"1\",role=\"trainer\",node=\"n1\""
#define CHECK_LINE(text, line)                                                       \
    do {                                                                             \
        if (!has_line((text), (line)))                                               \
            test_fail(__FILE__, __LINE__, "no line '%s' in:\n%s", (line), (text));   \
    } while (0)

TEST(metrics_render_agent_series) {
    agent_metrics *m = make(NULL);
    metrics_round(m, 0.3);
    metrics_heartbeat(m, 100.0);
    metrics_group_started(m, 2, 0, 4, 2, 0);
    metrics_set_state(m, METRICS_RUNNING);
    metrics_worker_exited(m, 1, METRICS_W_FAILED);
    metrics_worker_failed(m, -9, 0);
    metrics_worker_failed(m, 3, 0);
    metrics_worker_failed(m, -9, 0);
    metrics_worker_failed(m, -6, 1);
    metrics_set_state(m, METRICS_STOPPING);
    metrics_round(m, 7);
    metrics_group_started(m, 2, 1, 4, 2, 1);
    metrics_set_state(m, METRICS_RUNNING);
    char *t = render(m, 101.5);
    CHECK_LINE(t, "# TYPE ddprun_restarts_total counter");
    CHECK_LINE(t, "ddprun_restarts_total{" L "} 1");
    CHECK_LINE(t, "ddprun_failure_restarts{" L "} 1");
    CHECK_LINE(t, "ddprun_max_restarts{" L "} 3");
    CHECK_LINE(t, "ddprun_agent_state{" L ",state=\"running\"} 1");
    CHECK_LINE(t, "ddprun_agent_state{" L ",state=\"stopping\"} 0");
    CHECK_LINE(t, "# TYPE ddprun_worker_failures_total counter");
    CHECK_LINE(t, "ddprun_worker_failures_total{" L ",cause=\"SIGKILL\"} 2");
    CHECK_LINE(t, "ddprun_worker_failures_total{" L ",cause=\"exit_code_3\"} 1");
    CHECK_LINE(t, "ddprun_worker_failures_total{" L ",cause=\"watchdog\"} 1");
    CHECK_LINE(t, "ddprun_rendezvous_rounds_total{" L "} 2");
    CHECK_LINE(t, "ddprun_rendezvous_last_duration_seconds{" L "} 7");
    CHECK_LINE(t, "# TYPE ddprun_rendezvous_duration_seconds histogram");
    CHECK_LINE(t, "ddprun_rendezvous_duration_seconds_bucket{" L ",le=\"0.5\"} 1");
    CHECK_LINE(t, "ddprun_rendezvous_duration_seconds_bucket{" L ",le=\"10\"} 2");
    CHECK_LINE(t, "ddprun_rendezvous_duration_seconds_bucket{" L ",le=\"+Inf\"} 2");
    CHECK_LINE(t, "ddprun_rendezvous_duration_seconds_sum{" L "} 7.3");
    CHECK_LINE(t, "ddprun_rendezvous_duration_seconds_count{" L "} 2");
    CHECK_LINE(t, "ddprun_heartbeat_age_seconds{" L "} 1.5");
    CHECK_LINE(t, "ddprun_workers_up{" L "} 2"); /* the new group's */
    CHECK_LINE(t, "ddprun_workers{" L ",state=\"running\"} 2");
    CHECK_LINE(t, "ddprun_workers{" L ",state=\"failed\"} 0");
    CHECK_LINE(t, "ddprun_world_size{" L "} 4");
    CHECK_LINE(t, "ddprun_nodes{" L "} 2");
    /* every family once, a HELP and a TYPE line each, before its samples */
    int types = 0, helps = 0;
    for (const char *p = t; (p = strstr(p, "# TYPE ")); p++) types++;
    for (const char *p = t; (p = strstr(p, "# HELP ")); p++) helps++;
    CHECK_EQ(types, helps);
    CHECK_EQ(types, 15);
    CHECK(t[strlen(t) - 1] == '\n');
    free(t);
    metrics_free(m);
}

/* ddprun_build_info: 1, labelled with this build's version and libraries. */
TEST(metrics_render_build_info) {
    agent_metrics *m = make(NULL);
    char *t = render(m, 1.0);
    build_libs l;
    build_libs_get(&l);
    char want[512];
    snprintf(want, sizeof want,
             "ddprun_build_info{" L ",version=\"%s\",cuda=\"%s\",cudnn=\"%s\",nccl=\"%s\","
             "onednn=\"%s\"} 1",
             build_version(), l.cuda, l.cudnn, l.nccl, l.onednn);
    CHECK_LINE(t, "# TYPE ddprun_build_info gauge");
    CHECK_LINE(t, want);
    CHECK(strstr(build_version(), "0.") != NULL || strstr(build_version(), "1.") != NULL);
    CHECK(l.onednn[0] != 0);
    free(t);
    metrics_free(m);
}

TEST(metrics_render_counts_worker_states) {
    agent_metrics *m = make(NULL);
    metrics_group_started(m, 3, 0, 3, 1, 0);
    metrics_worker_exited(m, 0, METRICS_W_SUCCEEDED);
    metrics_worker_exited(m, 2, METRICS_W_TERMINATED);
    metrics_worker_exited(m, 7, METRICS_W_FAILED); /* not a local rank: ignored */
    char *t = render(m, 1);
    CHECK_LINE(t, "ddprun_workers_up{" L "} 1");
    CHECK_LINE(t, "ddprun_workers{" L ",state=\"succeeded\"} 1");
    CHECK_LINE(t, "ddprun_workers{" L ",state=\"terminated\"} 1");
    CHECK_LINE(t, "ddprun_workers{" L ",state=\"failed\"} 0");
    CHECK_LINE(t, "ddprun_restarts_total{" L "} 0");
    CHECK(!strstr(t, "ddprun_heartbeat_age_seconds")); /* never renewed: no sample */
    free(t);
    metrics_free(m);
}

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* Two ranks' files become one family each (one HELP, one TYPE), every
 * sample with the agent's labels added before the rank's own. */
TEST(metrics_render_merges_rank_files) {
    const char *dir = test_tmpdir();
    const char *rank = "# HELP ddprun_train_step Steps.\n"
                       "# TYPE ddprun_train_step gauge\n"
                       "ddprun_train_step{rank=\"%d\",local_rank=\"%d\"} %d\n"
                       "# HELP ddprun_train_step_seconds Step times.\n"
                       "# TYPE ddprun_train_step_seconds summary\n"
                       "ddprun_train_step_seconds_sum{rank=\"%d\",local_rank=\"%d\"} 1.5\n"
                       "ddprun_train_step_seconds_count{rank=\"%d\",local_rank=\"%d\"} 12\n";
    char text[1024];
    snprintf(text, sizeof text, rank, 10, 0, 12, 10, 0, 10, 0);
    write_file(dir, "rank_10.prom", text);
    snprintf(text, sizeof text, rank, 9, 1, 11, 9, 1, 9, 1);
    write_file(dir, "rank_9.prom", text);
    write_file(dir, "rank_9.prom.tmp", "garbage{\n"); /* a write in progress: not read */
    write_file(dir, "other.txt", "ddprun_other 1\n");
    agent_metrics *m = make(dir);
    char *t = render(m, 1);
    CHECK_LINE(t, "ddprun_train_step{" L ",rank=\"9\",local_rank=\"1\"} 11");
    CHECK_LINE(t, "ddprun_train_step{" L ",rank=\"10\",local_rank=\"0\"} 12");
    CHECK_LINE(t, "ddprun_train_step_seconds_count{" L ",rank=\"10\",local_rank=\"0\"} 12");
    CHECK(!strstr(t, "garbage") && !strstr(t, "ddprun_other"));
    const char *first = strstr(t, "# TYPE ddprun_train_step gauge");
    CHECK(first != NULL);
    CHECK(strstr(first + 1, "# TYPE ddprun_train_step gauge") == NULL);
    CHECK(strstr(t, "# HELP ddprun_train_step_seconds Step times.\n# TYPE "
                    "ddprun_train_step_seconds summary\nddprun_train_step_seconds_sum{") != NULL);
    /* rank 9 before rank 10 (numeric order) */
    CHECK(strstr(t, "rank=\"9\",local_rank=\"1\"} 11") < strstr(t, "rank=\"10\",local_rank=\"0\"} 12"));
    free(t);
    metrics_free(m);
}

/* More families than the merge first makes room for. */
TEST(metrics_render_merges_many_families) {
    const char *dir = test_tmpdir();
    char text[8192] = "", line[256];
    for (int i = 0; i < 40; i++) {
        snprintf(line, sizeof line, "# HELP f%d h\n# TYPE f%d gauge\nf%d{rank=\"0\"} %d\n", i, i,
                 i, i);
        strcat(text, line);
    }
    write_file(dir, "rank_0.prom", text);
    write_file(dir, "rank_1.prom", text);
    agent_metrics *m = make(dir);
    char *t = render(m, 1);
    CHECK_LINE(t, "f0{" L ",rank=\"0\"} 0");
    CHECK_LINE(t, "f39{" L ",rank=\"0\"} 39");
    CHECK(strstr(t, "f39{" L ",rank=\"0\"} 39\nf39{" L ",rank=\"0\"} 39\n") != NULL);
    free(t);
    metrics_free(m);
}

TEST(metrics_health_says_why) {
    agent_metrics *m = make(NULL);
    char body[512];
    CHECK_EQ(metrics_health(m, 10, body, sizeof body), 503);
    CHECK(strstr(body, "\"reason\":\"rendezvous in progress\"") != NULL);
    metrics_heartbeat(m, 10);
    metrics_group_started(m, 2, 0, 2, 1, 0);
    metrics_set_state(m, METRICS_RUNNING);
    CHECK_EQ(metrics_health(m, 12, body, sizeof body), 200);
    CHECK(strstr(body, "\"status\":\"ok\"") && strstr(body, "\"workers_up\":2"));
    CHECK(!strstr(body, "reason"));
    CHECK_EQ(metrics_health(m, 17.5, body, sizeof body), 503);
    CHECK(strstr(body, "\"reason\":\"heartbeat stale for 8 s (interval 5 s)\"") != NULL);
    metrics_heartbeat(m, 17);
    metrics_set_state(m, METRICS_STOPPING);
    CHECK_EQ(metrics_health(m, 17.5, body, sizeof body), 503);
    CHECK(strstr(body, "\"reason\":\"workers stopping\"") != NULL);
    metrics_set_state(m, METRICS_FINISHED);
    CHECK_EQ(metrics_health(m, 17.5, body, sizeof body), 503);
    metrics_free(m);
}

/* Every recording function takes NULL: metrics off. */
TEST(metrics_null_registry_records_nothing) {
    metrics_set_state(NULL, METRICS_RUNNING);
    metrics_group_started(NULL, 1, 0, 1, 1, 0);
    metrics_worker_exited(NULL, 0, METRICS_W_FAILED);
    metrics_worker_failed(NULL, 1, 0);
    metrics_round(NULL, 1);
    metrics_heartbeat(NULL, 1);
    metrics_free(NULL);
}

/* Goodput: with a step record (ddp-train) the ratio and every part; without
 * one (a script) no ratio and only what is known, where it used to say a
 * goodput of 0 with every second in "restarts". */
TEST(metrics_goodput_only_what_is_known) {
    agent_metrics *m = make(NULL);
    goodput_view v = {.wall = 10, .kept = 8, .rendezvous = 0.5, .restarts = 0.2, .other = 1.3,
                      .ratio = 0.8, .recorded = 1, .run = 9.5, .attempts = 1};
    metrics_goodput(m, &v);
    char *t = render(m, 1);
    CHECK_LINE(t, "ddprun_goodput_ratio{" L "} 0.8");
    CHECK_LINE(t, "ddprun_goodput_seconds{" L ",part=\"kept\"} 8");
    free(t);
    v = (goodput_view){.wall = 3, .run = 2.5, .rendezvous = 0.25, .restarts = 2.5, .attempts = 1};
    metrics_goodput(m, &v);
    t = render(m, 1);
    CHECK(!strstr(t, "ddprun_goodput_ratio{"));
    CHECK(!strstr(t, "part=\"kept\"") && !strstr(t, "part=\"restarts\""));
    CHECK_LINE(t, "ddprun_goodput_seconds{" L ",part=\"wall\"} 3");
    CHECK_LINE(t, "ddprun_goodput_seconds{" L ",part=\"run\"} 2.5");
    CHECK_LINE(t, "ddprun_goodput_seconds{" L ",part=\"rendezvous\"} 0.25");
    free(t);
    metrics_free(m);
}
