/* The janitor: what the agent made for its own use (the snapshot
 * directories in /dev/shm and on disk, its temporary log root) is removed
 * when the agent ends, however it ends: SIGKILL included, after which the
 * agent can clean up nothing itself. */
#ifndef DDPRUN_AGENT_JANITOR_H
#define DDPRUN_AGENT_JANITOR_H

/* Starts a shell, in a session of its own and adopted by init (no child
 * of the agent's, so nothing that ends the agent's children or process
 * group reaches it), with no environment of the agent's, blocked reading
 * a pipe whose write end only the agent holds (close-on-exec: no worker
 * inherits it). When the agent ends, the read sees the end of the pipe and
 * the shell removes paths (a NULL-terminated list of at most 4), then
 * exits. Returns the write end, or -1 when no shell could be started (the
 * paths are then left to the agent's own clean-up). */
int janitor_start(const char *const paths[]);

/* The workers' process groups: on (1) once a worker runs, off (0) once
 * its group is stopped and reaped. Groups still on when the agent ends
 * are SIGKILLed by the janitor: a worker dies with its agent
 * (PR_SET_PDEATHSIG), but whatever it started (a shell script's child, a
 * data loader's processes) would outlive a SIGKILLed agent otherwise. */
void janitor_track(int fd, int pgid, int on);

/* One more path to remove at the agent's end (made after the janitor
 * started). */
void janitor_add_path(int fd, const char *path);

/* At the agent's end, what is left of the paths is to stay (the logs of a
 * job in which a worker failed): the janitor removes nothing. */
void janitor_keep(int fd);

/* The agent removed the paths itself: lets the janitor go (finding nothing). */
void janitor_dismiss(int fd);

#endif
