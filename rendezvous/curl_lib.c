/* See curl_lib.h. */
#include "rendezvous/curl_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#define SONAME "libcurl.so.4"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static curl_lib lib;     /* written once, under `once`; read-only after */
static int loaded;       /* lib is complete */
static char why[512];    /* else why not */

/* Each entry point by its name: curl_<field>. */
#define SYM(field)                                                                          \
    do {                                                                                    \
        if (!(*(void **)&lib.field = dlsym(h, "curl_" #field))) {                           \
            snprintf(why, sizeof why, "%s has no curl_%s: too old a libcurl (7.68 or later " \
                     "is needed)", SONAME, #field);                                          \
            return;                                                                         \
        }                                                                                   \
    } while (0)

static void load(void) {
    void *h = dlopen(SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, sizeof why, "the etcd rendezvous needs libcurl, which cannot be loaded "
                 "(%s); install it (apt install libcurl4)", dlerror());
        return;
    }
    SYM(global_init); SYM(easy_init); SYM(easy_duphandle); SYM(easy_cleanup);
    SYM(easy_setopt); SYM(easy_getinfo); SYM(easy_perform); SYM(easy_strerror);
    SYM(multi_init); SYM(multi_cleanup); SYM(multi_add_handle); SYM(multi_remove_handle);
    SYM(multi_perform); SYM(multi_info_read); SYM(multi_poll); SYM(multi_wakeup);
    SYM(slist_append); SYM(slist_free_all);
    CURLcode e = lib.global_init(CURL_GLOBAL_DEFAULT);
    if (e != CURLE_OK) {
        snprintf(why, sizeof why, "libcurl would not start (curl_global_init: error %d)", (int)e);
        return;
    }
    loaded = 1; /* (the library stays loaded for the process' life) */
}

const curl_lib *curl_lib_get(char *err, size_t errlen) {
    pthread_once(&once, load);
    if (!loaded && err) snprintf(err, errlen, "%s", why);
    return loaded ? &lib : NULL;
}
