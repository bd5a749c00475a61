/* libcurl, loaded on first use (dlopen) rather than linked: only the
 * etcd-v3 rendezvous needs it, and linking it made every program load it
 * and the 30 libraries it pulls in (TLS, Kerberos, LDAP, ...): 3.5 ms of
 * dynamic linking at each start, 3.5 CPU seconds for 1,000 agents of a
 * c10d job that never speak HTTP. The types and constants are curl.h's. */
#ifndef DDPRUN_CURL_LIB_H
#define DDPRUN_CURL_LIB_H

#include <curl/curl.h>
#include <stddef.h>

typedef struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURL *(*easy_duphandle)(CURL *h);
    void (*easy_cleanup)(CURL *h);
    CURLcode (*easy_setopt)(CURL *h, CURLoption opt, ...);
    CURLcode (*easy_getinfo)(CURL *h, CURLINFO info, ...);
    CURLcode (*easy_perform)(CURL *h);
    const char *(*easy_strerror)(CURLcode e);
    CURLM *(*multi_init)(void);
    CURLMcode (*multi_cleanup)(CURLM *m);
    CURLMcode (*multi_add_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_remove_handle)(CURLM *m, CURL *h);
    CURLMcode (*multi_perform)(CURLM *m, int *running);
    CURLMsg *(*multi_info_read)(CURLM *m, int *queued);
    CURLMcode (*multi_poll)(CURLM *m, struct curl_waitfd *extra, unsigned n, int timeout_ms,
                            int *numfds);
    CURLMcode (*multi_wakeup)(CURLM *m);
    struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
    void (*slist_free_all)(struct curl_slist *l);
} curl_lib;

/* The library, loaded and initialised (curl_global_init) once per process;
 * NULL with why in err (once it failed, every call says the same). Any
 * thread. */
const curl_lib *curl_lib_get(char *err, size_t errlen);

#endif
