/* Unit tests of common/thread_prio.c: the nice value is the calling
 * thread's alone (Linux), taken where the process may (root here), and
 * refused with nothing changed where it may not. */
#include "tests/unit/test.h"
#include "common/thread_prio.h"

#include <errno.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

typedef struct {
    int rc, nice_after;
} prio_result;

static void *raise_in_thread(void *p) {
    prio_result *r = p;
    r->rc = thread_prio_raise(THREAD_PRIO_CONTROL);
    errno = 0;
    r->nice_after = getpriority(PRIO_PROCESS, (id_t)gettid());
    return NULL;
}

TEST(thread_prio_raises_the_calling_thread_only) {
    errno = 0;
    int before = getpriority(PRIO_PROCESS, (id_t)gettid());
    prio_result r = {0};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, raise_in_thread, &r), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    if (r.rc == 0) {
        CHECK_EQ(r.nice_after, THREAD_PRIO_CONTROL);
    } else { /* not root: refused, and the thread kept its value */
        CHECK(r.rc == -EACCES || r.rc == -EPERM);
        CHECK_EQ(r.nice_after, before);
    }
    CHECK_EQ(getpriority(PRIO_PROCESS, (id_t)gettid()), before); /* this thread's unchanged */
}
