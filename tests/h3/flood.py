"""A flood of QUIC Initial packets for tests/h3_hostile.rs: COUNT new connection attempts, each
a real client's first datagram (aioquic's, so a fresh connection ID and a ClientHello) sent
from a socket of its own (so a source port of its own), none ever answered. Prints how many
were sent. With --addresses, each socket is bound to an address of its own in 127.0.0.0/8
(127.1.0.1, 127.1.0.2, ...), as a flood from many hosts, spoofed or not, would come.

    flood.py HOST PORT COUNT [--addresses]
"""

import socket
import sys
import time

from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection

host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
addresses = "--addresses" in sys.argv[4:]
sockets = []
sent = 0
for i in range(count):
    connection = QuicConnection(configuration=QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN,
                                                                 server_name="api.example.test"))
    connection.connect((host, port), now=time.time())
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((f"127.1.{i // 250}.{i % 250 + 1}" if addresses else "127.0.0.1", 0))
    sockets.append(sock)
    for data, _ in connection.datagrams_to_send(now=time.time()):
        sock.sendto(data, (host, port))
        sent += 1
        break
print(sent, flush=True)
for sock in sockets:
    sock.close()
