"""Tool-selection quality: BM25, dense, the reference pipeline and fusions, on MetaTool-format data.

    python -m benchmarks.quality.tool_selection --data ../shared/eval/metatool [--full] [--sample 2000]

Data: ``tools.jsonl`` lines ``{"server", "name", "description"}``; ``queries.jsonl`` lines ``{"id",
"query", "relevant": ["server/name", ...]}`` (optional ``relevant_groups``: any member of a group
satisfies it). By default a fixed sample of 2,000 queries (``random.Random(0)``), the tuning set;
``--full`` adds the whole file; ``--split multi`` keeps only the queries needing several tools.
``--history-folds K --data A B ...`` prints instead the default pipeline cold and with k-fold history,
every folder in one table (:func:`benchmarks.quality.history_folds.one_request_table`);
``--example-gate COS`` (``--narrow-example-gate``, ``--example-score``) with it measure another gate
for recorded examples (:func:`benchmarks.quality.history_folds.set_example_constants`).
An optional ``servers.jsonl`` (``{"server", "description"}`` lines) gives servers descriptions.
The hand-written multi-server task set is ``--data benchmarks/data/mcp_tasks``.

Systems: ``bm25`` and ``dense`` over ``name: description`` (dense: one vector per query);
``dense-maxpool`` (one vector per query sentence, max-pooled, as the reference does);
``fusion-wsum`` (dense + w * BM25 normalised by the query's best BM25) and ``fusion-rrf``
(reciprocal-rank fusion, k = 60); ``reference pipeline`` (the engine's session over an agent whose
tools are all in ``agent`` mode, with the reference system's chunking and the ``reference`` preset:
the ranked list is what it selects, so it is short by design); ``default pipeline`` (contextsieve's
defaults) and the default with one feature switched off or on. A ``tools.jsonl`` line may carry the
tool's ``inputSchema``. With a ``lang`` field on the queries, a table by language follows.

Metrics: R@k = mean over queries of |relevant in top k| / |relevant| (groups count once);
all@5 = share of queries with every relevant tool in the top 5; nDCG@10 (binary gains); R@sel /
all@sel / n: the same for the whole list a system returns (a pipeline: its selection; a ranking
system: its top 10) and that list's mean length; prec@sel = share of that list the query needs (a
member of one of its groups), averaged over queries; p50 = median milliseconds per query, each query
embedded and scored alone (200 queries). ``--only A,B`` runs the systems whose names contain A or B.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.common import group_recall, timed
from benchmarks.quality.history_folds import add_example_arguments, set_example_constants
from contextsieve.agent.agent import Agent
from contextsieve.retrieval.bm25 import BM25Index
from contextsieve.retrieval.text import query_chunks

KS = (1, 3, 5, 10)
KEYWORD_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5)


def load(folder: Path) -> tuple[list[dict], list[dict]]:
    tools = [
        json.loads(line) for line in (folder / "tools.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    queries = [
        json.loads(line) for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return tools, queries


class MemoEmbedder:
    """The embedder with a memo of query vectors by text, so each system does not re-embed every query
    (vectors are the same; latency loops switch it off with ``enabled = False``)."""

    def __init__(self, inner: object) -> None:
        self.inner, self.enabled, self._memo = inner, True, {}
        self.info = getattr(inner, "info", None)

    def embed(self, texts: list[str], **kwargs: object) -> np.ndarray:
        if not self.enabled or len(texts) > 8 or kwargs:
            return self.inner.embed(texts, **kwargs)  # type: ignore[attr-defined]
        key = tuple(texts)
        if key not in self._memo:
            self._memo[key] = self.inner.embed(list(texts))  # type: ignore[attr-defined]
        return self._memo[key]

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)  # type: ignore[attr-defined]

    @property
    def model_id(self) -> str | None:
        """The inner embedder's model (its vectors are the same)."""
        return getattr(self.inner, "model_id", None)


def load_servers(folder: Path) -> dict[str, str]:
    """Server name -> description from an optional ``servers.jsonl`` (``{"server", "description"}`` lines)."""
    path = folder / "servers.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["server"]: r.get("description", "") for r in rows}


def catalog_agent(tools: list[dict], server_desc: dict[str, str], name: str) -> Agent:
    """An agent whose tools are a catalog's (``tools.jsonl`` rows), every server in ``agent`` mode."""
    from contextsieve.agent.agent import McpServer
    from contextsieve.agent.items import IncludeMode, Tool

    servers = {
        s: McpServer(s, default_include=IncludeMode.AGENT, description=server_desc.get(s, ""))
        for s in {t["server"] for t in tools}
    }
    return Agent(
        name=name,
        servers=servers,
        tools=[Tool(t["server"], t["name"], t.get("description", ""), t.get("inputSchema") or {}) for t in tools],
    )


def groups(q: dict) -> list[set[str]]:
    if q.get("relevant_groups"):
        return [set(g) for g in q["relevant_groups"]]
    return [{r} for r in q["relevant"]]


def metrics(ranked: list[list[str]], qs: list[dict]) -> dict[str, float]:
    out = {f"R@{k}": 0.0 for k in KS} | {"all@5": 0.0, "nDCG@10": 0.0, "R@sel": 0.0, "all@sel": 0.0, "n": 0.0}
    out["prec@sel"] = 0.0
    disc = 1.0 / np.log2(np.arange(2, 12))
    for ids, q in zip(ranked, qs):
        gs = groups(q)
        for k in KS:
            out[f"R@{k}"] += group_recall(ids[:k], gs)
        out["all@5"] += float(all(g & set(ids[:5]) for g in gs))
        out["R@sel"] += group_recall(ids, gs)
        out["all@sel"] += float(all(g & set(ids) for g in gs))
        out["prec@sel"] += sum(1 for t in ids if any(t in g for g in gs)) / len(ids) if ids else 1.0
        out["n"] += len(ids)
        hit, seen = np.zeros(10), set()
        for i, t in enumerate(ids[:10]):
            for j, g in enumerate(gs):
                if t in g and j not in seen:
                    hit[i] = 1.0
                    seen.add(j)
                    break
        ideal = disc[: min(len(gs), 10)].sum()
        out["nDCG@10"] += float((hit * disc).sum() / ideal)
    return {k: v / len(qs) for k, v in out.items()}


def rank(scores: np.ndarray, ids: list[str], k: int = 10) -> list[str]:
    top = np.lexsort((np.arange(len(scores)), -scores))[:k]
    return [ids[i] for i in top]


def query_sets(queries: list[dict], sample: int, *, full: bool, split: str | None) -> dict[str, list[dict]]:
    """The query sets a run scores, by label: the queries of ``split`` (all without one), as a fixed
    sample of ``sample`` (``random.Random(0)``) when there are more, and all of them too with ``full``."""
    if split:
        queries = [q for q in queries if q.get("split") == split]
    if len(queries) <= sample:
        return {f"all {len(queries)}": queries}
    sets = {f"sample {sample}": random.Random(0).sample(queries, sample)}
    if full:
        sets[f"full {len(queries)}"] = queries
    return sets


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, nargs="+", required=True, help="the data folder (several: --history-folds)")
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--full", action="store_true", help="also evaluate every query in the file")
    ap.add_argument("--variant", default="int8")
    ap.add_argument("--split", help="only queries whose 'split' field has this value (e.g. multi)")
    ap.add_argument(
        "--scifact", type=Path, help="also run the pipeline on a BEIR folder (documents as agent-mode references)"
    )
    ap.add_argument(
        "--sweep-keyword", action="store_true", help=f"only the default pipeline at keyword weights {KEYWORD_WEIGHTS}"
    )
    ap.add_argument("--only", help="comma-separated parts of system names to run (default: all)")
    ap.add_argument(
        "--examples",
        help="learning from use: comma-separated examples per tool (e.g. 0,1,2,5,10), recorded from the queries "
        "outside the evaluated sample, then the default pipeline on the sample",
    )
    ap.add_argument("--no-latency", action="store_true", help="skip the per-query latency loop")
    ap.add_argument(
        "--history-as-vectors",
        action="store_true",
        help="with --history-folds: each engine keeps its history in a file without the requests' text, as a "
        "host's history.sqlite does by default (else in memory, text kept)",
    )
    ap.add_argument(
        "--history-folds",
        type=int,
        metavar="K",
        help="instead: the default pipeline cold and with the other folds' tasks recorded first (task i in fold "
        "i %% K), every --data folder in one table (benchmarks.quality.history_folds.one_request_table)",
    )
    add_example_arguments(ap)
    args = ap.parse_args(argv)
    if args.history_folds:
        from benchmarks.quality.history_folds import one_request_table

        said = set_example_constants(args)
        if said:
            print(f"# {said}", flush=True)
        one_request_table(
            args.data,
            args.history_folds,
            sample=args.sample,
            split=args.split,
            variant=args.variant,
            vectors_only=args.history_as_vectors,
        )
        return
    if len(args.data) > 1:
        ap.error("several --data folders are for --history-folds")
    if any(v is not None for v in (args.example_gate, args.narrow_example_gate, args.example_score)):
        ap.error("--example-gate, --narrow-example-gate and --example-score are for --history-folds")
    args.data = args.data[0]
    from contextsieve import Embedder
    from contextsieve.engine import Engine
    from contextsieve.selection.chunking import ChunkConfig

    tools, queries = load(args.data)
    server_desc = load_servers(args.data)
    sets = query_sets(queries, args.sample, full=args.full, split=args.split)
    ids = [f"{t['server']}/{t['name']}" for t in tools]
    texts = [f"{t['name']}: {t['description']}" if t.get("description") else t["name"] for t in tools]
    emb = MemoEmbedder(Embedder(variant=args.variant))
    tool_vecs = emb.embed(texts)
    bm25 = BM25Index(texts)
    agent = catalog_agent(tools, server_desc, "eval")
    engines: dict[ChunkConfig, Engine] = {}

    def session(chunking: ChunkConfig = ChunkConfig(), **settings: object) -> Callable[[str], list[str]]:
        if chunking not in engines:
            engines[chunking] = Engine(agent, embedder=emb, cache_dir=False, chunking=chunking)
            engines[chunking].index()
        sess = engines[chunking].session(**settings)

        def run(q: str) -> list[str]:
            ctx = sess.build_request(q).context
            return [f"{e.key.server}/{e.key.name}" for e in ctx.entries]

        return run

    reference_chunking = ChunkConfig(tool_context="none")

    def dense(q: str) -> np.ndarray:
        return tool_vecs @ emb.embed([q])[0]

    def dense_max(q: str) -> np.ndarray:
        qc = query_chunks(q) or [q]
        return (tool_vecs @ emb.embed(qc).T).max(axis=1)

    def wsum(q: str, w: float = 0.3) -> np.ndarray:
        b = bm25.scores(q)
        return dense(q) + w * (b / b.max() if b.max() > 0 else b)

    def rrf(q: str, k: int = 60) -> np.ndarray:
        out = np.zeros(len(ids))
        for s in (dense(q), bm25.scores(q)):
            order = np.lexsort((np.arange(len(s)), -s))
            out[order] += 1.0 / (k + np.arange(1, len(s) + 1))
        return out

    expansion = {"expansion_depth": 1, "expansion_threshold": 0.75, "expansion_top_n": 3}
    systems: dict[str, Callable[[str], list[str]]] = {
        "bm25": lambda q: rank(bm25.scores(q), ids),
        "dense (name: description, one vector)": lambda q: rank(dense(q), ids),
        "dense-maxpool": lambda q: rank(dense_max(q), ids),
        "fusion-wsum (w=0.3)": lambda q: rank(wsum(q), ids),
        "fusion-rrf": lambda q: rank(rrf(q), ids),
        "reference pipeline": session(reference_chunking, preset="reference"),
        "default pipeline": session(),
        "default - keyword term": session(keyword_weight=0.0),
        "default - keyword adds (re-ranks only)": session(keyword_role="rerank"),
        "default - steps (tools searched by sentence)": session(tool_query_split="sentences"),
        "default - adaptive size (always 10 tools)": session(context_min_ratio=None),
        "default, 5 tools (the reference's size)": session(tool_top_n=5, context_min_ratio=None),
        "default, ratio 0.5": session(context_min_ratio=0.5),
        "default - server context": session(ChunkConfig(tool_context="none")),
        "default + server description": session(ChunkConfig(tool_context="server+description")),
        "default + server profile (weight 0.2)": session(server_weight=0.2),
        "default + feedback (Rocchio 0.3, 3 chunks)": session(prf_weight=0.3),
        "default + feedback (Rocchio 0.6, 3 chunks)": session(prf_weight=0.6),
        "default + identifier splitting": session(ChunkConfig(split_identifiers=True)),
        "default + parameters in the tool text": session(ChunkConfig(tool_schema="text")),
        "default + parameters as a second chunk": session(ChunkConfig(tool_schema="chunk")),
        "default + min-representation (floor 0.3)": session(min_representation_floor=0.3, min_representation_cap=2),
        "default + expansion pass 2 (0.75, top 3)": session(**expansion),
        "default + expansion graph": session(**expansion, expansion_source="graph"),
        "default + expansion hybrid": session(**expansion, expansion_source="hybrid"),
        "default + mean pooling": session(query_pooling="mean"),
        "default with RRF fusion (weight 1)": session(keyword_fusion="rrf", keyword_weight=1.0),
    }
    if args.sweep_keyword:
        systems = {f"default, keyword_weight {w}": session(keyword_weight=w) for w in KEYWORD_WEIGHTS}
    if args.only:
        parts = args.only.split(",")
        systems = {k: v for k, v in systems.items() if any(p in k for p in parts)}
    for name, qs in sets.items():
        print(
            f"\n{args.data.name} {name} queries, {len(ids)} tools on {len(agent.servers)} servers, contextsieve "
            f"{args.variant}\n"
        )
        print("| system | R@1 | R@3 | R@5 | R@10 | all@5 | nDCG@10 | R@sel | all@sel | prec@sel | n | p50 ms |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for sname, f in systems.items():
            emb.enabled = False  # latency: every query embedded for real
            lat = [timed(lambda q=q: f(q["query"])) for q in ([] if args.no_latency else qs[:200])]
            emb.enabled = True  # quality: the same vectors, computed once per query text
            m = metrics([f(q["query"]) for q in qs], qs)
            cols = ("R@1", "R@3", "R@5", "R@10", "all@5", "nDCG@10", "R@sel", "all@sel", "prec@sel")
            p50 = f"{np.median(lat) * 1e3:.2f}" if lat else "-"
            print(f"| {sname} | " + " | ".join(f"{m[k]:.3f}" for k in cols) + f" | {m['n']:.1f} | {p50} |", flush=True)
        langs = sorted({q["lang"] for q in qs if "lang" in q})
        if len(langs) > 1:
            print(
                "\nR@sel (all@sel) by language: "
                + ", ".join(f"{g} {sum(q.get('lang') == g for q in qs)}" for g in langs)
            )
            print("\n| system | " + " | ".join(langs) + " |")
            print("| --- |" + " --- |" * len(langs))
            for sname in ("bm25", "reference pipeline", "default pipeline"):
                if sname not in systems:
                    continue
                cells = []
                for g in langs:
                    sub = [q for q in qs if q.get("lang") == g]
                    m = metrics([systems[sname](q["query"]) for q in sub], sub)
                    cells.append(f"{m['R@sel']:.3f} ({m['all@sel']:.2f})")
                print(f"| {sname} | " + " | ".join(cells) + " |", flush=True)

    if args.examples:
        learning(agent, emb, queries, sets, [int(x) for x in args.examples.split(",")])
    if (args.data / "results.jsonl").exists():
        tool_results(args.data / "results.jsonl", engines[ChunkConfig()])
    if args.scifact:
        scifact(args.scifact, emb, KEYWORD_WEIGHTS if args.sweep_keyword else None)


def learning(agent: object, emb: object, queries: list[dict], sets: dict[str, list[dict]], counts: list[int]) -> None:
    """Learning from use with an honest split: examples are recorded (``record_tool_calls``) from the
    queries outside the first evaluated set, at most N per tool (in file order), and the default
    pipeline is scored on that set; a fresh engine per N."""
    from contextsieve.engine import Engine

    name, test = next(iter(sets.items()))
    held = {q["id"] for q in test}
    pool = [q for q in queries if q["id"] not in held]
    print(f"\nLearning from use: examples from {len(pool)} queries outside the {name} sample, scored on it\n")
    print("| examples per tool | tools with examples | R@1 | R@5 | all@5 | R@sel | all@sel | n |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in counts:
        engine = Engine(agent, embedder=emb, cache_dir=False)  # type: ignore[arg-type]
        session = engine.session()
        taken: dict[str, int] = {}
        for q in pool:
            for tool in q["relevant"]:
                if taken.get(tool, 0) < n:
                    server, tname = tool.split("/", 1)
                    session.record_tool_calls(q["query"], [f"{server}:{tname}"])
                    taken[tool] = taken.get(tool, 0) + 1
        session = engine.session()
        m = metrics(
            [[f"{e.key.server}/{e.key.name}" for e in session.build_request(q["query"]).context.entries] for q in test],
            test,
        )
        cols = ("R@1", "R@5", "all@5", "R@sel", "all@sel")
        print(f"| {n} | {len(taken)} | " + " | ".join(f"{m[k]:.3f}" for k in cols) + f" | {m['n']:.1f} |", flush=True)


def tool_results(path: Path, engine: object) -> None:
    """Tool-result expansion: recall of the tools needed next, from the message alone vs ``expand_from(result)``."""
    cases = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    print(f"\nTool-result expansion ({len(cases)} cases): recall of the tools needed next\n")
    print("| settings | from the message | from expand_from(result) | either | items proposed (mean) |")
    print("| --- | --- | --- | --- | --- |")
    for name, settings in (("reference preset", {"preset": "reference"}), ("default", {})):
        msg = res = both = size = 0.0
        for c in cases:
            sess = engine.session(**settings)  # type: ignore[attr-defined]
            by_msg = {f"{e.key.server}/{e.key.name}" for e in sess.build_request(c["query"]).context.entries}
            proposed = sess.expand_from(c["result"]).entries
            by_res = {f"{e.key.server}/{e.key.name}" for e in proposed}
            need = set(c["next"])
            msg += len(need & by_msg) / len(need)
            res += len(need & by_res) / len(need)
            both += len(need & (by_msg | by_res)) / len(need)
            size += len(proposed)
        n = len(cases)
        print(f"| {name} | {msg / n:.3f} | {res / n:.3f} | {both / n:.3f} | {size / n:.1f} |", flush=True)


def scifact(folder: Path, emb: object, weights: tuple[float, ...] | None = None) -> None:
    """Documents as agent-mode references (title = description); nDCG@10 of dense vs the pipeline."""
    from benchmarks.quality.beir_quality import beir_references, evaluate, load_beir
    from contextsieve.agent.agent import Agent
    from contextsieve.engine import Engine

    if isinstance(emb, MemoEmbedder):
        emb.enabled = False  # per-query latency below: embed every query for real
    corpus, queries, qrels = load_beir(folder)
    doc_ids, query_ids = list(corpus), list(queries)
    refs = beir_references(folder)
    engine = Engine(Agent(name="scifact", references=refs), embedder=emb, cache_dir=False)
    t = time.perf_counter()
    engine.index()
    print(
        f"\nSciFact test: {len(doc_ids)} documents as references ({time.perf_counter() - t:.0f} s to index), "
        f"{len(query_ids)} queries\n"
    )
    print("| system | nDCG@10 | R@10 | p50 ms |")
    print("| --- | --- | --- | --- |")
    D = emb.embed([corpus[d] for d in doc_ids])  # type: ignore[attr-defined]
    Q = emb.embed([queries[q] for q in query_ids])  # type: ignore[attr-defined]
    m = evaluate(Q @ D.T, doc_ids, query_ids, qrels)
    print(f"| dense (title + text, one vector) | {100 * m['nDCG@10']:.2f} | {100 * m['Recall@10']:.2f} | - |")
    col = {f"d{d}": i for i, d in enumerate(doc_ids)}
    runs: list[tuple[str, dict[str, object]]] = [
        ("reference pipeline", {"preset": "reference"}),
        ("default pipeline", {}),
        ("default - keyword adds (re-ranks only)", {"keyword_role": "rerank"}),
        ("default + steps for documents too", {"query_split": "steps"}),
        ("default + feedback (Rocchio 0.3, 3 chunks)", {"prf_weight": 0.3}),
        ("default - adaptive size (always 10)", {"context_min_ratio": None}),
        ("default with RRF fusion (weight 1)", {"keyword_fusion": "rrf", "keyword_weight": 1.0}),
    ]
    if weights is not None:
        runs = [(f"default, keyword_weight {w}", {"keyword_weight": w}) for w in weights]
    for name, settings in runs:
        session = engine.session(context_top_k=100, context_top_n=10, context_include_score=1.0, **settings)
        scores = np.full((len(query_ids), len(doc_ids)), -np.inf, dtype=np.float32)
        lat = []
        for qi, q in enumerate(query_ids):
            t = time.perf_counter()
            entries = session.build_request(queries[q]).context.entries
            lat.append(time.perf_counter() - t)
            for rank_, e in enumerate(entries):
                scores[qi, col[e.key.name]] = 100.0 - rank_
        m = evaluate(scores, doc_ids, query_ids, qrels)
        print(
            f"| {name} | {100 * m['nDCG@10']:.2f} | {100 * m['Recall@10']:.2f} | {np.median(lat) * 1e3:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
