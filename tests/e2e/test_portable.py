"""The portable binary (scripts/build portable: build-portable/dist/sgpu, in
SGPU_PORTABLE_BIN as scripts/test sets it) on an older distribution: a Debian
11 root filesystem (glibc 2.31) made with debootstrap from Debian's own
packages, kept under ~/.cache/sgpu/roots, entered with chroot in a mount and
PID namespace of its own. The developer build, which asks for glibc 2.36, is
run there too: it must not start, or the root proves nothing."""
import os
import pathlib
import shutil
import subprocess

import pytest

from conftest import ROOT

PORTABLE = os.environ.get("SGPU_PORTABLE_BIN", "")
pytestmark = pytest.mark.skipif(not PORTABLE, reason="SGPU_PORTABLE_BIN unset: scripts/build portable makes it "
                                                     "(scripts/test does)")
SUITE, GLIBC = "bullseye", "2.31"


@pytest.fixture(scope="module")
def old_root():
    """Debian 11's minimal root, made once (debootstrap --variant=minbase) and kept."""
    root = pathlib.Path(os.environ.get("SGPU_OLD_ROOT", pathlib.Path.home() / ".cache/sgpu/roots" / SUITE))
    if not (root / ".done").exists():
        if not shutil.which("debootstrap"):
            pytest.fail("debootstrap is missing (scripts/install-deps installs it)")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run(["debootstrap", "--variant=minbase", SUITE, str(tmp), "http://deb.debian.org/debian"],
                             capture_output=True, text=True, timeout=900)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        (tmp / ".done").touch()
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return root


def in_root(root, binary, *argv, timeout=60):
    """Runs `binary argv` in the root: the binary copied to /usr/local/bin, /proc of a new PID namespace, /dev."""
    shutil.copy2(binary, root / "usr/local/bin/sgpu-under-test")
    script = ('mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && mount -t tmpfs tmpfs "$1/tmp" && '
              'root="$1" && shift && exec chroot "$root" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root "$@"')
    return subprocess.run(["unshare", "--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", script,
                           "sh", str(root), "/usr/local/bin/sgpu-under-test", *argv],
                          capture_output=True, text=True, timeout=timeout)


def glibc_versions(binary):
    dyn = subprocess.run(["objdump", "-T", binary], capture_output=True, text=True, check=True).stdout
    return {tuple(map(int, v.split("."))) for v in set(__import__("re").findall(r"GLIBC_([0-9.]+)", dyn))}


def test_it_asks_glibc_for_no_symbol_newer_than_2_28_and_links_nothing_else():
    assert max(glibc_versions(PORTABLE)) <= (2, 28), sorted(glibc_versions(PORTABLE))
    needed = subprocess.run(["objdump", "-p", PORTABLE], capture_output=True, text=True, check=True).stdout
    libs = {line.split()[1] for line in needed.splitlines() if line.strip().startswith("NEEDED")}
    # Not even libm: one library fewer to load at each start, 330 KiB less
    # of a launch's peak (packaging/portable/glibc_compat.cpp: modff).
    assert libs <= {"libc.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}, libs
    # Stripped, its debug info beside it and linked by name.
    sections = subprocess.run(["objdump", "-h", PORTABLE], capture_output=True, text=True, check=True).stdout
    assert ".debug_info" not in sections and ".gnu_debuglink" in sections
    assert (pathlib.Path(PORTABLE).parent / "sgpu.debug").stat().st_size > 0


def test_a_two_rank_job_runs_on_debian_11(old_root):
    libc = subprocess.run(["chroot", str(old_root), "ldd", "--version"], capture_output=True, text=True)
    assert GLIBC in libc.stdout.splitlines()[0], libc.stdout  # the root is what it says
    version = in_root(old_root, PORTABLE, "--version")
    assert version.returncode == 0 and version.stdout.startswith("sgpu "), version.stderr
    res = in_root(old_root, PORTABLE, "launch", "--nproc", "2", "--no-python", "sh", "-c",
                  'echo "rank $RANK of $WORLD_SIZE, local $LOCAL_RANK, master $MASTER_ADDR:$MASTER_PORT"')
    assert res.returncode == 0, res.stdout + res.stderr
    for rank in (0, 1):
        assert f"rank {rank} of 2, local {rank}, master 127.0.0.1:" in res.stdout, res.stdout


def test_a_rank_killed_by_a_signal_is_named_there(old_root):
    # The signal's name comes from the binary's own sigabbrev_np (glibc 2.32's).
    res = in_root(old_root, PORTABLE, "launch", "--nproc", "2", "--no-python", "sh", "-c",
                  'if [ "$RANK" = 1 ]; then kill -TERM $$; fi; sleep 30')
    assert res.returncode == 143, res.stdout + res.stderr
    assert "SIGTERM" in res.stderr, res.stderr


def test_the_developer_build_does_not_start_there(old_root):
    developer = os.environ.get("SGPU_BIN", str(ROOT / "build/apps/sgpu/sgpu"))
    if max(glibc_versions(developer)) <= (2, 31):
        pytest.skip(f"{developer} would run on glibc {GLIBC} too")
    res = in_root(old_root, developer, "--version")
    assert res.returncode != 0 and "GLIBC_2.3" in res.stderr and "not found" in res.stderr, res.stderr


def test_the_wheel_is_manylinux_2_28_and_holds_that_same_binary():
    wheel = os.environ.get("SGPU_WHEEL_FILE", "")
    if not wheel:
        pytest.skip("SGPU_WHEEL_FILE unset: scripts/wheel makes it (scripts/test does)")
    import zipfile
    version = pathlib.Path(wheel).name.split("-")[1]
    with zipfile.ZipFile(wheel) as z:
        tags = [line.split(": ", 1)[1] for line in z.read(f"sgpu-{version}.dist-info/WHEEL").decode().splitlines()
                if line.startswith("Tag: ")]
        inside = z.read(f"sgpu-{version}.data/scripts/sgpu")
        names = z.namelist()
    assert tags == ["py3-none-manylinux_2_28_x86_64"], tags
    assert inside == pathlib.Path(PORTABLE).read_bytes()  # one build: the wheel does not compile its own
    assert "sgpu/__init__.py" in names and "sgpu/py.typed" in names, names
