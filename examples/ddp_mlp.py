"""A small PyTorch DDP training run: an MLP on synthetic data, gloo on CPU.

Runs unchanged under torchrun or sgpu (it reads only the torchrun variables):
    sgpu launch --nproc 4 --python /usr/bin/python3 examples/ddp_mlp.py --epochs 3
The data and the initial weights depend only on the seed, and each step sees
the same global batch whatever the number of ranks or nodes, so the printed
loss is the same for 1x4 and 2x2 ranks.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP


def make_data(seed, samples, features):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(samples, 1, generator=g)
    return x, y


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def train_epoch(model, opt, x, y, batch, rank, world):
    """One pass over the data; each step takes this rank's share of a global
    batch. Returns the epoch's mean loss over every rank, and the tensor that
    went through all_reduce. Keep that tensor until the model is gone:
    torch 1.13 (Debian 12's) hangs at exit now and then otherwise, when a gloo
    worker thread drops the last reference to a Python tensor and waits for
    the GIL that the process group's destructor holds while joining it."""
    per_rank = batch // world
    total = torch.zeros(1)
    steps = len(x) // batch
    for step in range(steps):
        lo = step * batch + rank * per_rank
        xb, yb = x[lo:lo + per_rank], y[lo:lo + per_rank]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
        total += loss.detach()
    dist.all_reduce(total)
    return total.item() / (steps * world), total


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=64, help="global batch size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the world size {world}")

    torch.manual_seed(args.seed)
    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = make_data(args.seed, args.samples, 16)

    loss_value, epoch_loss = 0.0, None
    for epoch in range(args.epochs):
        loss_value, epoch_loss = train_epoch(model, opt, x, y, args.batch, rank, world)
        if rank == 0:
            print(f"epoch {epoch} loss {loss_value:.6f}", flush=True)

    if rank == 0:
        print(f"final loss {loss_value:.6f}", flush=True)
    result_file = os.environ.get("SGPU_RESULT_FILE")
    if result_file:
        with open(result_file, "w") as f:
            json.dump({"rank": rank, "final_loss": round(loss_value, 6)}, f)
    dist.destroy_process_group()
    del model  # while epoch_loss lives: see train_epoch


if __name__ == "__main__":
    main()
