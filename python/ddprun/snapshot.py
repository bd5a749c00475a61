"""Resume a PyTorch script where it stopped: a snapshot of its state after
every step, kept where it survives the worker.

Under ddprun, each node has a directory in memory that outlives its workers
(``DDPRUN_SNAPSHOT_DIR``, on /dev/shm). ``save`` writes the state there from
local rank 0 of each node, atomically (a whole new file replaces the old
one, so a worker killed mid-save leaves the last one intact); ``load``
finds the newest state any node holds when the group starts again, and its
holder sends it to the others, so losing a node costs nothing either.
Outside ddprun, or where its memory is not wanted, ``directory`` (or
``DDPRUN_SNAPSHOT_FALLBACK``) names a directory on disk to use instead;
with neither, ``save`` does nothing and ``load`` finds nothing::

    from ddprun import snapshot

    state, step = snapshot.load()           # (None, -1) on a fresh start
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
    for step in range(step + 1, steps):
        ...                                 # one training step
        snapshot.save({"model": model.state_dict(), "opt": opt.state_dict()}, step)

Every rank calls both: ``load`` is collective once torch.distributed is
initialised (the ranks agree on the newest step; one holder broadcasts it),
``save`` writes on local rank 0 only. The file is ``torch.save``'s.
"""
import os

import torch

__all__ = ["directory", "save", "load"]

FILE = "ddprun-snapshot.pt"


def directory(fallback=None):
    """Where snapshots go: ddprun's DDPRUN_SNAPSHOT_DIR, else `fallback`,
    else DDPRUN_SNAPSHOT_FALLBACK; None when there is none of them."""
    return (os.environ.get("DDPRUN_SNAPSHOT_DIR") or fallback
            or os.environ.get("DDPRUN_SNAPSHOT_FALLBACK") or None)


def _local_rank():
    return int(os.environ.get("LOCAL_RANK", "0"))


def save(state, step, fallback=None):
    """Keeps `state` (anything torch.save takes) as the state after step
    `step` (an int), replacing the one before atomically. Local rank 0 of
    each node writes; other ranks return at once. Returns the file's path,
    or None where nothing was written."""
    where = directory(fallback)
    if not where or _local_rank() != 0:
        return None
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, FILE)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        torch.save({"step": int(step), "state": state}, f)
        f.flush()
        if not os.environ.get("DDPRUN_SNAPSHOT_DIR"):
            os.fsync(f.fileno())  # on disk, not in memory: make it durable
    os.replace(tmp, path)
    return path


def _read(where, map_location):
    path = os.path.join(where, FILE) if where else None
    if not path or _local_rank() != 0 or not os.path.exists(path):
        return None
    try:
        return torch.load(path, map_location=map_location)
    except Exception as e:  # a damaged file is no reason not to start
        print(f"ddprun.snapshot: cannot read {path} ({e}); not resuming from it", flush=True)
        return None


def load(fallback=None, map_location="cpu"):
    """The newest state any node holds and its step, or (None, -1).

    Collective when torch.distributed is initialised with several ranks:
    every rank must call it; the ranks agree on the newest step (an
    all-reduce), the lowest rank holding it broadcasts it, and every rank
    returns the same state."""
    import torch.distributed as dist

    mine = _read(directory(fallback), map_location)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return (mine["state"], mine["step"]) if mine else (None, -1)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) \
        if dist.get_backend() == "nccl" else torch.device("cpu")
    step = torch.tensor([mine["step"] if mine else -1], device=device)
    dist.all_reduce(step, op=dist.ReduceOp.MAX)
    newest = int(step.item())
    if newest < 0:
        return None, -1
    holder = torch.tensor([rank if mine and mine["step"] == newest else world], device=device)
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    box = [mine if rank == int(holder.item()) else None]
    dist.broadcast_object_list(box, src=int(holder.item()))
    return box[0]["state"], newest
