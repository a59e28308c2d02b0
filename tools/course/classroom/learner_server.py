"""The learner's kernel side of the grading boundary: serve the trusted grader's calls for one test cell.

While the trusted grader process runs a test cell, the kernel runs one small cell of ours,
`serve(address, token, globals())`: it connects to the trusted process (a Unix socket in the folder the
kernel shares with its grader, or a port on the loopback interface where the kernel has no network
namespace of its own), sends
the cell's token, then answers each request (`tools.course.grader.boundary.serve_request`: the learner's
function of that name, called in this kernel's namespace, its result and the arguments' new state
encoded safely) until the trusted side says `done` or closes the connection. Anything this process does
to itself (patched modules, hooks, a different reply) can only change what the learner's functions
answer, never the verdict, which the trusted process computes.

Frames: an 8-byte big-endian length, then the payload.
"""

from __future__ import annotations

import socket
import struct

from tools.course.grader.boundary import serve_request

FRAME = struct.Struct(">Q")
DONE = b"done"
CONNECT_TIMEOUT_S = 30.0


def send_frame(link: socket.socket, payload: bytes) -> None:
    link.sendall(FRAME.pack(len(payload)) + payload)


def recv_exact(link: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = link.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(link: socket.socket, limit: int | None = None) -> bytes:
    """One frame; ConnectionError when the other side closed it, ValueError past `limit` bytes."""
    (size,) = FRAME.unpack(recv_exact(link, FRAME.size))
    if limit is not None and size > limit:
        raise ValueError(f"a frame of {size} bytes, more than {limit}")
    return recv_exact(link, size)


def connect(address: int | str) -> socket.socket:
    """The trusted grader's listening socket: a Unix socket's path (a kernel in a network namespace of its
    own), or a port on the loopback interface."""
    if isinstance(address, str):
        link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        link.settimeout(CONNECT_TIMEOUT_S)
        try:
            link.connect(address)
        except OSError:
            link.close()
            raise
        return link
    return socket.create_connection(("127.0.0.1", address), timeout=CONNECT_TIMEOUT_S)


def serve(address: int | str, token: str, namespace: dict) -> None:
    """Answer the trusted grader's requests for one test cell (see the module docstring)."""
    with connect(address) as link:
        link.settimeout(None)
        send_frame(link, token.encode("ascii"))
        while True:
            try:
                request = recv_frame(link)
            except ConnectionError:
                return
            if request == DONE:
                return
            send_frame(link, serve_request(request, namespace))
