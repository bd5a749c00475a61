/* See tf_config.h. */
#include "agent/tf_config.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/err.h"

int tf_config_ports(int n, char *out, size_t len, char *err, size_t errlen) {
    size_t at = 0;
    out[0] = '\0';
    int *fds = calloc((size_t)n, sizeof *fds), rc = 0;
    if (!fds) return err_set(err, errlen, -ENOMEM, "out of memory");
    /* all held open until all are chosen: n different ports */
    for (int i = 0; i < n && rc == 0; i++) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
        socklen_t sl = sizeof sa;
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&sa, sizeof sa) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&sa, &sl) != 0) {
            rc = err_set(err, errlen, -errno, "cannot pick a free port for TF_CONFIG: %s",
                         strerror(errno));
            break;
        }
        int k = snprintf(out + at, len - at, "%s%d", i ? "," : "", ntohs(sa.sin_port));
        if (k < 0 || (size_t)k >= len - at)
            rc = err_set(err, errlen, -E2BIG, "--tf-config: %d ports do not fit", n);
        else
            at += (size_t)k;
    }
    for (int i = 0; i < n; i++)
        if (fds[i] > 0) close(fds[i]);
    free(fds);
    return rc;
}

char *tf_config_cluster(const rdzv_result *round, char *err, size_t errlen) {
    json_t *list = json_array();
    for (int i = 0; list && i < round->group_world_size; i++) {
        const rdzv_node *nd = &round->nodes[i];
        const char *p = nd->worker_ports;
        for (int k = 0; k < nd->nproc; k++) {
            char *end;
            long port = strtol(p, &end, 10);
            if (end == p || port <= 0 || port > 65535 || (*end && *end != ',')) {
                err_set(err, errlen, -EPROTO,
                        "--tf-config: the agent on %s published %s for its %d workers' ports "
                        "(is it running ddprun with --tf-config too?)",
                        nd->host, nd->worker_ports, nd->nproc);
                json_decref(list);
                return NULL;
            }
            char hp[200];
            snprintf(hp, sizeof hp, "%s:%ld", nd->host, port);
            json_array_append_new(list, json_string(hp));
            p = *end ? end + 1 : end;
        }
    }
    char *s = list ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    if (!s) err_set(err, errlen, -ENOMEM, "out of memory");
    return s;
}

char *tf_config_var(const char *cluster, int index) {
    char *s = NULL;
    if (asprintf(&s, "TF_CONFIG={\"cluster\":{\"worker\":%s},\"task\":{\"type\":\"worker\","
                     "\"index\":%d}}",
                 cluster, index) < 0)
        return NULL;
    return s;
}
