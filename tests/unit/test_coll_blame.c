/* common/coll_record.c and agent/coll_blame.c: a rank's collective record
 * read back as it was written (the ring wrapped included), and the
 * verdict over the ranks' positions: who never entered the collective the
 * others waited in, who fell silent inside it, and no verdict where there
 * is no hang (a crash's peers notice within milliseconds). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/coll_blame.h"
#include "common/coll_record.h"
#include "common/proc_stat.h"
#include "tests/unit/test.h"

static void tmp_path(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/ddprun-test-%d-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid(), name);
}

TEST(coll_record_reads_back_what_was_written) {
    char path[256];
    tmp_path(path, sizeof path, "coll");
    coll_record *r;
    CHECK_EQ(coll_record_open(path, 5, &r), 0);
    coll_view v;
    CHECK_EQ(coll_record_read(path, &v), 0);
    CHECK_EQ(v.rank, 5);
    CHECK_EQ(v.pid, (int)getpid());
    CHECK_EQ(v.entered, 0);
    CHECK_EQ(v.n, 0);
    /* more than the ring holds, the last one left unfinished */
    for (int i = 1; i <= COLL_RING + 5; i++) {
        uint64_t seq = coll_record_enter(r, i % 2 ? "all-reduce" : "broadcast", 4 * (uint64_t)i);
        CHECK_EQ(seq, (uint64_t)i);
        if (i < COLL_RING + 5) coll_record_leave(r, seq, 0);
    }
    coll_record_step(r, 76);
    nanosleep(&(struct timespec){0, 2000000}, NULL);
    coll_record_step(r, 77); /* step 76 ended: one step of 2 ms or more */
    coll_record_blocked(r, 1500000);
    coll_record_tick(r);
    CHECK_EQ(coll_record_read(path, &v), 0);
    CHECK_EQ(v.entered, COLL_RING + 5);
    CHECK_EQ(v.done, COLL_RING + 4);
    CHECK_EQ(v.step, 77);
    CHECK_EQ(v.steps, 1);
    CHECK(v.step_ns >= 2000000 && v.step_ns < 1000000000);
    CHECK_EQ(v.blocked_ns, 1500000);
    CHECK_EQ(v.n, COLL_RING);
    CHECK_EQ(v.ring[0].seq, 6); /* the oldest kept */
    const coll_entry_view *e = coll_view_entry(&v, COLL_RING + 5);
    CHECK(e != NULL);
    CHECK_STR(e->op, "all-reduce");
    CHECK_EQ(e->bytes, 4 * (uint64_t)(COLL_RING + 5));
    CHECK_EQ(e->ended_ns, 0);
    CHECK(v.alive_ns >= e->issued_ns);
    CHECK(coll_view_entry(&v, 5) == NULL); /* overwritten */
    CHECK(coll_view_entry(&v, COLL_RING + 4)->ended_ns > 0);
    /* a failed collective is not done */
    coll_record_leave(r, COLL_RING + 5, -110);
    CHECK_EQ(coll_record_read(path, &v), 0);
    CHECK_EQ(v.done, COLL_RING + 4);
    CHECK_EQ(coll_view_entry(&v, COLL_RING + 5)->rc, -110);
    coll_record_close(r);
    coll_pos p;
    CHECK_EQ(coll_pos_read(path, "h1", 2, &p), 0); /* the file outlives the writer */
    CHECK_EQ(p.rank, 5);
    CHECK_EQ(p.local_rank, 2);
    CHECK_STR(p.op, "all-reduce");
    CHECK(p.state == 'R' || p.state == 'S'); /* this process */
    unlink(path);
    CHECK_EQ(coll_record_read(path, &v), -ENOENT);
    FILE *f = fopen(path, "w");
    fputs("not a record", f);
    fclose(f);
    CHECK_EQ(coll_record_read(path, &v), -EINVAL);
    unlink(path);
}

/* Rank r at collective `entered` (done up to `done`), entered at `issued`,
 * last alive at `alive` (seconds). */
static coll_pos pos(int r, uint64_t entered, uint64_t done, double issued, double alive) {
    coll_pos p = {.rank = r, .local_rank = r % 2, .pid = 100 + r, .step = 40, .entered = entered, .done = done,
                  .bytes = 3 << 20, .issued = issued, .alive = alive, .state = 'S'};
    snprintf(p.host, sizeof p.host, "node%d", r / 2);
    snprintf(p.op, sizeof p.op, "all-reduce");
    return p;
}

TEST(coll_blame_names_the_rank_that_never_entered) {
    coll_pos ps[4] = {pos(0, 57, 56, 100, 112), pos(1, 56, 56, 99, 99.5), pos(2, 57, 56, 100.2, 112),
                      pos(3, 57, 56, 100.1, 112)};
    ps[1].state = 'T';
    coll_verdict v;
    CHECK_EQ(coll_blame(ps, 4, &v), 1);
    CHECK_EQ(v.seq, 57);
    CHECK_EQ(v.nblamed, 1);
    CHECK_EQ(v.blamed[0].rank, 1);
    CHECK_EQ(v.blamed[0].pid, 101);
    CHECK(coll_verdict_blames(&v, 1) && !coll_verdict_blames(&v, 0));
    CHECK(v.waited > 11.9 && v.waited < 12.1);
    CHECK(strstr(v.text, "ranks 0, 2, 3 waited 12.0 s in collective #57 (all-reduce of 3.0 MB) "
                         "for rank 1, which never entered it") != NULL);
    CHECK(strstr(v.text, "host node0, pid 101) had entered #56 and finished #56, in step 40") !=
          NULL);
    CHECK(strstr(v.text, "stopped (SIGSTOP)") != NULL);
}

TEST(coll_blame_names_the_rank_silent_inside_the_collective) {
    coll_pos ps[3] = {pos(0, 9, 8, 50, 60), pos(1, 9, 8, 50, 51), pos(2, 9, 8, 50, 60)};
    coll_verdict v;
    CHECK_EQ(coll_blame(ps, 3, &v), 1);
    CHECK_EQ(v.nblamed, 1);
    CHECK_EQ(v.blamed[0].rank, 1);
    CHECK(strstr(v.text, "every rank entered collective #9") != NULL);
    CHECK(strstr(v.text, "rank 1 (host node0, pid 101) fell silent in it 9.0 s before") != NULL);
}

TEST(coll_blame_finds_no_hang_where_there_is_none) {
    coll_verdict v;
    /* a crash: the peers waited 50 ms before they noticed */
    coll_pos crash[2] = {pos(0, 12, 11, 10, 10.05), pos(1, 11, 11, 9.9, 9.9)};
    CHECK_EQ(coll_blame(crash, 2, &v), 0);
    /* all inside, all alive */
    coll_pos busy[3] = {pos(0, 5, 4, 1, 9), pos(1, 5, 4, 1, 8.5), pos(2, 5, 4, 1, 9)};
    CHECK_EQ(coll_blame(busy, 3, &v), 0);
    /* all between collectives */
    coll_pos idle[2] = {pos(0, 5, 5, 1, 2), pos(1, 5, 5, 1, 2)};
    CHECK_EQ(coll_blame(idle, 2, &v), 0);
    CHECK_EQ(coll_blame(idle, 1, &v), 0);
}

/* A rank frozen in its collective, then SIGKILLed by the watchdog, is
 * read as exiting (or gone) before the verdict: it keeps "stopped". */
TEST(coll_state_seen_keeps_the_frozen_state_of_a_dying_rank) {
    CHECK_EQ(coll_state_seen('T', 'Z'), 'T');
    CHECK_EQ(coll_state_seen('D', '?'), 'D');
    CHECK_EQ(coll_state_seen('t', 'Z'), 't');
    CHECK_EQ(coll_state_seen('T', 'R'), 'R'); /* continued (SIGCONT): it runs */
    CHECK_EQ(coll_state_seen('S', 'Z'), 'Z');
    CHECK_EQ(coll_state_seen(0, 'T'), 'T');
}

/* /proc's flags say a killed process is on its way out while its state
 * letter may still say it runs. */
TEST(proc_stat_reads_the_flags) {
    proc_stat st;
    CHECK_EQ(proc_stat_read(getpid(), &st), 0);
    CHECK_EQ(st.state, 'R');
    CHECK_EQ(st.flags & PROC_PF_EXITING, 0);
    CHECK(st.flags != 0); /* (every task has some: PF_RANDOMIZE, PF_FORKNOEXEC...) */
    CHECK_EQ(st.ppid, getppid());
}

TEST(coll_pos_json_round_trips) {
    coll_pos ps[2] = {pos(4, 7, 6, 1.5, 2.25), pos(5, 6, 6, 1, 1)};
    ps[0].state = 'T';
    char *json = coll_pos_json(ps, 2, 500.5);
    CHECK(json != NULL);
    coll_pos back[3];
    int n = 1;
    back[0] = pos(0, 1, 1, 0, 0);
    CHECK_EQ(coll_pos_from_json(json, 501, back, &n, 3), -ESTALE); /* read too early */
    CHECK_EQ(n, 1);
    CHECK_EQ(coll_pos_from_json(json, 500, back, &n, 3), 0);
    CHECK_EQ(n, 3);
    CHECK_EQ(back[1].rank, 4);
    CHECK_EQ(back[1].local_rank, 0);
    CHECK_EQ(back[1].entered, 7);
    CHECK_EQ(back[1].done, 6);
    CHECK_EQ(back[1].state, 'T');
    CHECK_STR(back[1].host, "node2");
    CHECK(back[1].alive == 2.25 && back[1].issued == 1.5);
    CHECK_EQ(back[2].rank, 5);
    n = 0;
    CHECK_EQ(coll_pos_from_json("{\"not\": \"an array\"}", 0, back, &n, 3), -EINVAL);
    CHECK_EQ(coll_pos_from_json("[]", 0, back, &n, 3), -EINVAL);
    free(json);
}
