"""The launchers being compared, spelled once, and the benchmark's context."""
import dataclasses
import os
import shutil
import socket
import sys
import time

from harness import Peer, Row, rotated

TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch belongs to this interpreter


@dataclasses.dataclass
class Context:
    root: str  # the repository; every command runs from here
    sgpu: str  # the sgpu binary, relative to root
    work: str  # scratch directory for outputs, stamps and run directories
    quick: bool  # smoke mode: sgpu and the floor only, tiny sizes
    rounds: int  # 0: each comparison's own default
    env: dict  # the environment every launcher gets (env_note says what and why)
    output_mib: int  # total bytes the output comparison's ranks write, MiB

    def log(self, msg):
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    def scratch(self, name):
        path = os.path.join(self.work, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def rounds_for(self, default):
        """--rounds when given, else the comparison's default (2 in quick mode)."""
        return self.rounds or (2 if self.quick else default)


def base_env(work):
    env = dict(os.environ)
    for name in ("SGPU_FAKE_GPUS", "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_ERROR_FILE", "MASTER_PORT", "MASTER_ADDR",
                 "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    env["SGPU_HOME"] = os.path.join(work, "sgpu-home")
    # Every launcher but the floor would set it to 1 and print a note; setting it
    # for all makes the ranks identical and the floor fair.
    env["OMP_NUM_THREADS"] = "1"
    return env


ENV_NOTE = ("Every command runs with `OMP_NUM_THREADS=1` (sgpu and torchrun set it anyway; set for all so the "
            "floor's ranks are the same) and `SGPU_HOME` in the benchmark's scratch directory.")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sgpu(ctx, n):
    return [ctx.sgpu, "launch", "--nproc", str(n)]


def torchrun(n):
    # Debian's torch 1.13 spells the flags with underscores (--nproc-per-node came in 2.0).
    return [TORCH_PYTHON, "bench/torchrun_py311.py", "--standalone", "--nproc_per_node", str(n)]


def mpirun(n):
    as_root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return ["mpirun", *as_root, "-np", str(n), "--oversubscribe"]


def floor(n, pipe=False):
    return ["bash", "bench/floor.sh", *(["--pipe"] if pipe else []), str(n)]


def floor_tee(n, log_dir):
    return ["bash", "bench/floor.sh", "--tee", log_dir, str(n)]


def launchers(ctx, n, program, *, torchrun_flags=(), mpi=True, floor_name="floor (bash & wait)", pipe=False):
    """sgpu, the peers that are installed (none in quick mode) and the floor, all running program."""
    peers = [Peer("sgpu", [*sgpu(ctx, n), "--no-python", *program], "sgpu")]
    if not ctx.quick:
        peers.append(Peer("torchrun", [*torchrun(n), *torchrun_flags, "--no_python", *program]))
        if mpi:
            peers.append(Peer("mpirun", [*mpirun(n), *program]))
    peers.append(Peer(floor_name, [*floor(n, pipe), *program], "floor"))
    return peers


def missing_tools(peers):
    """Peers whose program is not installed: reported, never silently dropped."""
    return [p for p in peers if shutil.which(p.argv[0]) is None and not os.path.exists(p.argv[0])]


def alternate(ctx, section, rows, rounds, run):
    """Round i runs every peer once, the order rotated by i; a failed peer runs no more."""
    for i in range(rounds):
        for row in rotated(rows, i):
            if row.failure:
                continue
            run(row, i)
            last = f"{row.values[-1]:.4f}" if row.values and not row.failure else row.failure
            ctx.log(f"{section}: round {i + 1}/{rounds} {row.peer.name}: {last}")


def rows_for(peers):
    return [Row(p) for p in peers]
