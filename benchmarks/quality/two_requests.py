"""A message that asks two things: does each get its rule or reference?

    python -m benchmarks.quality.two_requests [--scifact ../shared/eval/scifact] [--pairs 150]

Rules and references are chosen by their best score over the message's sentences, so the sentence
that matches better can fill every place and the other sentence's item is left out ("How many orders
from Canada were refunded last month? Write the SQL for it." lost the rule about database queries).
``contextsieve.selection.ranking.represent_sentences`` gives such a sentence its best candidate when
that candidate's evidence is not weak. This measures it on real text with the default settings:

- **SciFact pairs**: the 5,183 abstracts of SciFact (test split) as agent-mode references; two test
  claims joined into one message ("<claim A>. <claim B>."), pairs drawn with ``random.Random(0)``;
  per claim, whether one of its relevant abstracts is among the message's references. Columns: R (the
  share of claims found), both (messages with both claims found), n (references per message),
  promoted (messages where a sentence got its item this way).
- **SciFact single claims**: each test claim alone (the control: most are one sentence, so the rule
  should not change them).
- **the bundled example agent**: the demo's messages, the rules and references each selects.

Every message is built once before the rows, so the p50 columns time the selection with the message's
vectors in the query-vector memo, the same work in each row.

Rows: ``default`` and ``without sentence representation`` (``min_representation_cap=0``).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

from benchmarks.common import cpu_line

ROWS: tuple[tuple[str, dict[str, object]], ...] = (
    ("default", {}),
    ("without sentence representation", {"min_representation_cap": 0}),
)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else text + "."


def scifact(folder: Path, pairs: int) -> None:
    """SciFact claims, alone and in pairs, against its abstracts as references."""
    from benchmarks.quality.beir_quality import beir_references, load_beir
    from contextsieve.agent.agent import Agent
    from contextsieve.engine import Engine

    _, queries, qrels = load_beir(folder)
    refs = beir_references(folder)
    engine = Engine(Agent(name="scifact", references=refs), embedder=None, cache_dir=False)
    t = time.perf_counter()
    engine.index()
    ids = sorted(queries)
    rng = random.Random(0)
    order = ids[:]
    rng.shuffle(order)
    message_pairs = [(order[2 * i], order[2 * i + 1]) for i in range(min(pairs, len(order) // 2))]
    print(
        f"\nSciFact: {len(refs)} abstracts as references ({time.perf_counter() - t:.0f} s to index), "
        f"{len(ids)} claims, {len(message_pairs)} messages of two claims\n"
    )
    sets = (
        ("two claims", [(_sentence(queries[a]) + " " + _sentence(queries[b]), (a, b)) for a, b in message_pairs]),
        ("one claim", [(queries[q], (q,)) for q in ids]),
    )
    warm = engine.session()
    for _, messages in sets:  # every message embedded once (the query-vector memo): the rows time the same work
        for text, _ in messages:
            warm.build_request(text)
    print("| messages | selection | R | both | n | promoted | p50 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, settings in ROWS:
        session = engine.session(**settings)  # type: ignore[arg-type]
        for label, messages in sets:
            found = both = n = promoted = 0
            lat: list[float] = []
            for text, claims in messages:
                t = time.perf_counter()
                entries = session.build_request(text).context.entries
                lat.append(time.perf_counter() - t)
                names = {e.key.name[1:] for e in entries if e.key.kind.value == "reference"}
                hits = [bool(names & set(qrels[c])) for c in claims]
                found += sum(hits)
                both += all(hits)
                n += len(names)
                promoted += any(e.via == "min-representation" for e in entries)
            k = len(messages)
            lat.sort()
            print(
                f"| {label} | {name} | {found / sum(len(c) for _, c in messages):.3f} | {both / k:.3f} | "
                f"{n / k:.2f} | {promoted} | {1e3 * lat[k // 2]:.1f} |",
                flush=True,
            )


def demo() -> None:
    """The demo's messages on the bundled example agent: the agent-mode rules and references chosen."""
    from contextsieve import Engine, example_agent_path
    from contextsieve.cli.agent_commands import DEMO_MESSAGES

    engine = Engine.from_file(example_agent_path(), registry=False)
    print("\nThe bundled example agent (agent-mode rules and references):\n")
    print("| message | selection | rules and references |")
    print("| --- | --- | --- |")
    for message in DEMO_MESSAGES:
        for name, settings in ROWS:
            entries = engine.session(**settings).build_request(message).context.entries  # type: ignore[arg-type]
            chosen = [
                e.key.name + (f" (sentence {(e.query_chunk or 0) + 1})" if e.via == "min-representation" else "")
                for e in entries
                if e.key.kind.value != "tool" and e.mode.value == "agent"
            ]
            print(f"| {message[:60]} | {name} | {', '.join(chosen)} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scifact", type=Path, default=None, help="a BEIR folder (SciFact); default: the demo only")
    ap.add_argument("--pairs", type=int, default=150, help="messages of two claims (default 150)")
    args = ap.parse_args(argv)
    print(f"# two_requests; {cpu_line()}")
    demo()
    if args.scifact is not None:
        scifact(args.scifact, args.pairs)


if __name__ == "__main__":
    main()
