"""An agent's live MCP tools: list the servers (or read their cached listings), apply the listings to
the agent with the file's overrides, and report per server what changed.

Listings are cached per server under ``<cache>/mcp-tools/<key>.json``, ``key`` = sha256 of the server's
connection settings (type, command, args, env, cwd, url, headers: a changed setting is another
server), so a restarted agent selects without spawning its servers; :func:`connect` with
``refresh=True`` (CLI: ``contextsieve tools AGENT --refresh``) lists them again. The cache file holds
the server's name, the listing time and the tools, never the settings themselves (header values and
environment variables stay out of it). A tool's identity is the sha256 of what is embedded from it
(name, description, input schema); the chunk store embeds only texts it has not seen, so an unchanged
tool is never embedded again and a removed one leaves the selection.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.file_servers import server_tools
from contextsieve.agent.tool_limits import ToolLimits
from contextsieve.errors import ContextSieveError, InputError
from contextsieve.fileio import atomic_write_bytes
from contextsieve.mcp_client.client import INTERNAL, ListConfig, Listing, list_tools, run_sync, server_kind

__all__ = ["ServerReport", "ToolCatalog", "ToolCache", "connect", "connect_async", "tool_hash", "server_key"]

_CONNECTION_FIELDS = ("type", "transport", "command", "args", "env", "cwd", "url", "headers")
CACHE_VERSION = 1


def server_key(server: McpServer) -> str:
    """sha256 of the server's connection settings (see the module docstring)."""
    conn = {k: server.config.get(k) for k in _CONNECTION_FIELDS if k in server.config}
    blob = json.dumps({"v": CACHE_VERSION, "connection": conn}, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def tool_hash(entry: Mapping[str, Any]) -> str:
    """sha256 of a tool's name, description and input schema (what is embedded from it)."""
    blob = json.dumps(
        [entry.get("name"), entry.get("description") or "", entry.get("inputSchema") or {}],
        sort_keys=True,
        default=str,
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class ServerReport:
    """What happened to one server's tools.

    Attributes:
        server: its name. source: ``live`` (listed now), ``cache`` (the cached listing), ``skipped``
            (an ``internal`` server) or ``none`` (listing failed and nothing is cached: no tools).
        found: tools it has now. added / changed / removed: against the tools the agent had before.
        seconds: listing time (0 from the cache). error: why live listing failed (``None`` if it did not).
        stderr: the tail of a failed stdio server's stderr. note: anything else worth saying.
        cut: the tools the listing limits cut (:class:`~contextsieve.agent.tool_limits.ToolLimits`), one
            ``"<tool>: <what was cut>"`` each.
    """

    server: str
    source: str
    found: int = 0
    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    seconds: float = 0.0
    error: str | None = None
    stderr: str = ""
    note: str = ""
    cut: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolCatalog:
    """Per-server reports of one :func:`connect`, and the listings it applied (server -> entries)."""

    servers: tuple[ServerReport, ...]
    tools: dict[str, list[dict[str, Any]]] = field(repr=False)

    @property
    def ok(self) -> bool:
        """No server failed."""
        return all(r.error is None for r in self.servers)

    def to_dict(self) -> dict[str, Any]:
        return {"servers": [asdict(r) for r in self.servers], "ok": self.ok}

    def summary(self) -> str:
        """A table of the reports, one server per line, errors and stderr tails below."""
        lines = [f"{'server':<20} {'source':<7} {'found':>5} {'added':>5} {'changed':>7} {'removed':>7} {'seconds':>7}"]
        for r in self.servers:
            lines.append(
                f"{r.server:<20} {r.source:<7} {r.found:>5} {len(r.added):>5} {len(r.changed):>7} "
                f"{len(r.removed):>7} {r.seconds:>7.2f}"
            )
        for r in self.servers:
            if r.error:
                lines.append(f"{r.server}: {r.error}")
                if r.stderr.strip():
                    lines += ["  stderr: " + line for line in r.stderr.strip().splitlines()[-8:]]
            if r.note:
                lines.append(f"{r.server}: {r.note}")
            lines += [f"{r.server}: tool {c}" for c in r.cut]
        return "\n".join(lines)


class ToolCache:
    """Listings on disk, one JSON file per server key (written atomically; unreadable files are ignored
    and replaced by the next listing)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    def _path(self, server: McpServer) -> Path:
        return self.folder / f"{server_key(server)}.json"

    def get(self, server: McpServer) -> tuple[list[dict[str, Any]], float] | None:
        """The cached tools of ``server`` and when they were listed (Unix seconds), or ``None``."""
        try:
            doc = json.loads(self._path(server).read_text(encoding="utf-8"))
            tools = doc["tools"]
            if doc.get("v") != CACHE_VERSION or not isinstance(tools, list):
                return None
            if not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
                return None
            return tools, float(doc.get("listed", 0.0))
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None

    def put(self, server: McpServer, tools: list[dict[str, Any]]) -> None:
        doc = {"v": CACHE_VERSION, "server": server.name, "listed": time.time(), "tools": tools}
        data = json.dumps(doc, ensure_ascii=False, indent=1).encode("utf-8", "surrogatepass")
        atomic_write_bytes(self._path(server), data, follow_symlinks=False)


def _diff(before: Mapping[str, str], after: Mapping[str, str]) -> tuple[tuple[str, ...], ...]:
    added = tuple(n for n in after if n not in before)
    changed = tuple(n for n in after if n in before and before[n] != after[n])
    removed = tuple(n for n in before if n not in after)
    return added, changed, removed


def _plan(
    agent: Agent, cache: ToolCache | None, refresh: bool
) -> tuple[dict[str, tuple[list[dict[str, Any]], float]], list[McpServer], dict[str, str]]:
    """Which servers' listings come from the cache, which are listed live, which are skipped (why)."""
    cached: dict[str, tuple[list[dict[str, Any]], float]] = {}
    to_list: list[McpServer] = []
    skipped: dict[str, str] = {}
    for s in agent.servers.values():
        try:
            kind = server_kind(s)
        except InputError as e:
            skipped[s.name] = str(e)
            continue
        if kind == INTERNAL:
            skipped[s.name] = "internal server (part of the reference host, no process): skipped"
            continue
        hit = cache.get(s) if cache is not None and not refresh else None
        if hit is not None:
            cached[s.name] = hit
        else:
            to_list.append(s)
    return cached, to_list, skipped


def connect(
    agent: Agent,
    *,
    cache_folder: Path | None,
    refresh: bool = False,
    config: ListConfig = ListConfig(),
) -> ToolCatalog:
    """Give ``agent`` the tools of its MCP servers and report what changed (see the module docstring).

    Args:
        agent: the agent; its servers' tools are replaced by their listings (file overrides applied).
        cache_folder: where listings are cached; ``None``: no disk cache (every call lists live).
        refresh: list every server live even when a cached listing exists.
        config: timeouts and limits of live listing.

    A server whose live listing fails keeps its cached listing if there is one (the report gives the
    error and says so) and otherwise has no tools this time; the other servers are applied either way.
    On a thread running an event loop this raises :class:`~contextsieve.errors.EventLoopError`:
    await :func:`connect_async` there.
    """
    cache = ToolCache(cache_folder) if cache_folder is not None else None
    cached, to_list, skipped = _plan(agent, cache, refresh)

    async def run() -> dict[str, Listing]:
        return await list_tools(to_list, config)

    listings = run_sync(run, "connect_async(...) (Engine.connect_async)") if to_list else {}
    return _apply(agent, cache, cached, skipped, listings, config.limits)


async def connect_async(
    agent: Agent,
    *,
    cache_folder: Path | None,
    refresh: bool = False,
    config: ListConfig = ListConfig(),
) -> ToolCatalog:
    """:func:`connect` for code running in an event loop (asyncio or trio): the servers are listed on
    the running loop. Arguments and result as :func:`connect`."""
    cache = ToolCache(cache_folder) if cache_folder is not None else None
    cached, to_list, skipped = _plan(agent, cache, refresh)
    listings = await list_tools(to_list, config) if to_list else {}
    return _apply(agent, cache, cached, skipped, listings, config.limits)


def _apply(
    agent: Agent,
    cache: ToolCache | None,
    cached: dict[str, tuple[list[dict[str, Any]], float]],
    skipped: dict[str, str],
    listings: dict[str, Listing],
    limits: ToolLimits,
) -> ToolCatalog:
    """Give the agent each server's tools (live, else cached), held to ``limits``, and report what changed."""
    servers = list(agent.servers.values())
    reports: list[ServerReport] = []
    applied: dict[str, list[dict[str, Any]]] = {}
    for s in servers:
        before = {
            t.name: tool_hash({"name": t.name, "description": t.description, "inputSchema": t.input_schema})
            for t in agent.tools
            if t.server == s.name
        }
        if s.name in skipped:
            reports.append(ServerReport(s.name, "skipped", len(before), note=skipped[s.name]))
            continue
        listing = listings.get(s.name)
        error, stderr, seconds, note = None, "", 0.0, ""
        if listing is not None:
            seconds, error, stderr = listing.seconds, listing.error, listing.stderr
            entries, source = listing.tools, "live"
            if entries is not None and cache is not None:
                try:
                    cache.put(s, entries)
                except OSError as e:
                    note = f"the listing could not be cached: {e.strerror or e}"
            if entries is None:
                old = cache.get(s) if cache is not None else None
                if old is not None:
                    entries, source = old[0], "cache"
                    note = f"live listing failed; using the listing cached at {_when(old[1])}"
                else:
                    source = "none"
        else:
            entries, source = cached[s.name][0], "cache"
            note = f"listed at {_when(cached[s.name][1])}; --refresh lists again"
        if entries is None:
            entries = []
        try:
            tools, listed = server_tools(s, entries, limits=limits)
        except ContextSieveError as e:
            reports.append(ServerReport(s.name, source, len(before), seconds=seconds, error=f"malformed tools: {e}"))
            continue
        agent.set_server_tools(s.name, tools, listed)
        applied[s.name] = entries
        after = {
            t.name: tool_hash({"name": t.name, "description": t.description, "inputSchema": t.input_schema})
            for t in tools
        }
        added, changed, removed = _diff(before, after)
        cut = tuple(f"{t.name}: {t.cut_note}" for t in tools if t.cut_note)
        reports.append(
            ServerReport(s.name, source, len(tools), added, changed, removed, seconds, error, stderr, note, cut)
        )
    return ToolCatalog(tuple(reports), applied)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "an unknown time"
