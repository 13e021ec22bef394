"""Request-context latency of the engine on a 200-item agent (~1,000 chunks), in one run.

    python -m benchmarks.request_latency

The agent is built from standard-library docstrings (``benchmarks/workloads.py``): 60 references of
13 chunks, 60 rules of 2 chunks and 80 tools of 1 chunk, all in ``agent`` mode (every item is
searched: the worst case). Messages are 1-3 docstring sentences. Reported: the first request on a
cold cache (embedding all chunks; the model already loaded), warm requests (p50/p99 over 200
messages, and how much of that is embedding the query), and the first request of a restarted engine
whose disk cache is warm (a new process would add ~0.35 s of imports and model load).
"""

from __future__ import annotations

import random
import tempfile
import time

import numpy as np

from benchmarks import workloads
from contextsieve.agent import Agent, McpServer
from contextsieve.engine import Engine
from contextsieve.items import IncludeMode, Reference, Rule, Tool


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


def main() -> None:
    from contextsieve import Embedder

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
            from contextsieve.chunking import query_chunks

            qc = query_chunks(m)
            t = time.perf_counter()
            emb.embed(qc)
            query.append(time.perf_counter() - t)
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
    print(f"| warm (all caches) | {np.percentile(total_ms, 50):.2f} | {np.percentile(total_ms, 99):.2f} |")
    print(
        f"|   of which embedding the query chunks | {np.percentile(query_ms, 50):.2f} | "
        f"{np.percentile(query_ms, 99):.2f} |"
    )
    print(f"|   of which selection and assembly | {np.percentile(rest, 50):.2f} | {np.percentile(rest, 99):.2f} |")
    print(f"| first request, cold cache (embeds {n_chunks} chunks) | {cold * 1e3:.0f} | - |")
    print(f"| first request after a restart, disk cache warm | {warm_disk * 1e3:.1f} | - |")


if __name__ == "__main__":
    main()
