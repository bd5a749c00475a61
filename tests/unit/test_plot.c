/* `ddp-train plot`'s reading of a --metrics file into series (restarts,
 * evaluations at their step, bad lines named by number, a line still being
 * written), the moving mean, and the gnuplot script it writes. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "tests/unit/test.h"
#include "worker/plot/gnuplot.h"
#include "worker/plot/metrics_series.h"

static int parse(const char *text, metrics_series *s, char *err) {
    return metrics_series_parse(text, strlen(text), "m.jsonl", s, err, 512);
}

#define TRAIN(e, g, loss) \
    "{\"epoch\":" #e ",\"step\":1,\"global_step\":" #g ",\"loss\":" #loss \
    ",\"acc\":0.5,\"lr\":0.1,\"img_per_s\":10.0,\"time\":1.0}\n"

/* A job whose group restarted once, at world size 3, from the checkpoint
 * at step 2 after it had trained to step 3. */
static const char restarted[] =
    "{\"event\":\"start\",\"global_step\":0,\"epoch\":1,\"restart\":0,\"world_size\":2}\n"
    TRAIN(1, 1, 2.5) TRAIN(1, 2, 2.25)
    "{\"epoch\":1,\"global_step\":2,\"test_loss\":2.0,\"test_acc\":0.25}\n"
    TRAIN(2, 3, 2.0)
    "{\"event\":\"start\",\"global_step\":2,\"epoch\":2,\"restart\":1,\"world_size\":3}\n"
    TRAIN(2, 3, 1.9) TRAIN(2, 4, 1.5)
    "{\"epoch\":2,\"global_step\":4,\"test_loss\":1.25,\"test_acc\":0.75}\n"
    "{\"event\":\"done\",\"global_step\":4,\"img_per_s\":1.0}\n";

TEST(plot_parse_restart_marked_at_resume_step) {
    metrics_series s = {0};
    char err[512] = "";
    CHECK_EQ(parse(restarted, &s, err), 0);
    CHECK_EQ(s.ntrain, 5);
    CHECK_EQ(s.starts, 2);
    CHECK_EQ(s.nrestarts, 1);
    CHECK_EQ(s.restarts[0].step, 2);
    CHECK_EQ(s.restarts[0].restart, 1);
    CHECK_EQ(s.restarts[0].world, 3);
    CHECK_EQ(s.restarts[0].line, 6);
    CHECK_EQ(s.restarts[0].inferred, 0);
    CHECK_EQ(s.world, 3);
    CHECK_EQ(s.done, 1);
    /* File order kept: step 3 twice, before and after the restart, each
     * in its own segment (the smoothed curve breaks there). */
    CHECK_EQ(s.train[2].step, 3); CHECK_EQ(s.train[2].segment, 0);
    CHECK_EQ(s.train[3].step, 3); CHECK_EQ(s.train[3].segment, 1);
    CHECK(s.train[3].loss == 1.9);
    CHECK_EQ(metrics_series_check(&s, "m.jsonl", err, sizeof err), 0);
    metrics_series_free(&s);
}

TEST(plot_parse_test_points_carry_their_step) {
    metrics_series s = {0};
    char err[512] = "";
    CHECK_EQ(parse(restarted, &s, err), 0);
    CHECK_EQ(s.ntest, 2);
    CHECK_EQ(s.test[0].step, 2); CHECK_EQ(s.test[0].epoch, 1);
    CHECK(s.test[0].loss == 2.0 && s.test[0].acc == 0.25);
    CHECK_EQ(s.test[1].step, 4);
    CHECK(s.test[1].loss == 1.25 && s.test[1].acc == 0.75);
    /* Its own step, not the last training line's (a file that lost lines). */
    CHECK_EQ(parse(TRAIN(1, 3, 2.0) "{\"epoch\":1,\"global_step\":5,\"test_loss\":1.0,"
                   "\"test_acc\":0.5}\n", &s, err), 0);
    CHECK_EQ(s.test[0].step, 5);
    /* A file from before test lines had their step: the last step's. */
    const char *old = TRAIN(1, 7, 2.0) "{\"epoch\":1,\"test_loss\":2.0,\"test_acc\":0.25}\n";
    CHECK_EQ(parse(old, &s, err), 0);
    CHECK_EQ(s.ntest, 1);
    CHECK_EQ(s.test[0].step, 7);
    metrics_series_free(&s);
}

TEST(plot_parse_restart_inferred_without_start_lines) {
    metrics_series s = {0};
    char err[512] = "";
    const char *old = TRAIN(1, 1, 2.5) TRAIN(1, 2, 2.4) TRAIN(1, 3, 2.3) TRAIN(1, 3, 2.4)
        TRAIN(1, 4, 2.2) TRAIN(1, 2, 2.4);
    CHECK_EQ(parse(old, &s, err), 0);
    CHECK_EQ(s.nrestarts, 2);
    CHECK_EQ(s.restarts[0].step, 2); /* it trained step 3 again: resumed from 2 */
    CHECK_EQ(s.restarts[0].inferred, 1);
    CHECK_EQ(s.restarts[0].line, 4);
    CHECK_EQ(s.restarts[1].step, 1);
    CHECK_EQ(s.train[5].segment, 2);
    CHECK_EQ(s.done, 0);
    metrics_series_free(&s);
}

TEST(plot_parse_bad_lines_named_by_number) {
    metrics_series s = {0};
    char err[512] = "";
    CHECK_EQ(parse(TRAIN(1, 1, 2.5) TRAIN(1, 2, 2.4) "garbage here\n" TRAIN(1, 3, 2.3), &s, err),
             -EINVAL);
    CHECK(strstr(err, "m.jsonl:3: not JSON"));
    CHECK(strstr(err, "'garbage here'"));
    CHECK_EQ(parse(TRAIN(1, 1, 2.5) "\n[1, 2]\n", &s, err), -EINVAL);
    CHECK(strstr(err, "m.jsonl:3: not a JSON object"));
    CHECK_EQ(parse("{\"epoch\":1,\"global_step\":1,\"loss\":\"x\",\"acc\":0.5}\n", &s, err),
             -EINVAL);
    CHECK(strstr(err, "m.jsonl:1: \"loss\" is not a number"));
    CHECK_EQ(parse("{\"epoch\":1,\"loss\":2.0,\"acc\":0.5}\n", &s, err), -EINVAL);
    CHECK(strstr(err, "m.jsonl:1: \"global_step\" is missing"));
    CHECK_EQ(parse(TRAIN(1, 1, 2.5) "{\"name\":\"x\"}\n", &s, err), -EINVAL);
    CHECK(strstr(err, "m.jsonl:2: a JSON object, but not a metrics line"));
    metrics_series_free(&s);
}

TEST(plot_parse_partial_last_line_left_out) {
    metrics_series s = {0};
    char err[512] = "";
    /* The writer is in the middle of line 3: it is no error, and not drawn. */
    CHECK_EQ(parse(TRAIN(1, 1, 2.5) TRAIN(1, 2, null) "{\"epoch\":1,\"step\":3,\"glo", &s, err),
             0);
    CHECK_EQ(s.ntrain, 2);
    CHECK_EQ(s.lines, 2);
    CHECK_EQ(s.tail_partial, 1);
    CHECK(isnan(s.train[1].loss)); /* null: a step whose loss was not finite */
    /* Unknown events are skipped (a newer writer), blank lines too. */
    CHECK_EQ(parse(TRAIN(1, 1, 2.5) "\n{\"event\":\"later\"}\n", &s, err), 0);
    CHECK_EQ(s.ntrain, 1);
    metrics_series_free(&s);
}

TEST(plot_parse_nothing_to_draw) {
    metrics_series s = {0};
    char err[512] = "";
    CHECK_EQ(parse("", &s, err), 0);
    CHECK_EQ(metrics_series_check(&s, "m.jsonl", err, sizeof err), -ENODATA);
    CHECK(strstr(err, "metrics file m.jsonl is empty"));
    CHECK_EQ(parse("{\"event\":\"start\",\"global_step\":0}\n", &s, err), 0);
    CHECK_EQ(metrics_series_check(&s, "m.jsonl", err, sizeof err), -ENODATA);
    CHECK(strstr(err, "no training step to plot yet (1 line,"));
    char path[512];
    snprintf(path, sizeof path, "%s/absent.jsonl", test_tmpdir());
    CHECK_EQ(metrics_series_read(path, &s, err, sizeof err), -ENOENT);
    CHECK(strstr(err, "absent.jsonl: No such file or directory"));
    metrics_series_free(&s);
}

TEST(plot_smooth_stays_in_its_segment) {
    double v[] = {1, 2, 3, 10, 20, NAN, 40}, out[7];
    int seg[] = {0, 0, 0, 1, 1, 1, 1};
    metrics_series_smooth(v, seg, 7, 3, out);
    CHECK(out[0] == 1.5 && out[1] == 2 && out[2] == 2.5);
    CHECK(out[3] == 15 && out[4] == 15 && out[5] == 30 && out[6] == 40);
    metrics_series_smooth(v, NULL, 7, 3, out);
    CHECK(out[2] == 5); /* without segments the window crosses */
    CHECK_EQ(metrics_series_window(10), 1);
    CHECK_EQ(metrics_series_window(300), 15);
    CHECK_EQ(metrics_series_window(1000000), 201);
}

TEST(plot_script_has_data_restarts_and_quoted_title) {
    metrics_series s = {0};
    char err[512] = "";
    CHECK_EQ(parse(restarted, &s, err), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    plot_opts o = {.width = 640, .height = 480, .title = "it's\na 'run'", .program = "gnuplot"};
    CHECK_EQ(plot_write_script(&s, &o, f), 0);
    fclose(f);
    CHECK(strstr(text, "set terminal pngcairo size 640,480 "));
    CHECK(strstr(text, "$TRAIN << EOD\n1 2.5 50\n2 2.25 50\n3 2 50\n3 1.9 50\n4 1.5 50\nEOD\n"));
    CHECK(strstr(text, "$TEST << EOD\n2 2 25\n4 1.25 75\nEOD\n"));
    /* The restart: a line at step 2 in both panels, labelled once. */
    const char *arrow = "set arrow from 2, graph 0 to 2, graph 1 nohead";
    char *first = strstr(text, arrow);
    CHECK(first && strstr(first + 1, arrow));
    CHECK(strstr(text, "set label 'restart 1 (3 ranks)' at 2, graph"));
    /* The title: quotes doubled, the newline a space, nothing else of it. */
    CHECK(strstr(text, "title 'it''s a ''run'''"));
    CHECK(!strstr(text, "it's"));
    CHECK(strstr(text, "\nset output\n"));
    free(text);
    metrics_series_free(&s);
}
