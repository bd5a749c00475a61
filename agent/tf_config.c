/* See tf_config.h. */
#include "agent/tf_config.h"

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "agent/free_ports.h"
#include "common/err.h"

int tf_config_ports(int n, char *out, size_t len, char *err, size_t errlen) {
    return free_ports(n, "TF_CONFIG", out, len, err, errlen);
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
