"""A worker for tests/compat/torch_record.sh: its main is decorated with
torch's @record (torch.distributed.elastic.multiprocessing.errors), which
writes the exception to the file named by TORCHELASTIC_ERROR_FILE (set by
the agent) before the process exits 1. Rank 1 raises; rank 0 returns."""
import os

from torch.distributed.elastic.multiprocessing.errors import record


def load_batch(rank):
    raise ValueError(f"batch 7 of rank {rank} is corrupt")


@record
def main():
    rank = int(os.environ["RANK"])
    if rank == 1:
        load_batch(rank)
    print(f"rank {rank}: ok", flush=True)


if __name__ == "__main__":
    main()
