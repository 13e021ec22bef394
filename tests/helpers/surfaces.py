"""Fuzz targets over the stash API and the MCP surfaces (issue 27): hostile calls to a real
:class:`~contextsieve.stash.store.StashStore`, to the MCP tools through the SDK's in-memory client, raw lines
to a real ``contextsieve serve`` over stdio and raw HTTP bodies to a real ``serve --transport http``
on 127.0.0.1. Used by :mod:`tests.helpers.properties` (its ``TARGETS``), so both ``python -m
benchmarks.robustness.fuzz`` and ``tests/robustness/test_properties.py`` run them.

What counts (see :func:`tests.helpers.properties.outcome`): a typed refusal is a
:class:`~contextsieve.errors.ContextSieveError` from the API, a JSON-RPC error with a standard code
from MCP, a 4xx from HTTP; an *untyped* error is any other exception, an MCP tool result that is an
unexpected-error text ("Error executing tool"), a JSON-RPC internal error, a 5xx, a server process
that died or wrote a traceback; a *hang* is the fuzz's timer (a reply that does not come within
:data:`REPLY_SECONDS` raises). A *lost* write is a stash call that returned ids the store then does
not hold, or a refused call that changed the store.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import random
import selectors
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from contextsieve.errors import ContextSieveError

__all__ = ["Surfaces", "t_mcp_http", "t_mcp_stdio", "t_mcp_tools", "t_stash_api"]

#: Seconds a served process has to answer one line or request before the call counts as hung.
REPLY_SECONDS = 30.0
_MAX_SEGMENTS = 3000  # the fuzz store is emptied past this many segments


class Untyped(RuntimeError):
    """What a surface let escape: an unexpected-error result, a 5xx, a dead process, a traceback."""


@dataclass
class Surfaces:
    """Lazily made, shared by the calls of one run: a stash store, an in-memory MCP client, a stdio
    and an HTTP server process. :meth:`close` ends them."""

    folder: Path
    engine: Any
    model_cache: Path | None = None
    store: Any = None
    portal: Any = None
    portal_cm: Any = None
    client: Any = None
    closing: Any = None  # an anyio.Event that ends the client's task
    held: Any = None  # the client's task (a Future)
    tools: dict[str, dict[str, Any]] = field(default_factory=dict)
    stdio: subprocess.Popen[bytes] | None = None
    stdio_buffer: bytes = b""
    http_port: int | None = None
    http: subprocess.Popen[bytes] | None = None
    next_id: int = 1000

    def stash(self) -> Any:
        if self.store is None:
            from contextsieve.stash.store import StashStore

            self.store = StashStore.open(self.folder / "fuzz-stash.db", self.engine.embedder)
        return self.store

    def mcp(self) -> Any:
        if self.client is None:
            import anyio
            from anyio.from_thread import start_blocking_portal
            from mcp import Client

            from contextsieve.mcp_server.server import build_server

            self.portal_cm = start_blocking_portal()
            self.portal = self.portal_cm.__enter__()
            self.closing = self.portal.call(anyio.Event)
            server = build_server(self.engine, stash=self.stash())

            async def hold(task_status: Any) -> None:  # the client lives in one task, start to end
                async with Client(server, mode="legacy") as c:
                    task_status.started(c)
                    await self.closing.wait()

            self.held, client = self.portal.start_task(hold)
            self.client = client
            listed = self.portal.call(client.list_tools)
            self.tools = {t.name: dict(t.input_schema or {}) for t in listed.tools}
        return self.client

    def _env(self) -> dict[str, str]:
        env = {**os.environ, "CONTEXTSIEVE_DATA": str(self.folder / "data")}
        if self.model_cache is not None:
            env["CONTEXTSIEVE_CACHE"] = str(self.model_cache)
        return env

    def stdio_server(self) -> subprocess.Popen[bytes]:
        if self.stdio is None or self.stdio.poll() is not None:
            if self.stdio is not None:
                raise Untyped(f"the stdio server died (exit {self.stdio.returncode})")
            from contextsieve.agent.agentfile import example_agent_path

            cmd = [sys.executable, "-m", "contextsieve", "serve", str(example_agent_path()), "--offline"]
            self.stdio = subprocess.Popen(
                cmd,
                env=self._env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=open(self.folder / "stdio-stderr.txt", "wb"),  # noqa: SIM115 - lives with the process
            )
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "f", "version": "1"},
                },
            }
            self.send_line(json.dumps(init).encode())
            self.reply_to(1, deadline=time.monotonic() + 180)
            self.send_line(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        return self.stdio

    def send_line(self, line: bytes) -> None:
        assert self.stdio is not None and self.stdio.stdin is not None
        try:
            self.stdio.stdin.write(line + b"\n")
            self.stdio.stdin.flush()
        except OSError as e:
            raise Untyped(f"the stdio server stopped reading: {e}") from e

    def reply_to(self, want: int, deadline: float) -> list[dict[str, Any]]:
        """Every message the stdio server writes until the reply with id ``want`` (included)."""
        assert self.stdio is not None and self.stdio.stdout is not None
        out: list[dict[str, Any]] = []
        sel = selectors.DefaultSelector()
        sel.register(self.stdio.stdout, selectors.EVENT_READ)
        fd = self.stdio.stdout.fileno()
        try:
            while True:
                while b"\n" in self.stdio_buffer:
                    line, self.stdio_buffer = self.stdio_buffer.split(b"\n", 1)
                    try:
                        msg = json.loads(line)
                    except ValueError as e:
                        raise Untyped(f"the stdio server wrote a line that is not JSON: {line[:200]!r}") from e
                    out.append(msg)
                    if isinstance(msg, dict) and msg.get("id") == want:
                        return out
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no reply to id {want} within {REPLY_SECONDS} s")
                if sel.select(timeout=left):
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        raise Untyped(f"the stdio server died (exit {self.stdio.wait()})")
                    self.stdio_buffer += chunk
        finally:
            sel.close()

    def http_server(self) -> int:
        if self.http is not None and self.http.poll() is not None:
            raise Untyped(f"the HTTP server died (exit {self.http.returncode})")
        if self.http_port is None:
            from contextsieve.agent.agentfile import example_agent_path

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            cmd = [sys.executable, "-m", "contextsieve", "serve", str(example_agent_path()), "--offline"]
            cmd += ["--transport", "http", "--port", str(port), "--stash", str(self.folder / "http-stash.db")]
            self.http = subprocess.Popen(
                cmd,
                env=self._env(),
                stdout=subprocess.DEVNULL,
                stderr=open(self.folder / "http-stderr.txt", "wb"),  # noqa: SIM115 - lives with the process
            )
            deadline = time.monotonic() + 180
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if self.http.poll() is not None or time.monotonic() > deadline:
                        raise Untyped("the HTTP server did not start") from None
                    time.sleep(0.2)
            self.http_port = port
        return self.http_port

    def tracebacks(self) -> int:
        """Tracebacks the server processes wrote to their stderr so far."""
        n = 0
        for name in ("stdio-stderr.txt", "http-stderr.txt"):
            p = self.folder / name
            if p.exists():
                n += p.read_bytes().count(b"Traceback (most recent call last)")
        return n

    def close(self) -> None:
        if self.client is not None:
            self.portal.call(self.closing.set)
            try:
                self.held.result(timeout=30)
            except Exception:  # noqa: BLE001, S110 - closing after a fuzz run
                pass
            self.portal_cm.__exit__(None, None, None)
            self.client = None
        for proc in (self.stdio, self.http):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if self.store is not None:
            self.store.close()
            self.store = None


# -- hostile values of the stash's own kinds ------------------------------------------------------


def _time(rng: random.Random, hostile_value: Any) -> Any:
    r = rng.random()
    if r < 0.3:
        return datetime(rng.randrange(1, 10000), rng.randrange(1, 13), rng.randrange(1, 29), tzinfo=timezone.utc)
    if r < 0.45:
        off = timezone(timedelta(hours=rng.randrange(-23, 24)))
        return datetime(rng.choice([1, 9999]), rng.choice([1, 12]), rng.choice([1, 31]), 23, tzinfo=off).isoformat()
    if r < 0.55:
        return datetime(2026, 1, 1)  # naive
    if r < 0.7:
        return rng.choice(["2026-01-01T00:00:00Z", "yesterday", "0000-00-00", "9999-12-31T23:59:59.999999+00:00"])
    return hostile_value(rng)


def _segment(rng: random.Random, hostile_text: Any, hostile_value: Any, ids: list[str]) -> Any:
    r = rng.random()
    if r < 0.35:
        return hostile_text(rng, 6)
    if r < 0.9:
        seg: dict[str, Any] = {"text": hostile_text(rng, 6)}
        for name, make in (
            ("type", lambda: rng.choice(["message", "file", "tool_output", "note", "summary", hostile_value(rng)])),
            ("topic", lambda: rng.choice([None, "plans", hostile_text(rng, 2), hostile_value(rng)])),
            ("source", lambda: rng.choice(["", "mail", hostile_value(rng)])),
            ("timestamp", lambda: _time(rng, hostile_value)),
            ("expires_at", lambda: _time(rng, hostile_value)),
            ("expires_in_days", lambda: rng.choice([1, 0.5, 0, -1, math.nan, 1e308, hostile_value(rng)])),
            ("protected", lambda: rng.choice([True, False, hostile_value(rng)])),
            (
                "references",
                lambda: (
                    rng.sample(ids, min(len(ids), rng.randrange(0, 3))) + [hostile_value(rng)] * rng.randrange(0, 2)
                ),
            ),
            ("id", lambda: rng.choice([f"id-{rng.randrange(50)}", hostile_text(rng, 1), hostile_value(rng)])),
            ("unknown_field", lambda: hostile_value(rng)),
        ):
            if rng.random() < 0.25:
                seg[name] = make()
        return seg
    return hostile_value(rng)


def _filters(rng: random.Random, hostile_value: Any) -> Any:
    if rng.random() < 0.4:
        return None
    if rng.random() < 0.2:
        return hostile_value(rng)
    keys = ["types", "topics", "sources", "start_time", "end_time", "protected", "sessions", "nope"]
    out: dict[str, Any] = {}
    for _ in range(rng.randrange(1, 3)):
        k = rng.choice(keys)
        out[k] = _time(rng, hostile_value) if "time" in k else rng.choice([["message"], ["plans"], hostile_value(rng)])
    return out


def _session(rng: random.Random, hostile_text: Any, hostile_value: Any) -> Any:
    r = rng.random()
    if r < 0.7:
        return rng.choice(["default", "s1", "s2"])
    if r < 0.9:
        return hostile_text(rng, 2)
    return hostile_value(rng)


def _count(store: Any) -> int:
    return int(store.stats()["segments"])


def t_stash_api(state: Any, rng: random.Random) -> None:
    """One hostile call to the stash API; a refused call changes nothing, an accepted stash is held."""
    from tests.helpers.properties import check, hostile_text, hostile_value

    surf = surfaces(state)
    store = surf.stash()
    if _count(store) > _MAX_SEGMENTS:
        for s in ("default", "s1", "s2"):
            ids = [x.id for x in store.list(session=s, limit=10_000)]
            if ids:
                store.delete(ids, session=s)
    known = [x.id for x in store.list(limit=20)]
    ids_arg = rng.choice([known[:3], [hostile_text(rng, 1)], hostile_value(rng), known[:1] + [hostile_value(rng)], []])
    session = _session(rng, hostile_text, hostile_value)
    before = _count(store)
    op = rng.randrange(9)
    try:
        if op <= 1:
            segments = [_segment(rng, hostile_text, hostile_value, known) for _ in range(rng.randrange(0, 6))]
            r = store.stash(segments if rng.random() < 0.95 else hostile_value(rng), session=session)
            unique = list(dict.fromkeys(r.segment_ids))  # a text given twice in one batch gets one id twice
            got = store.get(unique, session=session) if unique else []
            check(len(got) == len(unique), "a stash returned ids the store does not hold (lost)")
            check(
                _count(store) == before + r.stashed,
                f"stashed {r.stashed} but the count went {before} -> {_count(store)}",
            )
        elif op <= 3:
            k = rng.choice([1, 5, 50, 0, -1, 10**9, hostile_value(rng)])
            found = store.retrieve(
                hostile_text(rng, 4),
                session=session,
                top_k=k,
                min_similarity=rng.choice([0.0, -1.0, 0.5, 2.0, math.nan, hostile_value(rng)]),
                filters=_filters(rng, hostile_value),
                cross_session=rng.random() < 0.2,
                now=rng.choice([None, _time(rng, hostile_value)]),
            )
            scores = [r.score for r in found]
            check(all(math.isfinite(x) for x in scores), f"scores {scores}")
            check(scores == sorted(scores, reverse=True), "results not best first")
            check(len(found) <= int(k), "more results than top_k")
        elif op == 4:
            store.list(
                session=session,
                filters=_filters(rng, hostile_value),
                limit=rng.choice([1, 100, 0, 10**6, hostile_value(rng)]),
                offset=rng.choice([0, 5, -1, 2**63, hostile_value(rng)]),
            )
        elif op == 5:
            store.get(ids_arg, session=session, missing_ok=rng.random() < 0.5)
        elif op == 6:
            store.merge(ids_arg, session=session, keep=rng.choice([True, True, False, hostile_value(rng)]))
        elif op == 7:
            rng.choice([store.delete, store.protect, store.unprotect])(ids_arg, session=session)
        else:
            if rng.random() < 0.5:
                store.cleanup_old(rng.choice([30, 0, -1, 1e308, math.nan, timedelta.max, hostile_value(rng)]))
            else:
                store.cleanup_expired(now=rng.choice([None, _time(rng, hostile_value)]))
    except ContextSieveError:
        check(_count(store) == before, f"a refused call changed the store: {before} -> {_count(store)} segments")
        raise


# -- MCP through the SDK's in-memory client --------------------------------------------------------


def _argument(rng: random.Random, spec: dict[str, Any], hostile_text: Any, hostile_value: Any, known: list[str]) -> Any:
    kind = spec.get("type") if isinstance(spec, dict) else None
    r = rng.random()
    if r < 0.25:
        return hostile_value(rng)
    if kind == "string" or "anyOf" in spec:
        return rng.choice(
            [hostile_text(rng, 5), rng.choice(known) if known else "x", "tool:github:create_pull_request"]
        )
    if kind == "integer":
        return rng.choice([1, 5, 0, -1, 2**63, 10**30])
    if kind == "number":
        return rng.choice([0.0, 0.5, -1.0, 1e308])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [
            rng.choice(
                [
                    {"text": hostile_text(rng, 4)},
                    hostile_text(rng, 2),
                    rng.choice(known) if known else "y",
                    hostile_value(rng),
                ]
            )
            for _ in range(rng.randrange(0, 4))
        ]
    if kind == "object":
        return {rng.choice(["context_top_n", "token_budget", "types", "nope"]): hostile_value(rng)}
    return hostile_value(rng)


def t_mcp_tools(state: Any, rng: random.Random) -> None:
    """One hostile ``tools/call`` (any tool, arguments from its schema or anything) over the SDK's
    in-memory client: a result, or a JSON-RPC error with a standard code; never an unexpected error."""
    from mcp import MCPError

    from tests.helpers.properties import check, hostile_text, hostile_value

    surf = surfaces(state)
    client = surf.mcp()
    name = rng.choice([*surf.tools, "no_such_tool"]) if rng.random() < 0.97 else hostile_text(rng, 1)
    props = dict((surf.tools.get(name) or {}).get("properties") or {})
    known = [*state.keys, *[x.id for x in surf.stash().list(limit=5)]]
    args: Any = {
        k: _argument(rng, v, hostile_text, hostile_value, known) for k, v in props.items() if rng.random() < 0.8
    }
    if rng.random() < 0.1:
        args[hostile_text(rng, 1)] = hostile_value(rng)
    try:
        args = json.loads(
            json.dumps(args, default=str, allow_nan=True).replace("NaN", "null").replace("Infinity", "1e308")
        )
    except (ValueError, TypeError):
        args = {}
    args = _no_surrogates(args)  # the SDK client cannot send them (mcp_stdio and mcp_http send them raw)
    try:
        result = surf.portal.call(client.call_tool, name, args)
    except MCPError as e:
        code = e.error.code
        if code in (-32602, -32600, -32601, -32001):
            raise _TypedMcp(f"{code}: {e.error.message[:200]}") from None
        raise Untyped(f"JSON-RPC error {code}: {e.error.message[:300]}") from e
    text = " ".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        # the SDK's own check of the arguments against the tool's schema says what is wrong, as a tool
        # error (MCP 2025-11-25: input validation errors are tool execution errors): a typed refusal
        validation = text.startswith("Error executing tool") and "validation error" in text
        if ("Error executing tool" in text and not validation) or "Traceback" in text:
            raise Untyped(f"{name}: {text[:300]}")
        raise _TypedMcp(text[:200])
    check(bool(text), f"{name}: an empty result")
    json.loads(text)  # every tool answers JSON


def _no_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_no_surrogates(k): _no_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_surrogates(v) for v in value]
    return value


class _TypedMcp(ContextSieveError):
    """A JSON-RPC error with a standard code, or a tool error result that says what was wrong: the
    MCP surface's typed refusal."""


# -- raw stdio lines and raw HTTP bodies ----------------------------------------------------------


def _raw_body(rng: random.Random, hostile_text: Any, hostile_value: Any, tools: list[str]) -> bytes:
    r = rng.random()
    if r < 0.35:
        msg: Any = {
            "jsonrpc": rng.choice(["2.0", "2.0", "1.0", hostile_value(rng)]),
            "id": rng.choice([7, "s", None, 2**70, -1, 1.5, hostile_value(rng)]),
            "method": rng.choice(
                [
                    "tools/call",
                    "tools/list",
                    "prompts/get",
                    "resources/read",
                    "ping",
                    "logging/setLevel",
                    hostile_text(rng, 1),
                ]
            ),
            "params": rng.choice(
                [
                    {"name": rng.choice([*tools, "x"]), "arguments": hostile_value(rng)},
                    hostile_value(rng),
                    {"level": hostile_value(rng)},
                ]
            ),
        }
        try:
            return json.dumps(msg, default=str).encode("utf-8", "surrogatepass")
        except (ValueError, TypeError):
            return b"{}"
    if r < 0.5:
        return rng.choice(
            [
                b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"\\ud800"}}',
                b"[]",
                b"[{}]",
                b"null",
                b"{",
                b"\xff\xfe\x00",
            ]
        )
    if r < 0.6:
        depth = rng.choice([50, 1000, 100_000])
        return b'{"jsonrpc":"2.0","id":4,"method":"ping","params":' + b"[" * depth + b"]" * depth + b"}"
    if r < 0.75:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200))).replace(b"\n", b" ")
    return hostile_text(rng, 6).encode("utf-8", "surrogatepass").replace(b"\n", b" ")


def t_mcp_stdio(state: Any, rng: random.Random) -> None:
    """One hostile line to a real ``serve`` over stdio, then a ping: the server answers the line at
    once where it can (a JSON-RPC error is a typed refusal), answers the ping, writes no traceback."""
    from tests.helpers.properties import hostile_text, hostile_value

    surf = surfaces(state)
    surf.stdio_server()
    before = surf.tracebacks()
    surf.send_line(_raw_body(rng, hostile_text, hostile_value, list(surf.tools) or ["select_context"]))
    surf.next_id += 1
    ping = surf.next_id
    surf.send_line(json.dumps({"jsonrpc": "2.0", "id": ping, "method": "ping"}).encode())
    seen = surf.reply_to(ping, deadline=time.monotonic() + REPLY_SECONDS)
    if surf.tracebacks() > before:
        raise Untyped("the stdio server wrote a traceback")
    errors = [m.get("error") for m in seen[:-1] if isinstance(m, dict) and m.get("error")]
    bad = [e for e in errors if isinstance(e, dict) and e.get("code") == -32603]
    if bad:
        raise Untyped(f"internal error: {str(bad[0])[:300]}")
    if errors:
        raise _TypedMcp(str(errors[0])[:200])


_STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _stateless_call(
    rng: random.Random, surf: Surfaces, hostile_text: Any, hostile_value: Any
) -> tuple[bytes, dict[str, str]]:
    """A well-formed request of the default (stateless) protocol calling a tool with hostile
    arguments, so the tools themselves are reached over HTTP."""
    surf.mcp()  # the tools' schemas
    name = rng.choice(list(surf.tools))
    props = dict((surf.tools.get(name) or {}).get("properties") or {})
    known = [str(it.key) for it in surf.engine.agent.all_items()]
    args = {k: _argument(rng, v, hostile_text, hostile_value, known) for k, v in props.items() if rng.random() < 0.8}
    msg = {"jsonrpc": "2.0", "id": rng.randrange(1, 10**6), "method": "tools/call"}
    msg["params"] = {"name": name, "arguments": args, "_meta": _STATELESS_META}
    body = json.dumps(msg, default=str).encode("utf-8", "surrogatepass")
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": name}
    return body, headers


def _json_reply(resp_body: bytes, content_type: str) -> Any:
    """The JSON-RPC message of an HTTP answer (a JSON body, or the last ``data:`` of an SSE stream)."""
    text = resp_body.decode("utf-8", "replace")
    if "event-stream" in content_type:
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
        text = data[-1] if data else ""
    try:
        return json.loads(text)
    except ValueError:
        return None


def t_mcp_http(state: Any, rng: random.Random) -> None:
    """One hostile body POSTed to a real ``serve --transport http`` (half of them well-formed calls of
    the default protocol with hostile tool arguments): an answer within the time, never a 5xx, an
    internal error, an unexpected-error tool result or a dropped connection, and no traceback in the
    server's log."""
    from tests.helpers.properties import hostile_text, hostile_value

    surf = surfaces(state)
    port = surf.http_server()
    before = surf.tracebacks()
    headers = {
        "Content-Type": rng.choice(["application/json", "application/json", "text/plain", ""]),
        "Accept": rng.choice(["application/json, text/event-stream", "application/json, text/event-stream", "*/*", ""]),
        "MCP-Protocol-Version": rng.choice(["2025-06-18", "2026-07-28", "1999-01-01", ""]),
    }
    if rng.random() < 0.5:
        body, extra = _stateless_call(rng, surf, hostile_text, hostile_value)
        headers.update(extra, **{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    else:
        body = _raw_body(rng, hostile_text, hostile_value, ["select_context", "stash_context"])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REPLY_SECONDS)
    try:
        conn.request("POST", "/mcp", body=body, headers={k: v for k, v in headers.items() if v})
        resp = conn.getresponse()
        status = resp.status
        reply = _json_reply(resp.read(), resp.getheader("content-type") or "")
    except (ConnectionError, http.client.HTTPException) as e:
        raise Untyped(f"the connection broke: {e!r}") from e
    except socket.timeout:
        raise TimeoutError(f"no answer within {REPLY_SECONDS} s") from None
    finally:
        conn.close()
    if status >= 500 or surf.tracebacks() > before:
        raise Untyped(f"HTTP {status}" + (" and a traceback in the log" if surf.tracebacks() > before else ""))
    error = reply.get("error") if isinstance(reply, dict) else None
    if isinstance(error, dict) and error.get("code") == -32603:
        raise Untyped(f"internal error: {str(error)[:300]}")
    result = reply.get("result") if isinstance(reply, dict) else None
    if isinstance(result, dict) and result.get("isError"):
        text = " ".join(str(c.get("text", "")) for c in result.get("content") or [] if isinstance(c, dict))
        validation = text.startswith("Error executing tool") and "validation error" in text
        if ("Error executing tool" in text and not validation) or "Traceback" in text:
            raise Untyped(text[:300])
        raise _TypedMcp(text[:200])
    if status >= 400 or error is not None:
        raise _TypedMcp(f"HTTP {status}: {str(error)[:200]}")


def surfaces(state: Any) -> Surfaces:
    """The state's :class:`Surfaces`, made on first use."""
    surf = getattr(state, "surfaces", None)
    if surf is None:
        surf = Surfaces(state.folder, state.engine, state.model_cache)
        state.surfaces = surf
    return surf
