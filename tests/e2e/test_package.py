"""The .deb (scripts/package, which scripts/test runs; its path in SGPU_DEB):
what it holds, lintian's verdict, and a real install and removal with dpkg
into a root of its own (dpkg --root), so the test leaves this machine as it
was; apt resolves its dependencies against this Debian."""
import gzip
import os
import pathlib
import re
import shutil
import subprocess

import pytest

DEB = os.environ.get("SGPU_DEB", "")
pytestmark = pytest.mark.skipif(not DEB, reason="SGPU_DEB unset: scripts/package makes the .deb (scripts/test does)")


def run(*argv, **kw):
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, **kw)


def test_the_package_holds_the_binary_man_page_and_completions():
    info = run("dpkg-deb", "-f", DEB, "Package", "Version", "Architecture", "Depends")
    assert info.returncode == 0, info.stderr
    fields = dict(line.split(": ", 1) for line in info.stdout.splitlines())
    assert fields["Package"] == "sgpu" and fields["Architecture"] == "amd64"
    # glibc alone (everything else is linked in), 2.28 or newer: the portable binary.
    depends = re.fullmatch(r"libc6 \(>= 2\.(\d+)\)", fields["Depends"])
    assert depends and int(depends[1]) <= 28, fields
    files = run("dpkg-deb", "-c", DEB).stdout
    for path in ("./usr/bin/sgpu", "./usr/share/man/man1/sgpu.1.gz",
                 "./usr/share/bash-completion/completions/sgpu", "./usr/share/fish/vendor_completions.d/sgpu.fish",
                 "./usr/share/doc/sgpu/copyright", "./usr/share/doc/sgpu/changelog.gz"):
        assert f" {path}\n" in files, (path, files)


@pytest.mark.skipif(shutil.which("lintian") is None, reason="lintian missing: run scripts/install-deps")
def test_lintian_finds_no_error_or_warning():
    res = run("lintian", "--fail-on", "error,warning", DEB)
    assert res.returncode == 0, res.stdout + res.stderr


def test_apt_can_install_it_on_this_debian():
    res = run("apt-get", "install", "--simulate", "--no-install-recommends", DEB)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Inst sgpu (" in res.stdout, res.stdout


def test_it_installs_runs_renders_its_man_page_and_removes_cleanly(tmp_path):
    root = tmp_path / "root"
    (root / "var/lib/dpkg/info").mkdir(parents=True)
    (root / "var/lib/dpkg/updates").mkdir()
    (root / "var/lib/dpkg/status").touch()
    (root / "var/lib/dpkg/available").touch()
    # Its dependency (libc6) is this machine's, not in the empty root's database.
    res = run("dpkg", f"--root={root}", "--force-depends", "--force-script-chrootless", "-i", DEB)
    assert res.returncode == 0, res.stdout + res.stderr
    sgpu = root / "usr/bin/sgpu"
    version = run(sgpu, "--version")
    assert version.returncode == 0 and version.stdout.startswith("sgpu "), version.stderr
    job = run(sgpu, "launch", "--nproc", 2, "--no-python", "sh", "-c", "echo rank $RANK of $WORLD_SIZE",
              env=dict(os.environ, SGPU_HOME=str(tmp_path / "home")))
    assert job.returncode == 0, job.stderr
    assert sorted(line.split("] ", 1)[1] for line in job.stdout.splitlines()) == ["rank 0 of 2", "rank 1 of 2"]
    page = gzip.decompress((root / "usr/share/man/man1/sgpu.1.gz").read_bytes()).decode()
    man = run("man", "--warnings", "-l", "-", input=page, env=dict(os.environ, MANWIDTH="100"))
    assert man.returncode == 0 and man.stderr == "", man.stderr
    assert "SGPU launch" in man.stdout and "--backend" in man.stdout
    bash = run("bash", "-c", f"source {root}/usr/share/bash-completion/completions/sgpu && complete -p sgpu")
    assert bash.stdout.strip() == "complete -F _sgpu sgpu", bash.stderr
    res = run("dpkg", f"--root={root}", "-r", "sgpu")
    assert res.returncode == 0, res.stdout + res.stderr
    left = [p for p in root.rglob("*") if p.is_file() and "var/lib/dpkg" not in str(p)]
    assert left == [], left
    assert not (root / "usr/bin/sgpu").exists()


def test_the_binary_is_stripped_and_its_debug_symbols_come_in_a_dbgsym_package(tmp_path):
    """The .deb's sgpu carries no debug info (10 MB, not 200); sgpu-dbgsym's .ddeb next to it holds it under
    /usr/lib/debug/.build-id, where gdb finds it by the binary's build id."""
    ddebs = sorted(pathlib.Path(DEB).parent.glob("sgpu-dbgsym_*.ddeb"))
    assert len(ddebs) == 1, list(pathlib.Path(DEB).parent.iterdir())
    for package in (DEB, ddebs[0]):
        assert run("dpkg-deb", "-x", package, tmp_path / "root").returncode == 0
    sgpu = tmp_path / "root/usr/bin/sgpu"
    sections = run("readelf", "-S", "-W", sgpu).stdout
    assert ".debug_info" not in sections, sections
    assert sgpu.stat().st_size < 40 << 20, sgpu.stat().st_size
    note = run("readelf", "-n", sgpu).stdout
    build_id = note.split("Build ID: ")[1].split()[0]
    debug = tmp_path / f"root/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
    assert debug.is_file(), sorted(str(p) for p in (tmp_path / "root/usr/lib/debug").rglob("*"))
    assert ".debug_info" in run("readelf", "-S", "-W", debug).stdout
    if shutil.which("eu-addr2line"):  # a source line through the build id, as gdb and eu-stack look it up
        main = next(line.split()[0] for line in run("nm", debug).stdout.splitlines() if line.endswith(" T main"))
        res = run("eu-addr2line", f"--debuginfo-path={tmp_path}/root/usr/lib/debug", "-e", sgpu, f"0x{main}")
        assert "apps/sgpu/main.cpp:" in res.stdout, res.stdout + res.stderr
