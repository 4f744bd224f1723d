"""Rank 0 binds MASTER_PORT the plain way (no SO_REUSEADDR), as any server
outside torch would, and listens; rank 1 connects and both write the port to
$OUT_DIR/<rank>.txt. Rank 1 retries a refused connection while rank 0 is
still starting, as a client of any rendezvous does.

With $BARRIER_DIR and $JOBS set, rank 0 keeps its port bound until $JOBS
jobs have each bound theirs (a file each in $BARRIER_DIR): every job then
holds its port while every other job takes one, so the ports must differ
(a job that ended may rightly give its port to a later one)."""
import os
import socket
import time

rank = int(os.environ["RANK"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    with socket.socket() as s:
        s.bind((addr, port))
        s.listen()
        conn, _ = s.accept()
        with conn:
            conn.sendall(b"hello")
        barrier, jobs = os.environ.get("BARRIER_DIR"), int(os.environ.get("JOBS", "0"))
        if barrier:
            open(os.path.join(barrier, str(port)), "w").close()
            deadline = time.monotonic() + 240
            while len(os.listdir(barrier)) < jobs:  # the others' state, not a clock: each is on its way
                if time.monotonic() > deadline:
                    raise SystemExit(f"only {len(os.listdir(barrier))} of {jobs} jobs bound their port")
                time.sleep(0.01)
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection((addr, port)) as c:
                assert c.recv(5) == b"hello"
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
with open(os.path.join(os.environ["OUT_DIR"], f"{rank}.txt"), "w") as f:
    f.write(str(port))
