"""Stash retrieval quality on a long multi-session conversation set: recall@5/@10 of evidence turns.

    python -m benchmarks.stash_quality [--data benchmarks/data/conversations] [--fp32]

Every turn of each conversation is stashed (one stash session per conversation) as
``"<Speaker>: <text>"`` with its session's date; each question retrieves from its conversation's
session and is scored by the share of its evidence turns in the top 5 / top 10 (averaged over
questions). Rankings compared, all over the same stored vectors: dense alone, BM25 alone, a fixed
0.7/0.3 hybrid, the default :class:`~contextsieve.stash.RankConfig`, and sweeps of the keyword weight
and of the decay weights. Ages are measured now (the conversations are years old, so the decays are
flat) and, as a second column for the default, at the day after each conversation's last session
(recent sessions favoured by the decays). No LLM anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from contextsieve.models.cpu import cpu_summary
from contextsieve.stash import NewSegment, RankConfig, StashStore

DATA = Path(__file__).resolve().parent / "data" / "conversations"


def load(folder: Path) -> tuple[list[dict], list[dict]]:
    turns = [json.loads(line) for line in (folder / "turns.jsonl").read_text(encoding="utf-8").splitlines()]
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    return turns, questions


def when(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(hour=12, tzinfo=timezone.utc)


def evaluate(
    store: StashStore, questions: list[dict], ids: dict[str, str], rank: RankConfig, at: dict[int, datetime] | None
) -> tuple[float, float]:
    store.config = dataclasses.replace(store.config, rank=rank)
    r5 = r10 = 0.0
    for q in questions:
        c = q["conversation"]
        got = store.retrieve(
            q["question"], session=f"conv{c}", top_k=10, min_similarity=-1.0, now=at[c] if at else None
        )
        order = [g.segment.id for g in got]
        want = {ids[e] for e in q["evidence"]}
        r5 += len(want & set(order[:5])) / len(want)
        r10 += len(want & set(order[:10])) / len(want)
    return r5 / len(questions), r10 / len(questions)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--fp32", action="store_true", help="fp32 weights (default int8)")
    args = ap.parse_args(argv)
    from contextsieve.models.embedder import Embedder

    turns, questions = load(args.data)
    emb = Embedder(variant="fp32" if args.fp32 else None)
    last: dict[int, datetime] = {}
    by_conv: dict[int, list[dict]] = defaultdict(list)
    for t in turns:
        by_conv[t["conversation"]].append(t)
        last[t["conversation"]] = max(last.get(t["conversation"], when(t["date"])), when(t["date"]))
    after = {c: d + timedelta(days=1) for c, d in last.items()}
    with tempfile.TemporaryDirectory() as tmp:
        store = StashStore.open(Path(tmp) / "conv.db", emb)
        t0 = time.perf_counter()
        ids: dict[str, str] = {}
        for c, ts in by_conv.items():
            segs = [NewSegment(f"{t['speaker']}: {t['text']}", timestamp=when(t["date"])) for t in ts]
            r = store.stash(segs, session=f"conv{c}")
            ids.update({t["id"]: sid for t, sid in zip(ts, r.segment_ids)})
        stash_s = time.perf_counter() - t0
        print(f"# stash_quality: {len(turns)} turns in {len(by_conv)} conversations, {len(questions)} questions;")
        print(f"# stashed in {stash_s:.1f} s; {cpu_summary()}; {'fp32' if args.fp32 else 'int8'} weights")
        flat = dict(created_weight=0.0, stashed_weight=0.0)
        rows: list[tuple[str, RankConfig, bool]] = [
            ("dense", RankConfig(similarity_weight=1.0, keyword_weight=0.0, **flat), False),
            ("bm25", RankConfig(similarity_weight=0.0, keyword_weight=1.0, **flat), False),
            ("hybrid 0.7/0.3", RankConfig(similarity_weight=0.7, keyword_weight=0.3, **flat), False),
            ("default", RankConfig(), False),
            ("default, ages at conversation end", RankConfig(), True),
        ]
        for kw in (0.1, 0.2, 0.3, 0.4, 0.5):
            rows.append(
                (
                    f"hybrid {1 - kw:.1f}/{kw:.1f}",
                    RankConfig(similarity_weight=1 - kw, keyword_weight=kw, **flat),
                    False,
                )
            )
        for d in (0.0, 0.05, 0.1, 0.2):
            r = RankConfig(similarity_weight=0.7, keyword_weight=0.3, created_weight=d, stashed_weight=d)
            rows.append((f"0.7/0.3 + decays {d}/{d}, ages at end", r, True))
        print(f"{'ranking':<40} {'R@5':>6} {'R@10':>6}")
        for name, rank, at_end in rows:
            r5, r10 = evaluate(store, questions, ids, rank, after if at_end else None)
            print(f"{name:<40} {r5:>6.3f} {r10:>6.3f}")
        store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
