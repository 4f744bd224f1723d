"""The machine, the peers' versions, and the Markdown of BENCHMARKS.md."""
import dataclasses
import os
import platform
import shlex
import subprocess

from harness import median, ratio, sgpu_row, floor_row, spread


def read_text(path):
    """The file's text, or "" when it cannot be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _cmd(argv):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine():
    cpuinfo = read_text("/proc/cpuinfo")
    fields = dict(line.split(":", 1) for line in cpuinfo.split("\n\n")[0].splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    model = fields.get("model name", platform.processor() or "unknown")
    if "cpu family" in fields:
        model += f" (family {fields['cpu family']}, model {fields.get('model', '?')}, {fields.get('cpu MHz', '?')} MHz)"
    mem_kib = next((int(line.split()[1]) for line in read_text("/proc/meminfo").splitlines()
                    if line.startswith("MemTotal:")), 0)
    os_name = next((line.split("=", 1)[1].strip('"') for line in read_text("/etc/os-release").splitlines()
                    if line.startswith("PRETTY_NAME=")), "unknown")
    hypervisor = next((line.split(":", 1)[1].strip() for line in _cmd(["lscpu"]).splitlines()
                       if line.startswith("Hypervisor vendor")), "")
    return {
        "CPU": model + (f" (virtual machine, {hypervisor})" if hypervisor else ""),
        "cores": f"{os.cpu_count()} online, {len(os.sched_getaffinity(0))} usable by the benchmark",
        "memory": f"{mem_kib / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "OS": os_name,
    }


def load():
    """The 1-minute load average and the CPU pressure: how busy the machine was."""
    avg1 = read_text("/proc/loadavg").split()[:1]
    pressure = read_text("/proc/pressure/cpu").split("\n")[0]
    some = next((f.split("=")[1] for f in pressure.split() if f.startswith("avg60=")), "?")
    return f"load average {avg1[0] if avg1 else '?'}, CPU pressure (some, 60 s) {some}%"


def versions(sgpu_bin, root):
    def dpkg(name):
        return _cmd(["dpkg-query", "-W", "-f=${Version}", name]) or "not installed"

    # The sgpu being measured is its sources: name the last commit that touched them.
    sources = ["apps", "lib", "CMakeLists.txt"]
    commit = _cmd(["git", "-C", root, "log", "-1", "--format=%h %s", "--abbrev=12", "--", *sources])
    dirty = _cmd(["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", *sources])
    return {
        "sgpu": f"{commit}{' plus uncommitted changes' if dirty else ''} (`{sgpu_bin}`, RelWithDebInfo)",
        "torchrun": f"Debian python3-torch {dpkg('python3-torch')}, {_cmd(['/usr/bin/python3', '--version'])}",
        "mpirun": f"Debian openmpi-bin {dpkg('openmpi-bin')}",
        "hyperfine": _cmd(["hyperfine", "--version"]) or "not installed",
        "bash": f"Debian bash {dpkg('bash')}",
    }


# --- formatting -------------------------------------------------------------

def fmt_seconds(s):
    if s >= 10:
        return f"{s:.1f} s"
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 0.01:
        return f"{s * 1000:.0f} ms"
    return f"{s * 1000:.2f} ms"


def fmt_ratio(r):
    return f"{r:.0f}x" if r >= 100 else f"{r:.1f}x" if r >= 10 else f"{r:.2f}x"


def fmt_kib(k):
    return f"{k / 1024:.1f} MiB"


def shell(argv, env=None):
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    return (prefix + " " if prefix else "") + shlex.join(argv)


@dataclasses.dataclass
class Section:
    key: str
    title: str
    intro: str = ""
    table: list = dataclasses.field(default_factory=list)  # rows of cells; first row is the header
    more_tables: list = dataclasses.field(default_factory=list)  # (caption, table)
    commands: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    skipped: str = ""
    sgpu_failure: str = ""  # set when sgpu itself failed: the benchmark exits non-zero
    headline: list = dataclasses.field(default_factory=list)  # (what, ratio text) for the summary
    measured: str = ""  # when and at which commit, so that a section rerun with --only says so
    load_before: str = ""
    load_after: str = ""

    def compact(self):
        """The title and the tables only: what --quick prints."""
        out = [self.title]
        if self.skipped:
            return "\n".join(out + [f"  skipped: {self.skipped}"])
        for _, table in [("", self.table), *self.more_tables]:
            if not table:
                continue
            widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
            out += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
        return "\n".join(out)

    def markdown(self):
        out = [f"## {self.title}", ""]
        if self.measured:
            out += [f"Measured {self.measured}.", ""]
        if self.intro:
            out += [self.intro, ""]
        if self.skipped:
            out += [f"**Skipped:** {self.skipped}", ""]
            return "\n".join(out)
        for caption, table in [("", self.table), *self.more_tables]:
            if not table:
                continue
            if caption:
                out += [caption, ""]
            out.append("| " + " | ".join(table[0]) + " |")
            out.append("|" + "|".join(" --- " for _ in table[0]) + "|")
            out += ["| " + " | ".join(row) + " |" for row in table[1:]]
            out.append("")
        for note in self.notes:
            out.append(f"- {note}")
        if self.load_before:
            out.append(f"- Machine during this section: {self.load_before} before, {self.load_after} after.")
        out.append("")
        if self.commands:
            out += ["Commands (from the repository root, environment below):", "", "```"]
            out += self.commands
            out += ["```", ""]
        return "\n".join(out)


def timing_table(rows, value_name="median", fmt=fmt_seconds, extra_cols=()):
    """Median, spread and ratios against sgpu and the floor, refused for failed peers."""
    base, floor = sgpu_row(rows), floor_row(rows)
    header = ["launcher", value_name, "spread (min - max)", "runs", "÷ sgpu"]
    if floor:
        header.append("÷ floor")
    header += [name for name, _ in extra_cols]
    table = [header]
    for row in rows:
        if row.ok:
            lo, hi = spread(row.values)
            cells = [row.peer.name, fmt(median(row.values)), f"{fmt(lo)} - {fmt(hi)}", str(len(row.values))]
        else:
            cells = [row.peer.name, "FAILED", row.failure, str(len(row.values))]
        for other in ([base, floor] if floor else [base]):
            if other is row:
                cells.append("1" if row.ok else "-")
                continue
            r, why = ratio(row, other)
            cells.append(fmt_ratio(r) if r is not None else why)
        cells += [fn(row) for _, fn in extra_cols]
        table.append(cells)
    return table


def document(sections, info, vers, env_note, method_note, started, duration_s, argv):
    # Markers around each section's lines let `scripts/bench --only KEY` replace them in place.
    summary = []
    for s in sections:
        summary.append(f"<!-- summary:{s.key} -->")
        items = [f"{what}: **{text}**" for what, text in s.headline]
        summary.append(f"- {s.title}: " + ("; ".join(items) if items else
                                           "not measured" if s.skipped else "no ratio (see below)"))
        summary.append(f"<!-- /summary:{s.key} -->")
    lines = [
        "# Benchmarks",
        "",
        f"Written by `{shlex.join(argv)}` on {started} in {duration_s / 60:.1f} minutes. "
        "Every figure is a ratio against a peer or the floor measured in the same run, "
        "the peers alternating; rerun with `scripts/bench` (or `scripts/bench --only output` for one comparison).",
        "",
        "## Summary",
        "",
        *summary,
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        "",
        "## Peers",
        "",
        *[f"- {k}: {v}" for k, v in vers.items()],
        "",
        "## Method",
        "",
        method_note,
        "",
        env_note,
        "",
    ]
    for s in sections:
        lines += [f"<!-- section:{s.key} -->", s.markdown(), f"<!-- /section:{s.key} -->", ""]
    return "\n".join(lines).rstrip() + "\n"
