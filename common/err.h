/* Errors, the one convention. A function that can fail returns 0 or a
 * negative errno (a named positive result where a call has outcomes that
 * are not errors, e.g. rdzv_outcome); the first function to see the
 * failure writes what happened, in words, into its caller's message
 * buffer, and the callers above pass the code up without rewriting it. */
#ifndef DDPRUN_COMMON_ERR_H
#define DDPRUN_COMMON_ERR_H

#include <stdarg.h>
#include <stddef.h>

/* Writes the message into err (nothing when err is NULL or errlen 0) and
 * returns rc, so that a failure is one statement:
 *     return err_set(err, errlen, -EINVAL, "--port: '%s' is not a port", v); */
int err_set(char *err, size_t errlen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int err_vset(char *err, size_t errlen, int rc, const char *fmt, va_list ap);

#endif
