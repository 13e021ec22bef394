"""Over real sockets, a ``serve --transport http`` process closes connections that
trickle their headers (or send none) within ``--header-timeout`` and answers 408 to a body that
trickles past ``--body-timeout``; well-behaved clients are served throughout, and a keep-alive
connection gets the same deadline for its next request's headers."""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tests.helpers.servers import http_server

TOKEN = "t0ken-for-the-test"
INIT = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18",'
    b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
)


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closes ``sock`` (None if still open after ``seconds``), sending one
    byte of ``trickle`` every 0.2 s meanwhile."""
    start = time.monotonic()
    sock.settimeout(0.2)
    sent = 0
    while time.monotonic() - start < seconds:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except socket.timeout:
            pass
        except OSError:  # reset by the server
            return time.monotonic() - start
        if sent < len(trickle):
            try:
                sock.sendall(trickle[sent : sent + 1])
            except OSError:
                return time.monotonic() - start
            sent += 1
    return None


def test_slow_headers_and_bodies_hold_no_connection_past_their_timeouts(model_cache: Path, int8) -> None:  # noqa: ANN001
    with http_server(model_cache, "--header-timeout", "1", "--body-timeout", "1.5", "--no-stash") as url:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        headers = (
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n".encode()
            + b"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        )
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        trickling = [socket.create_connection(("127.0.0.1", port)) for _ in range(10)]
        started = time.monotonic()
        for s in trickling:
            s.sendall(headers[:5])
        # a well-behaved client is served while 20 connections stall
        good = socket.create_connection(("127.0.0.1", port))
        good.sendall(headers + f"Content-Length: {len(INIT)}\r\n\r\n".encode() + INIT)
        good.settimeout(30)
        assert good.recv(4096).startswith(b"HTTP/1.1 200"), "a complete request is answered"
        good.close()
        closed = [_closed_within(s, 6.0, headers[5:]) for s in trickling[:1]]
        closed += [_closed_within(s, 6.0 - (time.monotonic() - started)) for s in trickling[1:] + silent]
        assert all(c is not None for c in closed), closed  # was: 600 of 600 open after 90 s
        assert time.monotonic() - started < 6.0
        for s in silent + trickling:
            s.close()

        # a body that trickles past the body timeout: 408, then the connection is done
        body = socket.create_connection(("127.0.0.1", port))
        body.sendall(headers + f"Content-Length: {len(INIT)}\r\n\r\n".encode() + INIT[:10])
        body.settimeout(6.0)
        t = time.monotonic()
        answer = body.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert 1.0 < time.monotonic() - t < 6.0
        body.close()

        # keep-alive: after a complete request, the next request's headers get the same deadline
        alive = socket.create_connection(("127.0.0.1", port))
        alive.sendall(
            f"GET /nothing HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        alive.settimeout(10)
        assert alive.recv(4096).startswith(b"HTTP/1.1 404")
        assert _closed_within(alive, 6.0, b"GET /nothing HTTP/1.1\r\nHost: x\r\n") is not None
        alive.close()
