"""What bench/python_api.py times: fn.distributed() of a function that returns
at once, against `sgpu launch` of this same script, alternating, in one process.

    python bench/python_call.py ROUNDS SGPU_BIN OUT.json   # the driver
    (no arguments)                                        # one rank of `sgpu launch`
"""
import json
import os
import subprocess
import sys
import time

import sgpu

N = 4


@sgpu.distributed(nproc=N, stream=False)
def noop():
    return sgpu.rank()


def main(rounds, sgpu_bin, out):
    launch = [sgpu_bin, "launch", "--nproc", str(N), "--python", sys.executable, os.path.abspath(__file__)]
    times = {"distributed": [], "launch": []}
    for i in range(rounds):
        for kind in (("distributed", "launch") if i % 2 == 0 else ("launch", "distributed")):
            t0 = time.perf_counter()
            if kind == "distributed":
                got = noop.distributed()
                if got != list(range(N)):
                    raise SystemExit(f"fn.distributed() returned {got!r}, expected {list(range(N))}")
            else:
                rc = subprocess.run(launch, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL).returncode
                if rc != 0:
                    raise SystemExit(f"sgpu launch exited {rc}")
            times[kind].append(time.perf_counter() - t0)
    with open(out, "w") as f:
        json.dump(times, f)


if __name__ == "__main__":
    if len(sys.argv) == 1:
        noop()  # a rank of `sgpu launch`: the function, called once
    else:
        main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
