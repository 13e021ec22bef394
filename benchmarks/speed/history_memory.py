"""What a year of learned history costs a 500-tool agent: memory and request time.

    python -m benchmarks.speed.history_memory [--data benchmarks/data/mcp_live] [--records 25000]

The agent holds the tools of ``--data`` (``tools.jsonl``; mcp_live: 507 tools of 25 real MCP servers)
in ``agent`` mode. Its history file (``contextsieve.agent.usage.UsageLog``, as ``history.sqlite`` keeps
it) is filled through ``UsageLog.record`` with ``--records`` examples and as many misses: a year of
a busy agent (40 tasks a day of 2-3 calls each is ~36,000 calls; the file keeps the newest 25,000 per
kind, ``KEEP_PER_AGENT``, and 100 per tool and kind). Each record's vector is a unit vector made from
a task message of the set plus noise (memory and time do not depend on the words), the tools drawn
from the catalog with a fixed seed.

Each configuration runs in a fresh process (so one's memory does not count in another's): the
scoring kernels are loaded (``compile_kernels``, as ``contextsieve build`` leaves them: a history
makes the chunk matrix large enough for the Numba kernels, whose runtime would otherwise count as the
history's memory), the engine is built, the tools embedded, and ``--requests`` requests built from the
set's task messages, each embedding its message (the query-vector memo emptied first), as a new
request does. Columns: the resident memory after the requests (MB, ``/proc/self/statm``), its peak
(``ru_maxrss``), the request p50 / p99 (ms), and what one request a host keeps holds (MB, traced by
tracemalloc after the other measures: a gateway keeps each conversation's latest request).
``history`` minus ``no history`` is what the history
costs; the goal is under 50 MB and a p50 within 1.5x. ``--pauses 0,1`` also times ``--paced-requests``
requests each made after that many seconds idle, as an agent's requests come after it waits for its
model: on some machines such a request takes several times as long as one made right after another
(the model's weights and the agent's data come back from memory), so the history's share of it is
smaller; the back-to-back p50 (pause 0) is the least a request costs. ``--malloc-mmap-threshold BYTES`` runs the
measuring processes with glibc's ``MALLOC_MMAP_THRESHOLD_`` fixed (by default glibc raises it to the size
of each large block freed, so the request's few-MB temporaries come from the heap afterwards and the
heap keeps them resident): what the history holds, apart from what the allocator keeps.

The resident size of a fresh process moves by 1-3 MB between runs (what the allocator keeps), as
much as the history's margin under the goal, so ``--rounds N`` (default 3) measures the processes
without history and with it N times each, alternating, and reports each column's median and the range
of the per-round difference.

The request p50 moves between fresh processes by more than the history costs (on the 2-core machines
measured here, 4.3 to 6.7 ms without history in one afternoon), so the last columns measure the two
in one process as well: an engine without history and one with it (one embedder), the requests
alternating between them in pairs, ``--requests`` each; their p50s and ratio.
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
    from benchmarks.quality.tool_selection import catalog_agent, load, load_servers

    tools, queries = load(data)
    return catalog_agent(tools, load_servers(data), data.name), [q["query"] for q in queries]


def fill(data: Path, path: Path, records: int, spread: str = "uniform") -> None:
    """Fill the history file at ``path`` with ``records`` examples and as many misses, the tools drawn
    uniformly (``spread="uniform"``: every tool reaches the per-tool cap, the worst case) or by use
    (``"zipf"``: the k-th most used tool k times less often than the first, as real use is skewed)."""
    from contextsieve import Embedder
    from contextsieve.agent.usage import UsageLog
    from contextsieve.models.registry import model_family

    agent, messages = _agent(data)
    emb = Embedder()
    base = emb.embed(messages)
    log = UsageLog(path, model=model_family(emb.model_id))
    tools = [t.key for t in agent.tools]
    rng = random.Random(0)
    noise = np.random.default_rng(0)
    t = time.perf_counter()
    for kind in ("examples", "misses"):
        n = 0
        while n < records:
            i = rng.randrange(len(messages))
            vec = base[i] + 0.3 * noise.standard_normal(base.shape[1]).astype(np.float32) / np.sqrt(base.shape[1])
            k = rng.choice((2, 3))
            keys = rng.sample(tools, k) if spread == "uniform" else _zipf(rng, tools, k)
            log.record(agent.name or "", f"{messages[i]} #{kind}{n}", keys, kind, vec / np.linalg.norm(vec))
            n += k
    print(f"# filled {path.name}: {records} examples and misses in {time.perf_counter() - t:.0f} s", flush=True)


def _zipf(rng: random.Random, tools: list, k: int) -> list:  # noqa: ANN001
    weights = [1.0 / (i + 1) for i in range(len(tools))]
    out: list = []
    while len(out) < k:
        t = rng.choices(tools, weights)[0]
        if t not in out:
            out.append(t)
    return out


def measure(
    data: Path, history: str, requests: int, pauses: tuple[float, ...] = (), paced: int = 50
) -> dict[str, float]:
    """Build the engine (``history``: a file, or ``"none"``), embed the tools, run the requests back to
    back, then ``paced`` requests after each pause of ``pauses`` (seconds idle before each)."""
    from contextsieve import Embedder
    from contextsieve.engine import Engine
    from contextsieve.kernels.compiled import compile_kernels

    compile_kernels()  # as `contextsieve build` leaves them: the scoring kernels loaded in both processes
    agent, messages = _agent(data)
    before = _rss_mb()
    engine = Engine(agent, embedder=Embedder(), cache_dir=False, history=False if history == "none" else Path(history))
    engine.index()
    session = engine.session()

    def run(n: int, pause: float) -> list[float]:
        lat = []
        for i in range(n):
            session.new_task()
            engine.store.clear_query_cache()
            if pause:
                time.sleep(pause)
            t = time.perf_counter()
            session.build_request(messages[i % len(messages)])
            lat.append(time.perf_counter() - t)
        return sorted(lat)

    lat = run(requests, 0.0)
    paced_p50 = {f"p50 after {p:g} s": 1e3 * statistics.median(run(paced, p)) for p in pauses if p > 0}
    got = {
        "rss": _rss_mb(),
        "base": before,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "p50": 1e3 * statistics.median(lat),
        "p99": 1e3 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "examples": float(sum(len(v) for v in engine.store.examples.values())),
        **paced_p50,
    }
    got["kept"] = _kept_request_mb(engine, session, messages)  # after the measures above: it traces
    return got


def _kept_request_mb(engine, session, messages: list[str], n: int = 20) -> float:  # noqa: ANN001
    """What one request a host keeps holds (MB): ``n`` requests built and kept (a gateway keeps each
    conversation's latest, up to ``ServeConfig.max_sessions``), their memory traced by tracemalloc
    (numpy reports its arrays to it), per request."""
    import gc
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = []
        for i in range(n):
            session.new_task()
            engine.store.clear_query_cache()
            kept.append(session.build_request(messages[i % len(messages)]))
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - before) / n / 2**20
    finally:
        tracemalloc.stop()


def alternate(data: Path, history: str, requests: int) -> dict[str, float]:
    """The request p50 without history and with the history file ``history``, in one process: two
    engines (one embedder), ``requests`` requests each, alternating between them in pairs."""
    from contextsieve import Embedder
    from contextsieve.engine import Engine
    from contextsieve.kernels.compiled import compile_kernels

    compile_kernels()
    agent, messages = _agent(data)
    emb = Embedder()
    engines = [Engine(agent, embedder=emb, cache_dir=False, history=h) for h in (False, Path(history))]
    sessions = []
    for engine in engines:
        engine.index()
        sessions.append(engine.session())
    lat: list[list[float]] = [[], []]
    warm = 20
    for i in range(2 * (requests + warm)):
        arm = (i // 2) % 2
        sessions[arm].new_task()
        engines[arm].store.clear_query_cache()
        t = time.perf_counter()
        sessions[arm].build_request(messages[(i // 4) % len(messages)])  # each message once in each arm
        if i >= 2 * warm:
            lat[arm].append(time.perf_counter() - t)
    none, hist = (1e3 * statistics.median(v) for v in lat)
    return {"one process, no history": none, "one process, history": hist}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA / "mcp_live")
    ap.add_argument("--records", type=int, default=25_000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="fresh processes of each configuration (medians)")
    ap.add_argument("--spreads", default="uniform,zipf", help="how the recorded calls spread over the tools")
    ap.add_argument("--malloc-mmap-threshold", type=int, default=None, help="glibc MALLOC_MMAP_THRESHOLD_ (bytes)")
    ap.add_argument("--pauses", default="0", help="seconds idle before each request, comma-separated (0: back to back)")
    ap.add_argument("--paced-requests", type=int, default=50, help="requests timed after each nonzero pause")
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # the child process
    ap.add_argument("--alternate", default=None, help=argparse.SUPPRESS)  # the child process of one-process p50s
    args = ap.parse_args(argv)
    pauses = tuple(float(p) for p in args.pauses.split(",") if p.strip())
    if any(p < 0 for p in pauses) or min(args.paced_requests, args.requests, args.rounds) < 1:
        ap.error("--pauses must be >= 0, --requests, --paced-requests and --rounds >= 1")
    if args.measure is not None:
        print(json.dumps(measure(args.data, args.measure, args.requests, pauses, args.paced_requests)))
        return
    if args.alternate is not None:
        print(json.dumps(alternate(args.data, args.alternate, args.requests)))
        return
    fixed = "" if args.malloc_mmap_threshold is None else f"; MALLOC_MMAP_THRESHOLD_={args.malloc_mmap_threshold}"
    print(f"# history_memory; {cpu_line()}{fixed}")
    runs: dict[str, list[dict[str, float]]] = {"no history": []}
    sizes: dict[str, float] = {}
    for spread in args.spreads.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "history.sqlite"
            fill(args.data, path, args.records, spread)
            sizes[spread] = sum(p.stat().st_size for p in Path(tmp).iterdir()) / 2**20
            label = f"history, {spread}"
            runs[label] = []
            for _ in range(args.rounds):  # alternating, so that a slow spell of the machine hits both
                runs["no history"].append(_child(args, "none"))
                runs[label].append({**_child(args, str(path)), **_child(args, str(path), "--alternate")})
    rows = {label: _medians(r) for label, r in runs.items()}
    print(
        f"\n{args.records} examples and {args.records} misses recorded; the file on disk: "
        + ", ".join(f"{s} {mb:.1f} MB" for s, mb in sizes.items())
        + "\n"
    )
    paced = [k for k in rows["no history"] if k.startswith("p50 after")]
    print(
        "| configuration | examples as chunks | resident MB | peak MB | request p50 ms | p99 ms |"
        + "".join(f" {k} ms |" for k in paced)
        + " a kept request MB |"
    )
    print("| --- " * (7 + len(paced)) + "|")
    for label, r in rows.items():
        print(
            f"| {label} | {r['examples']:.0f} | {r['rss']:.0f} | {r['peak']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} |"
            + "".join(f" {r[k]:.2f} |" for k in paced)
            + f" {r['kept']:.2f} |"
        )
    a = rows["no history"]
    rounds = f" (medians of {args.rounds} fresh processes each" if args.rounds > 1 else ""
    for i, (label, b) in enumerate(rows.items()):
        if label != "no history":
            one = b["one process, history"] / b["one process, no history"]
            nones = runs["no history"][(i - 1) * args.rounds : i * args.rounds]
            each = sorted(h["rss"] - n["rss"] for h, n in zip(runs[label], nones))
            spread_note = f"{rounds}; per round {each[0]:.1f} to {each[-1]:.1f} MB)" if rounds else ""
            print(
                f"\n{label}: the history costs {b['rss'] - a['rss']:.1f} MB resident{spread_note} "
                f"({b['peak'] - a['peak']:.1f} MB peak) and {b['p50'] / a['p50']:.2f}x the request p50"
                + "".join(f"; {b[k] / a[k]:.2f}x the {k}" for k in paced)
                + f"; in one process, alternating: {b['one process, history']:.2f} against "
                f"{b['one process, no history']:.2f} ms, {one:.2f}x"
            )


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each value's median over ``runs`` (the measures of one configuration's fresh processes)."""
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _child(args: argparse.Namespace, where: str, how: str = "--measure") -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.speed.history_memory",
            "--data",
            str(args.data),
            "--requests",
            str(args.requests),
            "--pauses",
            args.pauses,
            "--paced-requests",
            str(args.paced_requests),
            how,
            where,
        ],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ
        if args.malloc_mmap_threshold is None
        else {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(args.malloc_mmap_threshold)},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
