"""Heading paths in contextual embeddings: does the right section of a markdown reference win?

    python -m benchmarks.quality.section_retrieval [--data benchmarks/data/md_sections] [--variant int8]

Data (written for this project, see its ``build.py``): three markdown references whose sections
repeat sub-headings under different parents, and one question per section. Each reference is an
agent-mode item; the pipeline returns items with their best chunk. ``section@1``: the first item is
the right document and its best chunk is the right section; ``doc@1``: the first item is the right
document. Rows: heading paths on (the default) or off, each with and without the keyword term.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common import DATA


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA / "md_sections")
    ap.add_argument("--variant", default="int8")
    args = ap.parse_args(argv)
    from contextsieve import Embedder
    from contextsieve.agent.agent import Agent
    from contextsieve.agent.items import IncludeMode, Reference
    from contextsieve.engine import Engine
    from contextsieve.retrieval.text import heading_sections
    from contextsieve.selection.chunking import ChunkConfig

    docs = [
        json.loads(line) for line in (args.data / "docs.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    questions = [
        json.loads(line)
        for line in (args.data / "questions.jsonl").read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    refs = [Reference(d["name"], d["text"], d["description"], include=IncludeMode.AGENT) for d in docs]
    sections = {d["name"]: heading_sections(d["text"]) for d in docs}
    emb = Embedder(variant=args.variant)
    print(
        f"\n{len(docs)} markdown references, {sum(len(s) for s in sections.values())} sections, {len(questions)} "
        f"questions, contextsieve {args.variant}\n"
    )
    print("| chunking | keyword weight | section@1 | doc@1 |")
    print("| --- | --- | --- | --- |")
    for label, chunking in (
        ("heading paths (default)", ChunkConfig()),
        ("no heading paths", ChunkConfig(heading_paths=False)),
    ):
        engine = Engine(Agent(name="docs", references=refs), embedder=emb, cache_dir=False, chunking=chunking)
        engine.index()
        for weight in (0.3, 0.0):
            session = engine.session(keyword_weight=weight, context_top_n=3, context_include_score=1.0)
            sec = doc = 0
            for q in questions:
                entries = session.build_request(q["query"]).context.entries
                if not entries or entries[0].key.name != q["doc"]:
                    continue
                doc += 1
                text = engine.store.chunks_of(entries[0].key).chunks[entries[0].chunk].text
                path = next((list(p) for p, body in sections[q["doc"]] if text in body), None)
                sec += path == q["section"]
            print(f"| {label} | {weight} | {sec / len(questions):.3f} | {doc / len(questions):.3f} |", flush=True)


if __name__ == "__main__":
    main()
