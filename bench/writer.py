"""A rank that writes BYTES bytes of lines to stdout, as fast as it can.

Every line is LINE bytes: "<rN>" then a letter chosen by the rank, repeated,
then "\n", so a checker can count each rank's whole lines in the launcher's
output whatever prefix the launcher adds, and a line torn by another rank's
bytes no longer matches. Usage: writer.py BYTES LINE
"""
import os
import sys


def line_for(rank, length):
    head = f"<r{rank}>".encode()
    return head + bytes([ord("a") + rank % 26]) * (length - len(head) - 1) + b"\n"


def main():
    total, length = int(sys.argv[1]), int(sys.argv[2])
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    line = line_for(rank, length)
    block = line * max(1, (256 * 1024) // length)
    lines = total // length
    per_block = len(block) // length
    view = memoryview(block)
    while lines > 0:
        n = min(lines, per_block)
        chunk = view[: n * length]
        while chunk:
            written = os.write(1, chunk)
            chunk = chunk[written:]
        lines -= n


if __name__ == "__main__":
    main()
