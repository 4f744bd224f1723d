"""Just enough of sgpu's rendezvous protocol (lib/rendezvous/protocol.hpp) to
play a misbehaving peer in tests: frames, hellos and the HMAC proofs."""
import hashlib
import hmac
import os
import socket
import struct

MAGIC = b"SGPURDZV"
VERSION = 9  # lib/rendezvous/protocol.hpp kProtocolVersion
CLIENT_HELLO, SERVER_HELLO, AUTH, REJECT, WELCOME = 1, 2, 3, 4, 5
JOIN, ASSIGN, READY, START, ABORT, HEARTBEAT = 6, 7, 8, 9, 10, 11
PROBE, PROBE_RESULT = 13, 14


def frame(msg_type, payload):
    return struct.pack(">IB", len(payload), msg_type) + payload


def client_hello(nonce, version=VERSION):
    return frame(CLIENT_HELLO, MAGIC + struct.pack(">H", version) + nonce)


def server_hello(nonce, proof, version=VERSION):
    return frame(SERVER_HELLO, MAGIC + struct.pack(">H", version) + nonce + proof)


def proof(secret, label, first, second):
    return hmac.new(secret.encode(), label + first + second, hashlib.sha256).digest()


def client_proof(secret, server_nonce, client_nonce):
    return proof(secret, b"sgpu-rdzv-v1 agent", server_nonce, client_nonce)


def server_proof(secret, client_nonce, server_nonce):
    return proof(secret, b"sgpu-rdzv-v1 launcher", client_nonce, server_nonce)


def read_frame(sock):
    """(type, payload), or None when the peer closed the connection."""
    head = _read_exactly(sock, 5)
    if head is None:
        return None
    length, msg_type = struct.unpack(">IB", head)
    payload = _read_exactly(sock, length)
    return None if payload is None else (msg_type, payload)


def _read_exactly(sock, n):
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def reject_reason(payload):
    (length,) = struct.unpack(">I", payload[2:6])
    return payload[6:6 + length].decode()


def read_until_closed(sock, timeout):
    """Every frame the peer sends until it closes; raises socket.timeout if it never does."""
    sock.settimeout(timeout)
    frames = []
    while True:
        f = read_frame(sock)
        if f is None:
            return frames
        frames.append(f)


def connect(port, host="127.0.0.1"):
    return socket.create_connection((host, port), timeout=10)


def nonce():
    return os.urandom(32)
