"""2. Real job: the 4-rank DDP example (gloo on CPU) end to end, and its loss."""
import os
import re

from harness import Peer, Row, median, run_once, tail, describe_exit
from peers import TORCH_PYTHON, alternate, floor, free_port, sgpu, torchrun
from report import Section, fmt_ratio, shell, timing_table

N = 4
LOSS = re.compile(rb"final loss ([0-9.]+)")


def peers(ctx, epochs):
    job = ["examples/ddp_mlp.py", "--epochs", str(epochs)]
    return [
        Peer("sgpu", [*sgpu(ctx, N), "--python", TORCH_PYTHON, *job], "sgpu"),
        Peer("torchrun", [*torchrun(N), *job]),
        Peer("floor (bash & wait)", [*floor(N), TORCH_PYTHON, "-u", *job], "floor",
             note="MASTER_PORT: a free port picked per run"),
    ]


def one_run(ctx, row, i):
    env = dict(ctx.env)
    if row.peer.role == "floor":
        env["MASTER_PORT"] = str(free_port())
    out, err = os.path.join(ctx.work, "ddp.out"), os.path.join(ctx.work, "ddp.err")
    run = run_once(row.peer.argv, env, ctx.root, out, err, timeout=900)
    if run.returncode != 0 or run.timed_out:
        row.fail(f"{describe_exit(run.returncode)}{' (timed out)' if run.timed_out else ''}: {tail(err)}")
        return
    with open(out, "rb") as f:
        found = LOSS.findall(f.read())
    if len(found) != 1:
        row.fail(f"expected one 'final loss' line, found {len(found)}: {tail(out)}")
        return
    row.values.append(run.wall)
    row.extra.setdefault("losses", []).append(found[0].decode())


def check_losses(rows):
    """Every run of every launcher must end with the same loss; the floor's is the reference."""
    reference = next((r.extra["losses"][0] for r in sorted(rows, key=lambda r: r.peer.role != "floor")
                      if r.ok and r.extra.get("losses")), None)
    for row in rows:
        odd = [loss for loss in row.extra.get("losses", []) if loss != reference]
        if odd:
            row.fail(f"final loss {odd[0]} differs from {reference}")
    return reference


def run(ctx):
    s = Section("ddp", "2. Real job: the 4-rank DDP example")
    epochs = 3
    s.intro = (f"`examples/ddp_mlp.py --epochs {epochs}` on 4 CPU ranks with gloo, from start to exit: Python and "
               "torch start-up, the rendezvous, the training. The floor starts the 4 ranks by hand with the "
               "torchrun variables. A run counts only if it exits 0 and prints one final loss, and every run of "
               "every launcher must print the same loss.")
    if ctx.quick:
        s.skipped = "not in --quick (four torch imports take more than a few seconds)."
        return s
    rows = [Row(p) for p in peers(ctx, epochs)]
    alternate(ctx, "ddp", rows, ctx.rounds_for(3), lambda row, i: one_run(ctx, row, i))
    reference = check_losses(rows)
    losses = {r.peer.name: sorted(set(r.extra.get("losses", []))) for r in rows}
    s.table = timing_table(rows, extra_cols=[("final loss", lambda r: ", ".join(losses[r.peer.name]) or "-")])
    s.notes.append(f"Final loss, every run: {reference}" if all(r.ok for r in rows) and reference
                   else "The losses could not be compared: see the failures in the table.")
    s.commands = [shell(r.peer.argv, {"MASTER_PORT": "<free port>"} if r.peer.role == "floor" else None)
                  for r in rows]
    base, peer = rows[0], rows[1]
    if not base.ok:
        s.sgpu_failure = base.failure
    if base.ok and peer.ok:
        s.headline.append(("torchrun ÷ sgpu, DDP job end to end", fmt_ratio(median(peer.values) / median(base.values))))
    if base.ok and rows[2].ok:
        s.headline.append(("sgpu ÷ floor, DDP job end to end", fmt_ratio(median(base.values) / median(rows[2].values))))
    return s
