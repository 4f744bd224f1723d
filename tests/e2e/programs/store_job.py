"""A minimal real torch.distributed job: init with env://, one all_reduce.
Writes MASTER_PORT and the reduced value to $OUT_DIR/<RANK>.txt."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
with open(os.path.join(os.environ["OUT_DIR"], f"{dist.get_rank()}.txt"), "w") as f:
    f.write(f"{os.environ['MASTER_PORT']} {int(t.item())}\n")
dist.destroy_process_group()
