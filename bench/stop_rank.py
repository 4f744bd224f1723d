"""A rank for the stop comparison: says it is ready, then waits; on SIGTERM it
writes the time it got it (ns) to $BENCH_DIR/term-<RANK> and exits 0."""
import os
import signal
import time

out = os.environ["BENCH_DIR"]
rank = os.environ["RANK"]


def publish(name, text):
    """Written aside, then renamed: the benchmark never reads a file half written."""
    path = os.path.join(out, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def on_term(signum, frame):
    publish(f"term-{rank}", str(time.time_ns()))
    os._exit(0)


signal.signal(signal.SIGTERM, on_term)
publish(f"ready-{rank}", str(os.getpid()))
while True:
    signal.pause()
