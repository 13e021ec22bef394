"""Serving over stdio so that every line gets an answer: the SDK's stdio transport turns a line it
cannot read into an exception that its server loop drops, so the host waits for its own timeout,
and it reads a request whose ``id`` is not a string or an integer as a notification and sends
nothing at all.

Here such a line gets a JSON-RPC error at once, the same as over HTTP (:func:`refusal` decides for
both transports; ``serve``'s HTTP app calls it on every POST body), and every request whose ``id`` can
be read gets that ``id`` back (JSON-RPC 2.0 section 5: the same value): ``-32700`` (parse error) for a
line that is not JSON the SDK accepts (not JSON at all, a lone surrogate escape such as ``"\\ud800"``,
nesting deeper than the parser allows); ``-32602`` (invalid params) for a request whose ``params`` are
by position (an array: valid JSON-RPC, but every MCP method takes its params by name); ``-32600``
(invalid request) for JSON that is no JSON-RPC message (a wrong field type, ``params`` that are no
structured value) and for a request whose ``id`` is an object, an array, a fraction, a boolean or
``null`` (MCP's ids are strings and integers; a message with an ``id`` member is never a
notification, JSON-RPC 2.0 section 4.1). A reply carries the request's ``id`` when the line is JSON
whose ``id`` is a string or a number (a lenient second parse), else ``null`` as JSON-RPC prescribes. A
batch (MCP has none since 2025-06-18) is refused as a whole, as JSON-RPC 2.0 section 6 answers one: an
array with a ``-32600`` reply to each of its requests (with its ``id``), nothing for its notifications,
no answer at all when it holds only notifications, and one ``-32600`` reply with ``id: null`` for an
empty array. A notification (no ``id`` member, a string ``method``, ``params`` absent, an object or an
array) is never answered, not even when its params are by position; a line whose ``id`` cannot be
recovered and that is no notification still gets the ``null`` reply: the host cannot tell it from a
broken request either. ``"params": null`` is read as no params, as the SDK reads it.
"""

from __future__ import annotations

import functools
import io
import json
import math
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
#: The message of the -32600 answer to JSON that is no JSON-RPC message.
NOT_A_MESSAGE = "Invalid request: not a JSON-RPC message"
#: The message of the -32602 answer to a request whose params are by position.
BY_POSITION_MESSAGE = "Invalid params: MCP takes a request's params by name (a JSON object), not by position (an array)"


def _echoed_id(value: object) -> str | int | float | None:
    """The ``id`` a reply to ``value`` carries: its ``id`` when that is a string or a finite number,
    else ``None`` (no id, a batch, an id of another type)."""
    if not isinstance(value, dict):
        return None  # a batch: no one id to answer
    rid = value.get("id")
    if isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
        return rid
    if isinstance(rid, float) and math.isfinite(rid):
        return rid  # a fraction: a JSON-RPC id, though not an MCP one
    return None


def _is_mcp_id(value: object) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _is_notification(value: object) -> bool:
    """Whether ``value`` is a JSON-RPC 2.0 notification (whatever its method and params mean to MCP)."""
    return (
        isinstance(value, dict)
        and "id" not in value
        and value.get("jsonrpc") == "2.0"
        and isinstance(value.get("method"), str)
        and isinstance(value.get("params", {}), (dict, list))
    )


@functools.cache
def _reply_types() -> tuple[Any, Any]:
    """The error reply (``mcp_types.JSONRPCError`` whose ``id`` may also be a fraction, as JSON-RPC
    allows and the request had it) and a batch of them, as models the SDK's writer serializes."""
    import mcp_types as types
    from pydantic import RootModel

    class Reply(types.JSONRPCError):
        id: str | int | float | None  # type: ignore[assignment]

    class Replies(RootModel[list[Reply]]):
        pass

    return Reply, Replies


def _error(rid: str | int | float | None, code: int, message: str) -> Any:
    import mcp_types as types

    reply, _ = _reply_types()
    return reply(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message))


def error_reply(exc: Exception) -> Any:
    """The JSON-RPC error answering a line the transport could not read (its exception)."""
    import mcp_types as types
    from pydantic import ValidationError

    code, message, rid = types.INVALID_REQUEST, NOT_A_MESSAGE, None
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        raw = errors[0].get("input") if errors else None
        if errors and errors[0].get("type") == "json_invalid":
            code, message = types.PARSE_ERROR, "Parse error: the line is not JSON this server can read"
            if isinstance(raw, (str, bytes)):
                try:
                    rid = _echoed_id(json.loads(raw))
                except (ValueError, RecursionError):
                    rid = None
        else:  # the whole message: the input of an error about a field it lacks, or of one about its type
            whole = [e["input"] for e in errors if e.get("type") == "missing" and len(e.get("loc", ())) == 2]
            whole += [e["input"] for e in errors if len(e.get("loc", ())) <= 1]
            raw = whole[0] if whole else raw
            rid = _echoed_id(raw)
            if isinstance(raw, list):
                message = BATCH_MESSAGE
    else:
        code, message = types.PARSE_ERROR, f"Parse error: {type(exc).__name__}"
    return _error(rid, code, message)


def refusal(decoded: Any) -> Any:
    """What is owed to ``decoded``, one JSON value read off the wire (a stdio line, an HTTP POST body),
    when it is not one MCP message the SDK answers as it should (see the module docstring): ``None``
    when it is (pass it on); otherwise a JSON-RPC error (an ``mcp_types.JSONRPCError``, whose ``id`` may
    also be a fraction), or a list of them for a batch, which is empty when nothing is owed (a
    notification with params by position, a batch of notifications: answer nothing, pass nothing on).

    ``-32600`` with ``id: null`` for an empty batch and for an object with an ``id`` member that the SDK
    would read as a notification (its ``id`` is an object, an array, a boolean or ``null``) or refuse (a
    fraction, answered with its ``id``); ``-32602`` with its ``id`` for a request with params by
    position; ``-32600`` (with the ``id`` when it is a string or a number) for anything else the SDK's
    message types refuse."""
    import mcp_types as types
    from pydantic import ValidationError

    if isinstance(decoded, list):
        if not decoded:
            return _error(None, types.INVALID_REQUEST, BATCH_MESSAGE)
        return [_error(_echoed_id(m), types.INVALID_REQUEST, BATCH_MESSAGE) for m in decoded if not _is_notification(m)]
    if isinstance(decoded, dict) and "id" in decoded and "method" in decoded and not _is_mcp_id(decoded["id"]):
        return _error(_echoed_id(decoded), types.INVALID_REQUEST, BAD_ID_MESSAGE)
    if isinstance(decoded, dict) and isinstance(decoded.get("params"), list):
        if _is_notification(decoded):
            return []  # a notification is never answered, whatever its params (JSON-RPC 2.0 section 4.1)
        if decoded.get("jsonrpc") == "2.0" and isinstance(decoded.get("method"), str):
            return _error(decoded["id"], types.INVALID_PARAMS, BY_POSITION_MESSAGE)
    try:
        types.jsonrpc_message_adapter.validate_python(decoded, by_name=False)
    except ValidationError:
        return _error(_echoed_id(decoded), types.INVALID_REQUEST, NOT_A_MESSAGE)
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
    the SDK would not send (:func:`refusal`: a request whose ``id`` is not a string or an integer or
    whose params are by position, a batch, JSON that is no JSON-RPC message) answered here instead of
    passed on, and a notification with params by position dropped (never answered; the SDK would
    answer it). A line that is not JSON is passed on: the SDK's exception for it is answered by
    :class:`_AnsweringReader`."""

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
            if isinstance(error, list):
                if not error:
                    continue  # a notification, or a batch of them: nothing is owed
                error = _reply_types()[1](error)  # a batch's replies: one array on one line
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
