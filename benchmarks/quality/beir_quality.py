"""Retrieval quality on a BEIR-format data set (SciFact by default), the way MTEB scores it.

    python -m benchmarks.quality.beir_quality --data ../shared/eval/scifact [--variants fp32,int8] [--split test]

Documents are embedded as ``title + " " + text`` (MTEB's convention), queries as given; exact dot-
product search over unit vectors. Prints nDCG@10 (MTEB's main score), Recall@10, Recall@100 and
MRR@10 per variant, with the published score from ``<data>/baseline/*.json`` when present.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np

from contextsieve.agent.items import Reference

__all__ = ["load_beir", "beir_references", "evaluate", "main"]


def beir_references(folder: Path) -> list[Reference]:
    """The corpus of a BEIR folder as agent-mode references of an agent (``d<id>``, the text, the title
    as description, priority 500): how the pipeline benchmarks put documents in front of selection."""
    from contextsieve.agent.items import IncludeMode, Reference

    rows = [
        json.loads(line) for line in (folder / "corpus.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return [
        Reference(
            f"d{d['_id']}", d.get("text") or d.get("title") or "-", (d.get("title") or "")[:300], 500, IncludeMode.AGENT
        )
        for d in rows
    ]


def load_beir(folder: Path, split: str = "test") -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]]]:
    """``(corpus id -> text, query id -> text, qrels)`` with only the queries that have qrels in ``split``."""
    corpus = {}
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            corpus[str(d["_id"])] = (d.get("title", "") + " " + d.get("text", "")).strip()
    qrels: dict[str, dict[str, int]] = {}
    with open(folder / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if int(row["score"]) > 0:
                qrels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    queries = {}
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if str(d["_id"]) in qrels:
                queries[str(d["_id"])] = d["text"]
    return corpus, queries, qrels


def evaluate(
    scores: np.ndarray, doc_ids: list[str], query_ids: list[str], qrels: dict[str, dict[str, int]], k_max: int = 100
) -> dict[str, float]:
    """nDCG@10, Recall@10/100, MRR@10 from a ``[queries, docs]`` score matrix (ties: lower doc index first)."""
    ndcg, r10, r100, mrr = [], [], [], []
    k = min(k_max, scores.shape[1])
    for qi, qid in enumerate(query_ids):
        s = scores[qi]
        top = np.argpartition(-s, k - 1)[:k]
        top = top[np.lexsort((top, -s[top]))]
        rel = qrels[qid]
        gains = np.array([rel.get(doc_ids[j], 0) for j in top], dtype=np.float64)
        disc = 1.0 / np.log2(np.arange(2, 12))
        dcg = (gains[:10] * disc[: len(gains[:10])]).sum()
        ideal = np.sort(np.array(list(rel.values()), dtype=np.float64))[::-1][:10]
        ndcg.append(dcg / (ideal * disc[: len(ideal)]).sum())
        n_rel = sum(1 for v in rel.values() if v > 0)
        r10.append((gains[:10] > 0).sum() / n_rel)
        r100.append((gains[:100] > 0).sum() / n_rel)
        hit = np.flatnonzero(gains[:10] > 0)
        mrr.append(1.0 / (hit[0] + 1) if len(hit) else 0.0)
    return {
        "nDCG@10": float(np.mean(ndcg)),
        "Recall@10": float(np.mean(r10)),
        "Recall@100": float(np.mean(r100)),
        "MRR@10": float(np.mean(mrr)),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--variants", default="fp32,int8")
    args = ap.parse_args(argv)
    from contextsieve import Embedder

    corpus, queries, qrels = load_beir(args.data, args.split)
    doc_ids, query_ids = list(corpus), list(queries)
    published = None
    for p in sorted((args.data / "baseline").glob("*.json")) if (args.data / "baseline").is_dir() else []:
        try:
            published = json.loads(p.read_text())["scores"][args.split][0]["ndcg_at_10"]
        except (KeyError, IndexError, ValueError):
            continue
    print(f"{args.data.name} ({args.split}): {len(doc_ids)} documents, {len(query_ids)} queries")
    print("| variant | nDCG@10 | Recall@10 | Recall@100 | MRR@10 | embed docs s |")
    print("| --- | --- | --- | --- | --- | --- |")
    if published is not None:
        print(f"| published all-MiniLM-L6-v2 (MTEB) | {100 * published:.2f} | | | | |")
    for variant in args.variants.split(","):
        emb = Embedder(variant=variant)
        t = time.perf_counter()
        D = emb.embed([corpus[d] for d in doc_ids], show_progress=True)
        secs = time.perf_counter() - t
        Q = emb.embed([queries[q] for q in query_ids])
        m = evaluate(Q @ D.T, doc_ids, query_ids, qrels)
        print(
            f"| contextsieve {variant} | {100 * m['nDCG@10']:.2f} | {100 * m['Recall@10']:.2f} | "
            f"{100 * m['Recall@100']:.2f} | {100 * m['MRR@10']:.2f} | {secs:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
