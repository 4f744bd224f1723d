"""Peers that do not belong to the run: refused and logged by the launcher,
nothing they send acted on, and the run goes on unharmed."""
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest

import rdzv_wire as w
from multinode import agent, free_port, make_secret_file, static_node


@pytest.fixture
def launcher(sgpu, tmp_path):
    """Node 0 of a two-node run, waiting for its second node."""
    port = free_port()
    secret = make_secret_file(tmp_path / "secret")
    p = static_node(sgpu, 2, 0, f"127.0.0.1:{port}", secret, "--nproc", 1, "--no-python", "sh", "-c",
                    'echo "rank $RANK of $WORLD_SIZE"')
    # Wait until it listens.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield p, port, secret
    if p.poll() is None:
        p.kill()
        p.communicate()


def finish_with_a_real_agent(sgpu, launcher):
    p, port, secret = launcher
    a = agent(sgpu, f"127.0.0.1:{port}", secret, "--node-name", "good")
    out, err = p.communicate(timeout=60)
    a.communicate(timeout=60)
    assert p.returncode == 0, err
    assert a.returncode == 0
    assert "[good:1] rank 1 of 2" in out.splitlines()
    return err


def test_a_peer_with_the_wrong_secret_is_refused(sgpu, launcher):
    _, port, _ = launcher
    with w.connect(port) as s:
        cn = w.nonce()
        s.sendall(w.client_hello(cn))
        kind, payload = w.read_frame(s)
        assert kind == w.SERVER_HELLO
        server_nonce = payload[10:42]
        s.sendall(w.frame(w.AUTH, w.client_proof("not-the-secret" * 4, server_nonce, cn)))
        # Whatever it sends next is never acted on: it is refused and cut off.
        s.sendall(w.frame(w.JOIN, b"\0" * 40))
        frames = w.read_until_closed(s, timeout=10)
    assert frames[0][0] == w.REJECT
    assert "authentication failed" in w.reject_reason(frames[0][1])
    err = finish_with_a_real_agent(sgpu, launcher)
    assert "refused rendezvous peer 127.0.0.1:" in err and "it does not know the run's secret" in err


def test_a_replayed_proof_is_refused(sgpu, launcher):
    # A proof is bound to the launcher's fresh nonce: one seen before is worthless.
    _, port, secret = launcher
    key = secret.read_text().strip()
    with w.connect(port) as s:
        cn = w.nonce()
        s.sendall(w.client_hello(cn))
        _, payload = w.read_frame(s)
        old_nonce = w.nonce()  # as if recorded from another connection
        s.sendall(w.frame(w.AUTH, w.client_proof(key, old_nonce, cn)))
        frames = w.read_until_closed(s, timeout=10)
    assert frames[0][0] == w.REJECT
    finish_with_a_real_agent(sgpu, launcher)


@pytest.mark.parametrize("junk,notice", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds the limit of 1024"),  # the first bytes read as a huge length
    (struct.pack(">IB", 2 << 20, w.CLIENT_HELLO) + b"x" * 4096, "frame of 2097152 bytes exceeds the limit"),
    (w.frame(w.CLIENT_HELLO, b"NOTSGPU!" + b"\0" * 34), "bad magic"),
    (w.frame(w.JOIN, b"\0" * 44), "unexpected Join before the hello"),  # a well-formed, empty Join
    (w.frame(200, b""), "unknown message type 200"),
], ids=["http", "oversized", "bad-magic", "join-first", "unknown-type"])
def test_garbage_and_oversized_frames_close_only_that_connection(sgpu, launcher, junk, notice):
    _, port, _ = launcher
    with w.connect(port) as s:
        s.sendall(junk)
        frames = w.read_until_closed(s, timeout=10)
    assert frames == []  # not a word back: it proved nothing
    err = finish_with_a_real_agent(sgpu, launcher)
    assert notice in err


def test_another_protocol_version_is_a_clear_error(sgpu, launcher):
    _, port, _ = launcher
    with w.connect(port) as s:
        s.sendall(w.client_hello(w.nonce(), version=99))
        frames = w.read_until_closed(s, timeout=10)
    assert frames[0][0] == w.REJECT
    assert f"this launcher speaks rendezvous protocol version {w.VERSION}, the agent 99" in w.reject_reason(frames[0][1])
    err = finish_with_a_real_agent(sgpu, launcher)
    assert f"it speaks protocol version 99, this launcher speaks {w.VERSION}" in err


def test_a_slow_hello_is_dropped_by_a_timer(sgpu, launcher):
    _, port, _ = launcher
    with w.connect(port) as s:
        s.sendall(w.client_hello(w.nonce())[:7])  # a few bytes, then nothing
        t0 = time.monotonic()
        frames = w.read_until_closed(s, timeout=10)
        waited = time.monotonic() - t0
    assert frames == []
    assert 1.5 < waited < 5  # --heartbeat-timeout 2s
    err = finish_with_a_real_agent(sgpu, launcher)
    assert "no authenticated hello within 2s" in err


def test_an_agent_refuses_a_launcher_of_another_version(sgpu, tmp_path):
    secret = make_secret_file(tmp_path / "secret")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def fake_launcher():
        conn, _ = server.accept()
        with conn:
            w.read_frame(conn)
            conn.sendall(w.server_hello(w.nonce(), b"\0" * 32, version=w.VERSION + 1))
            w.read_until_closed(conn, timeout=10)

    t = threading.Thread(target=fake_launcher)
    t.start()
    a = agent(sgpu, f"127.0.0.1:{port}", secret)
    _, err = a.communicate(timeout=30)
    t.join()
    server.close()
    assert a.returncode == 2
    assert f"speaks rendezvous protocol version {w.VERSION + 1}, this agent speaks {w.VERSION}: run the same sgpu version on every node" in err


def test_an_agent_refuses_a_launcher_that_does_not_know_the_secret(sgpu, tmp_path):
    secret = make_secret_file(tmp_path / "secret")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]

    def fake_launcher():
        conn, _ = server.accept()
        with conn:
            _, payload = w.read_frame(conn)
            cn = payload[10:42]
            sn = w.nonce()
            conn.sendall(w.server_hello(sn, w.server_proof("a-guess-at-the-secret" * 3, cn, sn)))
            w.read_until_closed(conn, timeout=10)

    t = threading.Thread(target=fake_launcher)
    t.start()
    a = agent(sgpu, f"127.0.0.1:{port}", secret)
    _, err = a.communicate(timeout=30)
    t.join()
    server.close()
    assert a.returncode == 2
    assert "does not know this run's secret" in err


def test_nodes_dropped_by_a_full_listen_queue_are_said_in_one_line_with_the_limit(sgpu, tmp_path):
    """200 simulated agents join at once through a listen queue of 16 (net.core.somaxconn, set in a network
    namespace of the test's own): the kernel drops some connections, their agents retry a second later and the
    run still completes, and the launcher says how many were dropped, the limit and its value."""
    from conftest import ROOT
    sim = ROOT / "build" / "bench" / "rdzv_scale" / "sgpu_rdzv_sim"
    if not os.access(sim, os.X_OK) or shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root, unshare and the simulator (scripts/build release builds it)")
    secret = make_secret_file(tmp_path / "secret")
    err = tmp_path / "launcher.err"
    counters = tmp_path / "overflows"
    script = f"""
set -e
ip link set lo up
echo 16 > /proc/sys/net/core/somaxconn  # this namespace's own
{shlex.quote(sgpu.bin)} launch --nnodes 201 --node-rank 0 --rdzv-endpoint 127.0.0.1:29555 \\
    --rdzv-secret-file {shlex.quote(str(secret))} --nproc 1 --no-python true 2>{shlex.quote(str(err))} &
launcher=$!
SGPU_RDZV_SECRET=$(cat {shlex.quote(str(secret))}) {shlex.quote(str(sim))} 127.0.0.1:29555 200 1
wait $launcher
awk '$1 == "TcpExt:" {{ if (!n) {{ for (i = 1; i <= NF; i++) if ($i == "ListenOverflows") c = i; n = 1 }} \\
     else print $c }}' /proc/net/netstat > {shlex.quote(str(counters))}
"""
    proc = subprocess.Popen(["unshare", "-n", "bash", "-c", script], env=sgpu.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, errs = proc.communicate(timeout=180)
    finally:  # the launcher and the simulator go with the test, whatever happened
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    res = subprocess.CompletedProcess(proc.args, proc.returncode, out, errs)
    said = err.read_text()
    assert res.returncode == 0, (res.stdout, res.stderr, said)
    dropped = int(counters.read_text().split()[0])  # this namespace's own count: the run's alone
    assert dropped > 0, "the queue of 16 never filled: the test proves nothing"
    line = next((ln for ln in said.splitlines() if "for a full listen queue" in ln), None)
    assert line is not None, said
    assert line.startswith("sgpu: ") and "while the 201 nodes joined (net.core.somaxconn = 16;" in line, line
    assert "sysctl -w net.core.somaxconn=201" in line, line
    assert int(re.search(r"(\d+) connections were dropped", line).group(1)) <= dropped, line
