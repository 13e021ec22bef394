"""The commands on an agent file, and how every command loads one: ``select``, ``index``, ``tools`` and
``demo`` (the bundled example agent); :func:`load_engine` is the engine of an agent file with its tools
(a JSON catalog, the live tools of its MCP servers, or the file's own for the bundled example)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from contextsieve.agent.agentfile import example_agent_path
from contextsieve.errors import InputError
from contextsieve.fileio import LIMIT_TEXT, read_stream, read_user_file

if TYPE_CHECKING:
    from contextsieve.engine import Engine

__all__ = [
    "DEMO_MESSAGES",
    "TOOLS_HELP",
    "load_engine",
    "read_catalog",
    "is_example",
    "select",
    "index",
    "tools",
    "demo",
]

DEMO_MESSAGES = (
    "Hi, my parcel is late. It has not moved for a week. Can I get my money back?",
    "Checkout is failing with 502 errors since the deploy ten minutes ago!",
    "How many orders from Canada were refunded last month? Write the SQL for it.",
    "@ref:style-guide Please open a pull request for the cart rounding fix.",
)

#: The help of every command's ``--tools`` option.
TOOLS_HELP = f"JSON tool catalog: {{server: [MCP tools/list entries]}} (a regular file of at most {LIMIT_TEXT})"


def load_engine(
    path: Path, tools: Path | None, offline: bool = True, remember: bool = False, history: bool | None = None
) -> Engine:
    """The engine for ``path``: with the ``tools`` catalog when given, else with the live tools of
    the agent's MCP servers unless ``offline`` (a failed server is reported on stderr); ``remember``:
    learning from use keeps its requests on disk (``Engine(remember_requests=True)``); ``history``: as
    ``Engine``'s (``False``: the agent's learned history is not opened at all)."""
    from contextsieve.engine import Engine

    catalog = read_catalog(tools) if tools is not None else None
    engine = Engine.from_file(path, tools=catalog, remember_requests=remember, history=history)
    if is_example(path):  # its servers are a fictional company's (hosts, paths): it declares its tools instead
        offline = True
    if catalog is None and not offline and _has_servers(engine.agent):
        report = engine.connect()
        if not report.ok:
            print(report.summary(), file=sys.stderr)
    return engine


def read_catalog(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The JSON tool catalog ``--tools`` names (:func:`~contextsieve.fileio.read_user_file`: a regular
    file of at most 64 MiB), of the shape :func:`~contextsieve.agent.file_servers.check_catalog` checks;
    :class:`InputError` naming the file for anything else."""
    from contextsieve.agent.file_servers import check_catalog

    data = read_user_file(path, "--tools")
    try:
        catalog = json.loads(data.decode("utf-8-sig"))  # a BOM (Windows editors) is no part of the JSON
    except ValueError as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InputError(f"--tools {path}: not a JSON tool catalog ({e})") from e
    except RecursionError:
        raise InputError(f"--tools {path}: not a JSON tool catalog (nested too deeply)") from None
    check_catalog(catalog, f"--tools {path}")
    return cast("dict[str, list[dict[str, Any]]]", catalog)


def is_example(path: Path) -> bool:
    """Whether ``path`` is the bundled example agent or a copy of it, unchanged (read offline: its servers
    are a fictional company's placeholders and cannot run anywhere)."""
    try:
        target = path / "tsagent.yaml" if path.is_dir() else path
        example = example_agent_path()
        if target.resolve() == example.resolve():
            return True
        # a copy: a regular file of the same size and bytes (never opened otherwise: a FIFO would block)
        return (
            target.is_file()
            and target.stat().st_size == example.stat().st_size
            and target.read_bytes() == example.read_bytes()
        )
    except OSError:
        return False


def _has_servers(agent: Any) -> bool:
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
    """``select``'s message: the argument, standard input for ``-``, or ``--message-file`` (UTF-8, a byte order
    mark before it dropped); a long message never meets the shell's argument limit this way."""
    if args.message_file is not None:
        if args.message is not None:
            raise InputError("give the message as an argument or with --message-file, not both")
        data = read_user_file(args.message_file, "--message-file")
        try:
            return data.decode("utf-8-sig")  # a BOM (Windows editors) is no part of the message
        except UnicodeDecodeError as e:
            raise InputError(f"--message-file {args.message_file}: cannot read it as UTF-8 text ({e})") from e
    if args.message is None:
        raise InputError('select needs a message: an argument, "-" for standard input, or --message-file FILE')
    if args.message == "-":
        data = read_stream(sys.stdin.buffer, "the message on standard input")
        try:
            return data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise InputError(f"the message on standard input is not UTF-8 ({e})") from e
    return str(args.message)


def select(args: argparse.Namespace) -> None:
    """``contextsieve select``: the request context for one message, as text or JSON."""
    message = _message(args)  # before the agent loads: a bad message costs nothing
    args.message = message
    engine = load_engine(args.agent, args.tools, args.offline)
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
    # the one-time work first (model loaded, items embedded; each said on stderr when slow), so the time
    # printed below is the request's own
    engine.prepare(show_progress=sys.stderr.isatty())
    t = time.perf_counter()
    req = session.build_request(args.message)
    ms = (time.perf_counter() - t) * 1000
    explanations = [session.explain(args.message, key) for key in args.explain]
    if args.json:
        out: dict[str, Any] = {"context": req.context.to_dict(), "request": req.openai()}
        if explanations:
            out["explanations"] = [{**e.__dict__, "text": str(e)} for e in explanations]
        print(json.dumps(out, indent=1))
    else:
        print(req.context.grouped_text())
        print(f"{req.context.summary()}  ({ms:.0f} ms)")
        for e in explanations:
            print(f"\n{e}")


def index(args: argparse.Namespace) -> None:
    """``contextsieve index``: embed and cache every item of the agent (a progress bar), then one line."""
    engine = load_engine(args.agent, args.tools, args.offline)
    s = engine.index(show_progress=True)
    print(
        f"{s.items} items, {s.chunks} chunks, {s.embedded} embedded now ({s.chunks - s.embedded} from the "
        f"cache), {s.seconds:.2f} s"
    )


def tools(args: argparse.Namespace) -> int:
    """List the agent's servers' tools; exit code 0 when every server listed, 1 otherwise."""
    from contextsieve.engine import Engine
    from contextsieve.mcp_client.client import ListConfig

    engine = Engine.from_file(args.agent)
    if is_example(args.agent):  # placeholders: npx/uvx packages and *.example.internal hosts of a fictional shop
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


def demo() -> None:
    """``contextsieve demo``: :data:`DEMO_MESSAGES` in one session of the bundled example agent."""
    from contextsieve.engine import Engine

    engine = Engine.from_file(example_agent_path())
    stats = engine.index()
    print(
        f"{engine.agent.name}: {stats.items} items, {stats.chunks} chunks ({stats.embedded} embedded now, "
        f"{stats.seconds:.2f} s)\n"
    )
    session = engine.session()
    for message in DEMO_MESSAGES:
        session.new_task()  # each message a task of its own (a task's later steps get fewer tools)
        t = time.perf_counter()
        req = session.build_request(message)
        ms = (time.perf_counter() - t) * 1000
        print(f"> {message}")
        print(req.context.grouped_text())
        print(f"{req.context.summary()}; {len(req.messages)} messages, {len(req.tools)} tools  ({ms:.1f} ms)\n")
        session.record_reply(req, "(reply)")
