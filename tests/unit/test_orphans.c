/* agent/orphans.c: a daemon a worker left in a session of its own is
 * adopted (the subreaper), found below the agent and ended, both from the
 * kernel's children lists and from every /proc entry (kernels without
 * them). Each test runs in a process of its own (the harness), so the
 * subreaper and the children are the test's alone. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/orphans.h"
#include "tests/unit/test.h"

/* A child that starts a grandchild in a session of its own and exits: the
 * grandchild (its pid in *daemon) is re-parented to this process. */
static void leave_a_daemon(pid_t *daemon) {
    int p[2];
    CHECK_EQ(pipe(p), 0);
    pid_t child = fork();
    if (child == 0) {
        pid_t g = fork();
        if (g == 0) {
            setsid();
            execl("/bin/sleep", "sleep", "60", (char *)NULL);
            _exit(127);
        }
        if (write(p[1], &g, sizeof g) != sizeof g) _exit(1);
        _exit(0);
    }
    close(p[1]);
    CHECK_EQ(read(p[0], daemon, sizeof *daemon), (long)sizeof *daemon);
    close(p[0]);
    waitpid(child, NULL, 0);
    for (int i = 0; i < 1000 && getpgid(*daemon) != *daemon; i++) usleep(1000); /* its setsid */
}

static void ends_the_daemon(int children_lists) {
    orphans_adopt();
    orphans_use_children_lists(children_lists);
    pid_t daemon, pids[4] = {0};
    leave_a_daemon(&daemon);
    CHECK_EQ(getpgid(daemon), daemon);
    CHECK_EQ(orphans_end(NULL, 0, pids, 4), 1);
    CHECK_EQ(pids[0], daemon);
    CHECK(kill(daemon, 0) != 0); /* ended and reaped */
}

TEST(orphans_a_daemon_left_behind_is_ended_from_the_children_lists) { ends_the_daemon(1); }

TEST(orphans_a_daemon_left_behind_is_ended_from_every_proc_entry) { ends_the_daemon(0); }
