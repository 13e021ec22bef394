"""Bounded work per input (issue 37, item 4): chunking time of long texts, and the first request over
an agent one of whose MCP servers lists a 1 MB tool description.

    python -m benchmarks.robustness.input_bounds                          # the table
    python -m benchmarks.robustness.input_bounds --uncut                  # also the 1 MB tool made in code (not cut)
    git show <commit>:engine/selection/chunking.py > /tmp/old_chunking.py
    python -m benchmarks.robustness.input_bounds --before /tmp/old_chunking.py   # chunking rows of that code too

Texts are words drawn (seeded) from the standard library's docstrings (``benchmarks/workloads.py``),
so no two chunks are alike: "no sentence breaks" is one run of words, "sentence breaks" ends a
sentence every 8-25 words and a paragraph every 4-10 sentences. Chunking is
:func:`~contextsieve.selection.chunking.chunk_item` of a reference document with that text (the shown and embedded
pieces, the token window of all-MiniLM-L6-v2's tokenizer), median of ``--runs`` runs (default 3).
``--before FILE`` times the same rows with the ``chunk_item`` of another copy of
``engine/selection/chunking.py`` (the code before the change), one run each, for the sizes in
``--before-sizes`` (default ``100KB``; the old code took minutes for 1 MB without sentence breaks).

First request: an :class:`~contextsieve.Engine` over an :class:`~contextsieve.Agent` built in code
(one MCP server, 30 ordinary tools and the 1 MB one, all in ``agent`` mode), an empty temporary
embedding cache, the model already loaded; timed is ``session.build_request`` of a first message
(chunking, embedding every chunk, the keyword index, the search). "listed" gives the tools to the
agent as a server's listing does (:func:`~contextsieve.agent.file_servers.server_tools`, which holds them to
:class:`~contextsieve.agent.tool_limits.ToolLimits`: the description is cut to 10,000 characters); "made in
code" (``--uncut``) puts the 1 MB :class:`~contextsieve.agent.items.Tool` into the agent as it is (its whole
description is sent; what is embedded stops at ``ChunkConfig.max_tool_chars``, 10,000 characters). The
issue's goal: the first request within 15 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks import workloads
from benchmarks.common import cpu_line, median_time
from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.file_servers import server_tools
from contextsieve.agent.items import IncludeMode, Reference, Tool
from contextsieve.engine import Engine
from contextsieve.models.embedder import Embedder
from contextsieve.selection.chunking import ChunkConfig, chunk_item

SIZES = {"100KB": 100_000, "1MB": 1_000_000}
MESSAGE = "Fetch the page at the docs site and summarise what it says about retries."


def text_of(size: int, breaks: bool, seed: int = 37) -> str:
    """``size`` characters of docstring words (see the module docstring)."""
    rng = random.Random(seed)
    vocab = [w for d in workloads._docstrings() for w in re.findall(r"[A-Za-z][A-Za-z'-]*", d)]
    out: list[str] = []
    length = 0
    sentence, paragraph = rng.randint(8, 25), rng.randint(4, 10)
    while length < size:
        w = rng.choice(vocab)
        sentence -= 1
        if breaks and sentence == 0:
            paragraph -= 1
            w += "." + ("\n\n" if paragraph == 0 else "")
            sentence = rng.randint(8, 25)
            paragraph = paragraph or rng.randint(4, 10)
        out.append(w)
        length += len(w) + 1
    return " ".join(out)[:size]


def load_chunking(path: Path) -> ModuleType:
    """Another copy of ``engine/selection/chunking.py`` as a module of its own."""
    spec = importlib.util.spec_from_file_location("old_chunking", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def chunking_rows(
    emb: Embedder, chunk: Callable[..., Any], sizes: list[str], runs: int
) -> list[tuple[str, float, int]]:
    rows = []
    for name in sizes:
        for breaks in (False, True):
            doc = Reference("long-doc", text_of(SIZES[name], breaks))  # a document: all of it is chunked
            seconds, chunks = median_time(lambda d=doc: chunk(d, ChunkConfig(), emb.count_tokens), runs)
            rows.append((f"{name}, {'sentence breaks' if breaks else 'no sentence breaks'}", seconds, len(chunks)))
    return rows


def agent_with(description: str, listed: bool) -> Agent:
    server = McpServer("web", {}, IncludeMode.AGENT)
    entries = [
        {"name": f"tool_{i}", "description": s, "inputSchema": {"type": "object"}}
        for i, s in enumerate(workloads.sentences(30))
    ]
    entries.append({"name": "fetch_page", "description": description, "inputSchema": {"type": "object"}})
    agent = Agent("big-description", servers={"web": server})
    if listed:
        tools, described = server_tools(server, entries)
        agent.set_server_tools("web", tools, described)
    else:
        for e in entries:
            agent.upsert(Tool("web", e["name"], e["description"], e["inputSchema"]))
    return agent


def first_request(emb: Embedder, listed: bool) -> tuple[float, int, str]:
    """Seconds of the first ``build_request``, chunks of the big tool, and its cut note."""
    agent = agent_with(text_of(SIZES["1MB"], breaks=False), listed)
    with tempfile.TemporaryDirectory() as cache:
        engine = Engine(agent, embedder=emb, cache_dir=cache)
        session = engine.session()
        t0 = time.perf_counter()
        session.build_request(MESSAGE)
        seconds = time.perf_counter() - t0
        big = agent.get("tool:web:fetch_page")
        assert isinstance(big, Tool)
        chunks = len(chunk_item(big, engine.store.config, emb.count_tokens))
        return seconds, chunks, big.cut_note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="runs per chunking row (median; default 3)")
    ap.add_argument("--uncut", action="store_true", help="also the first request with the 1 MB tool made in code")
    ap.add_argument("--before", type=Path, help="another engine/selection/chunking.py to time the chunking rows with")
    ap.add_argument("--before-sizes", default="100KB", help="sizes for --before, comma-separated (default 100KB)")
    args = ap.parse_args()

    print(cpu_line())
    t0 = time.perf_counter()
    emb = Embedder()
    emb.embed(["warm up"])
    print(f"model load: {time.perf_counter() - t0:.2f} s ({emb!r})\n")

    sizes = list(SIZES)
    before: dict[str, float] = {}
    if args.before is not None:
        old = load_chunking(args.before)
        wanted = [s.strip() for s in args.before_sizes.split(",") if s.strip()]
        before = {row: s for row, s, _ in chunking_rows(emb, old.chunk_item, wanted, 1)}
    print("| chunk_item of a document | chunks | seconds (median of %d) | before, seconds (1 run) |" % args.runs)
    print("| --- | ---: | ---: | ---: |")
    for row, seconds, n in chunking_rows(emb, chunk_item, sizes, args.runs):
        old_s = f"{before[row]:.2f}" if row in before else "-"
        print(f"| {row} | {n:,} | {seconds:.3f} | {old_s} |", flush=True)

    print("\n| first request, agent of 31 tools, one with a 1 MB description | chunks of that tool | seconds |")
    print("| --- | ---: | ---: |")
    cases = [("listed by its server (held to ToolLimits)", True)] + (
        [("made in code (not cut)", False)] if args.uncut else []
    )
    for name, listed in cases:
        seconds, chunks, note = first_request(emb, listed)
        print(f"| {name} | {chunks:,} | {seconds:.2f} |", flush=True)
        if note:
            print(f"|   cut note: {note} | | |")


if __name__ == "__main__":
    main()
