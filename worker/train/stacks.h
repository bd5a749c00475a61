/* Every thread's stack on request: when the launcher's watchdog is about
 * to kill a rank that stopped making progress, ddprun's agent first sends
 * each of its workers that catches it the signal named by
 * DDPRUN_STACK_SIGNAL (a real-time signal; the agent sends it only to
 * processes whose caught-signal mask has it, so a worker that did not ask
 * is never killed by it). ddp-train's handler then writes, on stderr (the
 * rank's log), a header with the rank and the step under way, and the
 * backtrace of each of its threads, one after the other: where a hung rank
 * is, and where the ranks waiting for it wait. A Python worker gets the
 * same with faulthandler.register(int(os.environ["DDPRUN_STACK_SIGNAL"]),
 * all_threads=True). */
#ifndef DDPRUN_WORKER_TRAIN_STACKS_H
#define DDPRUN_WORKER_TRAIN_STACKS_H

#include <stdint.h>

#include "common/coll_record.h"
#include "common/ddprun_env.h"

/* Installs the handler when DDPRUN_STACK_SIGNAL names a signal; rank for
 * the header. */
void stacks_install(int rank);

/* The step under way, for the header (set before each step). */
void stacks_note_step(int64_t step);
/* The rank's collective record (NULL: none), whose position the header
 * gives too. */
void stacks_note_record(const coll_record *r);

#endif
