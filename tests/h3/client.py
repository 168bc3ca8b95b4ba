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

With --load COUNT SECONDS, sends COUNT requests (GET /echo?load, four at once) within SECONDS
as a client that follows RFC 9114 does: after a GOAWAY it opens the next requests on a new
connection (resuming the session), and retries only requests the server says it did not
process (reset with H3_REQUEST_REJECTED, or at or past the GOAWAY's stream ID); prints
{"ok", "failed", "retried", "connections", "goaways", "errors"}.
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
from aioquic.quic.events import ConnectionTerminated, StreamReset

H3_REQUEST_REJECTED = 0x10B


class Failed(Exception):
    """A request without a whole response: its stream, and the reset code if it was reset."""

    def __init__(self, stream, why, code=None):
        super().__init__(f"stream {stream}: {why!r}")
        self.stream, self.code = stream, code


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
        if isinstance(event, StreamReset) and event.stream_id in self.waiting:
            done = self.waiting.pop(event.stream_id)
            if not done.done():
                done.set_exception(Failed(event.stream_id, "reset", event.error_code))
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
        try:
            await asyncio.wait_for(done, 20)
        except Failed:
            raise
        except Exception as e:
            raise Failed(stream, e)
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


def retryable(client, failure):
    """Whether RFC 9114 says the server did not process the request (§4.1.1, §5.2)."""
    if not isinstance(failure, Failed):
        return False
    if failure.code == H3_REQUEST_REJECTED:
        return True
    return client.h3.goaway is not None and failure.stream >= client.h3.goaway


async def load(host, port, authority, configuration, count, seconds):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    totals = {"ok": 0, "failed": 0, "retried": 0, "connections": 0, "goaways": 0, "errors": []}
    ticket = []
    while count > 0 and loop.time() < deadline:
        config = configuration()
        config.session_ticket = ticket[-1] if ticket else None
        totals["connections"] += 1
        async with connect(host, port, configuration=config, create_protocol=Client,
                           session_ticket_handler=ticket.append) as client:
            while count > 0 and loop.time() < deadline and not client.closed:
                results = await asyncio.gather(*(
                    client.request(authority, "GET", "/echo?load", b"") for _ in range(min(4, count))),
                    return_exceptions=True)
                for result in results:
                    if isinstance(result, dict) and result["status"] == 200:
                        totals["ok"] += 1
                        count -= 1
                    elif retryable(client, result):
                        totals["retried"] += 1
                    else:
                        totals["failed"] += 1
                        totals["errors"].append(repr(result)[:300])
                        count -= 1
                if client.h3.goaway is not None:
                    totals["goaways"] += 1
                    break
    return totals


async def lines(first=None):
    """The commands on stdin, read off the event loop so that the connection lives meanwhile;
    `first` (read already) before them."""
    if first is not None:
        yield first
    while True:
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        if line.strip():
            yield json.loads(line)


def say(value):
    print(json.dumps(value), flush=True)


async def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--load" in sys.argv:
        args = sys.argv[1:sys.argv.index("--load")]
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
    if "--load" in sys.argv:
        at = sys.argv.index("--load")
        count, seconds = int(sys.argv[at + 1]), float(sys.argv[at + 2])

        def configuration():
            c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server_name)
            c.verify_mode = ssl.CERT_REQUIRED
            c.load_verify_locations(ca)
            return c

        say(await load(host, port, authority, configuration, count, seconds))
        return
    if not session:
        commands = lines({"requests": json.load(sys.stdin)})
    elif early:
        # The first command before connecting, so that its requests leave before the handshake ends.
        commands = lines(json.loads(sys.stdin.readline()))
    else:
        commands = lines()
    async with connect(host, port, configuration=config, create_protocol=Client,
                       session_ticket_handler=save_ticket, wait_connected=not early) as client:
        async for command in commands:
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
