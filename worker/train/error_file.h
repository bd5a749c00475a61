/* The worker's side of torchrun's error-file contract: on a fatal error,
 * write TORCHELASTIC_ERROR_FILE as {"message": {"message": ..., "extraInfo":
 * {"py_callstack": <native stack>, "timestamp": "<epoch seconds>"}}} so the
 * agent's summary names the cause. */
#ifndef DDPRUN_WORKER_TRAIN_ERROR_FILE_H
#define DDPRUN_WORKER_TRAIN_ERROR_FILE_H

/* Writes the file named by $TORCHELASTIC_ERROR_FILE (nothing if unset);
 * the stack is this call's. Atomic: a temporary file renamed. */
void error_file_write(const char *message);

/* Also write it from SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT. */
void error_file_install_crash_handlers(void);

#endif
