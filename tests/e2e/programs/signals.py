"""Records the signals it receives to $OUT_DIR/sig-<RANK>.txt, then behaves as
$MODE says: 'exit' exits 0 on SIGINT/SIGTERM, 'ignore' ignores them."""
import os
import signal
import sys

out = os.path.join(os.environ["OUT_DIR"], f"sig-{os.environ['RANK']}.txt")
mode = os.environ.get("MODE", "exit")


def handler(signum, frame):
    with open(out, "a") as f:
        f.write(signal.Signals(signum).name + "\n")
    if mode == "exit" and signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        sys.exit(0)


for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
    signal.signal(s, handler)
with open(os.path.join(os.environ["OUT_DIR"], f"pid-{os.environ['RANK']}.txt"), "w") as f:
    f.write(str(os.getpid()))
with open(os.path.join(os.environ["OUT_DIR"], f"ready-{os.environ['RANK']}.txt"), "w") as f:
    f.write("ready")
while True:
    signal.pause()
