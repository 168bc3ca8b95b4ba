"""A flood of QUIC Initial packets for tests/h3_hostile.rs: COUNT new connection attempts, each
a real client's first datagram (aioquic's, so a fresh connection ID and a ClientHello) sent
from a socket of its own (so a source port of its own), none ever answered. Prints how many
were sent.

    flood.py HOST PORT COUNT
"""

import socket
import sys
import time

from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sockets = []
sent = 0
for _ in range(count):
    connection = QuicConnection(configuration=QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                                                                 server_name="api.example.test"))
    connection.connect((host, port), now=time.time())
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sockets.append(sock)
    for data, _ in connection.datagrams_to_send(now=time.time()):
        sock.sendto(data, (host, port))
        sent += 1
        break
print(sent, flush=True)
for sock in sockets:
    sock.close()
