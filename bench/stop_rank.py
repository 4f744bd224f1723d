"""A rank for the stop comparison: says it is ready, then waits; on SIGTERM it
writes the time it got it (ns) to $BENCH_DIR/term-<RANK> and exits 0."""
import os
import signal
import time

out = os.environ["BENCH_DIR"]
rank = os.environ["RANK"]


def on_term(signum, frame):
    got = time.time_ns()
    with open(os.path.join(out, f"term-{rank}"), "w") as f:
        f.write(str(got))
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
with open(os.path.join(out, f"ready-{rank}"), "w") as f:
    f.write(str(os.getpid()))
while True:
    signal.pause()
