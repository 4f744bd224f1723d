"""The ssh test hosts themselves: real sshd in network namespaces, reached
with the system OpenSSH client the way the ssh backend reaches them."""
import os
import subprocess

import pytest

import ssh_hosts
from ssh_hosts import SshHosts

pytestmark = pytest.mark.skipif(ssh_hosts.usable() is not None, reason=str(ssh_hosts.usable()))


@pytest.fixture
def hosts():
    with SshHosts(2, authorized={0}) as h:
        yield h


def namespaces():
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_a_command_runs_on_each_host_over_ssh_reusing_one_connection(hosts):
    host1 = hosts.hosts[0]
    control = os.path.join(hosts.dir, "cm-%C")
    # Each host answers with its own address: the command ran there, not here.
    res = hosts.ssh(host1, "ip -o -4 addr show dev eth0", control_path=control)
    assert res.returncode == 0, res.stderr
    assert f"inet {host1.addr}/" in res.stdout
    check = hosts.ssh(host1, None, "-O", "check", control_path=control)
    assert check.returncode == 0 and "Master running" in check.stderr, check.stderr
    again = hosts.ssh(host1, "echo second", control_path=control)
    assert again.stdout == "second\n", again.stderr
    # Two commands, one authentication: the second went through the master.
    assert host1.log().count("Accepted publickey for root") == 1, host1.log()
    stop = hosts.ssh(host1, None, "-O", "exit", control_path=control)
    assert stop.returncode == 0, stop.stderr


def test_two_hosts_run_commands_in_parallel():
    with SshHosts(2) as h:
        procs = [subprocess.Popen(["ssh", "-F", h.ssh_config(), "-o", "BatchMode=yes", "--", host.addr,
                                   "ip -o -4 addr show dev eth0; echo $SSH_CONNECTION; hostname"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  stdin=subprocess.DEVNULL)
                 for host in h.hosts]
        outs = [p.communicate(timeout=60) for p in procs]
        for host, p, (out, err) in zip(h.hosts, procs, outs):
            assert p.returncode == 0, err
            lines = out.split("\n")
            assert f"inet {host.addr}/" in lines[0]
            # The connection came from this side's address on the test network, to a host with its own name.
            assert lines[1].startswith(f"{h.client_addr} ")
            assert lines[2] == host.name


def test_a_refused_key_fails_at_once_in_batch_mode(hosts):
    res = hosts.ssh(hosts.hosts[1], "true")
    assert res.returncode == 255
    assert "Permission denied (publickey)" in res.stderr


def test_an_unreachable_address_fails_within_the_connect_timeout(hosts):
    res = hosts.ssh(hosts.unused_addr(), "true", "-o", "ConnectTimeout=1")
    assert res.returncode == 255
    assert hosts.unused_addr() in res.stderr


def test_sshd_config_sets_the_session_environment():
    with SshHosts(2, host_env={1: {"SGPU_TEST_MARK": "from-sshd-config"}}) as h:
        plain, marked = (h.ssh(host, "echo mark=$SGPU_TEST_MARK") for host in h.hosts)
        assert plain.stdout == "mark=\n", plain.stderr
        assert marked.stdout == "mark=from-sshd-config\n", marked.stderr


def test_everything_is_removed_also_when_the_test_fails():
    with pytest.raises(RuntimeError, match="boom"):
        with SshHosts(1) as h:
            sleeper = subprocess.Popen(["ssh", "-F", h.ssh_config(), "-o", "BatchMode=yes", "--", h.hosts[0].addr,
                                        "sleep 600"], stdin=subprocess.DEVNULL)
            host = h.hosts[0]
            names = [host.ns]
            assert all(n in namespaces() for n in names)
            raise RuntimeError("boom")
    assert sleeper.wait(timeout=30) == 255  # its host went away
    listed = namespaces()
    assert not any(n in listed for n in names)
    assert not os.path.exists(h.dir)
    assert host.sshd.poll() is not None
