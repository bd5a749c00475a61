"""Resume a PyTorch DDP script where it stopped, from memory.

ddprun gives the workers of each node a directory in memory that outlives
them (DDPRUN_SNAPSHOT_DIR, on /dev/shm): this script saves its state there
after every step, on local rank 0 of each node, and loads it when it starts
again. A worker killed at any moment costs at most the step under way;
every node holds a copy, so losing a node costs nothing either: the ranks
agree on the newest copy any of them has, and its holder sends it to the
others. Without ddprun (no DDPRUN_SNAPSHOT_DIR) it simply starts from step 0.

    ddprun --standalone --nproc-per-node 2 --max-restarts 3 \\
        examples/snapshot_resume.py --steps 200

Options: --steps N (100), --kill-at S (tests: on the first attempt, rank 1
kills itself with SIGKILL during step S, after the step before was saved),
--step-ms M (tests: each step also waits M ms, as a real model's compute
would take), --log-every N (rank 0 prints "step S/STEPS" every N steps).
"""
import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def batch(step, rank):
    """Data that depends only on (step, rank): a resumed run sees what an
    uninterrupted one would."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    return x, x.sum(dim=1, keepdim=True) * 0.5


def newest_state(path, rank, world):
    """The newest saved state any rank's node holds, and which rank sends it."""
    mine = torch.load(path) if path and os.path.exists(path) else None
    step = torch.tensor([mine["step"] if mine else -1])
    dist.all_reduce(step, op=dist.ReduceOp.MAX)
    if step.item() < 0:
        return None, -1
    holder = torch.tensor([rank if mine and mine["step"] == step.item() else world])
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    box = [mine if rank == holder.item() else None]
    dist.broadcast_object_list(box, src=holder.item())
    return box[0], holder.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--kill-at", type=int, default=-1)
    ap.add_argument("--step-ms", type=float, default=0)
    ap.add_argument("--log-every", type=int, default=0)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    snap = os.environ.get("DDPRUN_SNAPSHOT_DIR")
    path = os.path.join(snap, "state.pt") if snap else None

    state, holder = newest_state(path, rank, world)
    start = 0
    if state:
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"] + 1
        if rank == 0:
            print(f"resuming from step {state['step']} (memory of rank {holder}'s node)",
                  flush=True)

    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    for step in range(start, args.steps):
        if step == args.kill_at and rank == 1 and first_attempt:
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = batch(step, rank)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if args.step_ms:
            time.sleep(args.step_ms / 1000)
        if path and local_rank == 0:  # one copy per node, replaced whole
            tmp = path + ".tmp"
            torch.save({"step": step, "model": model.module.state_dict(),
                        "opt": opt.state_dict()}, tmp)
            os.replace(tmp, path)
        if rank == 0 and args.log_every and (step + 1) % args.log_every == 0:
            print(f"step {step + 1}/{args.steps}", flush=True)
    if rank == 0:
        w = torch.cat([p.detach().flatten() for p in model.parameters()])
        print(f"final step {args.steps - 1} weights {w.double().sum().item():.10f}", flush=True)
    # The work is done: said to ddprun (DDPRUN_FINISHED_FILE), which then
    # counts this worker as finished even if it fails on its way out.
    done = os.environ.get("DDPRUN_FINISHED_FILE")
    if done:
        with open(done, "w") as f:
            f.write(f"step {args.steps - 1}\n")
    # Every rank past its last collective before the group goes: PyTorch
    # 1.13's gloo group can deadlock in its destructor when a collective's
    # tensors are still being released on its thread (found by make chaos).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
