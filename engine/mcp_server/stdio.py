"""Serving over stdio so that every line gets an answer: the SDK's stdio transport turns a line it
cannot read into an exception that its server loop drops, so the host waits for its own timeout,
and it reads a request whose ``id`` is not a string or an integer as a notification and sends
nothing at all.

Here such a line gets a JSON-RPC error at once, the same as over HTTP (:func:`refusal` decides for
both transports; ``serve``'s HTTP app calls it on every POST body): ``-32700`` (parse error) for a
line that is not JSON the SDK accepts (not JSON at all, a lone surrogate escape such as
``"\\ud800"``, nesting deeper than the parser allows), ``-32600`` (invalid request) for JSON that is
no JSON-RPC message (a batch: MCP has none since 2025-06-18; a wrong field type) and for a request
whose ``id`` is an object, an array, a fraction, a boolean or ``null`` (MCP's ids are strings and
integers; a message with an ``id`` member is never a notification, JSON-RPC 2.0 section 4.1). The
reply carries the request's ``id`` when the line is JSON whose ``id`` is a string or an integer (a
lenient second parse), else ``null`` as JSON-RPC prescribes. A line whose ``id`` cannot be recovered
and that is not a request (a broken notification) still gets the ``null`` reply: the host cannot tell
the two apart either. A notification (no ``id`` member) is never answered.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import IO, Any, cast

__all__ = ["error_reply", "refusal", "run_stdio"]

#: The message of the -32600 answer to a batch (on stdio and over HTTP).
BATCH_MESSAGE = "Invalid request: JSON-RPC batches are not part of MCP; send one message per request"
#: The message of the -32600 answer to a request whose id is not a string or an integer.
BAD_ID_MESSAGE = "Invalid request: a request's id must be a string or an integer"


def _recover_id(value: object) -> str | int | None:
    if isinstance(value, list):
        return None  # a batch: no one id to answer
    if isinstance(value, dict):
        rid = value.get("id")
        if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
            return rid
    return None


def error_reply(exc: Exception) -> Any:
    """The JSON-RPC error answering a line the transport could not read (its exception)."""
    import mcp_types as types
    from pydantic import ValidationError

    code, message, rid = types.INVALID_REQUEST, "Invalid request: not a JSON-RPC message", None
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        raw = errors[0].get("input") if errors else None
        if errors and errors[0].get("type") == "json_invalid":
            code, message = types.PARSE_ERROR, "Parse error: the line is not JSON this server can read"
            if isinstance(raw, (str, bytes)):
                try:
                    rid = _recover_id(json.loads(raw))
                except (ValueError, RecursionError):
                    rid = None
        else:  # the whole message is the input of the errors about it as a whole (a missing field)
            raw = next((e["input"] for e in errors if isinstance(e.get("input"), (dict, list))), raw)
            rid = _recover_id(raw)
            if isinstance(raw, list):
                message = BATCH_MESSAGE
    else:
        code, message = types.PARSE_ERROR, f"Parse error: {type(exc).__name__}"
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message))


def refusal(decoded: Any) -> Any:
    """The JSON-RPC error (``mcp_types.JSONRPCError``) owed to ``decoded``, one JSON value read off the
    wire (a stdio line, an HTTP POST body), when it is not one MCP message; ``None`` when it is.

    ``-32600`` with ``id: null`` for a batch (a JSON array, empty or not) and for an object with an
    ``id`` member that the SDK would read as a notification (its ``id`` is an object, an array, a
    fraction, a boolean or ``null``), so it would get no answer; what :func:`error_reply` says for
    anything else the SDK's message types refuse (``-32600``, with the ``id`` when it is a string or
    an integer)."""
    import mcp_types as types
    from pydantic import ValidationError

    if isinstance(decoded, list):
        return types.JSONRPCError(
            jsonrpc="2.0", id=None, error=types.ErrorData(code=types.INVALID_REQUEST, message=BATCH_MESSAGE)
        )
    try:
        message = types.jsonrpc_message_adapter.validate_python(decoded, by_name=False)
    except ValidationError as e:
        return error_reply(e)
    if isinstance(message, types.JSONRPCNotification) and isinstance(decoded, dict) and "id" in decoded:
        return types.JSONRPCError(
            jsonrpc="2.0", id=None, error=types.ErrorData(code=types.INVALID_REQUEST, message=BAD_ID_MESSAGE)
        )
    return None


class _Wrapped:
    """A transport stream wrapped: entering, leaving and closing go to the stream inside."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc, tb)
        return result


class _AnsweringReader(_Wrapped):
    """The transport's read stream, answering the exceptions it yields instead of passing them on."""

    def __init__(self, inner: Any, write: Any) -> None:
        super().__init__(inner)
        self._write = write

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        from mcp.shared.message import SessionMessage

        while True:
            item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            await self._write.send(SessionMessage(error_reply(item)))

    def __aiter__(self) -> _AnsweringReader:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _clean(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys included) replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


class _EncodableWriter(_Wrapped):
    """The transport's write stream, sending only messages that can be written as UTF-8: a message
    holding a lone surrogate (a request ``id`` such as ``"\\udfff"`` is valid JSON that the reply
    echoes; so can a tool's text) made the SDK's writer raise, which ended the whole server process.
    Such a message is sent with U+FFFD in place of each lone surrogate instead. ``on_sent``: called
    after each message is handed to the transport."""

    def __init__(self, inner: Any, on_sent: Callable[[], None] | None = None) -> None:
        super().__init__(inner)
        self._on_sent = on_sent

    async def send(self, item: Any) -> None:
        from mcp.shared.message import SessionMessage

        message = getattr(item, "message", None)
        if message is not None:
            try:
                message.model_dump_json(by_alias=True, exclude_unset=True)
            except Exception:  # noqa: BLE001 - pydantic's serialization error: a lone surrogate
                data = _clean(message.model_dump(by_alias=True, exclude_unset=True))
                item = SessionMessage(type(message).model_validate(data), metadata=item.metadata)
        await self._inner.send(item)
        if self._on_sent is not None:
            self._on_sent()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _UnownedText(io.TextIOWrapper):
    """A text layer whose close leaves the binary stream below open (it is the wire, or ``sys.stdin``'s)."""

    def close(self) -> None:
        try:
            self.detach()
        except ValueError:  # already detached
            pass


@contextmanager
def _wire_stdin() -> Iterator[IO[bytes]]:
    """The host's stdin for the transport alone, as the SDK's own transport claims it: the wire is read
    through a private duplicate of fd 0, and fd 0 points at the null device while serving (a handler or
    a child process that reads stdin reads end of file instead of the host's messages); restored on exit.
    Where fd 0 cannot be duplicated (no ``fcntl``, ``sys.stdin`` not fd 0), ``sys.stdin``'s buffer is
    read in place."""
    try:
        import fcntl

        if sys.stdin is None or sys.stdin.buffer.fileno() != 0:
            raise OSError("sys.stdin is not fd 0")
        private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    except (ImportError, OSError, AttributeError, ValueError, io.UnsupportedOperation):
        yield sys.stdin.buffer
        return
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        # closefd=False: a worker thread may still block on the wire after the transport ended, so the
        # descriptor is never closed (and so never recycled under it)
        yield os.fdopen(private, "rb", closefd=False)
    finally:
        os.dup2(private, 0)


class _CheckedLines:
    """The lines of the host's stdin as the SDK's transport reads them, each line that is owed an error
    the SDK would not send (:func:`refusal`: a request whose ``id`` is not a string or an integer, a
    batch, JSON that is no JSON-RPC message) answered here instead of passed on. A line that is not JSON
    is passed on: the SDK's exception for it is answered by :class:`_AnsweringReader`."""

    def __init__(self, lines: Any) -> None:
        import anyio

        self._lines = lines
        self._reply: Callable[[Any], Awaitable[None]] | None = None
        self._ready = anyio.Event()

    def answer_with(self, reply: Callable[[Any], Awaitable[None]]) -> None:
        """Send answers with ``reply(session_message)`` (the transport's writer, known once it runs)."""
        self._reply = reply
        self._ready.set()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._read()

    async def _read(self) -> AsyncIterator[str]:
        import pydantic_core
        from mcp.shared.message import SessionMessage

        async for line in self._lines:
            try:
                decoded = pydantic_core.from_json(line)
            except ValueError:  # not JSON (or too deep): the SDK's reader fails on it too
                yield line
                continue
            error = refusal(decoded)
            if error is None:
                yield line
                continue
            await self._ready.wait()
            assert self._reply is not None
            await self._reply(SessionMessage(error))


async def run_stdio(lowlevel: Any, options: Any, on_sent: Callable[[], None] | None = None) -> None:
    """Serve the low-level MCP server ``lowlevel`` over this process's stdin and stdout until the host
    disconnects, answering every line that is not one MCP message and writing only what UTF-8 can hold
    (see the module docstring, :class:`_CheckedLines` and :class:`_EncodableWriter`). ``on_sent``: called
    after each message sent to the host (:meth:`~contextsieve.mcp_server.common.Warmup.host_answered`)."""
    import anyio
    from mcp.server.stdio import stdio_server

    with _wire_stdin() as wire:
        lines = _CheckedLines(anyio.wrap_file(_UnownedText(wire, encoding="utf-8", errors="replace")))
        async with stdio_server(stdin=cast(Any, lines)) as (read, raw_write):
            write = _EncodableWriter(raw_write, on_sent)
            lines.answer_with(write.send)
            await lowlevel.run(_AnsweringReader(read, write), write, options)
