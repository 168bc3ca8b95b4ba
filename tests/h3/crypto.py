"""Hostile CRYPTO data for tests/h3_hostile.rs: one hand-built QUIC Initial packet (version 1,
padded to 1,200 bytes, protected with the Initial keys of a fresh connection ID, as any client's)
whose CRYPTO frame is what no real client sends, then the server's answer read back.

    crypto.py HOST PORT MODE

MODE `gap`: 100 bytes at offset 20,000, which the server would have to hold until the 20,000
before them arrive (out of order, past lb-tls's 16 KiB CRYPTO buffer). MODE `oversized`: at
offset 0, a ClientHello whose header claims 16 MiB. Prints one JSON line: `closed` (the server
answered with CONNECTION_CLOSE), its `error_code` and `reason`, or `closed: false` when none
came within 3 seconds; `datagrams`: how many the server sent.
"""

import json
import os
import socket
import sys

from aioquic.buffer import Buffer
from aioquic.quic.crypto import CryptoPair
from aioquic.quic.packet import QuicPacketType, pull_quic_header

VERSION_1 = 0x00000001
CAP_PAST = 20_000


def varint(value):
    if value < 0x40:
        return bytes([value])
    if value < 0x4000:
        return (0x4000 | value).to_bytes(2, "big")
    return (0x80000000 | value).to_bytes(4, "big")


def crypto_frame(mode):
    if mode == "gap":
        offset, data = CAP_PAST, os.urandom(100)
    elif mode == "oversized":
        # A ClientHello (type 1) claiming 0xFFFFFF bytes, the start of its body after.
        offset, data = 0, bytes([1, 0xFF, 0xFF, 0xFF]) + bytes([3, 3]) + os.urandom(200)
    else:
        sys.exit(f"crypto.py: unknown mode {mode!r}")
    return b"\x06" + varint(offset) + varint(len(data)) + data


def initial(dcid, scid, payload, crypto):
    # Padded so that the datagram is 1,200 bytes, as a client's first must be (RFC 9000 §14.1).
    header_len = 1 + 4 + 1 + len(dcid) + 1 + len(scid) + 1 + 2 + 4
    payload += bytes(1200 - header_len - len(payload) - 16)
    length = 4 + len(payload) + 16
    header = (bytes([0xC3]) + VERSION_1.to_bytes(4, "big") + bytes([len(dcid)]) + dcid + bytes([len(scid)]) + scid
              + varint(0) + (0x4000 | length).to_bytes(2, "big") + (0).to_bytes(4, "big"))
    return crypto.encrypt_packet(header, payload, 0)


def connection_close(datagram, crypto, scid):
    """(error code, reason) of the first CONNECTION_CLOSE in the server's Initial packets."""
    buf = Buffer(data=datagram)
    while not buf.eof():
        start = buf.tell()
        header = pull_quic_header(buf, host_cid_length=len(scid))
        end = start + header.packet_length
        if header.packet_type != QuicPacketType.INITIAL or header.version != VERSION_1:
            buf.seek(end)
            continue
        _, payload, _ = crypto.decrypt_packet(datagram[start:end], buf.tell() - start, 0)
        buf.seek(end)
        frames = Buffer(data=payload)
        while not frames.eof():
            kind = frames.pull_uint_var()
            if kind == 0x00:  # PADDING
                continue
            if kind in (0x02, 0x03):  # ACK
                frames.pull_uint_var()
                frames.pull_uint_var()
                ranges = frames.pull_uint_var()
                frames.pull_uint_var()
                for _ in range(2 * ranges):
                    frames.pull_uint_var()
                if kind == 0x03:
                    for _ in range(3):
                        frames.pull_uint_var()
                continue
            if kind == 0x06:  # CRYPTO
                frames.pull_uint_var()
                frames.pull_bytes(frames.pull_uint_var())
                continue
            if kind == 0x1C:  # CONNECTION_CLOSE (transport)
                code = frames.pull_uint_var()
                frames.pull_uint_var()
                reason = frames.pull_bytes(frames.pull_uint_var()).decode(errors="replace")
                return code, reason
            return None
    return None


def main():
    host, port, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dcid, scid = os.urandom(8), os.urandom(8)
    crypto = CryptoPair()
    crypto.setup_initial(cid=dcid, is_client=True, version=VERSION_1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3)
    sock.sendto(initial(dcid, scid, crypto_frame(mode), crypto), (host, port))
    result = {"closed": False, "datagrams": 0}
    try:
        while True:
            datagram, _ = sock.recvfrom(65536)
            result["datagrams"] += 1
            closed = connection_close(datagram, crypto, scid)
            if closed:
                result = {"closed": True, "error_code": closed[0], "reason": closed[1], "datagrams": result["datagrams"]}
                break
    except socket.timeout:
        pass
    finally:
        sock.close()
    print(json.dumps(result), flush=True)


main()
