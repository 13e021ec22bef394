"""From an agent's MCP servers to its first request: cold (live listing + embedding every tool) and
warm (cached listing, nothing to embed), in one run.

    python -m benchmarks.speed.mcp_index [--runs 3]

The agent declares the three reference servers over stdio: ``mcp-server-time`` and ``mcp-server-git``
(PyPI) and ``@modelcontextprotocol/server-filesystem`` (npm, through ``npx -y``; its package is fetched
once before timing). Cold: a fresh cache folder, ``Engine.connect(refresh=True)`` (what ``contextsieve
tools --refresh`` does) then the first ``select`` (embeds the tools and the message). Warm: a new
``Engine`` on the same folder, ``connect()`` from the cached listings, then ``select``. The model
graph is built and loaded before timing (its cost is in ``benchmarks.speed.cold_start``). Also the wall
time of the CLI, ``contextsieve select AGENT MESSAGE`` in a new process, cold and warm. Medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from contextsieve import Embedder
from contextsieve.engine import Engine
from contextsieve.models.cache import default_cache_dir
from contextsieve.models.cpu import cpu_summary

MESSAGE = "What time is it in Tokyo? Then show the staged diff and read notes.txt."


def write_agent(folder: Path) -> Path:
    repo, files = folder / "repo", folder / "files"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    files.mkdir()
    (files / "notes.txt").write_text("remember the milk\n")
    bindir = Path(sys.executable).parent

    def cmd(name: str) -> str:
        return str(bindir / name) if (bindir / name).exists() else name

    doc = {
        "name": "dev-helper",
        "systemPrompt": "You help with files, git and time zones.",
        "mcpServers": {
            "time": {"type": "stdio", "command": cmd("mcp-server-time"), "serverToolDefaults": {"include": "agent"}},
            "git": {
                "type": "stdio",
                "command": cmd("mcp-server-git"),
                "args": ["--repository", str(repo)],
                "serverToolDefaults": {"include": "agent"},
            },
            "files": {
                "type": "stdio",
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-filesystem", str(files)],
                "serverToolDefaults": {"include": "agent"},
            },
        },
    }
    path = folder / "agent.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def one(agent: Path, cache: Path, embedder: Embedder, refresh: bool) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    engine = Engine.from_file(agent, embedder=embedder, cache_dir=cache)
    catalog = engine.connect(refresh=refresh)
    if not catalog.ok:
        raise SystemExit(catalog.summary())
    t1 = time.perf_counter()
    req = engine.select(MESSAGE)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1, len(req.context.entries)


def cli(agent: Path, cache: Path) -> float:
    env = {**os.environ, "CONTEXTSIEVE_CACHE": str(cache)}
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "contextsieve", "select", str(agent), MESSAGE], env=env, capture_output=True
    )
    if out.returncode:
        raise SystemExit(out.stderr.decode()[-2000:])
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    embedder = Embedder()
    embedder.embed(["warm up"])
    with tempfile.TemporaryDirectory(prefix="contextsieve-mcp-bench-") as tmp:
        folder = Path(tmp)
        agent = write_agent(folder)
        one(agent, folder / "prefetch", embedder, True)  # npx fetches the filesystem server once
        rows: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
        clis: dict[str, list[float]] = {"cold": [], "warm": []}
        tools = 0
        for r in range(args.runs):
            cache = folder / f"run{r}"
            lst, sel, _ = one(agent, cache, embedder, True)
            rows["cold"].append((lst, sel))
            lst, sel, _ = one(agent, cache, embedder, False)
            rows["warm"].append((lst, sel))
            tools = len(Engine.from_file(agent, embedder=embedder, cache_dir=cache).connect().tools.get("git", []))
            cli_cache = folder / f"cli{r}"
            for sub in ("models", "weights"):  # the built graph is shared; tool listings and vectors are not
                shutil.copytree(default_cache_dir() / sub, cli_cache / sub)
            clis["cold"].append(cli(agent, cli_cache))
            clis["warm"].append(cli(agent, cli_cache))
    print(
        f"# mcp_index: 3 stdio servers (time, git: {tools} tools, filesystem), {args.runs} runs, medians; "
        f"{cpu_summary()}"
    )
    print(f"{'':<6} {'connect s':>10} {'first select s':>15} {'total s':>8} {'CLI select s':>13}")
    for k in ("cold", "warm"):
        c = statistics.median(x for x, _ in rows[k])
        s = statistics.median(y for _, y in rows[k])
        print(f"{k:<6} {c:>10.2f} {s:>15.3f} {c + s:>8.2f} {statistics.median(clis[k]):>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
