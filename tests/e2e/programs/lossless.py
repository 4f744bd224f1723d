"""Writes random bytes (binary and text: "\n", "\r", "\r\n", invalid UTF-8,
escape codes) to stdout and stderr in writes of random size, ending without a
newline. data() gives the exact bytes (the tests import it). Usage:
lossless.py BYTES [forever]: with "forever" it keeps writing the stream
(cycled, a few MB/s) and records after each write how many bytes it has written in
$OUT_DIR/count-<rank>-<stream>, until it is killed."""
import os
import random
import sys
import time


def data(rank, stream, size):
    rng = random.Random(f"{rank}-{stream}")
    pieces = []
    total = 0
    while total < size:
        kind = rng.random()
        if kind < 0.3:
            p = rng.randbytes(rng.randint(1, 300))
        elif kind < 0.9:
            p = "".join(rng.choice("abc xyz0123\n\r\t\x1b[m") for _ in range(rng.randint(1, 200))).encode()
        else:
            p = b"x" * rng.randint(1000, 70000) + b"\r\n"
        pieces.append(p)
        total += len(p)
    out = b"".join(pieces)[:size]
    return out.rstrip(b"\n\r") + b"end"


def main():
    size = int(sys.argv[1])
    forever = len(sys.argv) > 2 and sys.argv[2] == "forever"
    rank = int(os.environ["RANK"])
    streams = [(1, data(rank, "o", size), "o"), (2, data(rank, "e", size), "e")]
    rng = random.Random(rank)
    counts = {}
    if forever:
        for _, _, name in streams:
            counts[name] = os.open(os.path.join(os.environ["OUT_DIR"], f"count-{rank}-{name}"),
                                   os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    pos = [0, 0]
    written = [0, 0]
    while True:
        progressed = False
        for k, (fd, blob, name) in enumerate(streams):
            if not forever and pos[k] >= len(blob):
                continue
            n = rng.randint(1, 100_000 if not forever else 20_000)
            start = pos[k] % len(blob)
            chunk = blob[start:start + n]
            done = os.write(fd, chunk)
            pos[k] += done
            written[k] += done
            progressed = True
            if forever:
                os.pwrite(counts[name], f"{written[k]:>20}".encode(), 0)
        if not progressed:
            return
        if forever:
            time.sleep(0.005)  # a few MB/s per rank: enough to be mid-write when killed, little disk


if __name__ == "__main__":
    main()
