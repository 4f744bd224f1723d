"""DDP training that survives restarts: it saves a checkpoint after every
epoch and, when started again after a failure, resumes from the last one.

Runs unchanged under torchrun or sgpu (it reads only the torchrun variables):
    sgpu launch --nproc 2 --max-restarts 1 --python /usr/bin/python3 \\
        examples/ddp_checkpoint.py --checkpoint-dir /tmp/ckpt --fail-at-epoch 2
TORCHELASTIC_RESTART_COUNT tells a restart (1, 2, ...) from the first start
(0); only a restart resumes, so a new run never picks up an old checkpoint.
--fail-at-epoch E makes the last rank crash at the start of epoch E on the
first attempt only, to see a restart resume from epoch E. The data, the
initial weights and the order of the batches depend only on the seed, so the
final loss is the same with or without a failure on the way. The model, the
data and an epoch's training are ddp_mlp.py's, beside this file.
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_mlp import make_data, make_model, train_epoch  # examples/, beside this file


def save_checkpoint(path, model, opt, epoch):
    """Rank 0 writes it whole or not at all: a crash mid-write leaves the previous one."""
    tmp = path + ".tmp"
    torch.save({"epoch": epoch, "model": model.module.state_dict(), "optimizer": opt.state_dict()}, tmp)
    os.replace(tmp, path)


@record
def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=64, help="global batch size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    parser.add_argument("--fail-at-epoch", type=int, default=-1, help="crash once, on the first attempt")
    parser.add_argument("--epoch-pause", type=float, default=0.0,
                        help="seconds each rank waits after every epoch on the first attempt: time to stop a node "
                             "by hand mid-run")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must be a multiple of the world size {world}")
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = os.path.join(args.checkpoint_dir, "checkpoint.pt")

    torch.manual_seed(args.seed)
    model = DDP(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    start_epoch = 0
    if restart > 0 and os.path.exists(path):
        state = torch.load(path, map_location="cpu")
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start_epoch = state["epoch"] + 1
    if rank == 0:
        print(f"attempt {restart}: starting at epoch {start_epoch}", flush=True)

    x, y = make_data(args.seed, args.samples, 16)
    loss_value, epoch_loss = 0.0, None
    for epoch in range(start_epoch, args.epochs):
        if epoch == args.fail_at_epoch and restart == 0 and rank == world - 1:
            raise RuntimeError(f"failing on purpose at epoch {epoch} (--fail-at-epoch)")
        loss_value, epoch_loss = train_epoch(model, opt, x, y, args.batch, rank, world)
        if rank == 0:
            save_checkpoint(path, model, opt, epoch)
            print(f"epoch {epoch} loss {loss_value:.6f}", flush=True)
        dist.barrier()  # no rank goes on before the epoch's checkpoint is on disk
        if restart == 0 and args.epoch_pause > 0:
            time.sleep(args.epoch_pause)

    if rank == 0:
        print(f"final loss {loss_value:.6f}", flush=True)
    result_file = os.environ.get("SGPU_RESULT_FILE")
    if result_file:
        with open(result_file, "w") as f:
            json.dump({"rank": rank, "start_epoch": start_epoch, "final_loss": round(loss_value, 6)}, f)
    dist.destroy_process_group()
    del model  # while epoch_loss lives: see train_epoch


if __name__ == "__main__":
    main()
