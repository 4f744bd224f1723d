"""sgpu launch --backend ssh --sync-env against real sshd test hosts: the
job's virtual environment (a package installed from a wheel, a local
editable package, Debian's torch through --system-site-packages) replicated
on every host with uv, offline, cached by its lock's hash; a host that cannot
run it named before anything starts.

Every host has a home of its own (sshd's SetEnv), so each has its own
~/.cache/sgpu, as separate machines do; the launcher's wheel cache is a
test directory too ($XDG_CACHE_HOME)."""
import json
import os
import pathlib
import re
import signal
import subprocess
import types

import pytest

import ssh_hosts
from conftest import ROOT, TORCH_PYTHON
from mlflow_server import venv_python
from ssh_hosts import SshHosts
from wheels import make_wheel
from test_ssh_backend import WITH_SGPU, final_loss, host_list, job_processes, launch

pytestmark = pytest.mark.skipif(ssh_hosts.usable() is not None, reason=str(ssh_hosts.usable()))

CHECK = """\
import os, sys
import demo_dep, localpkg, torch
print(f"rank {os.environ['RANK']} prefix {sys.prefix} {demo_dep.VALUE} {localpkg.VALUE} torch {torch.__version__}")
"""


def pip(venv, *args):
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check", *map(str, args)],
                   check=True, capture_output=True, text=True)


def job_environment(root):
    """A --system-site-packages venv with demo_dep 1.0 (a wheel) and localpkg (editable, from its source)."""
    venv = root / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    pip(venv, "install", "--no-index", make_wheel(root / "dist", "demo_dep", "1.0", "VALUE = 'demo-1.0'\n"))
    pip(venv, "install", "--no-index",
        make_wheel(root / "dist", "demo_data", "1.0", "", data={"share/demo-data/notes.txt": "not in site-packages\n"}))
    local = root / "localpkg"
    (local / "localpkg").mkdir(parents=True)
    (local / "localpkg" / "__init__.py").write_text("VALUE = 'local-v1'\n")
    (local / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "localpkg"\nversion = "0.1"\n[tool.setuptools]\npackages = ["localpkg"]\n')
    pip(venv, "install", "--no-index", "--no-build-isolation", "-e", local)
    (root / "check.py").write_text(CHECK)
    return types.SimpleNamespace(root=root, venv=venv, python=venv / "bin" / "python", local=local)


@pytest.fixture
def synced(sgpu, tmp_path):
    """sgpu's environment for --sync-env: uv from the project's venv, a wheel cache of the test's own."""
    sgpu.env["SGPU_UV"] = os.path.join(os.path.dirname(venv_python()), "uv")
    assert os.access(sgpu.env["SGPU_UV"], os.X_OK), "scripts/venv installs uv"
    sgpu.env["XDG_CACHE_HOME"] = str(tmp_path / "launcher-cache")
    return sgpu


def homes(tmp_path, n):
    out = []
    for i in range(n):
        home = tmp_path / f"home{i}"
        home.mkdir()
        out.append(home)
    return out


def host_env(homes_, extra=None):
    """Each host's environment: sgpu on the PATH, a home of its own, and `extra[i]`."""
    return {i: {**WITH_SGPU, "HOME": str(h), **(extra or {}).get(i, {})} for i, h in enumerate(homes_)}


def events(home, kind):
    runs = sorted((pathlib.Path(home) / "runs").glob("*/events.jsonl"), key=lambda p: p.stat().st_mtime)
    assert runs, "no run"
    lines = [json.loads(x) for x in runs[-1].read_text().splitlines()]
    return [e for e in lines if e["event"] == kind]


def rank_lines(stdout):
    return re.findall(r"rank (\d+) prefix (\S+) (\S+) (\S+) torch (\S+)", stdout)


def test_environment_reaches_every_host_and_a_second_launch_ships_nothing(synced, tmp_path):
    job = job_environment(tmp_path / "job")
    h = homes(tmp_path, 2)
    with SshHosts(2, host_env=host_env(h)) as hosts:
        common = ["--hosts", host_list(hosts), "--nproc", 1, "--sync-env", "--python", job.python]

        # The dry run asks the hosts, builds and ships nothing.
        dry = launch(hosts, synced, *common, "--dry-run", job.root / "check.py")
        assert dry.returncode == 0, dry.stderr
        m = re.search(r"environment: ([0-9a-f]{16}) \(Python 3\.\d+\.\d+, (\d+) packages; --sync-env\)", dry.stdout)
        assert m, dry.stdout
        env_hash = m.group(1)
        assert int(m.group(2)) >= 4  # demo_dep, localpkg, and the venv's pip and setuptools
        for host in hosts.hosts:
            assert re.search(rf"{re.escape(host.addr)}: would get \d+ wheels and uv", dry.stdout), dry.stdout
        assert not any((home / ".cache" / "sgpu").exists() for home in h)
        dry_json = json.loads(launch(hosts, synced, *common, "--dry-run", "-o", "json", job.root / "check.py").stdout)
        assert dry_json["environment"]["hash"] == env_hash
        assert [n["present"] for n in dry_json["environment"]["nodes"]] == [False, False]

        first = launch(hosts, synced, *common, job.root / "check.py")
        assert first.returncode == 0, first.stderr
        assert f"--sync-env: environment {env_hash}" in first.stderr
        # A file a wheel cannot carry (outside site-packages) is said, not lost silently.
        assert ("sgpu: warning: --sync-env: demo_data 1.0: ../../../share/demo-data/notes.txt is outside "
                "site-packages; the nodes' copies go without it") in first.stderr, first.stderr
        lines = sorted(rank_lines(first.stdout))
        assert [r for r, *_ in lines] == ["0", "1"], first.stdout
        for (rank, prefix, demo, local, torch_version), home in zip(lines, h):
            # Each rank runs the copy built on its host, under that host's cache, not the launcher's venv.
            assert prefix == str(home / ".cache" / "sgpu" / "envs" / env_hash), prefix
            assert (demo, local) == ("demo-1.0", "local-v1")
        shipped = events(synced.env["SGPU_HOME"], "env_synced")
        assert len(shipped) == 1 and shipped[0]["hash"] == env_hash
        assert all(not n["present"] and n["uv_shipped"] and n["bytes_shipped"] > 0 for n in shipped[0]["nodes"])
        assert [n["outcome"] for n in shipped[0]["nodes"]] == ["built", "built"]
        assert all(n["seconds"] > 0 for n in shipped[0]["nodes"])
        assert first.stderr.count(": the environment is built (") == 2, first.stderr

        # The same environment again: every host has it, nothing is shipped,
        # and the DDP example over the copies gives one node's loss.
        script = str(ROOT / "examples" / "ddp_mlp.py")
        local_run = synced.run("launch", "--nproc", 4, script, "--epochs", 2, timeout=300)
        assert local_run.returncode == 0, local_run.stderr
        ddp = launch(hosts, synced, "--hosts", host_list(hosts), "--nproc", 2, "--sync-env", "--python", job.python,
                     script, "--epochs", 2, timeout=300)
        assert ddp.returncode == 0, ddp.stderr
        assert final_loss(ddp.stdout) == final_loss(local_run.stdout)
        again = events(synced.env["SGPU_HOME"], "env_synced")[0]
        assert again["hash"] == env_hash
        assert [(n["present"], n["wheels_shipped"], n["bytes_shipped"], n["outcome"]) for n in again["nodes"]] == \
            [(True, 0, 0, "present")] * 2
        summary = json.loads(sorted((pathlib.Path(synced.env["SGPU_HOME"]) / "runs").glob("*/summary.json"),
                                    key=lambda p: p.stat().st_mtime)[-1].read_text())
        assert summary["spec"]["environment"]["hash"] == env_hash

        # One package changes: a new environment, and only that package's wheel travels.
        pip(job.venv, "install", "--no-index", make_wheel(job.root / "dist", "demo_dep", "1.1", "VALUE = 'demo-1.1'\n"))
        third = launch(hosts, synced, *common, job.root / "check.py")
        assert third.returncode == 0, third.stderr
        changed = events(synced.env["SGPU_HOME"], "env_synced")[0]
        assert changed["hash"] != env_hash
        assert [(n["present"], n["wheels_shipped"], n["uv_shipped"]) for n in changed["nodes"]] == [(False, 1, False)] * 2
        assert {demo for _, _, demo, _, _ in rank_lines(third.stdout)} == {"demo-1.1"}
        for host in hosts.hosts:
            assert job_processes(host) == []

        # --envs list: both environments on both hosts, nothing started.
        where = ["--hosts", host_list(hosts), "--nproc", 1]
        listed = launch(hosts, synced, *where, "--envs", "list", "-o", "json")
        assert listed.returncode == 0, listed.stderr
        doc = json.loads(listed.stdout)
        assert [x["host"] for x in doc["hosts"]] == [x.addr for x in hosts.hosts]
        for entry, home in zip(doc["hosts"], h):
            assert entry["home"] == str(home)
            assert {e["hash"] for e in entry["environments"]} == {env_hash, changed["hash"]}
            assert all(e["kib"] > 0 and e["packages"] >= 4 and not e["in_use"] for e in entry["environments"])

        # A job holds the new environment: prune everything unused removes
        # the old one and the wheels only it needed, and keeps the one in use.
        (job.root / "hold.py").write_text("import time\nprint('up', flush=True)\ntime.sleep(120)\n")
        holder = launch(hosts, synced, *common, job.root / "hold.py", wait=False)
        try:
            assert holder.stdout.readline().rstrip().endswith("up")
            assert holder.stdout.readline().rstrip().endswith("up")
            pruned = launch(hosts, synced, *where, "--envs", "prune", "--envs-unused-for", "1s")
            assert pruned.returncode == 0, pruned.stderr
            assert re.search(r"removed 2 environments \(.* MiB\) and 2 wheels \(", pruned.stdout), pruned.stdout
            assert len(re.findall(rf"{changed['hash']} .* in use", pruned.stdout)) == 2, pruned.stdout
        finally:
            holder.send_signal(signal.SIGINT)
            holder.communicate(timeout=60)
        for home in h:
            envs = home / ".cache" / "sgpu" / "envs"
            assert (envs / changed["hash"] / ".sgpu-ready").exists() and not (envs / env_hash).exists()
        # What is left still runs, shipping nothing.
        last = launch(hosts, synced, *common, job.root / "check.py")
        assert last.returncode == 0, last.stderr
        assert [n["present"] for n in events(synced.env["SGPU_HOME"], "env_synced")[0]["nodes"]] == [True, True]


def test_a_host_without_the_python_or_the_system_packages_is_named_and_nothing_starts(synced, tmp_path):
    job = job_environment(tmp_path / "job")
    h = homes(tmp_path, 3)
    # Host 1 has no Python at all on its PATH; host 2's python3.11 is a plain
    # one without Debian's packages (a venv made without them).
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    plain = tmp_path / "plain"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(plain)], check=True)
    env = host_env(h, {1: {"PATH": str(empty)}, 2: {"PATH": f"{plain}/bin:{WITH_SGPU['PATH']}"}})
    with SshHosts(3, host_env=env) as hosts:
        res = launch(hosts, synced, "--hosts", host_list(hosts), "--nproc", 1, "--sync-env", "--python", job.python,
                     job.root / "check.py")
        assert res.returncode == 1, res.stderr
        h1, h2 = hosts.hosts[1].addr, hosts.hosts[2].addr
        assert re.search(rf"node {re.escape(h1)} has no python3\.\d+ on its PATH", res.stderr), res.stderr
        assert re.search(rf"node {re.escape(h2)}'s python3\.\d+ \({re.escape(str(plain))}/bin/python3\.\d+\) lacks "
                         r"\d+ of the \d+ system packages this environment sees", res.stderr), res.stderr
        assert "no node was started" in res.stderr
        assert hosts.hosts[0].addr not in res.stderr.replace("sgpu: error:", "")
        # Nothing began: no run directory, nothing on any host, no environment built.
        assert not (pathlib.Path(synced.env["SGPU_HOME"]) / "runs").exists() or \
            not any((pathlib.Path(synced.env["SGPU_HOME"]) / "runs").glob("*/events.jsonl"))
        assert not any((home / ".cache" / "sgpu" / "envs").exists() for home in h)
        for host in hosts.hosts:
            assert job_processes(host) == []


def test_two_launches_at_once_build_the_environment_once_with_pip_when_there_is_no_uv(synced, tmp_path):
    job = job_environment(tmp_path / "job")
    h = homes(tmp_path, 2)
    del synced.env["SGPU_UV"]
    synced.env["PATH"] = os.pathsep.join(d for d in synced.env["PATH"].split(os.pathsep)
                                         if not os.access(os.path.join(d, "uv"), os.X_OK))
    with SshHosts(2, host_env=host_env(h)) as hosts:
        args = ["--hosts", host_list(hosts), "--nproc", 1, "--sync-env", "--python", job.python, job.root / "check.py"]
        runs = [launch(hosts, synced, *args, wait=False) for _ in range(2)]
        outs = [p.communicate(timeout=240) for p in runs]
        for p, (out, err) in zip(runs, outs):
            assert p.returncode == 0, err
            assert {local for _, _, _, local, _ in rank_lines(out)} == {"local-v1"}, out
            assert re.search(r": got \d+ wheels \(", err) and "and uv" not in err, err
        # Each host built it once: for one run, the other found it (waiting on the build) or had it.
        outcomes = []
        for events_file in (pathlib.Path(synced.env["SGPU_HOME"]) / "runs").glob("*/events.jsonl"):
            sync = [json.loads(x) for x in events_file.read_text().splitlines() if '"env_synced"' in x][0]
            outcomes.append([n["outcome"] for n in sync["nodes"]])
        assert len(outcomes) == 2
        for per_host in zip(*outcomes):
            assert sorted(per_host) in (["built", "found"], ["built", "present"]), outcomes
        for home in h:
            logs = list((home / ".cache" / "sgpu" / "envs").glob("*.log"))
            assert len(logs) == 1, logs
            assert len(logs[0].read_text().splitlines()) == 1, "built twice on one host"
            assert not (home / ".cache" / "sgpu" / "bin").exists() or not any((home / ".cache" / "sgpu" / "bin").iterdir())
            assert (logs[0].with_suffix("") / "bin" / "pip").exists()  # made by python3 -m venv, not uv


def test_envs_is_about_the_ssh_hosts_and_says_so_elsewhere(sgpu):
    res = sgpu.run("launch", "--envs", "list")
    assert res.returncode == 2, res.stderr
    assert "--envs list is about the ssh backend's hosts: add --backend ssh" in res.stderr
    res = sgpu.run("launch", "--backend", "ssh", "--hosts", "a", "--envs", "tidy")
    assert res.returncode == 2
    assert "--envs" in res.stderr and "list" in res.stderr and "prune" in res.stderr, res.stderr
