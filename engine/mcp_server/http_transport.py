"""``serve``'s streamable HTTP transport: the ASGI guard in front of the MCP app (bearer token, body size
and time limits, a body that is not one MCP message refused as stdio refuses it), uvicorn's h11 protocol
with a deadline on request headers, the check that a host other machines can reach has a token, binding
the listening sockets before anything is announced, and serving a built server over them; and
:class:`TransportConfig`, how ``serve`` and the gateway reach their hosts (stdio or HTTP)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from contextsieve.errors import ContextSieveError, InputError, brief
from contextsieve.mcp_server.common import ServeConfig

__all__ = [
    "TransportConfig",
    "guarded_app",
    "header_deadline_protocol",
    "is_loopback",
    "check_exposure",
    "bind",
    "serve_http",
]


def guarded_app(
    app: Any,
    *,
    token: str | None,
    max_request_bytes: int,
    body_seconds: float = 30.0,
    jsonrpc_path: str | None = "/mcp",
) -> Any:
    """An ASGI wrapper: ``401`` without ``Authorization: Bearer <token>`` (when a token is set, compared
    in constant time), ``413`` for bodies over ``max_request_bytes`` (by header, and as read: a chunked
    body is read here, up to the limit, before the app sees it) and ``408`` for a body that has not
    arrived within ``body_seconds`` (default 30 s: a client that trickles its body holds no worker).

    A JSON POST to ``jsonrpc_path`` (default ``/mcp``; ``None``: none) whose body is not one MCP message
    gets ``400`` with the JSON-RPC error stdio answers for the same line
    (:func:`contextsieve.mcp_server.stdio.refusal`: ``-32600`` for a batch and for a request whose ``id`` is
    not a string or an integer). The SDK answered a batch with ``-32602`` and pydantic's text on the
    handshake protocol, and a request with an object ``id`` as a notification (``202``, no answer)."""
    import hmac

    import anyio

    async def reply(send: Any, status: int, body: bytes, kind: bytes = b"text/plain") -> None:
        head = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if token is not None:
            scheme, _, got = headers.get(b"authorization", b"").strip().partition(b" ")
            # the scheme name is case-insensitive (RFC 7235); the token is compared in constant time
            if scheme.lower() != b"bearer" or not hmac.compare_digest(got.strip(), token.encode()):
                await reply(send, 401, b"missing or wrong bearer token")
                return
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > max_request_bytes):
            await reply(send, 413, f"request body over {max_request_bytes} bytes".encode())
            return
        parts: list[bytes] = []
        seen = 0
        with anyio.move_on_after(body_seconds) as waited:
            while True:
                message = await receive()
                if message.get("type") == "http.disconnect":
                    return  # the client left before its body was complete
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > max_request_bytes:
                    await reply(send, 413, f"request body over {max_request_bytes} bytes".encode())
                    return
                parts.append(chunk)
                if not message.get("more_body", False):
                    break
        if waited.cancelled_caught:
            await reply(send, 408, f"request body not received within {body_seconds:g} s".encode())
            return
        body = b"".join(parts)
        path = str(scope.get("path") or "")
        json_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower() == b"application/json"
        if (
            jsonrpc_path is not None
            and scope.get("method") == "POST"
            and path.rstrip("/") == jsonrpc_path
            and json_type
        ):
            refused = _refusal(body)
            if refused == b"":  # accepted, never answered (JSON-RPC: a notification gets no reply)
                await reply(send, 202, b"")
                return
            if refused is not None:
                await reply(send, 400, refused, b"application/json")
                return
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: the disconnect a streaming response waits for

        await app(scope, replay, send)

    return guarded


def _refusal(body: bytes) -> bytes | None:
    """The JSON-RPC error (as JSON) owed to an HTTP POST body that is JSON but not one MCP message, the
    same as stdio answers (:func:`contextsieve.mcp_server.stdio.refusal`); ``None`` for a message, and for a
    body that is not JSON (the SDK answers ``-32700`` for that itself); ``b""`` when nothing is owed (a
    notification with params by position, a batch of notifications: ``202``, no body)."""
    import json

    import pydantic_core

    from contextsieve.mcp_server.stdio import refusal

    try:
        decoded = pydantic_core.from_json(body)
    except ValueError:
        return None
    error = refusal(decoded)
    if error is None:
        return None
    if error == []:
        return b""  # a notification, or a batch of them: nothing is owed

    def wire(e: Any) -> dict[str, Any]:  # id null when there is no id to answer: JSON-RPC requires it
        return {"jsonrpc": "2.0", "id": e.id, "error": e.error.model_dump(mode="json", exclude_none=True)}

    out = [wire(e) for e in error] if isinstance(error, list) else wire(error)
    return json.dumps(out, separators=(",", ":")).encode()


def header_deadline_protocol(seconds: float) -> type:
    """uvicorn's h11 protocol with a deadline on request headers: a connection whose request line and
    headers are not complete ``seconds`` after it opened, or after its previous response was sent, is
    closed. uvicorn itself times out only an idle keep-alive connection, and any byte received cancels
    that timer, so a client trickling a header a byte at a time (or opening connections and sending
    nothing) held each connection forever."""
    import asyncio

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()  # still waiting for a request's headers

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()  # the headers are in: the body has its own limit (guarded_app)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.conn.their_state is h11.IDLE:
                self._arm()  # the next request's headers get the same time

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (``127.0.0.0/8``, ``::1``): a server
    bound there is reachable from this machine only. ``""``, ``0.0.0.0``, ``::``, a name that does
    not resolve and a name with any other address are not."""
    import ipaddress
    import socket

    if not host:
        return False
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]).split("%")[0] for info in found}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_exposure(host: str, token: str | None, allow_unauthenticated: bool = False) -> None:
    """Refuse to serve HTTP on ``host`` without a bearer token when ``host`` is not loopback (anyone who
    can reach the address could call the tools and read and delete the stash) unless
    ``allow_unauthenticated`` says so on purpose (e.g. behind a proxy that authenticates).

    Raises:
        InputError: ``host`` is not loopback, no ``token``, and not ``allow_unauthenticated``.
    """
    if token is None and not allow_unauthenticated and not is_loopback(host):
        raise InputError(
            f"--host {brief(host)} is reachable from other machines and no token is set: pass --token-env VAR "
            "(clients then send 'Authorization: Bearer <token>'), bind 127.0.0.1, or pass --allow-unauthenticated "
            "if something in front of the server authenticates"
        )


@dataclass(frozen=True, kw_only=True)
class TransportConfig:
    """How ``serve`` (:func:`contextsieve.mcp_server.server.serve`) and the gateway
    (:func:`contextsieve.mcp_server.gateway.run_gateway`) reach their hosts. Checked when made: a
    ``TransportConfig`` that exists can be served.

    Attributes:
        kind: ``"stdio"`` (default: one host, on this process's stdin and stdout) or ``"http"``
            (streamable HTTP at ``http://host:port/mcp``, for many hosts at once).
        host: the address HTTP listens on (default ``"127.0.0.1"``: this machine only).
        port: the port HTTP listens on (default 8000; 0: a free port).
        token: the bearer token HTTP requires (``Authorization: Bearer <token>``; default None: none; not
            in the ``repr``).
        allow_unauthenticated: serve HTTP on a ``host`` other machines can reach without a ``token``
            (default False: refused; e.g. behind a proxy that authenticates).

    ``host``, ``port``, ``token`` and ``allow_unauthenticated`` are for HTTP: stdio ignores them.

    Raises:
        InputError: ``kind`` is neither ``stdio`` nor ``http``; ``http`` on a ``host`` that is not
            loopback without a ``token`` or ``allow_unauthenticated`` (:func:`check_exposure`).
    """

    kind: str = "stdio"
    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = field(default=None, repr=False)
    allow_unauthenticated: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("stdio", "http"):
            raise InputError(f"transport must be 'stdio' or 'http', got {brief(self.kind)}")
        if self.kind == "http":
            check_exposure(self.host, self.token, self.allow_unauthenticated)


def bind(host: str, port: int, *, listen: bool = True) -> list[Any]:
    """Listening TCP sockets on every address of ``host`` at ``port`` (``0``: a free port, the same on
    every address), before anything is announced, so that a taken port is an error of this call.
    ``listen=False``: bound only (a check that accepts no connection; the CLI makes it before loading
    the agent).

    Raises:
        ContextSieveError: the address cannot be listened on (the port is taken, a privileged port, a
            host name that does not resolve); the message says which and what to do.
    """
    import errno
    import socket

    where = f"[{host}]" if ":" in host else host
    try:
        found = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as e:
        raise ContextSieveError(f"cannot listen on {where}:{port}: cannot resolve {brief(host)} ({e})") from e
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys((f, k, p, "", a) for f, k, p, _, a in found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            if sys.platform != "win32":  # POSIX: a port whose old connections linger in TIME_WAIT can be reused
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # the port the first address got
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
            if listen:
                sock.listen(2048)
    except OSError as e:
        for sock in sockets:
            sock.close()
        if e.errno == errno.EADDRINUSE:
            why = (
                "the port is in use (another process listens there): stop it, or pick another --port (0: any free one)"
            )
        elif e.errno == errno.EACCES:
            why = "permission denied (ports below 1024 need privileges): pick another --port"
        elif e.errno == errno.EADDRNOTAVAIL:
            why = "no network interface of this machine has that address: pick another --host"
        else:
            why = e.strerror or str(e)
        raise ContextSieveError(f"cannot listen on {where}:{port}: {why}") from e
    return sockets


def serve_http(server: Any, sockets: list[Any], host: str, token: str | None, config: ServeConfig) -> None:
    """Serve ``server`` over streamable HTTP on the bound ``sockets`` until interrupted, announcing the
    address on stderr once it serves."""
    import uvicorn

    app = guarded_app(
        server.streamable_http_app(),
        token=token,
        max_request_bytes=config.max_request_bytes,
        body_seconds=config.body_seconds,
    )
    where = f"[{host}]" if ":" in host else host
    url = f"http://{where}:{sockets[0].getsockname()[1]}/mcp"

    class Announcing(uvicorn.Server):
        async def startup(self, sockets: list[Any] | None = None) -> None:
            await super().startup(sockets=sockets)  # a startup that fails exits (SystemExit) instead
            print(f"contextsieve: serving MCP (streamable HTTP) at {url}", file=sys.stderr, flush=True)

    # log_config=None, log_level=None: uvicorn's loggers go through the process's logging like the SDK's
    http = uvicorn.Config(app, log_config=None, log_level=None, http=header_deadline_protocol(config.header_seconds))
    try:
        Announcing(http).run(sockets=sockets)
    except SystemExit as e:  # uvicorn exits with 3 when its startup fails
        raise ContextSieveError(f"the HTTP server did not start (uvicorn exit code {e.code}); see the log above") from e
