/* `ddprun status`: a job's state read from its rendezvous (see
 * rendezvous/rdzv_inspect.h), from any machine that reaches the store or
 * etcd; text for people, --json for scripts, --watch to refresh. */
#ifndef DDPRUN_LAUNCHER_STATUS_CLI_H
#define DDPRUN_LAUNCHER_STATUS_CLI_H

/* argv[1] is "status". Returns the exit code: 0 shown, 1 the job or its
 * store cannot be read, 2 a bad command line. */
int status_main(int argc, char **argv, char **environ_);

#endif
