"""A rank that saves a checkpoint when stopped, as training jobs do.

SIGTERM (or $STOP_SIGNAL) sets a flag; the training loop then writes
$OUT_DIR/ckpt-<RANK> in $CKPT_SECONDS (a temporary file renamed when whole)
and exits 0. With $WORKERS > 0 the loop reads a torch DataLoader with that
many worker processes, so a worker killed meanwhile raises in this process
(PyTorch's "DataLoader worker ... is killed by signal"). Every signal is
recorded with its time in $OUT_DIR/events-<RANK>; `ready-<RANK>` says the
loop runs (its workers too), and holds $SLURM_JOB_ID when there is one."""
import os
import signal
import sys
import time

out = os.environ["OUT_DIR"]
rank = os.environ["RANK"]
ckpt_seconds = float(os.environ.get("CKPT_SECONDS", "2"))
workers = int(os.environ.get("WORKERS", "0"))
stop_signal = getattr(signal, os.environ.get("STOP_SIGNAL", "SIGTERM"))
stop = False


def record(line):
    with open(os.path.join(out, f"events-{rank}"), "a") as f:
        f.write(line + "\n")


def on_stop(signum, frame):
    global stop
    record(f"{signal.Signals(signum).name} {time.time():.6f}")
    stop = True


def on_other(signum, frame):
    record(f"{signal.Signals(signum).name} {time.time():.6f}")
    if os.environ.get("EXIT_ON") == signal.Signals(signum).name:
        sys.exit(0)


signal.signal(stop_signal, on_stop)
for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    if s != stop_signal:
        signal.signal(s, on_other)


def batches():
    if workers == 0:
        while True:
            time.sleep(0.01)
            yield None
    import torch.utils.data as data

    class Slow(data.IterableDataset):
        def __iter__(self):
            while True:
                time.sleep(0.01)
                yield 0

    yield from data.DataLoader(Slow(), batch_size=1, num_workers=workers)


def checkpoint():
    tmp = os.path.join(out, f".ckpt-{rank}.tmp")
    with open(tmp, "w") as f:
        end = time.monotonic() + ckpt_seconds
        while time.monotonic() < end:
            f.write("x" * 1024)
            time.sleep(0.05)
    os.rename(tmp, os.path.join(out, f"ckpt-{rank}"))
    record(f"checkpointed {time.time():.6f}")


with open(os.path.join(out, f"pid-{rank}"), "w") as f:
    f.write(str(os.getpid()))
ready = False
for _ in batches():
    if not ready:
        with open(os.path.join(out, f"ready-{rank}"), "w") as f:
            f.write(os.environ.get("SLURM_JOB_ID", ""))  # what a scancel names
        ready = True
    if stop:
        checkpoint()
        sys.exit(0)
