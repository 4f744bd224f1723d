"""A rank that fails until a given attempt: for --max-restarts tests.
Records what it saw in $OUT_DIR/seen-<RANK>-<RESTART_COUNT>.txt
("RESTART_COUNT MAX_RESTARTS MASTER_PORT") and prints "rank R attempt K".
The ranks then meet on MASTER_ADDR:MASTER_PORT (rank 0 listens, as a
TCPStore would), so every rank has recorded its attempt before one fails.
Rank $FAIL_RANK (default 0) exits $FAIL_CODE (default 3) while
TORCHELASTIC_RESTART_COUNT < $FAIL_UNTIL; the other ranks then wait to be
stopped. Once the attempt may succeed every rank exits 0."""
import os
import signal
import socket
import sys
import time

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
out = os.environ["OUT_DIR"]
with open(os.path.join(out, f"seen-{rank}-{attempt}.txt"), "w") as f:
    f.write(f"{attempt} {os.environ['TORCHELASTIC_MAX_RESTARTS']} {os.environ['MASTER_PORT']}\n")
sys.stdout.write(f"rank {rank} attempt {attempt}\n")  # one write: a teardown cannot cut the line
sys.stdout.flush()


def meet():
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    if rank == 0:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(address)
        server.listen(world)
        server.settimeout(30)
        peers = [server.accept()[0] for _ in range(world - 1)]
        for p in peers:
            p.sendall(b"go")
            p.close()
        return
    deadline = time.monotonic() + 30
    while True:  # rank 0 may not listen yet: retry as torch's TCPStore clients do
        try:
            with socket.create_connection(address, timeout=30) as s:
                s.recv(2)
            return
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


meet()
if attempt >= int(os.environ.get("FAIL_UNTIL", "1000000")):
    sys.exit(0)
if rank == int(os.environ.get("FAIL_RANK", "0")):
    sys.stderr.write(f"boom on attempt {attempt}\n")
    sys.stderr.flush()
    sys.exit(int(os.environ.get("FAIL_CODE", "3")))
signal.pause()  # until sgpu stops the attempt
