/* The communicator's bootstrap through the store; see comm_bootstrap.h.
 *
 * An entry is one line of text, "<addr> <pid> <hostid>", so that it reads
 * well with ddprun-store-cli when a job hangs at start-up. The key prefix
 * is unique to the attempt (the launcher's restart count is part of it), so
 * a restarted group never reads its predecessor's entries. */
#include "worker/comm/comm_bootstrap.h"
#include "common/ddprun_env.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

static void read_small(const char *path, char *buf, size_t len) {
    buf[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    buf[strcspn(buf, "\n")] = 0;
}

void comm_bootstrap_hostid(char *buf, size_t len) {
    const char *env = getenv(DDPRUN_ENV_COMM_HOST_ID);
    if (env && *env) {
        snprintf(buf, len, "%s", env);
        return;
    }
    char host[256] = "", boot[64], ipc[64] = "", pidns[64] = "";
    gethostname(host, sizeof host - 1);
    read_small("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
    ssize_t n = readlink("/proc/self/ns/ipc", ipc, sizeof ipc - 1);
    ipc[n > 0 ? n : 0] = 0;
    n = readlink("/proc/self/ns/pid", pidns, sizeof pidns - 1);
    pidns[n > 0 ? n : 0] = 0;
    struct stat st;
    unsigned long long shmdev = stat("/dev/shm", &st) == 0 ? (unsigned long long)st.st_dev : 0;
    snprintf(buf, len, "%s/%s/%s/%s/shm:%llx", host, boot, ipc, pidns, shmdev);
    for (char *p = buf; *p; p++)
        if (*p == ' ' || *p == '\n') *p = '_';
}

int comm_bootstrap_addr(store_client *st, int port, char *buf, size_t len, comm_call *k) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "";
    if (getsockname(store_client_fd(st), (struct sockaddr *)&ss, &sl) != 0)
        return comm_call_fail(k, -errno, "cannot find this host's address: %s", strerror(errno));
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a6->sin6_addr, host, sizeof host);
        /* An IPv4 peer reached over a dual-stack socket: publish plain IPv4. */
        if (strncmp(host, "::ffff:", 7) == 0 && strchr(host + 7, '.'))
            snprintf(buf, len, "%s:%d", host + 7, port);
        else
            snprintf(buf, len, "[%s]:%d", host, port);
    } else {
        inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, host, sizeof host);
        snprintf(buf, len, "%s:%d", host, port);
    }
    return 0;
}

void comm_peers_free(comm_peers *p) {
    for (int i = 0; i < p->world; i++) {
        if (p->addr) free(p->addr[i]);
        if (p->hostid) free(p->hostid[i]);
    }
    free(p->addr);
    free(p->hostid);
    free(p->pid);
    memset(p, 0, sizeof *p);
}

static int ms_left(const comm_call *k) {
    int64_t ms = comm_call_left_ns(k) / 1000000;
    return ms > 0 ? (int)ms : 1;
}

static int parse_entry(comm_peers *p, int i, const uint8_t *v, size_t len) {
    char *s = malloc(len + 1);
    if (!s) return -ENOMEM;
    memcpy(s, v, len);
    s[len] = 0;
    char *sp1 = strchr(s, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    int rc = -EPROTO;
    if (sp2 && sp1 > s && sp2[1]) {
        *sp1 = *sp2 = 0;
        p->addr[i] = strdup(s);
        p->pid[i] = (pid_t)atol(sp1 + 1);
        p->hostid[i] = strdup(sp2 + 1);
        rc = p->addr[i] && p->hostid[i] ? 0 : -ENOMEM;
    }
    free(s);
    return rc;
}

/* The slice of the wait for the ranks' addresses (see below). */
#define WAIT_SLICE_MS 200

int comm_bootstrap_exchange(store_client *st, const char *prefix, int rank, int world,
                            const char *addr, const char *hostid, comm_peers *out,
                            comm_call *k) {
    memset(out, 0, sizeof *out);
    char **keys = calloc((size_t)world, sizeof *keys);
    uint8_t **vals = calloc((size_t)world, sizeof *vals);
    size_t *lens = calloc((size_t)world, sizeof *lens);
    out->world = world;
    out->addr = calloc((size_t)world, sizeof *out->addr);
    out->hostid = calloc((size_t)world, sizeof *out->hostid);
    out->pid = calloc((size_t)world, sizeof *out->pid);
    char *mine = NULL;
    int rc = 0, got = 0;
    if (!keys || !vals || !lens || !out->addr || !out->hostid || !out->pid) {
        rc = comm_call_fail(k, -ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < world && !rc; i++)
        if (asprintf(&keys[i], "%saddr/%d", prefix, i) < 0) keys[i] = NULL, rc = -ENOMEM;
    if (rc || asprintf(&mine, "%s %d %s", addr, (int)getpid(), hostid) < 0) {
        mine = NULL;
        rc = comm_call_fail(k, -ENOMEM, "out of memory");
        goto out;
    }
    store_client_set_timeout(st, ms_left(k));
    rc = store_set(st, keys[rank], mine, strlen(mine));
    if (rc) {
        rc = comm_call_fail(k, rc, "cannot publish this rank's address (%s) in the store: %s",
                            keys[rank], strerror(-rc));
        goto out;
    }
    /* In slices where the store can cancel a wait, so that a rank told to
     * stop (abort_at_ns) while a peer it waits for is gone stops within a
     * slice rather than at the timeout. */
    int slice = store_client_can_cancel(st) ? WAIT_SLICE_MS : 0;
    for (;;) {
        int left = ms_left(k), wait = slice && slice < left ? slice : left;
        store_client_set_timeout(st, left);
        rc = store_wait(st, (size_t)world, (const char *const *)keys, wait);
        if (rc != -ETIMEDOUT || wait == left) break;
        int stop = comm_call_stopped(k);
        if (stop == -ECANCELED) {
            rc = comm_call_check(k);
            goto out;
        }
    }
    if (rc == -ETIMEDOUT) {
        /* Name the missing ranks: that is what someone debugging a hang needs. */
        char missing[256] = "";
        size_t n = 0;
        for (int i = 0; i < world && n < sizeof missing - 16; i++) {
            int ready = 1;
            if (store_check(st, 1, (const char *const *)&keys[i], &ready) == 0 && !ready)
                n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? ", " : "", i);
        }
        rc = comm_call_fail(k, rc,
                            "timed out after %d ms waiting for every rank to publish its address "
                            "under %saddr/ (missing: %s)",
                            k->timeout_ms, prefix, n ? missing : "none left");
        goto out;
    }
    if (!rc) rc = store_multi_get(st, (size_t)world, (const char *const *)keys, vals, lens);
    if (rc) {
        rc = comm_call_fail(k, rc, "cannot read the ranks' addresses from the store: %s",
                            strerror(-rc));
        goto out;
    }
    got = 1;
    for (int i = 0; i < world && !rc; i++) {
        rc = parse_entry(out, i, vals[i], lens[i]);
        if (rc)
            rc = comm_call_fail(k, rc, "rank %d's entry %s is malformed: '%.*s'", i, keys[i],
                                (int)lens[i], (const char *)vals[i]);
    }
out:
    for (int i = 0; i < world; i++) {
        if (keys) free(keys[i]);
        if (got) free(vals[i]);
    }
    free(keys);
    free(vals);
    free(lens);
    free(mine);
    if (rc) comm_peers_free(out);
    return rc;
}
