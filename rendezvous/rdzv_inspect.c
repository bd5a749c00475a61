/* See rdzv_inspect.h. The key layout is rdzv.h's. */
#include "rendezvous/rdzv_inspect.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "rendezvous/rdzv.h"

#define KEY_MAX RDZV_KEY_MAX

typedef struct {
    rdzv_kv *kv;
    char prefix[256];
} job;

#define key(j, buf, ...) rdzv_key(buf, (j)->prefix, __VA_ARGS__)

/* The value of a key as a string (malloc'd), or NULL when it is missing. */
static int get(const job *j, const char *k, char **out) {
    uint8_t *v = NULL;
    size_t n;
    int rc = kv_try_get(j->kv, k, &v, &n);
    *out = rc == 0 ? (char *)v : NULL;
    return rc == -ENOENT ? 0 : rc;
}


/* The agents named under a prefix ("status/"), without it. */
static int agents_under(const job *j, const char *what, char ***ids, size_t *n) {
    char k[KEY_MAX];
    int rc = kv_list(j->kv, key(j, k, "%s", what), ids, n);
    size_t plen = strlen(k);
    for (size_t i = 0; rc == 0 && i < *n; i++) memmove((*ids)[i], (*ids)[i] + plen, strlen((*ids)[i] + plen) + 1);
    return rc;
}

static json_t *find_node(json_t *nodes, const char *agent_id) {
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        if (strcmp(json_string_value(json_object_get(n, "agent_id")), agent_id) == 0) return n;
    }
    return NULL;
}

static json_t *node_entry(json_t *nodes, const char *agent_id) {
    json_t *n = find_node(nodes, agent_id);
    if (n) return n;
    n = json_pack("{s:s, s:s, s:b, s:n, s:n, s:b, s:n, s:n}", "agent_id", agent_id, "host", "",
                  "member", 0, "node_rank", "nproc", "alive", 0, "heartbeat_age_s", "status");
    json_array_append_new(nodes, n);
    return n;
}

/* The round's members (r<round>/node/1..n) and every agent that published
 * a status or a heartbeat. */
static int read_nodes(const job *j, long round, long joined, json_t *nodes) {
    char k[KEY_MAX];
    int rc = 0;
    for (long i = 1; rc == 0 && i <= joined && i <= RDZV_MAX_NODES; i++) {
        char *v;
        rdzv_node node;
        if ((rc = get(j, key(j, k, "r%ld/node/%ld", round, i), &v)) || !v) continue;
        if (rdzv_parse_node(v, &node) == 0) {
            json_t *n = node_entry(nodes, node.agent_id);
            json_object_set_new(n, "host", json_string(node.host));
            json_object_set_new(n, "member", json_true());
            json_object_set_new(n, "nproc", json_integer(node.nproc));
        }
        free(v);
    }
    const char *kinds[] = {"status/", "beat/", "hb/"};
    double now = clock_wall_s();
    for (int kind = 0; rc == 0 && kind < 3; kind++) {
        char **ids = NULL;
        size_t nids = 0;
        rc = agents_under(j, kinds[kind], &ids, &nids);
        for (size_t i = 0; rc == 0 && i < nids; i++) {
            json_t *n = node_entry(nodes, ids[i]);
            if (kind == 2) {
                json_object_set_new(n, "alive", json_true());
                double age;
                int arc = j->kv->ops->renewed_age
                              ? j->kv->ops->renewed_age(j->kv, key(j, k, "hb/%s", ids[i]), &age)
                              : -ENOENT;
                if (arc == 0) json_object_set_new(n, "heartbeat_age_s", json_real(age));
                else if (arc != -ENOENT) rc = arc;
                continue;
            }
            char *v;
            if ((rc = get(j, key(j, k, "%s%s", kinds[kind], ids[i]), &v)) || !v) continue;
            if (kind == 1) {
                double age = now - strtod(v, NULL);
                json_object_set_new(n, "heartbeat_age_s", json_real(age < 0 ? 0 : age));
            } else {
                json_t *st = json_loads(v, 0, NULL);
                if (st) {
                    json_object_set_new(n, "status", st);
                    json_t *h = json_object_get(st, "host");
                    if (!json_string_length(json_object_get(n, "host")) && json_is_string(h))
                        json_object_set(n, "host", h);
                    json_t *nr = json_object_get(st, "node_rank");
                    if (json_object_get(n, "member") == json_true() && json_is_integer(nr))
                        json_object_set(n, "node_rank", nr);
                }
            }
            free(v);
        }
        rdzv_kv_free_keys(ids, nids);
    }
    return rc;
}

/* Members first, by node rank; then the others by host. */
static int node_order(const void *pa, const void *pb) {
    json_t *a = *(json_t *const *)pa, *b = *(json_t *const *)pb;
    int ma = json_is_true(json_object_get(a, "member")), mb = json_is_true(json_object_get(b, "member"));
    if (ma != mb) return mb - ma;
    json_int_t ra = json_integer_value(json_object_get(a, "node_rank"));
    json_int_t rb = json_integer_value(json_object_get(b, "node_rank"));
    if (ra != rb) return (ra > rb) - (ra < rb);
    int c = strcmp(json_string_value(json_object_get(a, "host")),
                   json_string_value(json_object_get(b, "host")));
    return c ? c : strcmp(json_string_value(json_object_get(a, "agent_id")),
                          json_string_value(json_object_get(b, "agent_id")));
}

static json_t *sorted(json_t *nodes) {
    size_t n = json_array_size(nodes);
    json_t **v = calloc(n ? n : 1, sizeof *v);
    json_t *out = json_array();
    for (size_t i = 0; v && i < n; i++) v[i] = json_array_get(nodes, i);
    if (v) qsort(v, n, sizeof *v, node_order);
    for (size_t i = 0; v && i < n; i++) json_array_append(out, v[i]);
    free(v);
    json_decref(nodes);
    return out;
}

/* The failure lines, the first of each round marked as its root cause
 * (torchrun's: the earliest failure). */
static json_t *read_failures(const job *j) {
    char k[KEY_MAX], *all = NULL;
    json_t *out = json_array();
    if (get(j, key(j, k, "failures"), &all) || !all) return out;
    long last_round = -1;
    for (char *save = NULL, *line = strtok_r(all, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        json_t *f = json_loads(line, 0, NULL);
        if (!json_is_object(f)) {
            json_decref(f);
            continue;
        }
        long round = (long)json_integer_value(json_object_get(f, "round"));
        json_object_set_new(f, "root_cause", json_boolean(round != last_round));
        last_round = round;
        json_array_append_new(out, f);
    }
    free(all);
    return out;
}

/* min and max nodes as the agents say (their statuses carry them). */
static void node_bounds(json_t *nodes, long *min, long *max) {
    size_t i;
    json_t *n;
    *min = *max = -1;
    json_array_foreach(nodes, i, n) {
        json_t *st = json_object_get(n, "status");
        if (json_is_integer(json_object_get(st, "min_nodes"))) {
            *min = (long)json_integer_value(json_object_get(st, "min_nodes"));
            *max = (long)json_integer_value(json_object_get(st, "max_nodes"));
        }
    }
}

static void hosts_of_members(json_t *nodes, char *out, size_t cap) {
    size_t i, len = 0;
    json_t *n;
    out[0] = 0;
    json_array_foreach(nodes, i, n) {
        if (!json_is_true(json_object_get(n, "member")) || len + 8 >= cap) continue;
        len += (size_t)snprintf(out + len, cap - len, "%s%s", len ? ", " : "",
                                json_string_value(json_object_get(n, "host")));
    }
}

/* What the job waits for, in a sentence ("" when nothing). */
static void waiting_for(json_t *o, json_t *nodes, char *out, size_t cap) {
    const char *phase = json_string_value(json_object_get(o, "phase"));
    long round = (long)json_integer_value(json_object_get(o, "round"));
    long joined = (long)json_integer_value(json_object_get(o, "joined"));
    long expect = (long)json_integer_value(json_object_get(o, "expect"));
    long min = (long)json_integer_value(json_object_get(o, "min_nodes"));
    long max = (long)json_integer_value(json_object_get(o, "max_nodes"));
    char hosts[512];
    hosts_of_members(nodes, hosts, sizeof hosts);
    out[0] = 0;
    if (strcmp(phase, "gathering") == 0) {
        if (min > 0 && joined < min)
            snprintf(out, cap, "round %ld waits for nodes: %ld of at least %ld joined%s%s%s", round,
                     joined, min, joined ? " (" : "", hosts, joined ? ")" : "");
        else
            snprintf(out, cap,
                     "round %ld has %ld node%s%s%s%s; it closes when %ld are there or when the "
                     "last call ends",
                     round, joined, joined == 1 ? "" : "s", joined ? " (" : "", hosts,
                     joined ? ")" : "", expect > 0 ? expect : max);
    } else if (strcmp(phase, "starting") == 0) {
        snprintf(out, cap, "round %ld is formed; node rank 0 is getting it ready", round);
    } else if (strcmp(phase, "restarting") == 0) {
        snprintf(out, cap, "round %ld ended (%s); the next round is being opened", round,
                 json_string_value(json_object_get(o, "outcome")));
    } else if (strcmp(phase, "running") == 0) {
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n) {
            if (json_is_true(json_object_get(n, "member")) && !json_is_true(json_object_get(n, "alive"))) {
                snprintf(out, cap, "node %s has no heartbeat: the others restart without it",
                         json_string_value(json_object_get(n, "host")));
                break;
            }
        }
    }
}

static int inspect(const job *j, const rdzv_inspect_opts *o, json_t *res) {
    char k[KEY_MAX];
    int64_t round = 0, joined = 0, waiting = 0;
    long finished, restarts, state, expect, ready;
    char *outcome = NULL, *open_next = NULL;
    char **any = NULL;
    size_t nany = 0;
    int rc = kv_list(j->kv, j->prefix, &any, &nany);
    rdzv_kv_free_keys(any, nany);
    if (rc == 0) rc = kv_add(j->kv, key(j, k, "round"), 0, &round);
    if (rc == 0) rc = kv_get_long(j->kv, key(j, k, "closed"), 0, &finished);
    if (rc == 0) rc = kv_get_long(j->kv, key(j, k, "r%lld/restarts", (long long)round), 0, &restarts);
    if (rc == 0) rc = kv_get_long(j->kv, key(j, k, "r%lld/state", (long long)round), -1, &state);
    if (rc == 0) rc = kv_get_long(j->kv, key(j, k, "r%lld/expect", (long long)round), -1, &expect);
    if (rc == 0) rc = kv_get_long(j->kv, key(j, k, "r%lld/ready", (long long)round), 0, &ready);
    if (rc == 0) rc = kv_add(j->kv, key(j, k, "r%lld/njoined", (long long)round), 0, &joined);
    if (rc == 0) rc = kv_add(j->kv, key(j, k, "r%lld/nwaiting", (long long)round), 0, &waiting);
    if (rc == 0) rc = get(j, key(j, k, "r%lld/outcome", (long long)round), &outcome);
    if (rc == 0) rc = get(j, key(j, k, "r%lld/open", (long long)round + 1), &open_next);
    json_t *nodes = json_array();
    if (rc == 0) rc = read_nodes(j, round, joined, nodes);
    if (rc) {
        free(outcome), free(open_next);
        json_decref(nodes);
        return rc;
    }
    nodes = sorted(nodes);
    long min, max;
    node_bounds(nodes, &min, &max);
    const char *phase = nany == 0       ? "unknown"
                        : finished      ? "finished"
                        : outcome       ? "restarting"
                        : state < 0     ? "gathering"
                        : !ready        ? "starting"
                                        : "running";
    json_object_set_new(res, "found", json_boolean(nany > 0));
    json_object_set_new(res, "round", json_integer(round));
    json_object_set_new(res, "finished", json_boolean(finished));
    json_object_set_new(res, "restart_count", json_integer(restarts));
    json_object_set_new(res, "min_nodes", json_integer(min));
    json_object_set_new(res, "max_nodes", json_integer(max));
    json_object_set_new(res, "phase", json_string(phase));
    json_object_set_new(res, "joined", json_integer(joined));
    json_object_set_new(res, "expect", json_integer(expect));
    json_object_set_new(res, "closed_with", state >= 0 ? json_integer(state) : json_null());
    json_object_set_new(res, "waiting", json_integer(waiting));
    json_object_set_new(res, "outcome", outcome ? json_string(outcome) : json_null());
    char why[1024];
    waiting_for(res, nodes, why, sizeof why);
    json_object_set_new(res, "waiting_for", json_string(why));
    json_object_set_new(res, "nodes", nodes);
    json_object_set_new(res, "failures", read_failures(j));
    (void)o;
    free(outcome), free(open_next);
    return 0;
}

int rdzv_inspect(const rdzv_inspect_opts *o, json_t **out, char *err, size_t errlen) {
    *out = NULL;
    job j = {0};
    snprintf(j.prefix, sizeof j.prefix, "%s%s/", o->key_prefix ? o->key_prefix : "/ddprun/",
             o->run_id);
    int rc = o->backend->open(&o->where, 0, &j.kv, err, errlen);
    if (rc) return rc;
    json_t *res = json_pack("{s:s, s:s}", "run_id", o->run_id, "where", j.kv->where);
    rc = res ? inspect(&j, o, res) : -ENOMEM;
    if (rc) {
        snprintf(err, errlen, "cannot read job '%s' from %s: %s", o->run_id, j.kv->where,
                 strerror(-rc));
        json_decref(res);
    } else {
        *out = res;
    }
    kv_close(j.kv);
    return rc;
}
