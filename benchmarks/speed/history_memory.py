"""What a year of learned history costs a 500-tool agent: memory and request time.

    python -m benchmarks.speed.history_memory [--data benchmarks/data/mcp_live] [--records 25000]

The agent holds the tools of ``--data`` (``tools.jsonl``; mcp_live: 507 tools of 25 real MCP servers)
in ``agent`` mode. Its history file (``contextsieve.agent.usage.UsageLog``, as ``history.sqlite`` keeps
it) is filled through ``UsageLog.record`` with ``--records`` examples and as many misses: a year of
a busy agent (40 tasks a day of 2-3 calls each is ~36,000 calls; the file keeps the newest 25,000 per
kind, ``KEEP_PER_AGENT``, and 100 per tool and kind). Each record's vector is a unit vector made from
a task message of the set plus noise (memory and time do not depend on the words), the tools drawn
from the catalog with a fixed seed.

Each configuration runs in a fresh process (so one's memory does not count in another's): the engine
is built, the tools embedded, and ``--requests`` requests built from the set's task messages; the
columns are the resident memory after the requests (MB, ``/proc/self/statm``), its peak
(``ru_maxrss``), and the request p50 / p99 (ms). ``history`` minus ``no history`` is what the history
costs; the goal is under 50 MB and a p50 within 1.5x.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import DATA, cpu_line


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _agent(data: Path):  # noqa: ANN202
    from benchmarks.quality.tool_selection import catalog_agent, load

    tools, queries = load(data)
    return catalog_agent(tools, data), [q["query"] for q in queries]


def fill(data: Path, path: Path, records: int) -> None:
    """Fill the history file at ``path`` with ``records`` examples and as many misses."""
    from contextsieve import Embedder
    from contextsieve.agent.items import ItemKind
    from contextsieve.agent.usage import UsageLog
    from contextsieve.models.registry import model_family

    agent, messages = _agent(data)
    emb = Embedder()
    base = emb.embed(messages)
    log = UsageLog(path, model=model_family(emb.model_id))
    tools = [t.key for t in agent.items if t.key.kind is ItemKind.TOOL]
    rng = random.Random(0)
    noise = np.random.default_rng(0)
    t = time.perf_counter()
    for kind in ("examples", "misses"):
        n = 0
        while n < records:
            i = rng.randrange(len(messages))
            vec = base[i] + 0.3 * noise.standard_normal(base.shape[1]).astype(np.float32) / np.sqrt(base.shape[1])
            k = rng.choice((2, 3))
            keys = rng.sample(tools, k)
            log.record(agent.name or "", f"{messages[i]} #{kind}{n}", keys, kind, vec / np.linalg.norm(vec))
            n += k
    print(f"# filled {path.name}: {records} examples and misses in {time.perf_counter() - t:.0f} s", flush=True)


def measure(data: Path, history: str, requests: int) -> dict[str, float]:
    """Build the engine (``history``: a file, or ``"none"``), embed the tools, run the requests."""
    from contextsieve import Embedder
    from contextsieve.engine import Engine

    agent, messages = _agent(data)
    before = _rss_mb()
    engine = Engine(agent, embedder=Embedder(), cache_dir=False, history=False if history == "none" else Path(history))
    engine.index()
    session = engine.session()
    lat = []
    for i in range(requests):
        session.new_task()
        t = time.perf_counter()
        session.build_request(messages[i % len(messages)])
        lat.append(time.perf_counter() - t)
    lat.sort()
    return {
        "rss": _rss_mb(),
        "base": before,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "p50": 1e3 * statistics.median(lat),
        "p99": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "examples": float(sum(len(v) for v in engine.store.examples.values())),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA / "mcp_live")
    ap.add_argument("--records", type=int, default=25_000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # the child process
    args = ap.parse_args(argv)
    if args.measure is not None:
        print(json.dumps(measure(args.data, args.measure, args.requests)))
        return
    print(f"# history_memory; {cpu_line()}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.sqlite"
        fill(args.data, path, args.records)
        size = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20
        rows = {}
        for label, where in (("no history", "none"), ("history", str(path))):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.speed.history_memory",
                    "--data",
                    str(args.data),
                    "--requests",
                    str(args.requests),
                    "--measure",
                    where,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            rows[label] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"\nhistory file: {size:.1f} MB on disk ({args.records} examples and {args.records} misses)\n")
    print("| configuration | examples as chunks | resident MB | peak MB | request p50 ms | p99 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, r in rows.items():
        print(f"| {label} | {r['examples']:.0f} | {r['rss']:.0f} | {r['peak']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} |")
    a, b = rows["no history"], rows["history"]
    print(
        f"\nthe history costs {b['rss'] - a['rss']:.1f} MB resident ({b['peak'] - a['peak']:.1f} MB peak) and "
        f"{b['p50'] / a['p50']:.2f}x the request p50"
    )


if __name__ == "__main__":
    main()
