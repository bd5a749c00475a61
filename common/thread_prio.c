/* See thread_prio.h. */
#include "common/thread_prio.h"

#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

int thread_prio_raise(int nice) {
    return setpriority(PRIO_PROCESS, (id_t)gettid(), nice) == 0 ? 0 : -errno;
}
