"""Test hosts on one machine: each a network namespace with its own address
and hostname, joined to a bridge by a veth pair. Reusable by any test that
needs separate hosts (multi-node runs, the ssh backend).

    with TestNet(3) as net:                 # hosts h0, h1, h2
        p = net.hosts[1].popen(["sgpu", "agent", ...], env=env)
        net.cut(net.hosts[2])               # its link goes down: packets vanish
        net.hosts[2].kill_all()             # the whole host dies at once
        assert net.hosts[1].pids() == []    # nothing left running there

Every process starts through `ip netns exec NS unshare --uts`, so each host
has its own hostname (its name), resolvable by every host through its own
/etc/hosts, but shares this machine's filesystem otherwise. The
launcher-side machine (the root namespace) reaches every host through the
bridge at `net.gateway`. Cleanup always runs: on leaving the `with`, at exit,
and for namespaces left by a test run that died (their creator's pid is in
the name). Needs root and iproute2 (`ip`); tests skip when they are missing.
"""
import atexit
import fcntl
import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import time

LOCK = "/tmp/sgpu-netns.lock"
NAME = re.compile(r"^sgpu-(\d+)-([0-9a-f]{4})-h(\d+)$")


def available():
    """(True, "") when this machine can make test hosts, else (False, why)."""
    if os.geteuid() != 0:
        return False, "test hosts need root (ip netns)"
    try:
        subprocess.run(["ip", "netns", "list"], check=True, capture_output=True)
        subprocess.run(["unshare", "--version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return False, f"test hosts need iproute2 and util-linux: {e}"
    return True, ""


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _netns_pids(ns):
    res = ip("netns", "pids", ns, check=False)
    return [int(p) for p in res.stdout.split()] if res.returncode == 0 else []


def _kill_netns(ns):
    for _ in range(50):
        pids = _netns_pids(ns)
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _etc(ns):
    # `ip netns exec` bind-mounts what is here over /etc: each host's /etc/hosts.
    return f"/etc/netns/{ns}"


def sweep_stale():
    """Removes namespaces (and their links) of test runs whose process is gone."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = NAME.match(name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_netns(name)
            ip("netns", "del", name, check=False)
            ip("link", "del", f"sgb{m.group(2)}", check=False)
            shutil.rmtree(_etc(name), ignore_errors=True)


class Host:
    def __init__(self, net, index, address):
        self.net = net
        self.index = index
        self.name = f"h{index}"
        self.hostname = net.hostname or self.name  # what `hostname` says there
        self.netns = f"sgpu-{os.getpid()}-{net.id}-h{index}"
        self.veth = f"sgv{net.id}{index}"  # the root side of its link (15 characters at most)
        self.address = address

    def command(self, argv):
        """argv wrapped to run on this host, with its own hostname."""
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname, *map(str, argv)]

    def popen(self, argv, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        return subprocess.Popen(self.command(argv), **kw)

    def run(self, argv, timeout=60, **kw):
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run(self.command(argv), timeout=timeout, **kw)

    def pids(self):
        """Every process running on this host."""
        return _netns_pids(self.netns)

    def kill_all(self, sig=signal.SIGKILL):
        """The host dies: every process on it gets `sig` at once."""
        for p in self.pids():
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass


class TestNet:
    def __init__(self, hosts, hostname=None, second_net=False):
        """`hostname`: one hostname every host shares, resolving to 127.0.1.1 on
        each (Debian's default for a machine's own name, and containers made
        from one image). `second_net`: each host also has eth1 on a network of
        its own that reaches no other host (a management or storage NIC)."""
        self.count = hosts
        self.hostname = hostname
        self.second_net = second_net
        self.hosts = []
        self.id = None
        self.bridge = None
        self.gateway = None
        self._closed = False

    def __enter__(self):
        sweep_stale()
        with open(LOCK, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent test runs pick distinct names and subnets
            self._allocate()
            atexit.register(self.close)
            try:
                self._create()
            except BaseException:
                self.close()
                raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _allocate(self):
        links = ip("-o", "link").stdout
        used = {ipaddress.ip_interface(a).network
                for a in re.findall(r"inet (\S+)", ip("-o", "-4", "addr").stdout)}
        while True:
            self.id = f"{random.randrange(16 ** 4):04x}"
            if f"sgb{self.id}" not in links:
                break
        for _ in range(1000):
            subnet = ipaddress.ip_network(f"10.{random.randrange(200, 250)}.{random.randrange(256)}.0/24")
            if not any(subnet.overlaps(u) for u in used):
                break
        hosts = list(subnet.hosts())
        self.bridge = f"sgb{self.id}"
        self.gateway = str(hosts[0])
        self.prefix = subnet.prefixlen
        self.hosts = [Host(self, i, str(hosts[10 + i])) for i in range(self.count)]

    def _create(self):
        # Every host resolves every host's name, as cluster DNS would (gloo and
        # NCCL look up their own hostname to choose an interface).
        hosts = "127.0.0.1 localhost\n::1 localhost\n" + "".join(f"{h.address} {h.name}\n" for h in self.hosts)
        if self.hostname:
            hosts = f"127.0.1.1 {self.hostname}\n" + hosts
        for h in self.hosts:
            os.makedirs(_etc(h.netns), exist_ok=True)
            with open(os.path.join(_etc(h.netns), "hosts"), "w") as f:
                f.write(hosts)
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.gateway}/{self.prefix}", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for h in self.hosts:
            ip("netns", "add", h.netns)
            ip("link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.netns)
            ip("link", "set", h.veth, "master", self.bridge, "up")
            ip("-n", h.netns, "addr", "add", f"{h.address}/{self.prefix}", "dev", "eth0")
            ip("-n", h.netns, "link", "set", "eth0", "up")
            ip("-n", h.netns, "link", "set", "lo", "up")
            if self.second_net:
                # A veth pair inside the host: a link that leads nowhere else
                # (the dummy driver is not always there).
                ip("-n", h.netns, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1peer")
                ip("-n", h.netns, "addr", "add", f"192.168.{100 + h.index}.1/24", "dev", "eth1")
                ip("-n", h.netns, "link", "set", "eth1", "up")
                ip("-n", h.netns, "link", "set", "eth1peer", "up")

    def cut(self, host):
        """Takes the host's link down: no packet in or out, and no reset either."""
        ip("link", "set", host.veth, "down")

    def restore(self, host):
        ip("link", "set", host.veth, "up")

    def close(self):
        if self._closed:
            return
        self._closed = True
        for h in self.hosts:
            _kill_netns(h.netns)
            ip("netns", "del", h.netns, check=False)
            ip("link", "del", h.veth, check=False)
            shutil.rmtree(_etc(h.netns), ignore_errors=True)
        if self.bridge:
            ip("link", "del", self.bridge, check=False)
