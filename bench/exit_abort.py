# One all_reduce over gloo, then (with --destroy) destroy_process_group():
# bench/exit_abort_bench.sh counts how often a torch.distributed script
# aborts as its interpreter ends ("terminate called without an active
# exception") under each launcher.
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4) * dist.get_rank()
dist.all_reduce(t)
print(f"rank {dist.get_rank()} sum {t.sum().item()} torch {torch.__version__}", flush=True)
if "--destroy" in sys.argv:
    dist.destroy_process_group()
