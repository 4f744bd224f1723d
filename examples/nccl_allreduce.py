"""The GPU counterpart of ddp_mlp.py: each rank takes the GPU sgpu gave it
(LOCAL_RANK within CUDA_VISIBLE_DEVICES), joins an NCCL process group and
checks one all-reduce. Runs unchanged under torchrun or sgpu:
    sgpu launch --gpus 8 examples/nccl_allreduce.py
    torchrun --nproc-per-node 8 examples/nccl_allreduce.py
It prints one line per rank and exits 1 if the sum is wrong.
"""
import os

import torch
import torch.distributed as dist


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.full((1 << 20,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    want = world * (world + 1) / 2
    ok = bool(torch.all(t == want).item())
    print(f"rank {rank}/{world} on {torch.cuda.get_device_name()} "
          f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}): "
          f"all_reduce {'ok' if ok else 'WRONG'} ({t[0].item():g}, want {want:g}), "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}", flush=True)
    dist.destroy_process_group()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
