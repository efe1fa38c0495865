"""A loopback TCP sink: the raw-copy reference of the transfer benchmark. Per message the client sends
an 8-byte little-endian length, then that many bytes; the sink reads them into one preallocated buffer
and answers one byte."""

from __future__ import annotations

import socket
import struct
import sys


def serve(port: int = 0) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    print(f"listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    buffer = bytearray(0)
    while True:
        connection, _ = listener.accept()
        with connection:
            while True:
                header = connection.recv(8, socket.MSG_WAITALL)
                if len(header) < 8:
                    break
                (length,) = struct.unpack("<Q", header)
                if len(buffer) < length:
                    buffer = bytearray(length)
                view = memoryview(buffer)
                received = 0
                while received < length:
                    count = connection.recv_into(view[received:length])
                    if count == 0:
                        return
                    received += count
                connection.sendall(b"\x01")


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
