"""A gloo job whose rank FAIL_RANK raises inside a function decorated with
torch's @record, after one all_reduce; the other ranks wait in the next
collective until sgpu stops them."""
import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def check_batch(step):
    raise RuntimeError(f"boom from rank {dist.get_rank()} at step {step}")


@record
def main():
    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} reduced {int(t.item())}", flush=True)
    if dist.get_rank() == int(os.environ["FAIL_RANK"]):
        check_batch(7)
    dist.all_reduce(t)  # waits for the failed rank until sgpu stops it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
