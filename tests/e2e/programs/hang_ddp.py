"""A DDP loop over gloo in which one rank stops before a collective: the
others wait in all_reduce. HANG_RANK (default 2) sleeps before step
HANG_STEP (default 10); PRINT_EVERY prints a line every that many steps
(0: never); HEARTBEAT touches $SGPU_HEARTBEAT_FILE while it sleeps."""
import os
import time

import torch
import torch.distributed as dist


def stuck_here(seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if os.environ.get("HEARTBEAT") == "1":
            with open(os.environ["SGPU_HEARTBEAT_FILE"], "a"):
                os.utime(os.environ["SGPU_HEARTBEAT_FILE"])
        time.sleep(0.2)


def step(t):
    dist.all_reduce(t)
    return t


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    hang_rank = int(os.environ.get("HANG_RANK", "2"))
    hang_step = int(os.environ.get("HANG_STEP", "10"))
    print_every = int(os.environ.get("PRINT_EVERY", "0"))
    steps = int(os.environ.get("STEPS", "1000000"))
    t = torch.ones(4)
    for i in range(steps):
        if rank == hang_rank and i == hang_step:
            stuck_here(float(os.environ.get("HANG_SECONDS", "3600")))
        step(t)
        if print_every and i % print_every == 0:
            print(f"rank {rank} step {i}", flush=True)
        time.sleep(0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
