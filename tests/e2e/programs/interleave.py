"""Prints LINES lines on stdout and as many on stderr, as fast as it can, in
writes of several lines or parts of a line, so that ranks' bytes meet in
sgpu's pipes. Each line says who wrote it and carries a checkable body; see
line() (the tests import it)."""
import os
import sys


def line(rank, stream, i):
    # Lengths from 1 byte to a few KiB, and every 97th line 100 KiB: longer than a pipe's buffer.
    n = 100_000 if i % 97 == 0 else (i * 37) % 3000
    body = (f"{rank}{stream}{i % 10}" * (n // 3 + 1))[:n]
    return f"{rank}:{stream}:{i}:{body}\n".encode()


def main():
    lines = int(sys.argv[1])
    rank = int(os.environ["RANK"])
    for stream, fd in (("o", 1), ("e", 2)):
        pending = b""
        for i in range(lines):
            pending += line(rank, stream, i)
            if len(pending) > 5000 or i % 13 == 0:
                cut = len(pending) // 2 if i % 7 == 0 else len(pending)  # sometimes half a line
                os.write(fd, pending[:cut])
                pending = pending[cut:]
        os.write(fd, pending)


if __name__ == "__main__":
    main()
