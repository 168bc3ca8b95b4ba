"""A real WebSocket peer for the tests (Debian's python3-websockets), run by lb-testkit.

    peer.py serve PORT           echo server on 127.0.0.1:PORT; prints "listening" when ready.
                                 "headers" is answered with the request's headers as JSON;
                                 "bye" makes the server close with code 4000.
    peer.py talk URL N GAP       client: sends N messages GAP seconds apart, each must come back
                                 (wss:// without certificate checks); then "headers"; prints
                                 "echoed N", the headers line, and "closed CODE" at the end.
"""

import asyncio
import json
import ssl
import sys

import websockets


async def echo(ws, path=None):
    try:
        async for message in ws:
            if message == "headers":
                await ws.send(json.dumps({k.lower(): v for k, v in ws.request_headers.raw_items()}))
            elif message == "bye":
                await ws.close(code=4000, reason="bye")
                return
            else:
                await ws.send(message)
    except websockets.ConnectionClosed:
        pass


async def serve(port):
    async with websockets.serve(echo, "127.0.0.1", port, ping_interval=None):
        print("listening", flush=True)
        await asyncio.Future()


async def talk(url, n, gap):
    context = None
    if url.startswith("wss:"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    async with websockets.connect(url, ssl=context, ping_interval=None, open_timeout=10) as ws:
        echoed = 0
        try:
            for i in range(n):
                text = f"message {i} " + "x" * (i * 37 % 3000)
                await ws.send(text)
                back = await asyncio.wait_for(ws.recv(), 10)
                if back != text:
                    print(f"mismatch at {i}", flush=True)
                    sys.exit(1)
                echoed += 1
                if gap:
                    await asyncio.sleep(gap)
        except websockets.ConnectionClosed as closed:
            print(f"echoed {echoed}", flush=True)
            print(f"closed {closed.rcvd.code if closed.rcvd else 'abnormally'}", flush=True)
            return
        print(f"echoed {echoed}", flush=True)
        await ws.send("headers")
        print(await asyncio.wait_for(ws.recv(), 10), flush=True)
        await ws.send("bye")
        try:
            await asyncio.wait_for(ws.recv(), 10)
        except websockets.ConnectionClosed as closed:
            print(f"closed {closed.rcvd.code if closed.rcvd else 'abnormally'}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        asyncio.run(serve(int(sys.argv[2])))
    else:
        asyncio.run(talk(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
