"""An HTTP/3 client for tests/h3_*.rs, on aioquic: sends the requests given as JSON on stdin,
all at once on one QUIC connection (one stream each), and prints one JSON line: whether the
TLS session was resumed, and each response (status, headers, body length, sha256 and the first
64 KiB of the body). With TICKET_FILE, offers the session ticket saved there (if any) and saves
the one the server sends.

    client.py HOST PORT SERVER_NAME CA_FILE [TICKET_FILE] < [{"method": "GET", "path": "/", "body": ""}, ...]

With --session (after the arguments), one connection is kept open and stdin is read a JSON
command a line, each answered by one JSON line on stdout:

    {"requests": [...]}   the requests, at once; answer {"responses": [...]}
    {"migrate": true}     send from a new socket (a new source port) with a new connection ID,
                          as a client does that changes networks; answer {"port": new port}
    {"state": true}       {"goaway": the last GOAWAY's stream ID or null, "closed": bool,
                          "resumed": bool, "early_data_accepted": bool}

and at the end of stdin the connection closes. With --early, the first command's requests go
before the handshake completes: in 0-RTT early data when the ticket allows it.
"""

import asyncio
import hashlib
import json
import os
import pickle
import socket
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import Buffer
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated


class Observing(H3Connection):
    """aioquic 1.2 reads a GOAWAY and drops it; this notes its stream ID."""

    goaway = None

    def _handle_control_frame(self, frame_type, frame_data):
        if frame_type == FrameType.GOAWAY:
            self.goaway = Buffer(data=frame_data).pull_uint_var()
        super()._handle_control_frame(frame_type, frame_data)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = Observing(self._quic)
        self.waiting = {}
        self.responses = {}
        self.closed = False

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.closed = True
            for done in self.waiting.values():
                if not done.done():
                    done.set_exception(ConnectionError(f"connection closed: {event.reason_phrase}"))
        for h3_event in self.h3.handle_event(event):
            stream = getattr(h3_event, "stream_id", None)
            if stream not in self.responses:
                continue
            response = self.responses[stream]
            if isinstance(h3_event, HeadersReceived):
                for name, value in h3_event.headers:
                    response["headers"].append([name.decode(), value.decode()])
            elif isinstance(h3_event, DataReceived):
                response["body"] += h3_event.data
            if getattr(h3_event, "stream_ended", False):
                self.waiting.pop(stream).set_result(None)

    async def request(self, authority, method, path, body):
        stream = self._quic.get_next_available_stream_id()
        headers = [(b":method", method.encode()), (b":scheme", b"https"),
                   (b":authority", authority.encode()), (b":path", path.encode())]
        if body:
            headers.append((b"content-length", str(len(body)).encode()))
        self.h3.send_headers(stream, headers, end_stream=not body)
        if body:
            self.h3.send_data(stream, body, end_stream=True)
        self.responses[stream] = {"headers": [], "body": b""}
        done = asyncio.get_running_loop().create_future()
        self.waiting[stream] = done
        self.transmit()
        await asyncio.wait_for(done, 20)
        response = self.responses.pop(stream)
        status = next((int(v) for n, v in response["headers"] if n == ":status"), None)
        data = response["body"]
        return {"status": status, "headers": response["headers"], "length": len(data),
                "sha256": hashlib.sha256(data).hexdigest(), "body": data[:65536].decode("latin-1")}

    async def requests(self, authority, requests):
        results = await asyncio.gather(*(
            self.request(authority, r.get("method", "GET"), r["path"], r.get("body", "").encode("latin-1"))
            for r in requests), return_exceptions=True)
        return [{"status": None, "error": repr(r)} if isinstance(r, BaseException) else r for r in results]

    async def migrate(self, host):
        """A new socket, so a new source port, and a new connection ID towards the server; the
        old socket is left open (closing it would end the protocol)."""
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0, 0, 0))
        transport, _ = await asyncio.get_running_loop().create_datagram_endpoint(lambda: self, sock=sock)
        self._quic.change_connection_id()
        self.transmit()
        return transport.get_extra_info("sockname")[1]

    def state(self):
        return {"goaway": self.h3.goaway, "closed": self.closed,
                "resumed": self._quic.tls.session_resumed,
                "early_data_accepted": self._quic.tls.early_data_accepted}


def lines():
    for line in sys.stdin:
        if line.strip():
            yield json.loads(line)


def say(value):
    print(json.dumps(value), flush=True)


async def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    session, early = "--session" in sys.argv, "--early" in sys.argv
    host, port, server_name, ca = args[0], int(args[1]), args[2], args[3]
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server_name)
    config.verify_mode = ssl.CERT_REQUIRED
    config.load_verify_locations(ca)
    ticket_file = args[4] if len(args) > 4 else None
    if ticket_file and os.path.exists(ticket_file):
        with open(ticket_file, "rb") as f:
            config.session_ticket = pickle.load(f)

    def save_ticket(ticket):
        if ticket_file:
            with open(ticket_file, "wb") as f:
                pickle.dump(ticket, f)

    authority = f"{server_name}:{port}"
    commands = lines() if session else iter([{"requests": json.load(sys.stdin)}])
    async with connect(host, port, configuration=config, create_protocol=Client,
                       session_ticket_handler=save_ticket, wait_connected=not early) as client:
        for command in commands:
            if "requests" in command:
                results = await client.requests(authority, command["requests"])
                if not session:
                    say({"resumed": client._quic.tls.session_resumed, "responses": results})
                    break
                say({"responses": results})
            elif command.get("migrate"):
                say({"port": await client.migrate(host)})
            elif command.get("state"):
                say(client.state())


asyncio.run(main())
