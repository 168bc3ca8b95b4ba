"""An HTTP/3 client for tests/h3_*.rs, on aioquic: sends the requests given as JSON on stdin,
all at once on one QUIC connection (one stream each), and prints one JSON line: whether the
TLS session was resumed, and each response (status, headers, body length, sha256 and the first
64 KiB of the body). With TICKET_FILE, offers the session ticket saved there (if any) and saves
the one the server sends.

    client.py HOST PORT SERVER_NAME CA_FILE [TICKET_FILE] < [{"method": "GET", "path": "/", "body": ""}, ...]
"""

import asyncio
import hashlib
import json
import os
import pickle
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.waiting = {}
        self.responses = {}

    def quic_event_received(self, event):
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


async def main():
    host, port, server_name, ca = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    requests = json.load(sys.stdin)
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server_name)
    config.verify_mode = ssl.CERT_REQUIRED
    config.load_verify_locations(ca)
    ticket_file = sys.argv[5] if len(sys.argv) > 5 else None
    if ticket_file and os.path.exists(ticket_file):
        with open(ticket_file, "rb") as f:
            config.session_ticket = pickle.load(f)

    def save_ticket(ticket):
        if ticket_file:
            with open(ticket_file, "wb") as f:
                pickle.dump(ticket, f)

    async with connect(host, port, configuration=config, create_protocol=Client,
                       session_ticket_handler=save_ticket) as client:
        authority = f"{server_name}:{port}"
        results = await asyncio.gather(*(
            client.request(authority, r.get("method", "GET"), r["path"], r.get("body", "").encode("latin-1"))
            for r in requests))
        resumed = client._quic.tls.session_resumed
    print(json.dumps({"resumed": resumed, "responses": results}))


asyncio.run(main())
