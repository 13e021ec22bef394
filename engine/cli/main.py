"""The ``contextsieve`` command line.

contextsieve select AGENT_FILE "message" [--json]   the request context for one message ("-": stdin)
contextsieve example-agent                           print the path of the bundled example agent file
contextsieve index AGENT_FILE                        embed and cache every item (progress bar)
contextsieve tools AGENT_FILE [--refresh] [--json]   list the agent's MCP servers' tools, report changes
contextsieve serve AGENT_FILE [--transport http]     serve select_context / search_tools over MCP
contextsieve gateway AGENT_FILE                      front the agent's MCP servers, offering only the task's tools
contextsieve inspect AGENT_FILE [--session FILE]     a local page: the request context per message or saved turn
contextsieve stash stats|cleanup|rebuild STORE        a stash store's counts, expiry cleanup, re-embedding
contextsieve stash export STORE FILE | import FILE STORE | migrate SRC DST   move a stash (JSON Lines)
contextsieve demo                                    a few messages against the bundled example agent
contextsieve build [--force] [--variant V|all]       measure the variants on this CPU (table), cache the choice
contextsieve embed TEXT [TEXT ...]                   print one vector per text (JSON lines)
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from contextsieve.agent.agent import Agent
from contextsieve.agent.agentfile import example_agent_path
from contextsieve.errors import AgentFileWarning, ContextSieveError, InputError

__all__ = ["main", "DEMO_MESSAGES"]

DEMO_MESSAGES = (
    "Hi, my parcel is late. It has not moved for a week. Can I get my money back?",
    "Checkout is failing with 502 errors since the deploy ten minutes ago!",
    "How many orders from Canada were refunded last month? Write the SQL for it.",
    "@ref:style-guide Please open a pull request for the cart rounding fix.",
)


#: When to use ``serve`` and when ``gateway``, with the host configuration of each (both commands' --help).
SERVE_CONFIG = '{"mcpServers": {"contextsieve": {"command": "contextsieve", "args": ["serve", "/path/agent.yaml"]}}}'
GATEWAY_CONFIG = '{"mcpServers": {"tools": {"command": "contextsieve", "args": ["gateway", "/path/agent.yaml"]}}}'
_WHICH = f"""\
serve or gateway?
  serve    for a host that calls select_context itself: context selection (rules,
           references, the tools to offer, and why), tool search and the stash, as MCP
           tools. serve does not call the agent's MCP tools: the host offers the tools
           select_context names through its own connections to those servers.
           {SERVE_CONFIG}
  gateway  for a host that should just see the right tools of the agent's MCP servers:
           configure the gateway instead of those servers; it offers the tools the
           current task needs (set_task) and forwards their calls.
           {GATEWAY_CONFIG}
"""
_LOG_HELP = (
    "log records of this level and above go to stderr, the MCP SDK's and uvicorn's included "
    "(default warning; info and debug show each request)"
)

_REMEMBER_HELP = (
    "keep the requests that learning from use records (record_tool_calls) on disk beside the embedding cache "
    "(default: in this process's memory only, so no message text is written)"
)


def _parser() -> argparse.ArgumentParser:
    from contextsieve import __version__

    p = argparse.ArgumentParser(prog="contextsieve", description="CPU-first context selection for LLM agents.")
    p.add_argument("--version", action="version", version=f"contextsieve {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("select", help="show the request context chosen for one message")
    s.add_argument("agent", type=Path, help="agent YAML file or agent folder")
    s.add_argument(
        "message",
        nargs="?",
        help='the user message; "-" reads it from standard input (or give --message-file)',
    )
    s.add_argument("--message-file", type=Path, metavar="FILE", help="read the message from FILE (UTF-8)")
    s.add_argument("--json", action="store_true", help="print the context and the OpenAI-shaped request as JSON")
    s.add_argument("--tools", type=Path, help="JSON tool catalog: {server: [MCP tools/list entries]}")
    s.add_argument("--offline", action="store_true", help="do not ask the agent's MCP servers for their tools")
    for name in ("top-k", "top-n"):
        s.add_argument(f"--{name}", type=int, help=f"override context{name.title().replace('-', '')} for this request")
    s.add_argument("--tool-top-n", type=int, help="override tool_top_n (tools aimed for) for this request")
    s.add_argument("--include-score", type=float, help="override contextIncludeScore for this request")
    s.add_argument("--preset", choices=["aggressive", "normal", "conservative", "reference"], help="selection preset")
    s.add_argument("--token-budget", type=int, help="most tokens the request's items may take")
    s.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        dest="settings",
        help=(
            "any session setting, VALUE as JSON when it parses (--set keyword_weight=0.1 --set "
            "expansion_source=graph --set 'tool_settings={\"context_top_n\": 8}'); repeatable"
        ),
    )
    s.add_argument(
        "--explain",
        action="append",
        default=[],
        metavar="KEY",
        help="explain why an item (rule:NAME, reference:NAME, tool:SERVER:NAME) is or is not included; repeatable",
    )
    i = sub.add_parser("index", help="embed and cache every item of an agent")
    i.add_argument("agent", type=Path)
    i.add_argument("--tools", type=Path)
    i.add_argument("--offline", action="store_true", help="do not ask the agent's MCP servers for their tools")
    t = sub.add_parser("tools", help="list the tools of the agent's MCP servers and report what changed")
    t.add_argument("agent", type=Path)
    t.add_argument("--refresh", action="store_true", help="list every server live (default: cached listings first)")
    t.add_argument("--json", action="store_true", help="print the report as JSON")
    t.add_argument("--timeout", type=float, default=10.0, help="seconds per server (default 10)")
    v = sub.add_parser(
        "serve",
        help="serve context selection and tool search to MCP hosts (stdio or HTTP)",
        description="Serve context selection and tool search to an MCP host, over stdio (default) or\n"
        "streamable HTTP (http://HOST:PORT/mcp).",
        epilog=_WHICH + "\nexit codes: 0 the host disconnected or the server was stopped, 1 a contextsieve\n"
        "error (e.g. the port is taken), 2 usage (e.g. a --host other machines can reach\n"
        "without --token-env), 130 Ctrl-C",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument("agent", type=Path)
    v.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    v.add_argument(
        "--host",
        default="127.0.0.1",
        help="HTTP only (default 127.0.0.1); an address other machines can reach needs --token-env",
    )
    v.add_argument("--port", type=_port, default=8000, help="HTTP only (default 8000; 0: any free port)")
    v.add_argument(
        "--token-env",
        metavar="VAR",
        help="HTTP only: require 'Authorization: Bearer <token>' with the token read from this environment variable",
    )
    v.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="HTTP only: serve a --host other machines can reach without a token (when something in front of "
        "the server authenticates); refused otherwise",
    )
    v.add_argument("--log-level", choices=_LOG_LEVELS, default="warning", help=_LOG_HELP)
    v.set_defaults(usage_error=v.error)
    v.add_argument("--offline", action="store_true", help="do not ask the agent's MCP servers for their tools")
    v.add_argument(
        "--stash",
        metavar="PATH|URI",
        help="the stash store the stash tools serve (SQLite file or postgresql:// URI; default: "
        "$CONTEXTSIEVE_DATA or ~/.local/share/contextsieve, stash/IDENTITY.db: one store per agent file)",
    )
    v.add_argument("--no-stash", action="store_true", help="serve no stash tools")
    v.add_argument(
        "--stash-session",
        metavar="NAME",
        help="one stash namespace for every call (default: the agent's, agent:IDENTITY, for calls without a "
        "handle on either protocol; a private handle's own)",
    )
    v.add_argument(
        "--stash-per-connection",
        action="store_true",
        help="each connection of the handshake protocol stashes into a namespace of its own (isolation per "
        "connection; its next process does not find it)",
    )
    v.add_argument("--stash-cross-session", action="store_true", help="stash retrieval searches every session")
    v.add_argument("--remember-requests", action="store_true", help=_REMEMBER_HELP)
    v.add_argument(
        "--header-timeout",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="HTTP only: close a connection whose request headers are not complete within S seconds (default 10)",
    )
    v.add_argument(
        "--body-timeout",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="HTTP only: answer 408 to a request whose body is not complete within S seconds (default 30)",
    )
    st = sub.add_parser(
        "stash",
        help="a stash store: stats, cleanup of expired segments, rebuild after a model change, export to a file, "
        "import from one, migrate between stores",
    )
    st.add_argument("action", choices=["stats", "cleanup", "rebuild", "export", "import", "migrate"])
    st.add_argument("store", help="SQLite file or postgresql:// URI (import: the export file)")
    st.add_argument("target", nargs="?", help="export: the file to write; import, migrate: the store to write into")
    st.add_argument("--max-age-days", type=float, help="cleanup: also delete unprotected segments older than this")
    st.add_argument(
        "--vectors",
        action="store_true",
        help="export: write each segment's vectors too (an import into a store of the same model and "
        "settings then checks a sample and writes them instead of embedding)",
    )
    g = sub.add_parser(
        "gateway",
        help="one MCP server (stdio) in front of the agent's servers, offering the task's tools",
        description="One MCP server (stdio) in front of the agent's MCP servers: it offers the host the\n"
        "tools the current task needs and forwards their calls to the server that owns each.",
        epilog=_WHICH + "\nexit codes: 0 the host disconnected, 1 a contextsieve error, 2 usage, 130 Ctrl-C",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("agent", type=Path)
    g.add_argument("--log-level", choices=_LOG_LEVELS, default="warning", help=_LOG_HELP)
    g.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        metavar="S",
        help="seconds to start a downstream server and list its tools (default 30; not a limit on calls)",
    )
    g.add_argument(
        "--call-timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="seconds a forwarded tool call may take (default: no limit; over it the call is cancelled on the "
        "server and fails, the server stays connected)",
    )
    g.add_argument("--remember-requests", action="store_true", help=_REMEMBER_HELP)
    g.add_argument(
        "--stable-offer",
        action="store_true",
        help="each task adds its tools to the offer instead of replacing it (the host's tool list, and its "
        "prompt cache, change only when a task needs a new tool; at most 30 beyond always and session tools)",
    )
    n = sub.add_parser(
        "inspect",
        help="a local web page (127.0.0.1) showing the request context of a typed message or of each turn of a "
        "saved session: items by include mode with scores, near misses and why, offer and prefix stability",
    )
    n.add_argument("agent", type=Path)
    n.add_argument(
        "--session",
        type=Path,
        metavar="FILE",
        help="a session saved by Session.save: the page shows each of its turns, and typed messages continue it",
    )
    n.add_argument(
        "--stash",
        metavar="PATH|URI",
        help="an existing stash store (SQLite file or postgresql:// URI): its hits for each message, and the "
        "segments the session brings back",
    )
    n.add_argument(
        "--stash-session",
        metavar="NAME",
        help="the page session's name in the stash without --session (default: the stash's default session)",
    )
    n.add_argument("--port", type=_port, default=0, help="port on 127.0.0.1 (default 0: any free port)")
    n.add_argument(
        "--offer",
        choices=["request", "stable"],
        default="request",
        help="how the page's session offers tools across requests (default request; see OfferConfig)",
    )
    n.add_argument("--tools", type=Path, help="JSON tool catalog: {server: [MCP tools/list entries]}")
    n.add_argument("--offline", action="store_true", help="do not ask the agent's MCP servers for their tools")
    sub.add_parser("demo", help="run a few messages against the bundled example agent")
    sub.add_parser("example-agent", help="print the path of the bundled example agent file (to copy or try)")
    b = sub.add_parser(
        "build",
        help="build the model graphs, measure them on this CPU and cache the fastest that passes (prints the table)",
    )
    b.add_argument(
        "--variant",
        choices=["auto", "fp32", "int8", "int8w7", "all"],
        default="auto",
        help="auto (default): measure the candidates and choose; all: build every variant; else build that one",
    )
    b.add_argument("--force", action="store_true", help="measure again even if a choice is cached")
    b.add_argument(
        "--candidates",
        default=None,
        help="comma-separated variants to measure (default: those worth it on this CPU); the choice is cached "
        "per candidate list",
    )
    b.add_argument("--rebuild", action="store_true", help="rebuild the graphs even if cached")
    e = sub.add_parser("embed", help="embed texts, print one JSON vector per line")
    e.add_argument("texts", nargs="+")
    e.add_argument(
        "--variant",
        choices=["auto", "fp32", "int8", "int8w7"],
        default=None,
        help="default: $CONTEXTSIEVE_VARIANT or auto (the variant measured fastest on this CPU)",
    )
    e.add_argument("--digits", type=int, default=6, help="decimals printed per value (default 6)")
    return p


def _engine(path: Path, tools: Path | None, offline: bool = True, remember: bool = False):  # noqa: ANN202
    """The engine for ``path``: with the ``tools`` catalog when given, else with the live tools of
    the agent's MCP servers unless ``offline`` (a failed server is reported on stderr); ``remember``:
    learning from use keeps its requests on disk (``Engine(remember_requests=True)``)."""
    from contextsieve.engine import Engine

    catalog = None
    if tools is not None:
        try:
            catalog = json.loads(tools.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ContextSieveError(f"cannot read the tool catalog {tools}: {e}") from e
    engine = Engine.from_file(path, tools=catalog, remember_requests=remember)
    if _is_example(path):  # its servers are a fictional company's (hosts, paths): it declares its tools instead
        offline = True
    if catalog is None and not offline and _has_servers(engine.agent):
        report = engine.connect()
        if not report.ok:
            print(report.summary(), file=sys.stderr)
    return engine


def _is_example(path: Path) -> bool:
    """Whether ``path`` is the bundled example agent (read offline: its servers cannot run anywhere)."""
    try:
        return path.resolve() == example_agent_path().resolve()
    except OSError:
        return False


def _has_servers(agent) -> bool:  # noqa: ANN001
    return any(s.config.get("type") != "internal" for s in agent.servers.values())


def _parse_settings(pairs: list[str]) -> dict[str, object]:
    """``NAME=VALUE`` strings as settings (VALUE read as JSON when it parses, else as a string)."""
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--set needs NAME=VALUE, got {pair!r}")
        try:
            out[name.strip()] = json.loads(raw)
        except ValueError:
            out[name.strip()] = raw
    return out


def _message(args: argparse.Namespace) -> str:
    """``select``'s message: the argument, standard input for ``-``, or ``--message-file`` (UTF-8); a long
    message never meets the shell's argument limit this way."""
    if args.message_file is not None:
        if args.message is not None:
            raise InputError("give the message as an argument or with --message-file, not both")
        try:
            return str(args.message_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"--message-file {args.message_file}: cannot read it as UTF-8 text ({e})") from e
    if args.message is None:
        raise InputError('select needs a message: an argument, "-" for standard input, or --message-file FILE')
    if args.message == "-":
        try:
            return sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"the message on standard input is not UTF-8 ({e})") from e
    return str(args.message)


def _select(args: argparse.Namespace) -> None:
    message = _message(args)  # before the agent loads: a bad message costs nothing
    args.message = message
    engine = _engine(args.agent, args.tools, args.offline)
    pairs = (
        ("context_top_k", args.top_k),
        ("context_top_n", args.top_n),
        ("tool_top_n", args.tool_top_n),
        ("context_include_score", args.include_score),
        ("token_budget", args.token_budget),
        ("preset", args.preset),
    )
    overrides = {k: v for k, v in pairs if v is not None}
    overrides.update(_parse_settings(args.settings))
    session = engine.session(**overrides)
    t = time.perf_counter()
    req = session.build_request(args.message)
    ms = (time.perf_counter() - t) * 1000
    explanations = [session.explain(args.message, key) for key in args.explain]
    if args.json:
        out = {"context": req.context.to_dict(), "request": req.openai()}
        if explanations:
            out["explanations"] = [{**e.__dict__, "text": str(e)} for e in explanations]
        print(json.dumps(out, indent=1))
    else:
        print(req.context.grouped_text())
        print(f"{req.context.summary()}  ({ms:.0f} ms)")
        for e in explanations:
            print(f"\n{e}")


def _tools(args: argparse.Namespace) -> int:
    """List the agent's servers' tools; exit code 0 when every server listed, 1 otherwise."""
    from contextsieve.engine import Engine
    from contextsieve.mcp_client.client import ListConfig

    engine = Engine.from_file(args.agent)
    if _is_example(args.agent):  # placeholders: npx/uvx packages and *.example.internal hosts of a fictional shop
        print(
            "contextsieve: the bundled example agent's MCP servers are placeholders of a fictional company "
            "(nothing is started or resolved); its tools are declared in the file:",
            file=sys.stderr,
        )
        for server in engine.agent.servers:
            names = [t.name for t in engine.agent.tools if t.server == server]
            print(f"{server}: {len(names)} tools ({', '.join(names)})")
        return 0
    report = engine.connect(refresh=args.refresh, listing=ListConfig(timeout=args.timeout))
    if args.json:
        out = report.to_dict()
        for r in out["servers"]:
            r["tools"] = [t["name"] for t in report.tools.get(r["server"], [])]
        print(json.dumps(out, indent=1, ensure_ascii=False))
    else:
        print(report.summary())
    return 0 if report.ok else 1


_LOG_LEVELS = ["debug", "info", "warning", "error"]


def _log_to_stderr(level: str) -> None:
    """Log records of ``level`` (a name of :data:`_LOG_LEVELS`) and above to stderr, one line each.
    Done before the MCP SDK's server object is made: that calls ``logging.basicConfig(level=INFO)``,
    which does nothing once the root logger has a handler, so the SDK's and uvicorn's INFO lines (a
    line per request, session manager start and stop) stay out of the host's log by default."""
    import logging

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger().setLevel(level.upper())


def _serve(args: argparse.Namespace) -> None:
    import os

    from contextsieve.mcp_server.server import bind, check_exposure, serve

    _log_to_stderr(args.log_level)
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise InputError(f"--token-env {args.token_env}: that environment variable is empty or not set")
    if args.transport == "http":  # before the agent is loaded: a refused host or a taken port fails at once
        try:
            check_exposure(args.host, token, args.allow_unauthenticated)
        except InputError as e:
            args.usage_error(str(e))  # exit code 2
        for sock in bind(args.host, args.port, listen=False):
            sock.close()
    engine = _engine(args.agent, None, args.offline, remember=args.remember_requests)
    from contextsieve.mcp_server.server import ServeConfig

    config = ServeConfig(
        stash_session=args.stash_session,
        stash_cross_session=args.stash_cross_session,
        stash_per_connection=args.stash_per_connection,
        header_seconds=args.header_timeout,
        body_seconds=args.body_timeout,
    )
    stash = None
    if not args.no_stash:
        from contextsieve.stash import StashStore

        location = args.stash or _default_stash(engine.agent)
        stash = StashStore.open(location, engine.embedder)
    serve(
        engine,
        transport=args.transport,
        host=args.host,
        port=args.port,
        token=token,
        config=config,
        stash=stash,
        allow_unauthenticated=args.allow_unauthenticated,
    )


def _port(text: str) -> int:
    """A TCP port from the command line (0: any free port)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is from 0 to 65535, got {text}")
    return n


def _inspect(args: argparse.Namespace) -> None:
    from contextsieve.inspect.page import Inspector, InspectServer

    if args.stash and "://" not in args.stash and not Path(args.stash).is_file():
        raise InputError(f"--stash {args.stash}: no stash store there (inspect does not create one)")
    if args.session is not None and not args.session.is_file():
        raise InputError(f"--session {args.session}: no such file")
    engine = _engine(args.agent, args.tools, args.offline)
    stash = None
    if args.stash:
        from contextsieve.stash import StashStore

        stash = StashStore.open(args.stash, engine.embedder)
    try:
        engine.index(show_progress=sys.stderr.isatty())  # the first message is then as quick as the others
        inspector = Inspector(
            engine, session_file=args.session, stash=stash, stash_session=args.stash_session, offer=args.offer
        )
        server = InspectServer(inspector, port=args.port)
        print(f"contextsieve: inspect page for {engine.agent.name} at {server.url} (Ctrl-C stops)", flush=True)
        server.serve_forever()
    finally:
        if stash is not None:
            stash.close()


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (up to a day) from the command line."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < x <= 86_400:
        raise argparse.ArgumentTypeError(f"seconds must be in (0, 86400], got {text}")
    return x


def _default_stash(agent: Agent) -> str:
    """The embedded store ``serve`` uses without ``--stash``: one per agent (:attr:`Agent.identity`: its
    name and its file) in the data folder. A store an earlier version kept under the name alone (shared
    by every agent of that name) is not read; a note on stderr says how to use it."""
    import re

    from contextsieve.fileio import default_data_dir

    folder = default_data_dir() / "stash"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{agent.identity}.db"
    old = folder / f"{(re.sub(r'[^A-Za-z0-9._-]+', '-', agent.name).strip('.-') or 'agent')[:100]}.db"
    if old != path and old.is_file() and not path.exists():
        print(
            f"contextsieve: note: an earlier version kept the stash of every agent named {agent.name!r} in {old}; "
            f"this agent's own store is now {path}. To read the old one: --stash {old} "
            f"--stash-session {shlex.quote('agent:' + agent.name)}",
            file=sys.stderr,
        )
    return str(path)


def _stash(args: argparse.Namespace) -> None:
    from contextsieve.stash import StashStore

    if args.action in ("export", "import", "migrate"):
        from contextsieve.stash.transfer import export_store, import_store, migrate

        if not args.target:
            raise SystemExit(
                f"contextsieve stash {args.action}: name the {'file' if args.action == 'export' else 'store'} to write"
            )
        if args.action == "export":
            with StashStore.open(args.store) as store:
                n = export_store(store, args.target, vectors=args.vectors, show_progress=True)
                print(f"exported {n} segments to {args.target}" + (" with their vectors" if args.vectors else ""))
            return
        if args.action == "import":
            from contextsieve.stash.transfer import read_file

            read_file(args.store)  # a bad file is refused before the store is opened (or created)
            with StashStore.open(args.target) as store:
                r = import_store(store, args.store, show_progress=True)
        else:
            with StashStore.open(args.store) as src, StashStore.open(args.target) as dst:
                r = migrate(src, dst, show_progress=True)
        reused = f" ({r.vectors_reused} with the file's vectors)" if r.vectors_reused else ""
        print(f"wrote {r.written} segments{reused}, skipped {r.skipped} already there, of {r.total}")
        return
    if args.action == "rebuild":
        with StashStore.open(args.store, rebuild=True) as store:
            n = store.rebuild(show_progress=True)
            print(f"re-embedded {n} segments with {store.model_id}")
        return
    with StashStore.open(args.store) as store:
        if args.action == "cleanup":
            n = store.cleanup_expired()
            print(f"deleted {n} expired segments")
            if args.max_age_days is not None:
                print(f"deleted {store.cleanup_old(args.max_age_days)} segments older than {args.max_age_days:g} days")
        print(json.dumps(store.stats(), indent=2))


def _demo() -> None:
    from contextsieve.engine import Engine

    engine = Engine.from_file(example_agent_path())
    stats = engine.index()
    print(
        f"{engine.agent.name}: {stats.items} items, {stats.chunks} chunks ({stats.embedded} embedded now, "
        f"{stats.seconds:.2f} s)\n"
    )
    session = engine.session()
    for message in DEMO_MESSAGES:
        t = time.perf_counter()
        req = session.build_request(message)
        ms = (time.perf_counter() - t) * 1000
        print(f"> {message}")
        print(req.context.grouped_text())
        print(f"{req.context.summary()}; {len(req.messages)} messages, {len(req.tools)} tools  ({ms:.1f} ms)\n")
        session.record_reply(req, "(reply)")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 a contextsieve error, 2 usage)."""
    args = _parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("always", AgentFileWarning)
        previous = warnings.showwarning
        warnings.showwarning = _show_warning(previous)
        try:
            return _main(args)
        finally:
            warnings.showwarning = previous


def _show_warning(previous: Any) -> Any:
    """``warnings.showwarning`` that prints an agent file's warning as ``contextsieve: warning: ...`` on
    stderr (never stdout: ``serve``'s stdio protocol runs there); other warnings as Python would."""

    def show(message: Any, category: type[Warning], *rest: Any, **kw: Any) -> None:
        if issubclass(category, AgentFileWarning):
            print(f"contextsieve: warning: {message}", file=sys.stderr)
        else:
            previous(message, category, *rest, **kw)

    return show


def _main(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback; finished work (cached vectors) is kept
        print("contextsieve: interrupted (work finished so far is kept)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`contextsieve tools AGENT | head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit would raise again
        return 141  # 128 + SIGPIPE, what a shell expects of a writer whose pipe closed


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "select":
            _select(args)
        elif args.command == "index":
            engine = _engine(args.agent, args.tools, args.offline)
            s = engine.index(show_progress=True)
            print(
                f"{s.items} items, {s.chunks} chunks, {s.embedded} embedded now ({s.chunks - s.embedded} from the "
                f"cache), {s.seconds:.2f} s"
            )
        elif args.command == "tools":
            return _tools(args)
        elif args.command == "serve":
            _serve(args)
        elif args.command == "stash":
            _stash(args)
        elif args.command == "gateway":
            from contextsieve.mcp_client.client import ListConfig
            from contextsieve.mcp_server.gateway import run_gateway

            _log_to_stderr(args.log_level)
            engine = _engine(args.agent, None, offline=False, remember=args.remember_requests)
            from contextsieve.mcp_server.common import ServeConfig

            run_gateway(
                engine,
                listing=ListConfig(timeout=args.timeout, call_timeout=args.call_timeout),
                config=ServeConfig(stable_offer=args.stable_offer),
            )
        elif args.command == "inspect":
            _inspect(args)
        elif args.command == "demo":
            _demo()
        elif args.command == "example-agent":
            print(example_agent_path())
        elif args.command == "build":
            from contextsieve.models.embedder import Embedder
            from contextsieve.models.registry import Variant
            from contextsieve.models.variants import candidates, choose_variant

            if args.variant in ("auto", "all"):
                names = [v.value for v in (list(Variant) if args.variant == "all" else candidates())]
                if args.variant == "auto" and args.candidates:
                    names = [c.strip() for c in args.candidates.split(",") if c.strip()]
            else:
                names = [args.variant]
            for variant in names:
                t = time.perf_counter()
                emb = Embedder(variant=variant, rebuild=args.rebuild)
                how = "built" if emb.info.built else "loaded from cache"
                print(f"{variant}: {how} in {time.perf_counter() - t:.2f} s -> {emb.info.onnx_path}")
            if args.variant == "auto":
                t = time.perf_counter()
                cands = None
                if args.candidates:
                    try:
                        cands = [Variant(c.strip()) for c in args.candidates.split(",") if c.strip()]
                    except ValueError:
                        raise InputError(
                            f"--candidates must name variants among {', '.join(v.value for v in Variant)}"
                        ) from None
                choice = choose_variant(force=args.force, candidate_variants=cands, progress=sys.stderr.isatty())
                how = f"measured in {time.perf_counter() - t:.1f} s" if choice.measured_now else "cached choice"
                print(f"\nvariant choice ({how}; `contextsieve build --force` measures again):\n")
                print(choice.table())
        elif args.command == "embed":
            from contextsieve.models.embedder import Embedder

            emb = Embedder(variant=args.variant)
            for text, vec in zip(args.texts, emb.embed(args.texts)):
                print(
                    json.dumps(
                        {
                            "text": text,
                            "model": emb.info.model_id,
                            "vector": [round(float(v), args.digits) for v in vec],
                        }
                    )
                )
    except ContextSieveError as e:
        print(f"contextsieve: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
