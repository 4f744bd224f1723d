"""Free TCP ports for test daemons (stdlib only: the benchmark uses it too)."""
import socket


def free_port_block(count):
    """A base port with `count` consecutive ports free right now (e.g. slurmctld's, then one per slurmd)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports")
