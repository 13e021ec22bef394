"""The commands that run a server until stopped: ``serve`` (context selection over MCP, stdio or HTTP),
``gateway`` (one MCP server in front of the agent's) and ``inspect`` (the local page); logging to stderr
and the stash store ``serve`` opens by default."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import TYPE_CHECKING

from contextsieve.agent.agent import Agent
from contextsieve.cli.agent_commands import is_example, load_engine
from contextsieve.errors import InputError
from contextsieve.fileio import regular_file

if TYPE_CHECKING:
    from contextsieve.mcp_server.http_transport import TransportConfig

__all__ = ["LOG_LEVELS", "serve", "gateway", "inspect_page"]

#: The ``--log-level`` choices of ``serve`` and ``gateway``.
LOG_LEVELS = ["debug", "info", "warning", "error"]


def _log_to_stderr(level: str) -> None:
    """Log records of ``level`` (a name of :data:`LOG_LEVELS`) and above to stderr, one line each, so the
    SDK's and uvicorn's INFO lines (a line per request, session manager start and stop) stay out of the
    host's log by default."""
    import logging

    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger().setLevel(level.upper())


def serve(args: argparse.Namespace) -> None:
    """``contextsieve serve``: context selection, tool search and the stash over MCP (stdio or HTTP).
    The transport starts at once: the agent's MCP servers are listed (unless ``--offline``) and the
    model loaded in a background thread the calls wait for
    (:class:`~contextsieve.mcp_server.common.Warmup`)."""
    import os

    from contextsieve.mcp_server.common import Warmup
    from contextsieve.mcp_server.http_transport import bind
    from contextsieve.mcp_server.server import serve as run_server

    _log_to_stderr(args.log_level)
    token = None
    if args.token_env:
        token = os.environ.get(args.token_env)
        if not token:
            raise InputError(f"--token-env {args.token_env}: that environment variable is empty or not set")
    transport = _transport(args, token)  # before the agent is loaded: a refused host or a taken port fails at once
    if transport.kind == "http":
        for sock in bind(transport.host, transport.port, listen=False):
            sock.close()
    engine = load_engine(args.agent, None, offline=True, remember=args.remember_requests)

    def list_servers() -> None:  # in the background: a server started with npx takes seconds
        report = engine.connect()
        if not report.ok:
            print(report.summary(), file=sys.stderr)

    listing = list_servers if not args.offline and not is_example(args.agent) and _has_servers(engine.agent) else None

    from contextsieve.mcp_server.common import ServeConfig

    config = ServeConfig(
        stash_session=args.stash_session,
        stash_cross_session=args.stash_cross_session,
        stash_per_connection=args.stash_per_connection,
        header_seconds=args.header_timeout,
        body_seconds=args.body_timeout,
    )
    from contextsieve.cli.agent_data import print_notes, serve_store, settle

    stash = None
    if not args.no_stash:
        location = args.stash or _default_stash(engine.agent)
        stash, notes = serve_store(engine, location, explicit=args.stash is not None)
        print_notes(notes)
    if stash is not None:
        if not args.stash_session:  # the agent's own namespace: find it, or say where its data may be
            print_notes(settle(engine, stash, explicit=args.stash is not None))
    elif engine.resolution is not None and engine.resolution.note():
        print_notes([engine.resolution.note()])
    run_server(engine, transport=transport, config=config, stash=stash, warmup=Warmup(engine, connect=listing))


def gateway(args: argparse.Namespace) -> None:
    """``contextsieve gateway``: one MCP server (stdio, or HTTP for many hosts) in front of the agent's,
    offering each conversation's task its tools. The transport starts at once: the agent gets its
    servers' cached listings (none is started before the transport: the gateway starts and lists every
    server right after), and the model loads in a background thread its own tools wait for. The bundled
    example agent's servers are placeholders: the gateway says so and exits."""
    import os

    from contextsieve.cli.agent_data import print_notes
    from contextsieve.mcp_client.client import ListConfig
    from contextsieve.mcp_server.common import ServeConfig
    from contextsieve.mcp_server.gateway import run_gateway
    from contextsieve.mcp_server.gateway_state import apply_cached_listings
    from contextsieve.session.offer import OfferConfig

    _log_to_stderr(args.log_level)
    if is_example(args.agent):
        raise InputError(
            "the bundled example agent's MCP servers are placeholders (a fictional shop's hosts and folders), so "
            "the gateway has nothing to start: run `contextsieve serve` on it, or the gateway on an agent with "
            "real servers (README: the gateway)"
        )
    token = os.environ.get(args.token_env) if args.token_env else None
    if args.token_env and not token:
        raise InputError(f"--token-env {args.token_env}: that environment variable is empty or not set")
    transport = _transport(args, token)  # before the agent is loaded: a refused host fails at once, as serve's
    engine = load_engine(args.agent, None, offline=True, remember=args.remember_requests)
    if engine.resolution is not None and engine.resolution.note():  # found again after a move: say so
        print_notes([engine.resolution.note()])
    listing = ListConfig(timeout=args.timeout, call_timeout=args.call_timeout)
    apply_cached_listings(engine, listing)
    offer = OfferConfig(mode="stable", span="session") if args.stable_offer else OfferConfig()
    run_gateway(
        engine,
        listing=listing,
        config=ServeConfig(offer=offer),
        transport=transport,
    )


def _transport(args: argparse.Namespace, token: str | None) -> TransportConfig:
    """The transport ``serve`` and ``gateway`` were given (``--transport``, ``--host``, ``--port``,
    ``--allow-unauthenticated``; ``token``: read from ``--token-env``); a host it refuses is a usage
    error (exit code 2)."""
    from contextsieve.mcp_server.http_transport import TransportConfig

    try:
        return TransportConfig(
            kind=args.transport,
            host=args.host,
            port=args.port,
            token=token,
            allow_unauthenticated=args.allow_unauthenticated,
        )
    except InputError as e:
        args.usage_error(str(e))  # exits
        raise


def inspect_page(args: argparse.Namespace) -> None:
    """``contextsieve inspect``: the local page of request contexts, until Ctrl-C."""
    from contextsieve.inspect.inspector import Inspector
    from contextsieve.inspect.server import InspectServer

    if args.session is not None:
        regular_file(args.session, "--session")  # before anything loads: a FIFO would hang the page's load
    engine = load_engine(args.agent, args.tools, args.offline)
    stash = None
    if args.stash:
        from contextsieve.stash.store import StashStore

        stash = StashStore.open(args.stash, engine.embedder, create=False)  # inspect reads a store, never makes one
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


def _has_servers(agent: Agent) -> bool:
    """Whether the agent has a server to list (any but the reference host's ``internal`` ones)."""
    return any(s.config.get("type") != "internal" for s in agent.servers.values())


def _default_stash(agent: Agent) -> str:
    """The embedded store ``serve`` uses without ``--stash``: one per agent (:attr:`Agent.identity`, which
    follows the agent when its file moves: :mod:`contextsieve.agent.identity`) in the data folder
    (:func:`contextsieve.cli.agent_data.default_store`). A store an earlier version kept under the name
    alone (shared by every agent of that name) is not read; a note on stderr says how to use it."""
    from contextsieve.agent.identity import stem
    from contextsieve.agent.registry import AgentRegistry

    path = AgentRegistry().store_path(agent.identity)
    old = path.parent / f"{stem(agent.name)}.db"
    if old != path and os.path.isfile(old) and not os.path.exists(path):
        print(
            f"contextsieve: note: an earlier version kept the stash of every agent named {agent.name!r} in {old}; "
            f"this agent's own store is now {path}. To read the old one: --stash {old} "
            f"--stash-session {shlex.quote('agent:' + agent.name)}",
            file=sys.stderr,
        )
    return str(path)
