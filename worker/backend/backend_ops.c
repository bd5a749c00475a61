/* backend_missing_op (backend.h): a table's completeness, read from the
 * one list of operations, BACKEND_OPS, so that an operation added to the
 * list is checked with no change here. */
#include <stddef.h>

#include "worker/backend/backend.h"

/* Which kinds of operation every backend must have: all but the
 * recording ones, whose absence says the backend cannot record. */
#define REQUIRED_PLAIN 1
#define REQUIRED_PLAIN_VOID 1
#define REQUIRED_ACT 1
#define REQUIRED_RECORD 0
#define REQUIRED_DESTROY 1

/* The first required operation that ops leaves NULL. */
static const char *missing_required(const backend_ops *ops) {
#define MISSING(KIND, RET, NAME, PARAMS, ARGS)                                                     \
    if (REQUIRED_##KIND && !ops->NAME) return #NAME;
    BACKEND_OPS(MISSING)
#undef MISSING
    return NULL;
}

/* The optional operations come as a set (a backend records a step with
 * all three or not at all): the first left NULL while another is set. */
static const char *missing_optional(const backend_ops *ops) {
    int set = 0, unset = 0;
    const char *absent = NULL;
#define OPTIONAL(KIND, RET, NAME, PARAMS, ARGS)                                                    \
    if (!REQUIRED_##KIND) {                                                                        \
        if (ops->NAME)                                                                             \
            set++;                                                                                 \
        else                                                                                       \
            unset++, absent = absent ? absent : #NAME;                                             \
    }
    BACKEND_OPS(OPTIONAL)
#undef OPTIONAL
    return set && unset ? absent : NULL;
}

const char *backend_missing_op(const backend_ops *ops) {
    const char *name = missing_required(ops);
    return name ? name : missing_optional(ops);
}
