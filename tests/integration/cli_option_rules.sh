#!/usr/bin/env bash
# Every program reads its command line by the same rules (common/opts.c),
# so the same mistakes get the same answers everywhere: an unknown option
# is one line on stderr naming the option it resembles, and exit status 2;
# --a_b is --a-b; a missing value is named; -h and --help print a usage that
# lists the options, and exit 0. Nothing here starts a server or a job.
# timeout: 60
set -u
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
TMP=$(mktemp -d /tmp/ddprun-cli.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
die() { echo "FAIL: $*"; exit 1; }

path_of() { # the binary of a program name
    case $1 in
        store-load) echo "$ROOT/build/tests/store-load" ;;
        *) echo "$ROOT/build/bin/$1" ;;
    esac
}

# refused PROGRAM 'MESSAGE' ARGS...: exit 2, nothing on stdout, and stderr
# exactly "PROGRAM: MESSAGE" (store-load adds its usage after that line).
refused() {
    local prog=$1 want=$2 rc=0
    shift 2
    "$(path_of "$prog")" "$@" > "$TMP/out" 2> "$TMP/err" < /dev/null || rc=$?
    echo "$prog $*: $rc: $(head -n 1 "$TMP/err")"
    [ "$rc" = 2 ] || die "$prog $* exited $rc, expected 2"
    [ -s "$TMP/out" ] && die "$prog $* wrote to stdout: $(cat "$TMP/out")"
    [ "$(head -n 1 "$TMP/err")" = "$prog: $want" ] || die "$prog $*: expected '$prog: $want'"
    [ "$prog" = store-load ] || [ "$(wc -l < "$TMP/err")" = 1 ] || die "$prog $*: more than one line"
}

# helps PROGRAM OPTION...: -h and --help exit 0 and list every OPTION.
helps() {
    local prog=$1 flag opt
    shift
    for flag in -h --help; do
        "$(path_of "$prog")" $flag > "$TMP/out" 2> "$TMP/err" < /dev/null || die "$prog $flag failed"
        grep -q '^usage: ' "$TMP/out" || die "$prog $flag printed no usage"
        for opt in "$@"; do
            grep -q -- "$opt" "$TMP/out" || die "$prog $flag does not list $opt"
        done
    done
}

# One near miss per program; ddprun takes unique prefixes as torchrun does,
# so its typo is not a prefix.
refused ddprun "unknown option '--nnods' (did you mean --nnodes?)" --nnods 2 x.py
refused ddp-train "unknown option '--epoch' (did you mean --epochs?)" --epoch 3 --data-dir "$TMP/none"
refused ddprun-store "unknown option '--prot' (did you mean --port?)" --prot 1
refused ddprun-store-cli "unknown option '--tiemout' (did you mean --timeout?)" --tiemout 5 ping
refused ddp-allreduce-bench "unknown option '--iter' (did you mean --iters?)" --iter 3
refused store-load "unknown option '--conn' (did you mean --conns?)" bench --conn 3

# --a_b is --a-b: the value reaches the option and is checked there.
refused ddprun "--max-restarts: '-1' is not a non-negative integer" --max_restarts=-1 x.py
refused ddp-train "--batch-size: '0' is not a whole number from 1 to 1048576" --batch_size 0
refused ddprun-store "--max-conns: '0' is not a positive integer" --max_conns=0
refused ddprun-store-cli "--connect-timeout: 'soon' is not a positive integer" --connect_timeout soon ping
refused ddp-allreduce-bench "--timeout-ms: '0' is not a positive integer" --timeout_ms 0
refused store-load "--value-bytes: '1x' is not a size in bytes (K, M or G may follow)" \
    bench --value_bytes 1x

# A missing value is named, and the next option is not taken for it.
refused ddp-train "--lr expects a value (write --lr=VALUE for a value that starts with '-')" \
    --lr --epochs 2
refused ddprun-store "--port expects a value" --port

helps ddprun --nnodes --nproc-per-node --rdzv-endpoint --max-restarts --no-python
helps ddp-train --model --epochs --batch-size --lr --ckpt-dir --device --no-eval
helps ddprun-store --host --port --max-conns --verbose --quiet
helps ddprun-store-cli --host --port --timeout --protocol --no-ext
helps ddp-allreduce-bench --min-bytes --max-bytes --iters --own-memory --timeout-ms
helps store-load --host --port --conns --gen --no-ext
helps ddprun-exec __exec-worker
echo "every program answered alike"
