"""Real ssh test hosts: the test hosts of netns.py (network namespaces with
their own addresses and hostnames), each running Debian's OpenSSH sshd with
host keys, config and client key made here.

sgpu and ssh run on this machine's side, which reaches every host through
the test network's bridge (the launcher's address as the hosts see it is
`net.gateway`). Every process on the hosts, sshd included, goes with the
TestNet, also when a test fails.
"""
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import threading

import netns

SSHD = "/usr/sbin/sshd"


def usable():
    """Why these tests cannot run here, or None."""
    ok, why = netns.available()
    if not ok:
        return why
    if not os.access(SSHD, os.X_OK) or not shutil.which("ssh"):
        return "openssh-server/openssh-client missing: run scripts/install-deps"
    return None


class SshHost:
    def __init__(self, host, log_path):
        self.host = host          # the netns.Host
        self.name = host.name     # "h0"
        self.ns = host.netns
        self.addr = host.address  # its address on the test network
        self.log_path = log_path  # sshd's log (-e)
        self.sshd = None

    def pids(self):
        return self.host.pids()

    def agent_pids(self):
        """The `sgpu agent` processes running on this host."""
        found = []
        for pid in self.pids():
            try:
                if b"\0agent\0" in pathlib.Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        return found

    def log(self):
        return pathlib.Path(self.log_path).read_text(errors="replace")


class SshHosts:
    """`n` hosts with sshd on port 22; ssh_config() is a client config that
    reaches them with the key made here."""

    def __init__(self, n, authorized=None, host_env=None, hostname=None, second_net=False):
        """`hostname`, `second_net`: as netns.TestNet's (one hostname on every
        host, resolving to 127.0.1.1; a second interface reaching no host)."""
        self.dir = tempfile.mkdtemp(prefix="sgpu-ssh-")  # short: ControlPath must fit in 108 bytes
        self.net = netns.TestNet(n, hostname=hostname, second_net=second_net)
        self.hosts = []
        self._threads = []
        try:
            self.net.__enter__()
            self.hosts = [SshHost(h, os.path.join(self.dir, f"{h.name}.sshd.log")) for h in self.net.hosts]
            self.client_addr = self.net.gateway
            self._make_keys()
            for i, host in enumerate(self.hosts):
                ok = authorized is None or i in authorized
                self._start_sshd(host, ok, (host_env or {}).get(i, {}))
        except BaseException:
            self.close()
            raise

    def unused_addr(self):
        """An address on the test network where no host answers."""
        return self.net.gateway.rsplit(".", 1)[0] + ".99"

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
        host.sshd = host.host.popen([SSHD, "-D", "-e", "-f", config], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL)
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

    def ssh(self, host, command, *options, control_path=None):
        argv = ["ssh", "-F", self.ssh_config(), "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
        if control_path:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_path}", "-o", "ControlPersist=30"]
        argv += [*options, "--", host.addr if isinstance(host, SshHost) else host]
        if command is not None:
            argv.append(command)
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)

    def kill_host(self, host):
        """The host dies: its link goes down first (no FIN, no RST reaches anyone), then every process on it."""
        self.net.cut(host.host)
        host.host.kill_all()

    def close(self):
        # ssh masters (ControlPersist) made for these hosts end with them.
        for sock in pathlib.Path(self.dir).glob("cm-*"):
            subprocess.run(["ssh", "-F", self.ssh_config(), "-o", f"ControlPath={sock}", "-O", "exit", "x"],
                           capture_output=True, timeout=10)
        self.net.close()
        for host in self.hosts:
            if host.sshd:
                host.sshd.wait()
        for t in self._threads:
            t.join(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
