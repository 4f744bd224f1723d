"""A training loop without torch: each rank takes steps of STEP_S seconds
(the ranks in SLOW_RANKS twice that: they sleep half of each step) for RUN_S
seconds, and says its step through its heartbeat: sgpu.heartbeat(step=) with
USE_API=1, else a line appended to $SGPU_HEARTBEAT_FILE (any language)."""
import os
import time

rank = int(os.environ["RANK"])
slow = {int(r) for r in os.environ.get("SLOW_RANKS", "").split(",") if r}
step_s = float(os.environ.get("STEP_S", "0.05"))
run_s = float(os.environ.get("RUN_S", "4"))
print_every = int(os.environ.get("PRINT_EVERY", "0"))  # a "rank R step N" line every N steps
if os.environ.get("USE_API") == "1":
    import sgpu

    def beat(step):
        sgpu.heartbeat(step=step)
else:
    def beat(step):
        with open(os.environ["SGPU_HEARTBEAT_FILE"], "a") as f:
            f.write(f"{step}\n")

end = time.monotonic() + run_s
step = 0
while time.monotonic() < end:
    time.sleep(step_s * (2 if rank in slow else 1))
    step += 1
    beat(step)
    if print_every and step % print_every == 0:
        print(f"rank {rank} step {step}", flush=True)
print(f"rank {rank} done at step {step}", flush=True)
