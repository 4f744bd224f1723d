"""Rank 0 binds MASTER_PORT the plain way (no SO_REUSEADDR), as any server
outside torch would, and listens; rank 1 connects and both write the port to
$OUT_DIR/<rank>.txt. Rank 1 retries a refused connection while rank 0 is
still starting, as a client of any rendezvous does.

With $BARRIER set (a Unix socket the test listens on), rank 0 keeps its port
bound until the test lets go: the test answers once every job has bound its
own, so every job holds its port while every other job takes one, and the
ports must differ (a job that ended may rightly give its port to a later one)."""
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
        if "BARRIER" in os.environ:
            with socket.socket(socket.AF_UNIX) as b:
                b.connect(os.environ["BARRIER"])
                b.recv(1)  # end of file: every job has bound its port
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
