"""List the tools of an agent's MCP servers with the official MCP Python SDK (``contextsieve[mcp]``).

One :func:`list_tools` call connects to every server concurrently (stdio children, streamable HTTP
and SSE endpoints) in the protocol era the server speaks (the 2026-07-28 protocol where it answers
``server/discover``, the ``initialize`` handshake otherwise: the SDK's ``mode="auto"``), follows
``tools/list`` pagination cursors and disconnects, each server under its own timeout. A server that
cannot be started, times out, crashes or returns malformed tools gets a :class:`Listing` with the error
and the tail of its stderr; the others are listed anyway.

A stdio server runs in a process group of its own that ends with its connection, even a server that
ignores stdin EOF and SIGTERM, and a process that dies without ending them leaves its groups to the
:mod:`~contextsieve.mcp_client.reaper` (:mod:`~contextsieve.mcp_client.stdio_child`).

Security: a stdio server runs the command its agent file declares, with ``args`` as a list (never a
shell), the file's ``env`` plus the SDK's inherited basics (``HOME``, ``PATH``, ``LOGNAME``,
``SHELL``, ``TERM``, ``USER``), and the file's ``cwd``. HTTP headers (tokens) go to the server only:
they are never logged, put into errors, or written into the tool cache.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from contextsieve.agent.agent import McpServer
from contextsieve.agent.tool_limits import ToolLimits
from contextsieve.errors import EventLoopError, InputError, MissingExtraError, brief
from contextsieve.mcp_client.stdio_child import StdioChild

T = TypeVar("T")

__all__ = [
    "ListConfig",
    "Listing",
    "list_tools",
    "list_tools_sync",
    "run_sync",
    "server_kind",
    "require_sdk",
    "open_transport",
    "wire_entry",
    "describe_error",
]

INTERNAL = "internal"


@dataclass(frozen=True, kw_only=True)
class ListConfig:
    """How servers are listed.

    Attributes:
        timeout: seconds per server to start, connect and list its tools (default 10; the gateway's
            start-up limit of each downstream server).
        call_timeout: seconds a call the gateway forwards may take (default ``None``: no limit; the call
            runs as long as the server works on it and the host waits, and a call the host cancels is
            cancelled downstream). Over the limit the call is cancelled on the server and fails; the
            connection stays.
        max_pages: most ``tools/list`` pages followed per server (default 100; more is an error).
        max_tools: most tools accepted from one server (default 5,000; more is an error).
        stderr_chars: characters of a failed stdio server's stderr kept in its report (default 2,000).
        limits: the most text kept of each listed tool (default :class:`~contextsieve.agent.tool_limits.ToolLimits`:
            descriptions of 10,000 characters, input schemas of 24,000 characters of JSON); longer ones
            are cut when the listing is applied to the agent, and the report says which.
    """

    timeout: float = 10.0
    call_timeout: float | None = None
    max_pages: int = 100
    max_tools: int = 5000
    stderr_chars: int = 2000
    limits: ToolLimits = field(default_factory=ToolLimits)

    def __post_init__(self) -> None:
        if (
            isinstance(self.timeout, bool)
            or not isinstance(self.timeout, (int, float))
            or not 0 < self.timeout < math.inf
        ):
            raise InputError(f"timeout must be a positive number of seconds, got {brief(self.timeout)}")
        c = self.call_timeout
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not 0 < c < math.inf):
            raise InputError(f"call_timeout must be a positive number of seconds or None, got {brief(c)}")
        for name in ("max_pages", "max_tools", "stderr_chars"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise InputError(f"{name} must be a positive int, got {brief(v)}")
        if not isinstance(self.limits, ToolLimits):
            raise InputError(f"limits must be a ToolLimits, got {type(self.limits).__name__}")


@dataclass(frozen=True)
class Listing:
    """One server's listing.

    Attributes:
        server: the server's name in the agent file.
        tools: MCP ``tools/list`` entries as dicts (``name``, ``description``, ``inputSchema``), or ``None``
            when listing failed or was skipped.
        seconds: wall time of the attempt.
        error: what went wrong (``None`` on success).
        stderr: the tail of a stdio server's stderr when it failed (``""`` otherwise).
        skipped: why the server was not contacted (``internal`` servers have no process), or ``""``.
    """

    server: str
    tools: list[dict[str, Any]] | None
    seconds: float
    error: str | None = None
    stderr: str = ""
    skipped: str = ""


def require_sdk(purpose: str = "listing an agent's MCP servers") -> None:
    """:class:`MissingExtraError` naming the ``mcp`` extra when the MCP SDK is not installed.

    Args:
        purpose: what needs the SDK, as the message opens (default: listing an agent's MCP servers;
            ``serve`` and the gateway name themselves).
    """
    try:
        import mcp  # noqa: F401
    except ImportError as e:
        raise MissingExtraError(f"{purpose} needs the MCP Python SDK: pip install 'contextsieve[mcp]'") from e


def server_kind(server: McpServer) -> str:
    """``stdio``, ``streamable-http``, ``sse`` or ``internal`` (the reference format's ``type``; a
    config without one is stdio when it has a ``command`` and streamable HTTP when it has a ``url``)."""
    cfg = server.config
    kind = cfg.get("type") or cfg.get("transport")
    if kind is None:
        kind = "stdio" if "command" in cfg else "streamable-http" if "url" in cfg else ""
    kind = {"http": "streamable-http", "streamableHttp": "streamable-http", "streamable_http": "streamable-http"}.get(
        kind, kind
    )
    if kind not in ("stdio", "streamable-http", "sse", INTERNAL):
        raise InputError(f"server {server.name!r}: unknown type {brief(kind)} (stdio, streamable-http, sse, internal)")
    return str(kind)


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{what} must be a list of strings")
    return list(value)


def _string_map(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InputError(f"{what} must map strings to strings")
    return dict(value)


def open_transport(server: McpServer, kind: str, errlog: Any) -> Any:
    """The SDK transport context manager for ``server`` (stdio: a :class:`StdioChild`; streamable HTTP
    or SSE: the SDK's), its config validated (:class:`InputError` naming the field); stdio servers
    write stderr to ``errlog``."""
    cfg = server.config
    where = f"mcpServers.{server.name}"
    if kind == "stdio":
        from mcp.client.stdio import get_default_environment

        command = cfg.get("command")
        if not isinstance(command, str) or not command.strip():
            raise InputError(f"{where}.command must be a non-empty string")
        env = {**get_default_environment(), **_string_map(cfg.get("env"), f"{where}.env")}
        cwd = cfg.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise InputError(f"{where}.cwd must be a string")
        args = _strings(cfg.get("args"), f"{where}.args")
        if sys.platform == "win32":  # no process groups: the SDK's transport (a Job Object ends the tree)
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            return stdio_client(StdioServerParameters(command=command, args=args, env=env, cwd=cwd), errlog=errlog)
        return StdioChild([command, *args], env=env, cwd=cwd, errlog=errlog, name=server.name)
    url = cfg.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InputError(f"{where}.url must be an http(s) URL")
    headers = _string_map(cfg.get("headers"), f"{where}.headers")
    if kind == "sse":
        from mcp.client.sse import sse_client

        return sse_client(url, headers=headers)
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    return streamable_http_client(url, http_client=create_mcp_http_client(headers=headers))


def wire_entry(tool: Any) -> dict[str, Any]:
    """A ``tools/list`` entry in the wire format's field names, as the server sent it (the
    :class:`ListConfig` ``limits`` apply when a listing becomes the agent's tools:
    :func:`contextsieve.agent.file_servers.server_tools`)."""
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    return {"name": tool.name, "description": tool.description or "", "inputSchema": schema}


def _check_tools(tools: list[dict[str, Any]]) -> str | None:
    seen: set[str] = set()
    for t in tools:
        name = t["name"]
        if not isinstance(name, str) or not name.strip() or any(c in name for c in ":\n\r\t"):
            return f"malformed tool name {brief(name)}"
        if name in seen:
            return f"tool {name!r} is listed twice"
        seen.add(name)
    return None


def describe_error(e: BaseException) -> str:
    """A one-line cause without secrets (exception text only; headers are never in it)."""
    group = getattr(e, "exceptions", None)  # an ExceptionGroup (BaseExceptionGroup is 3.11+)
    if isinstance(group, tuple) and group:
        return "; ".join(describe_error(x) for x in group[:3])
    if isinstance(e, FileNotFoundError):
        return f"command not found: {e.filename or e}"
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text[:300]}" if text else type(e).__name__


def _fault(e: Exception) -> str:
    """What a transport fault says, e.g. the start of a stdout line that is not JSON-RPC."""
    for err in getattr(e, "errors", lambda: [])() if hasattr(e, "errors") else []:
        if isinstance(err, dict) and "input" in err:
            return f"stdout line {brief(err['input'])}"
    return describe_error(e)


class _QuietParseErrors(logging.Filter):
    """Drops the SDK's traceback for stdout lines that are not JSON-RPC: the listing reports them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Failed to parse JSONRPC message" not in record.getMessage()


async def list_server(server: McpServer, config: ListConfig = ListConfig()) -> Listing:
    """List one server's tools (see the module docstring); never raises for a server's fault."""
    require_sdk()
    try:
        kind = server_kind(server)
    except InputError as e:
        return Listing(server.name, None, 0.0, str(e))
    if kind == INTERNAL:
        return Listing(server.name, None, 0.0, skipped="internal server (part of the reference host, no process)")
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
        try:
            transport = open_transport(server, kind, errlog)
        except InputError as e:
            return Listing(server.name, None, 0.0, str(e))
        listing = await list_via(server.name, transport, config)
        if listing.error is not None:
            errlog.seek(0)
            listing = dataclasses.replace(listing, stderr=errlog.read()[-config.stderr_chars :])
    return listing


async def list_via(name: str, target: Any, config: ListConfig = ListConfig()) -> Listing:
    """List the tools of ``target``: whatever :class:`mcp.Client` connects to (a transport, an
    in-process server object, a URL). Faults are reported in the :class:`Listing`, never raised."""
    import anyio
    from mcp import Client

    faults: list[Exception] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            faults.append(message)  # e.g. a line on stdout that is not JSON-RPC

    t0 = time.perf_counter()
    tools: list[dict[str, Any]] = []
    error: str | None = None
    try:
        with anyio.fail_after(config.timeout):
            async with Client(  # the 2026-07-28 protocol where the server speaks it, else the handshake
                target, mode="auto", read_timeout_seconds=config.timeout, message_handler=on_message, cache=None
            ) as client:
                cursor: str | None = None
                for page in range(config.max_pages + 1):
                    if page == config.max_pages:
                        raise InputError(f"more than {config.max_pages} pages of tools")
                    result = await client.list_tools(cursor=cursor)
                    tools += [wire_entry(t) for t in result.tools]
                    if len(tools) > config.max_tools:
                        raise InputError(f"more than {config.max_tools} tools")
                    cursor = result.next_cursor
                    if not cursor:
                        break
        error = _check_tools(tools)
    except TimeoutError:
        error = f"no tool list within {config.timeout:g} s"
        if faults:
            error += f" (it wrote what is not MCP: {_fault(faults[0])})"
    except InputError as e:
        error = str(e)
    except Exception as e:  # noqa: BLE001 - a server's fault is reported, never raised
        error = describe_error(e)
    return Listing(name, None if error else tools, time.perf_counter() - t0, error)


async def list_tools(servers: Sequence[McpServer], config: ListConfig = ListConfig()) -> dict[str, Listing]:
    """Every server's :class:`Listing`, listed concurrently, by server name."""
    import anyio

    require_sdk()
    out: dict[str, Listing] = {}

    async def one(server: McpServer) -> None:
        out[server.name] = await list_server(server, config)

    quiet = _QuietParseErrors()
    log = logging.getLogger("mcp.client.stdio")
    log.addFilter(quiet)
    try:
        async with anyio.create_task_group() as tg:
            for server in servers:
                tg.start_soon(one, server)
    finally:
        log.removeFilter(quiet)
    return {s.name: out[s.name] for s in servers}


def running_loop() -> str | None:
    """The event loop library running on this thread (``"asyncio"``, ``"trio"``), or ``None``."""
    import asyncio
    import sys

    try:
        asyncio.get_running_loop()
        return "asyncio"
    except RuntimeError:
        pass
    trio = sys.modules.get("trio")
    if trio is not None:
        try:
            trio.lowlevel.current_trio_token()
            return "trio"
        except RuntimeError:
            pass
    return None


def run_sync(fn: Callable[[], Awaitable[T]], instead: str) -> T:
    """Run the coroutine function ``fn`` to completion in a new event loop, from synchronous code.

    On a thread that is running an event loop (inside ``asyncio.run``) this would block that loop
    or fail; it raises :class:`EventLoopError` naming ``instead``, the ``async`` call to await there
    (or call this from a worker thread, ``await asyncio.to_thread(...)``, which works)."""
    import anyio

    running = running_loop()
    if running is not None:
        raise EventLoopError(
            f"this call runs its own event loop, and this thread is running one ({running}): "
            f"await {instead} instead, or call it from a worker thread (asyncio.to_thread)"
        )
    return anyio.run(fn)


def list_tools_sync(servers: Sequence[McpServer], config: ListConfig = ListConfig()) -> dict[str, Listing]:
    """:func:`list_tools` from synchronous code (runs its own event loop; inside a running one it
    raises :class:`EventLoopError`: await :func:`list_tools` there)."""
    require_sdk()

    async def run() -> dict[str, Listing]:
        return await list_tools(servers, config)

    return run_sync(run, "contextsieve.mcp_client.client.list_tools(...)")
