"""Request-context latency of the engine on a 200-item agent (~1,000 chunks), in one run.

    python -m benchmarks.speed.request_latency            # the 200-item agent
    python -m benchmarks.speed.request_latency --large    # also a ~150,000-chunk agent, HNSW vs exact search

The agent is built from standard-library docstrings (``benchmarks/workloads.py``): 60 references of
13 chunks, 60 rules of 2 chunks and 80 tools of 1 chunk, all in ``agent`` mode (every item is
searched: the worst case). Messages are 1-3 docstring sentences. Reported: the first request on a
cold cache (embedding all chunks; the model already loaded), warm requests (p50/p99 over 200
messages, and how much of that is embedding the query), and the first request of a restarted engine
whose disk cache is warm (a new process would add the imports and the model load).

Memory and start-up, each in fresh processes (``VmRSS`` / ``VmHWM`` of ``/proc/self/status``, MB): a
process that builds an ``Engine`` on the bundled example agent and makes its first request (model
graph and embedding cache warm), then 200 more; a process that embeds 1,000 sentences with a bare
``Embedder``; ``contextsieve demo`` on an empty cache (the graph build included, peak from
``getrusage``); and the whole start of a fresh process, from its first import to the answer of its
first request (caches warm, median of 3).

``--large``: 14,000 references of 10 docstring sentences each (one chunk per sentence plus the
header chunk: 154,000 chunks; the sentences of ``benchmarks.speed.hnsw_table``), all in ``agent`` mode,
searched by the same 200 messages through the default index (HNSW from 50,000 chunks) and with
``IndexConfig(backend="exact")``, in one run; vectors are cached in the temp folder for reruns. It
reports request and selection latency (selection = request minus embedding the message) and how
many requests chose the same items both ways.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import workloads
from benchmarks.common import cpu_line, p50_p99
from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, Reference, Rule, Tool
from contextsieve.engine import Engine
from contextsieve.retrieval.chunks import IndexConfig


def build_agent() -> Agent:
    chunks = list(workloads.doc_chunks(60 * 12 + 60, seed=5))
    sents = list(workloads.sentences(1200, seed=5))
    refs = [
        Reference(f"ref_{i:03d}", "\n\n".join(chunks[i * 12 : (i + 1) * 12]), sents[i], 500, IncludeMode.AGENT)
        for i in range(60)
    ]
    rules = [Rule(f"rule_{i:03d}", chunks[720 + i], sents[100 + i], 500, IncludeMode.AGENT) for i in range(60)]
    servers = {f"s{k}": McpServer(f"s{k}", default_include=IncludeMode.AGENT) for k in range(4)}
    tools = [Tool(f"s{i % 4}", f"tool_{i:03d}", sents[200 + i]) for i in range(80)]
    return Agent(name="bench", rules=rules, references=refs, servers=servers, tools=tools)


def messages(n: int = 200) -> list[str]:
    sents = list(workloads.sentences(1200, seed=6))
    rnd = random.Random(0)
    return [" ".join(rnd.sample(sents, rnd.randint(1, 3))) for _ in range(n)]


def large_agent(n_refs: int = 14_000, per_ref: int = 10) -> Agent:
    from benchmarks.speed.hnsw_table import docstring_sentences

    sents = docstring_sentences(n_refs * (per_ref + 1))
    refs = [
        Reference(
            f"doc_{i:05d}",
            "\n\n".join(sents[n_refs + i * per_ref : n_refs + (i + 1) * per_ref]),
            sents[i],
            500,
            IncludeMode.AGENT,
        )
        for i in range(n_refs)
    ]
    return Agent(name="large", references=refs)


def request_times(session_of: object, msgs: list[str], embed: object) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
    """Per message: request ms, selection ms (request minus embedding the message), chosen keys."""
    session = session_of()  # type: ignore[operator]
    for m in msgs[:10]:
        session.build_request(m)
    total, select, keys = [], [], []
    for m in msgs:
        t = time.perf_counter()
        req = session.build_request(m)
        total.append(time.perf_counter() - t)
        t = time.perf_counter()
        embed(session.query_chunks(m))  # type: ignore[operator]
        select.append(total[-1] - (time.perf_counter() - t))
        keys.append([str(k) for k in req.context.keys()])
    return np.array(total) * 1e3, np.array(select) * 1e3, keys


def large(emb: object, msgs: list[str]) -> None:
    agent = large_agent()
    cache = Path(tempfile.gettempdir()) / "contextsieve-bench-large"
    t = time.perf_counter()
    hnsw = Engine(agent, embedder=emb, cache_dir=cache)  # type: ignore[arg-type]
    report = hnsw.index(show_progress=True)
    build = time.perf_counter() - t
    exact = Engine(agent, embedder=emb, cache_dir=cache, index=IndexConfig(backend="exact"))  # type: ignore[arg-type]
    assert exact.index().search == "exact" and report.search == "hnsw", report
    rows = {}
    for name, engine in (("HNSW (default from 50,000 chunks)", hnsw), ("exact", exact)):
        rows[name] = request_times(engine.session, msgs, emb.embed)  # type: ignore[attr-defined]
    same = sum(a == b for a, b in zip(rows["exact"][2], next(iter(rows.values()))[2]))
    print(
        f"\nagent: {len(agent.references)} references, {report.chunks} chunks; index built in {build:.0f} s "
        f"(embedding included, vectors from the disk cache when rerun); same {len(msgs)} messages\n"
    )
    print("| search | request p50 ms | request p99 ms | selection p50 ms | selection p99 ms |")
    print("| --- | --- | --- | --- | --- |")
    for name, (total, select, _) in rows.items():
        (t50, t99), (s50, s99) = p50_p99(total), p50_p99(select)
        print(f"| {name} | {t50:.2f} | {t99:.2f} | {s50:.2f} | {s99:.2f} |")
    print(f"\nHNSW chose the same items as exact search in {same} of {len(msgs)} requests.")


_MEM = (
    "import time\n_t0 = time.perf_counter()\n"
    "def _mem():\n"
    "    d = dict(l.split(':', 1) for l in open('/proc/self/status'))\n"
    "    return int(d['VmRSS'].split()[0]) / 1024, int(d['VmHWM'].split()[0]) / 1024\n"
)
_ENGINE = (
    _MEM + "from contextsieve import Engine, example_agent_path\n"
    "e = Engine.from_file(example_agent_path(), cache_dir={cache!r})\n"
    "s = e.session()\ns.build_request('Open a pull request for the retry fix.')\n"
    "first = time.perf_counter() - _t0\nafter, peak = _mem()\n"
    "from benchmarks.speed.request_latency import messages\n"
    "for m in messages():\n    s.build_request(m)\n"
    "print(first, peak, after, _mem()[0])"
)
_EMBEDDER = (
    _MEM + "from contextsieve import Embedder\nfrom benchmarks import workloads\n"
    "Embedder().embed(list(workloads.sentences(1000)))\nprint(*_mem())"
)


def _fresh(code: str, env: dict[str, str] | None = None) -> list[float]:
    """Run ``code`` in a fresh interpreter (from the repository root) and return the numbers it prints."""
    import os
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})}
    )
    if r.returncode:
        raise RuntimeError(r.stderr[-2000:])
    return [float(x) for x in r.stdout.strip().splitlines()[-1].split()]


def memory_table() -> None:
    """Memory and start-up rows (see the module docstring)."""
    import os
    import resource
    import shutil
    import subprocess
    import sys

    with tempfile.TemporaryDirectory() as cache:
        _fresh(_ENGINE.format(cache=cache))  # fills the embedding cache
        runs = [_fresh(_ENGINE.format(cache=cache)) for _ in range(3)]
        start = float(np.median([r[0] for r in runs]))
        _, peak, after, later = runs[-1]
        emb_rss, emb_peak = _fresh(_EMBEDDER)
    demo = shutil.which("contextsieve", path=str(Path(sys.executable).parent)) or "contextsieve"
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    with tempfile.TemporaryDirectory() as empty:
        env = {**os.environ, "CONTEXTSIEVE_CACHE": empty}
        subprocess.run([demo, "demo"], check=True, capture_output=True, env=env, timeout=900)
    demo_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print("\n| fresh process | MB |")
    print("| --- | --- |")
    print(f"| `Engine` on the bundled agent + first request (caches warm): peak | {peak:.0f} |")
    print(f"|   resident after it | {after:.0f} |")
    print(f"|   resident after 200 more requests | {later:.0f} |")
    print(f"| `Embedder` after embedding 1,000 sentences: resident / peak | {emb_rss:.0f} / {emb_peak:.0f} |")
    demo_mb = (
        f"{demo_peak / 1024:.0f}" if demo_peak > before else f"<= {before / 1024:.0f} (an earlier child was larger)"
    )
    print(f"| first run, `contextsieve demo` on an empty cache (graph build included): peak | {demo_mb} |")
    print(f"\nA fresh process from its first import to its first request's answer (caches warm): {start * 1e3:.0f} ms")


def main() -> None:
    from contextsieve import Embedder

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--large", action="store_true", help="also the ~150,000-chunk agent, HNSW vs exact")
    ap.add_argument("--no-memory", action="store_true", help="skip the fresh-process memory and start-up rows")
    args = ap.parse_args()
    print(f"{cpu_line()}\n")
    emb = Embedder()  # int8, graph from the model cache
    msgs = messages()
    with tempfile.TemporaryDirectory() as cache:
        engine = Engine(build_agent(), embedder=emb, cache_dir=cache)
        session = engine.session()
        t = time.perf_counter()
        session.build_request(msgs[0])
        cold = time.perf_counter() - t
        n_chunks = engine.index().chunks
        for m in msgs[:10]:
            session.build_request(m)
        total, query = [], []
        for m in msgs:
            t = time.perf_counter()
            session.build_request(m)
            total.append(time.perf_counter() - t)
            qc = session.query_chunks(m)  # what the request embedded: sentences and a task's steps
            t = time.perf_counter()
            emb.embed(qc)
            query.append(time.perf_counter() - t)
        plain = engine.session(tool_query_split="sentences")  # what searching a task's steps costs
        for m in msgs[:10]:
            plain.build_request(m)
        plain_ms = []
        for m in msgs:
            engine.store.clear_query_cache()  # every message embedded again, as in the first loop
            t = time.perf_counter()
            plain.build_request(m)
            plain_ms.append((time.perf_counter() - t) * 1e3)
        n_steps = np.mean([len(session.query_chunks(m)) for m in msgs])
        n_sent = np.mean([len(plain.query_chunks(m)) for m in msgs])
        restarted = Engine(build_agent(), embedder=Embedder(), cache_dir=cache)
        t = time.perf_counter()
        restarted.session().build_request(msgs[1])
        warm_disk = time.perf_counter() - t
    total_ms, query_ms = np.array(total) * 1e3, np.array(query) * 1e3
    rest = total_ms - query_ms
    print(
        f"agent: {len(list(engine.agent.all_items()))} items, {n_chunks} chunks; {len(msgs)} messages of 1-3 "
        f"sentences; {emb.info.variant} model\n"
    )
    print("| request | p50 ms | p99 ms |")
    print("| --- | --- | --- |")
    rows = {
        "warm (all caches)": total_ms,
        "  of which embedding the query chunks": query_ms,
        "  of which selection and assembly": rest,
        f"warm, tools searched by sentence only ({n_sent:.1f} query chunks a message, against {n_steps:.1f})": plain_ms,
    }
    for name, ms in rows.items():
        p50, p99 = p50_p99(ms)
        print(f"| {name} | {p50:.2f} | {p99:.2f} |")
    print(f"| first request, cold cache (embeds {n_chunks} chunks) | {cold * 1e3:.0f} | - |")
    print(f"| first request after a restart, disk cache warm | {warm_disk * 1e3:.1f} | - |")
    if not args.no_memory:
        memory_table()
    if args.large:
        large(emb, msgs)


if __name__ == "__main__":
    main()
