/* The agent's configuration: what one node's agent runs and how (the
 * rendezvous, the worker group, restarts, the workers' streams). The
 * launcher fills it in from torchrun's command line and PET_* variables
 * (launcher/config.h); the agent only reads it. */
#ifndef DDPRUN_AGENT_AGENT_CONFIG_H
#define DDPRUN_AGENT_AGENT_CONFIG_H

#include "rendezvous/rdzv_backend.h"

/* --redirects / --tee: which of a worker's streams go to files (redirect)
 * or to both the console and files (tee). 0 none, 1 stdout, 2 stderr,
 * 3 both; per local rank through "0:1,1:2" maps. */
enum { STREAM_NONE = 0, STREAM_OUT = 1, STREAM_ERR = 2, STREAM_BOTH = 3 };

#define AGENT_MAX_RANK_MAP 256

typedef struct {
    int dflt;                       /* for ranks absent from the map */
    int n;                          /* entries in the map */
    int rank[AGENT_MAX_RANK_MAP];  /* local rank */
    int value[AGENT_MAX_RANK_MAP]; /* STREAM_* */
} stream_spec;

/* A list of strings (--duplicate-stdout-filters), NULL-terminated; n items. */
typedef struct {
    char **items;
    int n;
} string_list;

/* --store-proxy: whether this node's workers reach the job's store through
 * a proxy of the agent's, one connection per node (store/store_proxy.h). */
typedef enum {
    STORE_PROXY_AUTO = 0, /* on for jobs that may have STORE_PROXY_AUTO_RANKS ranks or more */
    STORE_PROXY_ON,
    STORE_PROXY_OFF,
} store_proxy_mode;
#define STORE_PROXY_AUTO_RANKS 16384

/* --numa-binding: how each worker's CPUs are chosen (agent/numa_binding.c). */
typedef enum {
    NUMA_NONE = 0,
    NUMA_NODE,         /* the CPUs of the NUMA node nearest its GPU */
    NUMA_SOCKET,       /* the CPUs of that node's socket */
    NUMA_EXCLUSIVE,    /* a share of that node's cores, apart from the other workers' */
    NUMA_CORE_COMPLEX, /* one L3 cache domain (core complex) of that node, its own */
} numa_mode;

#define AGENT_MAX_SIGNALS 16

/* What --nproc-per-node said before it was resolved to a number. */
typedef enum { NPROC_NUMBER, NPROC_CPU, NPROC_GPU, NPROC_AUTO } nproc_mode;

typedef struct {
    /* --rdzv-conf key=value,... */
    double join_timeout;        /* s, default 600 */
    double last_call_timeout;   /* s, default 30 */
    double close_timeout;       /* s, default 30 */
    double keep_alive_interval; /* s, default 2 (also accepted as heartbeat) */
    int keep_alive_max_attempt; /* default 3 */
    double read_timeout;        /* s, default 60 */
    int is_host;                /* -1 unset (decide from the endpoint), 0, 1 */
    /* etcd-v3, as etcd names them (NULL: unset) */
    char *cacert, *cert, *key;  /* TLS: CA, client certificate and key files */
    char *user, *password;      /* etcd's authentication */
    char *key_prefix;           /* the job's keys under <key_prefix><rdzv_id>/ (/ddprun/) */
} rdzv_conf;

/* What the agent needs of the environment ddprun was started in, read once
 * by the launcher: the agent itself calls no getenv. */
typedef struct {
    char *cuda_visible_devices; /* CUDA_VISIBLE_DEVICES; NULL: unset */
    int omp_num_threads_set;    /* OMP_NUM_THREADS is set: no default of 1 for the workers */
    int nccl_async_set;         /* NCCL_ASYNC_ERROR_HANDLING is set: no default */
    int torch_nccl_async_set;   /* TORCH_NCCL_ASYNC_ERROR_HANDLING is set: no default */
    char *store_token;          /* DDPRUN_STORE_TOKEN: the store's shared secret; NULL: none */
    int file_timer;             /* TORCHELASTIC_ENABLE_FILE_TIMER=1: serve torch's FileTimer */
    double store_stall_s;       /* DDPRUN_STORE_STALL_S (60; 0: off): a store client that waits
                                 * this long for a key nobody has set is reported */
    int workers_host_store;     /* TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: each round's rank 0
                                 * worker hosts the workers' store, on a port node rank 0's
                                 * agent picks (torchrun's opt-out of its shared store) */
    char *timer_file;           /* TORCHELASTIC_TIMER_FILE; NULL: a new FIFO under tmpdir */
    char *tmpdir;               /* TMPDIR, or /tmp */
    char *shm_dir;              /* DDPRUN_SHM_DIR, or /dev/shm: where snapshot directories go */
} agent_env;

typedef struct {
    int min_nodes, max_nodes;   /* --nnodes N or MIN:MAX; default 1:1 */
    nproc_mode nproc_mode;      /* --nproc-per-node */
    int nproc_per_node;         /* resolved count (cpu: cores, gpu: GPUs, auto: GPUs or cores) */
    int node_rank;              /* --node-rank; -1 when unset */
    const rdzv_backend *rdzv_backend; /* static (default), c10d or etcd-v3: its flags say */
                                /* how it differs (rendezvous/rdzv_backend.h) */
    char *rdzv_endpoints;       /* --rdzv-endpoint as given (etcd-v3: every member) */
    char *rdzv_host;            /* --rdzv-endpoint host; NULL when unset; IPv6 without [] */
    int rdzv_port;              /* its port, default 29400; 0 (--standalone): a free port */
    char *rdzv_id;              /* --rdzv-id, default "none" */
    rdzv_conf rdzv;             /* --rdzv-conf */
    int standalone;             /* --standalone */
    int max_restarts;           /* --max-restarts, default 0 */
    double monitor_interval;    /* --monitor-interval s, default 0.1 (kept for compatibility; */
                                /* failures are seen by exit events, not polling) */
    char *role;                 /* --role, default "default" */
    char *log_dir;              /* --log-dir; NULL: a fresh directory under /tmp */
    stream_spec redirects;      /* -r/--redirects */
    stream_spec tee;            /* -t/--tee */
    int *local_ranks_filter;    /* --local-ranks-filter; NULL: all ranks shown */
    int n_local_ranks_filter;
    char *master_addr;          /* --master-addr (static backend); NULL when unset */
                                /* (torchrun's default is 127.0.0.1) */
    int master_port;            /* --master-port, -1 when unset (torchrun's default 29500) */
    char *local_addr;           /* --local-addr */
    double shutdown_timeout;    /* --shutdown-timeout s, default 30 */
    int run_module;             /* -m/--module: python3 -m PROGRAM */
    int no_python;              /* --no-python: exec PROGRAM directly */
    int run_path;               /* --run-path: PROGRAM is a Python script, whatever */
                                /* --no-python and -m say (torchrun's runpy.run_path) */
    int virtual_local_rank;     /* --virtual-local-rank: LOCAL_RANK=0 for every worker, each */
                                /* seeing only its own GPU (CUDA_VISIBLE_DEVICES) */
    char *log_line_prefix_template; /* --log-line-prefix-template or TORCHELASTIC_LOG_LINE_ */
                                /* PREFIX_TEMPLATE; NULL: "[${role_name}${local_rank}]:" */
    string_list dup_filters[2]; /* --duplicate-stdout-filters, --duplicate-stderr-filters: */
                                /* tee'd lines holding any of them also go to filtered_*.log */
    int signals[AGENT_MAX_SIGNALS]; /* --signals-to-handle: stop the workers with it */
    int nsignals;
    numa_mode numa_binding;     /* --numa-binding */
    int tf_config;              /* --tf-config: TensorFlow's TF_CONFIG for each worker */
    store_proxy_mode store_proxy; /* --store-proxy */
    double straggler_pct;       /* --straggler-threshold: percent over the median */
    double straggler_window;    /* --straggler-window: s */
    int replace_stragglers;     /* --replace-stragglers: a straggler's node leaves for a spare */
    int event_log_console;      /* --event-log-handler console: events on stderr as JSON */
    char *metrics_host;         /* --metrics-port [HOST:]PORT: HOST, NULL: 127.0.0.1 */
    int metrics_port;           /* its PORT (0: a free one); -1: no metrics server */
    char *health_host;          /* --health-check-port or TORCHELASTIC_HEALTH_CHECK_PORT: */
    int health_port;            /* the same for GET /health; -1: none */
    char health_setting[64];    /* where the health port came from, for messages */
                                /* (--health-check-port, TORCHELASTIC_HEALTH_CHECK_PORT) */
    char **argv;                /* the command to run for each worker (NULL-terminated) */
    int argc;
    agent_env env;              /* from ddprun's environment */
} agent_config;

/* The effective STREAM_* of a spec for one local rank. */
int stream_for_rank(const stream_spec *spec, int local_rank);

/* Where the job's store is, as the configuration names it: with a
 * RDZV_FIXED_RANKS backend (torchrun's static rendezvous) --master-addr and
 * --master-port (torchrun's default 29500), else --rdzv-endpoint's host and
 * port. *host NULL: no address was given. */
void agent_config_store(const agent_config *c, const char **host, int *port);

/* Whether this node's workers reach the job's store through the agent's
 * proxy: --store-proxy on, or auto for a job of several nodes that may
 * have STORE_PROXY_AUTO_RANKS ranks or more. */
int agent_config_store_proxy(const agent_config *c);

/* Where the backend keeps the job's keys (a store: where
 * agent_config_store says), with the TLS and authentication of
 * --rdzv-conf; connect_timeout_ms for a store, request_timeout_ms for a
 * cluster. */
rdzv_endpoint agent_config_rdzv_endpoint(const agent_config *c, int connect_timeout_ms,
                                         int request_timeout_ms);

#endif
