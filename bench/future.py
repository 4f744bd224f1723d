"""6. Rendezvous scale and 7. multi-node start: measured once their features are on main.

Until then each section says plainly that it was not measured and why. No
figure is printed for a feature that does not exist.
"""
import subprocess

from report import Section

TORCH_FIGURE = ("For context, torch's own figure: after making its rendezvous barrier and rank assignment O(n), "
                "torchelastic ran at 4000 hosts \"in as little as 10 seconds down from 373 seconds\" "
                "(pytorch/pytorch pull request 124982, 2024). That is a different machine and scale; it is not a "
                "ratio and the summary does not use it.")


def sgpu_help(ctx, *args):
    """The text of `sgpu ARGS --help` ("" when it fails)."""
    try:
        p = subprocess.run([ctx.sgpu, *args, "--help"], cwd=ctx.root, capture_output=True, text=True, timeout=30)
    except OSError:
        return ""
    return p.stdout if p.returncode == 0 else ""


def sgpu_subcommands(ctx):
    """The subcommands `sgpu --help` lists (CLI11 answers `sgpu unknown --help` with the main help, so ask it)."""
    text = sgpu_help(ctx).split("Subcommands:", 1)
    return {line.split()[0] for line in text[1].splitlines() if line.strip()} if len(text) == 2 else set()


def rendezvous(ctx):
    s = Section("rendezvous", "6. Rendezvous scale: 256, 1024, 2048 simulated agents")
    s.intro = ("Time until every simulated agent has joined one rendezvous over loopback and been assigned its "
               "ranks, and the launcher's memory, against torch's c10d rendezvous driven the same way. "
               + TORCH_FIGURE)
    if "agent" not in sgpu_subcommands(ctx):
        s.skipped = ("`sgpu agent` is not in this build (the rendezvous and agent are issue 5, being built now). "
                     "Rerun `scripts/bench --only rendezvous` once it is on main.")
    else:
        s.skipped = ("NOT MEASURED. `sgpu agent` exists in this build, but this benchmark has no simulated-agent "
                     "driver yet: it must join N agents through the real protocol (and the same N clients to torch's "
                     "c10d store for the peer). Writing it is the next step; see bench/README.md.")
    return s


def multinode(ctx):
    s = Section("multinode", "7. Multi-node start over ssh and inside SLURM")
    s.intro = ("Time to start 8 ranks on 4 ssh test hosts against `mpirun` with the same hostfile, and from "
               "`sgpu launch` to all ranks running inside a SLURM allocation against a plain `srun` of the same "
               "ranks.")
    launch_help = sgpu_help(ctx, "launch")
    ssh = "--hostfile" in launch_help
    slurm = "slurm" in launch_help
    missing = [name for name, there in (("the ssh backend (issue 6)", ssh), ("the SLURM backend (issue 7)", slurm))
               if not there]
    if missing:
        s.skipped = (f"{' and '.join(missing)} not in this build (`sgpu launch --help` does not offer it). "
                     "Rerun `scripts/bench --only multinode` once they are on main.")
    if len(missing) < 2:
        s.skipped = (s.skipped + " " if s.skipped else "") + (
            "NOT MEASURED for the backend that exists: its driver (test hosts in network namespaces, a one-machine "
            "SLURM cluster) is not wired into the benchmark yet; see bench/README.md.")
    return s
