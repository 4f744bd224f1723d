"""A rank for bench/hangs.py: says it is ready, records when it said so in
$BENCH_STAMP.<rank>, then sleeps: rank $STUCK in one function, the others in
another, as ranks waiting on a stuck one would."""
import os
import sys
import time


def stuck_here():
    time.sleep(3600)


def wait_for_others():
    time.sleep(3600)


rank = int(os.environ["RANK"])
print(f"rank {rank} ready", flush=True)
with open(f"{os.environ['BENCH_STAMP']}.{rank}", "w") as f:
    f.write(repr(time.time()))
sys.stdout.flush()
(stuck_here if rank == int(os.environ.get("STUCK", "2")) else wait_for_others)()
