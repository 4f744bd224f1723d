"""7. Multi-node start: over ssh (bench/ssh_start.py) and inside SLURM (bench/slurm_start.py, when it exists).

The SLURM half is written by whoever builds the SLURM benchmark: when
bench/slurm_start.py exists, its `measure(ctx)` is called and must return a
report.Section; its table (with its caption in `intro`), notes, commands,
headline, skipped and sgpu_failure are folded into this section (see
bench/README.md). Until then the section says plainly that SLURM was not
measured here.
"""
import importlib
import os

import ssh_start
from harness import median
from report import Section, fmt_ratio, timing_table

SLURM_MODULE = "slurm_start"
SLURM_MISSING = ("not measured in this section yet: bench/slurm_start.py (issue 7's SLURM benchmark: `sgpu launch` "
                 "to all ranks running inside an allocation, against `srun` of the same ranks) does not exist")


def ssh_part(ctx, s):
    why = ssh_start.usable()
    if why:
        s.notes.append(f"ssh: not measured on this machine: {why}.")
        s.headline.append(("ssh", f"not measured ({why})"))
        return
    runs = ctx.rounds or (1 if ctx.quick else 10)
    rows, commands = ssh_start.measure(ctx.sgpu, runs, env=ctx.env, cwd=ctx.root, mpi=not ctx.quick, log=ctx.log)
    s.table = timing_table(rows, extra_cols=[("what", lambda r: r.peer.note or "-")])
    s.commands += commands
    s.notes.append(f"ssh: {runs} rounds, each running every tool once in a rotated order; one unmeasured run of "
                   "sgpu warm and of mpirun first (it opens the ControlMaster the warm runs reuse, and pages Open MPI "
                   f"in). `{ssh_start.HOSTS_DIR}` is the test hosts' scratch directory (hostfile, ssh config, keys).")
    base = rows[0]
    if not base.ok:
        s.sgpu_failure = f"ssh: {base.failure}"
    for row in rows[1:]:
        if not row.ok and row.peer.role == "sgpu":
            s.sgpu_failure = s.sgpu_failure or f"ssh: {row.peer.name}: {row.failure}"
    mpi = next((r for r in rows if r.peer.name == "mpirun"), None)
    if mpi is None:
        s.headline.append(("ssh", "sgpu only (quick mode: no mpirun)"))
        return
    for row in rows:
        if row.peer.name.startswith("sgpu"):
            what = f"mpirun ÷ {row.peer.name}, {ssh_start.HOSTS * ssh_start.SLOTS} ranks on {ssh_start.HOSTS} hosts"
            text = (fmt_ratio(median(mpi.values) / median(row.values)) if mpi.ok and row.ok
                    else f"no ratio: {(mpi if not mpi.ok else row).peer.name} failed")
            s.headline.append((what, text))


def slurm_part(ctx, s):
    if not os.path.exists(os.path.join(ctx.root, "bench", f"{SLURM_MODULE}.py")):
        s.notes.append(f"SLURM: {SLURM_MISSING}.")
        s.headline.append(("SLURM", "not measured in this section yet"))
        return
    sub = importlib.import_module(SLURM_MODULE).measure(ctx)
    if sub.skipped:
        s.notes.append(f"SLURM: not measured: {sub.skipped}")
        s.headline.append(("SLURM", "not measured"))
    if sub.table:
        s.more_tables.append((sub.intro or "Inside SLURM:", sub.table))
    s.more_tables += sub.more_tables
    s.notes += [f"SLURM: {n}" for n in sub.notes]
    s.commands += sub.commands
    s.headline += sub.headline
    if sub.sgpu_failure:
        s.sgpu_failure = s.sgpu_failure or f"SLURM: {sub.sgpu_failure}"


def run(ctx):
    s = Section("multinode", "7. Multi-node start over ssh and inside SLURM")
    s.intro = (f"Over ssh: the time to start {ssh_start.HOSTS * ssh_start.SLOTS} ranks (`/bin/true`) on "
               f"{ssh_start.HOSTS} ssh test hosts and wait for them to end, `sgpu launch --backend ssh` against "
               "`mpirun` with the same hostfile. The hosts are network namespaces on this machine, each with its "
               "own address and a real OpenSSH sshd (tests/e2e/ssh_hosts.py), so the figures are connection setup, "
               "remote start and teardown without a real network's latency. `÷ sgpu` divides by sgpu with a cold "
               "ssh connection per host (as mpirun makes them); the warm row reuses its ControlMaster, sgpu's "
               "default. Inside SLURM: from `sgpu launch` to all ranks running against `srun` of the same ranks.")
    ssh_part(ctx, s)
    slurm_part(ctx, s)
    return s
