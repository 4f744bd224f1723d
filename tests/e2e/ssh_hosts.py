"""Real ssh test hosts: network namespaces on a private bridge, each running
Debian's OpenSSH sshd with host keys, config and client key made here.

Nothing touches the machine's own network: the bridge lives in a "switch"
namespace and the client (where sgpu or ssh runs) has a namespace of its own,
so concurrent test runs can all use 10.77.0.0/24 without meeting. Every
namespace and every process in it is removed on close(), also when a test
fails; namespaces left by a crashed run are removed by the next one.
"""
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
import threading

SSHD = "/usr/sbin/sshd"
SUBNET = "10.77.0"
CLIENT_ADDR = f"{SUBNET}.1"
PREFIX = "sgpu-ssh-"


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _ns_pids(ns):
    res = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in res.stdout.split()]


def _kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_namespace(ns):
    # A dying sshd may have just forked a session: go again until none is left.
    for _ in range(10):
        pids = _ns_pids(ns)
        if not pids:
            break
        _kill_all(pids)
    _ip("netns", "del", ns, check=False)


def remove_stale_namespaces():
    """Namespaces of test runs whose process is gone (killed before cleanup)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        m = re.match(rf"({PREFIX}(\d+)-\S+)", line)
        if m and not os.path.exists(f"/proc/{m.group(2)}"):
            _kill_namespace(m.group(1))


def usable():
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not os.access(SSHD, os.X_OK) or not shutil.which("ssh"):
        return "openssh-server/openssh-client missing: run scripts/install-deps"
    return None


class SshHost:
    def __init__(self, name, ns, addr, log_path):
        self.name = name          # "host1"
        self.ns = ns              # the namespace it lives in
        self.addr = addr          # its address on the test network
        self.log_path = log_path  # sshd's log (-e)
        self.sshd = None

    def pids(self):
        return _ns_pids(self.ns)

    def job_pids(self):
        """Every process on the host except the listening sshd: what a run may leave behind."""
        return [p for p in self.pids() if self.sshd is None or p != self.sshd.pid]

    def log(self):
        return pathlib.Path(self.log_path).read_text(errors="replace")


class SshHosts:
    """`n` hosts with sshd on port 22 of 10.77.0.11, .12, ...; ssh_config() is
    a client config that reaches them with the key made here."""

    def __init__(self, n, authorized=None, host_env=None):
        remove_stale_namespaces()
        self._serial = f"{os.getpid()}-{id(self) & 0xffffff:x}"
        self.dir = tempfile.mkdtemp(prefix="sgpu-ssh-")  # short: ControlPath must fit in 108 bytes
        self.switch = f"{PREFIX}{self._serial}-sw"
        self.client_ns = f"{PREFIX}{self._serial}-client"
        self.hosts = []
        self._threads = []
        try:
            self._make_network(n)
            self._make_keys()
            for i, host in enumerate(self.hosts):
                ok = authorized is None or i in authorized
                self._start_sshd(host, ok, (host_env or {}).get(i, {}))
        except BaseException:
            self.close()
            raise

    # -- network -----------------------------------------------------------
    def _add_node(self, ns, addr, port):
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")

    def _make_network(self, n):
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        self._add_node(self.client_ns, CLIENT_ADDR, "p-client")
        for i in range(n):
            name = f"host{i + 1}"
            host = SshHost(name, f"{PREFIX}{self._serial}-{name}", f"{SUBNET}.{11 + i}",
                           os.path.join(self.dir, f"{name}.sshd.log"))
            self.hosts.append(host)
            self._add_node(host.ns, host.addr, f"p-{name}")

    # -- keys and sshd -----------------------------------------------------
    def _keygen(self, path):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sgpu-test", "-f", path], check=True)

    def _make_keys(self):
        self.identity = os.path.join(self.dir, "id_ed25519")
        self._keygen(self.identity)
        known = []
        for host in self.hosts:
            key = os.path.join(self.dir, f"{host.name}_host_key")
            self._keygen(key)
            known.append(f"{host.addr} {pathlib.Path(key + '.pub').read_text().strip()}")
        pathlib.Path(self.dir, "known_hosts").write_text("\n".join(known) + "\n")
        pathlib.Path(self.dir, "ssh_config").write_text(
            "Host *\n"
            "  User root\n"
            f"  IdentityFile {self.identity}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.dir}/known_hosts\n"
            "  GlobalKnownHostsFile /dev/null\n"
            "  StrictHostKeyChecking yes\n"
            "  LogLevel ERROR\n")

    def _start_sshd(self, host, authorized, env):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        keys = os.path.join(self.dir, f"{host.name}_authorized_keys")
        pathlib.Path(keys).write_text(pathlib.Path(self.identity + ".pub").read_text() if authorized else "")
        config = os.path.join(self.dir, f"{host.name}_sshd_config")
        lines = [
            f"ListenAddress {host.addr}", "Port 22",
            f"HostKey {self.dir}/{host.name}_host_key",
            f"PidFile {self.dir}/{host.name}.pid",
            f"AuthorizedKeysFile {keys}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "MaxSessions 100", "MaxStartups 100", "LogLevel VERBOSE",
        ]
        if env:
            lines.append("SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()))
        pathlib.Path(config).write_text("\n".join(lines) + "\n")
        host.sshd = subprocess.Popen(["ip", "netns", "exec", host.ns, SSHD, "-D", "-e", "-f", config],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        listening = threading.Event()

        def copy_log():
            with open(host.log_path, "a") as log:
                for line in host.sshd.stderr:
                    log.write(line)
                    log.flush()
                    if "Server listening" in line:
                        listening.set()
            listening.set()  # sshd ended: wake the waiter, which then reports it

        t = threading.Thread(target=copy_log, daemon=True)
        t.start()
        self._threads.append(t)
        if not listening.wait(30) or host.sshd.poll() is not None:
            raise RuntimeError(f"sshd on {host.name} did not start:\n{host.log()}")

    # -- use -----------------------------------------------------------------
    def ssh_config(self):
        return os.path.join(self.dir, "ssh_config")

    def in_client(self, argv):
        """argv run from the client namespace, where the hosts are reachable."""
        return ["ip", "netns", "exec", self.client_ns, *argv]

    def ssh(self, host, command, *options, control_path=None):
        argv = ["ssh", "-F", self.ssh_config(), "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
        if control_path:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_path}", "-o", "ControlPersist=30"]
        argv += [*options, "--", host.addr if isinstance(host, SshHost) else host]
        if command is not None:
            argv.append(command)
        return subprocess.run(self.in_client(argv), capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)

    def kill_host(self, host):
        """The host dies: its link goes down first (no FIN, no RST reaches anyone), then every process on it."""
        _ip("-n", host.ns, "link", "set", "eth0", "down", check=False)
        _kill_all(host.pids())

    def close(self):
        for host in self.hosts:
            _kill_namespace(host.ns)
            if host.sshd:
                host.sshd.wait()
        _kill_namespace(self.client_ns)
        _kill_namespace(self.switch)
        for t in self._threads:
            t.join(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
