"""What a long task costs a request, against a one-sentence request, on the project's real MCP catalog.

    python -m benchmarks.speed.task_cost [--rounds 5]

The agent holds the 584 tools of ``benchmarks/data/mcp_catalog`` in ``agent`` mode (default settings,
the default embedder: ``variant="auto"``). Three kinds of request, each built with
``Session.build_request`` on a warm engine (the tools embedded; the query-vector memo emptied before
every request, so each request embeds its message as a new one would):

- ``one sentence``: the first sentence of each of the 120 tasks;
- ``task``: each task as written (mean 84 characters; 83 of 120 need 2-5 tools);
- ``long task``: three consecutive multi-tool tasks sent as one message (mean ~250 characters, 6-10
  tools needed: the union of the three), the shape of the long multi-step tasks real hosts send.

Rounds alternate the kinds request by request, so a slow phase of the machine hits all of them.
Reported per kind: request p50 / p99 (ms), the texts and padded tokens that go through the model per
request (:func:`contextsieve.retrieval.query_vectors.plan_query`; padded: rows x the longest), and
recall of the tools each request needs (R@sel: share of the needed tools in the selection; n: tools
selected). The ratio rows are the targets of the bounded-cost work (p50 <= 1.5x, p99 <= 3x the
one-sentence request).
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

import numpy as np

from benchmarks.common import DATA, cpu_line, group_recall, percentile
from benchmarks.quality.tool_selection import catalog_agent, groups, load, load_servers

CATALOG = DATA / "mcp_catalog"
_FIRST_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+")


def _first_sentence(text: str) -> str:
    return _FIRST_SENTENCE.split(text.strip(), maxsplit=1)[0]


def request_sets(queries: list[dict]) -> dict[str, list[dict]]:
    """The three kinds of request (see the module docstring), each a list of query dicts."""
    one = [{"query": _first_sentence(q["query"]), "relevant": q["relevant"][:1]} for q in queries]
    multi = [q for q in queries if q.get("split") == "multi"]
    long = []
    for i in range(0, len(multi) - 2):
        parts = multi[i : i + 3]
        gs = [g for p in parts for g in groups(p)]
        long.append({"query": " ".join(p["query"] for p in parts), "relevant_groups": [sorted(g) for g in gs]})
    return {"one sentence": one, "task": queries, "long task": long}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="passes over the requests (default 5)")
    ap.add_argument("--variant", default=None, help="embedder variant (default: auto)")
    args = ap.parse_args(argv)
    from contextsieve import Embedder
    from contextsieve.engine import Engine
    from contextsieve.retrieval.query_vectors import plan_query

    tools, queries = load(CATALOG)
    server_desc = load_servers(CATALOG)
    agent = catalog_agent(tools, server_desc, "catalog")
    emb = Embedder(variant=args.variant)
    engine = Engine(agent, embedder=emb, cache_dir=False)
    engine.index()
    session = engine.session()
    sets = request_sets(queries)
    n = min(len(v) for v in sets.values())
    times: dict[str, list[float]] = {k: [] for k in sets}
    embed_ms: dict[str, list[float]] = {k: [] for k in sets}
    inner_embed = emb.embed

    def timed_embed(batch: list[str], **kw: bool) -> np.ndarray:
        t = time.perf_counter()
        try:
            return inner_embed(batch, **kw)
        finally:
            spent[0] += time.perf_counter() - t

    spent = [0.0]
    texts: dict[str, list[int]] = {k: [] for k in sets}
    tokens: dict[str, list[int]] = {k: [] for k in sets}
    recall: dict[str, list[float]] = {k: [] for k in sets}
    sizes: dict[str, list[int]] = {k: [] for k in sets}
    for kind, qs in sets.items():  # quality: every request of every kind once
        for q in qs:
            sel = {f"{e.key.server}/{e.key.name}" for e in session.build_request(q["query"]).context.entries}
            recall[kind].append(group_recall(sel, groups(q)))
            sizes[kind].append(len(sel))
            embedded = list(plan_query(session.query_chunks(q["query"])).embed)  # what goes through the model
            texts[kind].append(len(embedded))
            lens = emb.count_tokens(embedded, truncate=True) if embedded else [0]
            tokens[kind].append(max(lens) * len(embedded))
    emb.embed = timed_embed  # type: ignore[method-assign]
    for _ in range(args.rounds):
        for i in range(n):
            for kind, qs in sets.items():
                engine.store.clear_query_cache()  # each request embeds its message as a new one would
                spent[0] = 0.0
                t = time.perf_counter()
                session.build_request(qs[i]["query"])
                times[kind].append(time.perf_counter() - t)
                embed_ms[kind].append(spent[0])
    print(f"{cpu_line()}; embedder {emb.info.variant} (queries {emb.info.query_variant})")
    print(f"{len(tools)} tools; {n} requests of each kind x {args.rounds} rounds, alternating\n")
    print(
        "| request | chars (mean) | texts embedded | padded tokens | p50 ms | p99 ms | of which embedding p50 "
        "| R@sel | n tools |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    p = {}
    for kind, qs in sets.items():
        ms = np.array(times[kind]) * 1e3
        p[kind] = (statistics.median(ms), percentile(ms, 99))
        chars = np.mean([len(q["query"]) for q in qs])
        print(
            f"| {kind} ({len(qs)}) | {chars:.0f} | {np.mean(texts[kind]):.2f} | {np.mean(tokens[kind]):.0f} "
            f"| {p[kind][0]:.2f} | {p[kind][1]:.2f} | {statistics.median(embed_ms[kind]) * 1e3:.2f} "
            f"| {np.mean(recall[kind]):.3f} | {np.mean(sizes[kind]):.1f} |"
        )
    base = p["one sentence"]
    print("\n| ratio to one sentence | p50 | p99 |")
    print("| --- | --- | --- |")
    for kind in ("task", "long task"):
        print(f"| {kind} | {p[kind][0] / base[0]:.2f}x | {p[kind][1] / base[1]:.2f}x |")


if __name__ == "__main__":
    main()
