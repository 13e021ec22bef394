"""Serving over stdio so that every line gets an answer: the SDK's stdio transport turns a line it
cannot read into an exception that its server loop drops, so the host waits for its own timeout.

Here such a line gets a JSON-RPC error at once, as over HTTP: ``-32700`` (parse error) for a line
that is not JSON the SDK accepts (not JSON at all, a lone surrogate escape such as ``"\\ud800"``,
nesting deeper than the parser allows), ``-32600`` (invalid request) for JSON that is no JSON-RPC
message (a batch: MCP has none since 2025-06-18; a wrong field type). The reply carries the
request's ``id`` when the line is JSON whose ``id`` is a string or an integer (a lenient second
parse), else ``null`` as JSON-RPC prescribes. A line whose ``id`` cannot be recovered and that is
not a request (a broken notification) still gets the ``null`` reply: the host cannot tell the two
apart either.
"""

from __future__ import annotations

import json
import re
from types import TracebackType
from typing import Any

__all__ = ["error_reply", "run_stdio"]


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
                message = "Invalid request: JSON-RPC batches are not part of MCP; send one message per line"
    else:
        code, message = types.PARSE_ERROR, f"Parse error: {type(exc).__name__}"
    return types.JSONRPCError(jsonrpc="2.0", id=rid, error=types.ErrorData(code=code, message=message))


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
    Such a message is sent with U+FFFD in place of each lone surrogate instead."""

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

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def run_stdio(lowlevel: Any, options: Any) -> None:
    """Serve the low-level MCP server ``lowlevel`` over this process's stdin and stdout until the host
    disconnects, answering unreadable lines and writing only what UTF-8 can hold (see the module
    docstring and :class:`_EncodableWriter`)."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, raw_write):
        write = _EncodableWriter(raw_write)
        await lowlevel.run(_AnsweringReader(read, write), write, options)
