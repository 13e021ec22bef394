"""The ``contextsieve`` command's parser, :func:`main` (the console script) and the dispatch to the
commands (:mod:`~contextsieve.cli.agent_commands`, :mod:`~contextsieve.cli.server_commands`,
:mod:`~contextsieve.cli.stash_command`, :mod:`~contextsieve.cli.model_commands`,
:mod:`~contextsieve.cli.evaluate`); the commands are listed in :mod:`contextsieve.cli`'s docstring."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any, TypeAlias

from contextsieve.agent.agentfile import example_agent_path
from contextsieve.cli import agent_commands, evaluate, model_commands, server_commands, stash_command
from contextsieve.cli.server_commands import LOG_LEVELS
from contextsieve.errors import AgentFileWarning, ContextSieveError, ContextSieveWarning
from contextsieve.fileio import LIMIT_TEXT

__all__ = ["main"]

#: The subcommands of ``contextsieve`` (``add_subparsers``): each ``_add_*_command(s)`` adds its own to it.
_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


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


def _http_arguments(p: argparse.ArgumentParser) -> None:
    """The HTTP transport's options of ``serve`` and ``gateway``."""
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="HTTP only (default 127.0.0.1); an address other machines can reach needs --token-env",
    )
    p.add_argument("--port", type=_port, default=8000, help="HTTP only (default 8000; 0: any free port)")
    p.add_argument(
        "--token-env",
        metavar="VAR",
        help="HTTP only: require 'Authorization: Bearer <token>' with the token read from this environment variable",
    )
    p.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="HTTP only: serve a --host other machines can reach without a token (when something in front of "
        "the server authenticates); refused otherwise",
    )


def _parser() -> argparse.ArgumentParser:
    from contextsieve import __version__

    p = argparse.ArgumentParser(prog="contextsieve", description="CPU-first context selection for LLM agents.")
    p.add_argument("--version", action="version", version=f"contextsieve {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    # in the order of `contextsieve --help`
    _add_agent_commands(sub)
    _add_serve_command(sub)
    _add_stash_commands(sub)
    _add_history_command(sub)
    _add_gateway_command(sub)
    _add_inspect_command(sub)
    evaluate.add_parser(sub)
    _add_example_commands(sub)
    _add_model_commands(sub)
    return p


def _add_agent_commands(sub: _Commands) -> None:
    """``select``, ``index`` and ``tools``: the commands on an agent file (:mod:`~contextsieve.cli.agent_commands`)."""
    s = sub.add_parser("select", help="show the request context chosen for one message")
    s.add_argument("agent", type=Path, help="agent YAML file or agent folder")
    s.add_argument(
        "message",
        nargs="?",
        help='the user message; "-" reads it from standard input (or give --message-file)',
    )
    s.add_argument(
        "--message-file",
        type=Path,
        metavar="FILE",
        help=f"read the message from FILE (UTF-8, a regular file of at most {LIMIT_TEXT})",
    )
    s.add_argument("--json", action="store_true", help="print the context and the OpenAI-shaped request as JSON")
    s.add_argument("--tools", type=Path, help=agent_commands.TOOLS_HELP)
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
    i.add_argument("--tools", type=Path, help=agent_commands.TOOLS_HELP)
    i.add_argument("--offline", action="store_true", help="do not ask the agent's MCP servers for their tools")
    t = sub.add_parser("tools", help="list the tools of the agent's MCP servers and report what changed")
    t.add_argument("agent", type=Path)
    t.add_argument("--refresh", action="store_true", help="list every server live (default: cached listings first)")
    t.add_argument("--json", action="store_true", help="print the report as JSON")
    t.add_argument("--timeout", type=float, default=10.0, help="seconds per server (default 10)")


def _add_serve_command(sub: _Commands) -> None:
    """``serve`` (:func:`~contextsieve.cli.server_commands.serve`)."""
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
    _http_arguments(v)
    v.add_argument("--log-level", choices=LOG_LEVELS, default="warning", help=_LOG_HELP)
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


def _add_stash_commands(sub: _Commands) -> None:
    """``stash`` and its actions (:mod:`~contextsieve.cli.stash_command`)."""
    st = sub.add_parser(
        "stash",
        help="a stash store: stats, cleanup of expired segments, rebuild after a model change, export to a file, "
        "import from one, migrate between stores; its namespaces, renaming one, adopting one for an agent",
    )
    acts = st.add_subparsers(dest="action", required=True)
    store_help = "SQLite file or postgresql:// URI"
    for action, helped in (
        ("stats", "counts of a store (it must exist)"),
        ("cleanup", "delete expired segments"),
        ("rebuild", "re-embed segments of another model"),
        ("namespaces", "each namespace (session) of a store: segments, last stash, whose agent"),
    ):
        a = acts.add_parser(action, help=helped)
        a.add_argument("store", help=store_help)
        if action == "cleanup":
            a.add_argument("--max-age-days", type=float, help="also delete unprotected segments older than this")
    a = acts.add_parser("export", help="write a store's segments to a JSON Lines file")
    a.add_argument("store", help=store_help)
    a.add_argument("target", nargs="?", help="the file to write")
    a.add_argument(
        "--vectors",
        action="store_true",
        help="write each segment's vectors too (an import into a store of the same model and settings then "
        "checks a sample and writes them instead of embedding)",
    )
    a = acts.add_parser("import", help="read an export file into a store (made when missing)")
    a.add_argument("store", metavar="FILE", help="the export file")
    a.add_argument("target", metavar="STORE", nargs="?", help="the store to write into")
    a = acts.add_parser("migrate", help="copy a store's segments into another store (made when missing)")
    a.add_argument("store", help=store_help)
    a.add_argument("target", nargs="?", help="the store to write into")
    a = acts.add_parser("rename", help="move every segment of namespace OLD into NEW, in one step")
    a.add_argument("store", help=store_help)
    a.add_argument("old")
    a.add_argument("new")
    a = acts.add_parser(
        "adopt",
        help="make a namespace an agent's: agent:IDENTITY makes the agent that identity (its stash, learned "
        "examples and tool names); any other namespace moves into the agent's, in one step",
    )
    a.add_argument("agent", type=Path, help="the agent file")
    a.add_argument("namespace", help="e.g. agent:travel-desk-1a2b3c4d5e (serve names it when it finds one)")
    a.add_argument("--stash", metavar="PATH|URI", help="the agent's store (default: its default store)")
    a.add_argument(
        "--from",
        dest="source",
        metavar="PATH|URI",
        help="the store holding the namespace when it is not the agent's: its segments are copied into the "
        "agent's store (the source is left as it was)",
    )


def _add_history_command(sub: _Commands) -> None:
    """``history`` (:func:`~contextsieve.cli.agent_data.history`)."""
    h = sub.add_parser(
        "history",
        help="what learning from use keeps for an agent (examples and misses per tool, kept as vectors unless "
        "--remember-requests kept the text too), and --forget to delete it",
    )
    h.add_argument(
        "agent",
        nargs="?",
        help="an agent file, or agent:<identity> (an agent whose file is gone); none: list every agent the "
        "history holds records of, with its file",
    )
    h.add_argument("--forget", action="store_true", help="delete the agent's recorded requests")
    h.add_argument(
        "--tool",
        metavar="SERVER:TOOL",
        help="only this tool's: SERVER:TOOL, tool:SERVER:TOOL or the name offered to the model (SERVER_TOOL), of a "
        "tool the agent has or one its history holds records of",
    )


def _add_gateway_command(sub: _Commands) -> None:
    """``gateway`` (:func:`~contextsieve.cli.server_commands.gateway`)."""
    g = sub.add_parser(
        "gateway",
        help="one MCP server (stdio) in front of the agent's servers, offering the task's tools",
        description="One MCP server (stdio) in front of the agent's MCP servers: it offers the host the\n"
        "tools the current task needs and forwards their calls to the server that owns each.",
        epilog=_WHICH + "\nexit codes: 0 the host disconnected, 1 a contextsieve error, 2 usage, 130 Ctrl-C",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("agent", type=Path)
    g.add_argument(
        "--transport",
        choices=["stdio", "http"],
        default="stdio",
        help="stdio (default: one host) or streamable HTTP at http://HOST:PORT/mcp (many hosts, each "
        "conversation its own offer)",
    )
    _http_arguments(g)
    g.add_argument("--log-level", choices=LOG_LEVELS, default="warning", help=_LOG_HELP)
    g.set_defaults(usage_error=g.error)
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


def _add_inspect_command(sub: _Commands) -> None:
    """``inspect`` (:func:`~contextsieve.cli.server_commands.inspect_page`)."""
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
    n.add_argument("--tools", type=Path, help=agent_commands.TOOLS_HELP)
    n.add_argument("--offline", action="store_true", help="do not ask the agent's MCP servers for their tools")


def _add_example_commands(sub: _Commands) -> None:
    """``demo`` and ``example-agent``: the bundled example agent."""
    sub.add_parser("demo", help="run a few messages against the bundled example agent")
    x = sub.add_parser("example-agent", help="print the path of the bundled example agent file (to copy or try)")
    x.add_argument(
        "--tasks", action="store_true", help="print the path of its task file instead (for contextsieve eval)"
    )


def _add_model_commands(sub: _Commands) -> None:
    """``build`` and ``embed``: the embedding model (:mod:`~contextsieve.cli.model_commands`)."""
    b = sub.add_parser(
        "build",
        help="build the model graphs, measure them on this CPU and cache the fastest that passes (prints the table), "
        "and compile the scoring kernels: a first request then waits for neither",
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


def _port(text: str) -> int:
    """A TCP port from the command line (0: any free port)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"a port is from 0 to 65535, got {text}")
    return n


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (up to a day) from the command line."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < x <= 86_400:
        raise argparse.ArgumentTypeError(f"seconds must be in (0, 86400], got {text}")
    return x


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 a contextsieve error, 2 usage)."""
    args = _parser().parse_args(argv)
    if sys.stdout is None:  # started with its standard output closed (`>&-`): what it prints would be lost
        print("contextsieve: error: standard output is closed, so nothing could be printed", file=sys.stderr)
        return 1
    from contextsieve.progress import to_stderr

    _text_everywhere()
    to_stderr()  # slow first-use work (a graph built, kernels compiled, items embedded) says so on stderr
    with warnings.catch_warnings():
        warnings.simplefilter("always", AgentFileWarning)
        previous = warnings.showwarning
        warnings.showwarning = _show_warning(previous)
        try:
            return _main(args)
        finally:
            warnings.showwarning = previous


def _show_warning(previous: Any) -> Any:
    """``warnings.showwarning`` that prints contextsieve's own warnings
    (:class:`~contextsieve.errors.ContextSieveWarning`) as one line, ``contextsieve: warning: ...``, on
    stderr (never stdout: ``serve``'s stdio protocol runs there); other warnings as Python would."""

    def show(message: Any, category: type[Warning], *rest: Any, **kw: Any) -> None:
        if issubclass(category, ContextSieveWarning):
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
        _drop_stdout()
        return 141  # 128 + SIGPIPE, what a shell expects of a writer whose pipe closed
    except OSError as e:  # what no check names (a path too long to look up, a full disk under stdout): one line
        print(f"contextsieve: error: {e}", file=sys.stderr)
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            _drop_stdout()
        return 1


def _drop_stdout() -> None:
    """Point stdout at the null device: Python's own flush at exit would raise again (a closed pipe, a
    full disk)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file behind stdout (captured in a test)
        pass


def _text_everywhere() -> None:
    """Text the terminal's encoding cannot show is escaped (``\\u65e5``) on stdout and stderr instead of
    stopping the command with ``UnicodeEncodeError`` (``PYTHONIOENCODING=ascii``, a C locale)."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "").replace("_", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
            except (OSError, ValueError):
                pass


def _run(args: argparse.Namespace) -> int:
    try:
        if args.command == "select":
            agent_commands.select(args)
        elif args.command == "index":
            agent_commands.index(args)
        elif args.command == "tools":
            return agent_commands.tools(args)
        elif args.command == "serve":
            server_commands.serve(args)
        elif args.command == "stash":
            stash_command.stash(args)
        elif args.command == "history":
            from contextsieve.cli.agent_data import history

            history(args)
        elif args.command == "gateway":
            server_commands.gateway(args)
        elif args.command == "inspect":
            server_commands.inspect_page(args)
        elif args.command == "demo":
            agent_commands.demo()
        elif args.command == "example-agent":
            if args.tasks:
                from contextsieve.evaluation.tasks import example_tasks_path

                print(example_tasks_path())
            else:
                print(example_agent_path())
        elif args.command == "eval":
            evaluate.run(args)
        elif args.command == "build":
            model_commands.build(args)
        elif args.command == "embed":
            model_commands.embed(args)
    except ContextSieveError as e:
        print(f"contextsieve: error: {e}", file=sys.stderr)
        return 1
    return 0
