#!/usr/bin/env bash
# timeout: 30
# The architecture, checked from the code: every #include "..." in the
# production folders points down the layers of docs/architecture.md, never
# back up. Between folders: common < proto < store < rendezvous < agent <
# launcher; the worker takes only common and store. Inside the worker: backend, data < comm < model < train <
# main.c. The communicator's parts below its front (shared memory, TCP
# ring, bootstrap, the call's deadline, the asynchronous queue) include
# none of its fronts (comm.h, devcomm.h). Prints every arrow that breaks a
# rule.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 - <<'PY'
import glob, re, sys

FOLDERS = {"common": 0, "proto": 1, "store": 2, "rendezvous": 3, "agent": 4, "launcher": 5}
WORKER_MAY_USE = {"common/", "store/"}
WORKER_LAYERS = {"backend": 0, "data": 0, "comm": 1, "model": 2, "train": 3, "plot": 3, "": 4}
TRANSPORTS = re.compile(r"worker/comm/comm_(shm|ring|bootstrap|call|async)\.[ch]$")
FRONTS = {"worker/comm/comm.h", "worker/comm/devcomm.h"}

def worker_layer(path):
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else ""

def why_not(src, dst):
    top, dtop = src.split("/")[0], dst.split("/")[0]
    if top in FOLDERS:
        if dtop not in FOLDERS or FOLDERS[dtop] > FOLDERS[top]:
            return f"{top}/ may include only {', '.join(f for f in FOLDERS if FOLDERS[f] <= FOLDERS[top])}"
        return None
    # the worker
    if dtop != "worker":
        if not any(dst == a or (a.endswith("/") and dst.startswith(a)) for a in WORKER_MAY_USE):
            return "the worker may use only common/ and store/"
        return None
    a, b = worker_layer(src), worker_layer(dst)
    if a != b and WORKER_LAYERS[b] >= WORKER_LAYERS[a]:
        return f"worker/{a or 'main.c'} may not include worker/{b}/ (layers: backend, data < comm < model < train < main.c)"
    if TRANSPORTS.search(src) and dst in FRONTS:
        return "a part below the communicator's front must not include it"
    return None

files = [f for top in list(FOLDERS) + ["worker"] for ext in ("c", "h", "cu")
         for f in glob.glob(f"{top}/**/*.{ext}", recursive=True)]
bad = 0
for f in sorted(files):
    for n, line in enumerate(open(f, encoding="utf-8"), 1):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        dst = m.group(1)
        if "/" not in dst:
            print(f"{f}:{n}: includes \"{dst}\": project headers are named from the repository root")
            bad += 1
            continue
        why = why_not(f, dst)
        if why:
            print(f"{f}:{n}: includes {dst}: {why}")
            bad += 1
print(f"{len(files)} files checked, {bad} arrow(s) against the layers")
sys.exit(1 if bad else 0)
PY
