"""Moving a stash (issue 28, move a store): export / import through a checked JSON Lines file and
migration between SQLite and the real PostgreSQL, both ways, keeping every field."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from contextsieve.errors import InputError, StashError
from contextsieve.stash.segment import ContextSegment
from contextsieve.stash.store import StashStore
from contextsieve.stash.transfer import export_store, import_store, migrate, read_file
from tests.helpers.fake_embedder import FakeEmbedder


def fake() -> FakeEmbedder:
    e = FakeEmbedder()
    e.model_id = "fake/1"  # type: ignore[misc]
    return e


def fill(store: StashStore) -> None:
    old = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
    store.stash(
        [
            {"text": "The plan: move checkout to the new queue.", "id": "plan-1", "type": "decision", "topic": "q"},
            {"text": "Step one done; the queue runs.", "references": ["plan-1"], "protected": True},
            {
                "text": "Old log line\nwith two lines and ünïcödé",
                "type": "error_log",
                "timestamp": old,
                "expires_in_days": 30,
                "source": "ci",
            },
        ],
        session="a",
    )
    store.stash([{"text": "Another session's plan.", "id": "plan-1"}], session="b")


def shape(seg: ContextSegment) -> tuple:
    """Every stored field a move must keep (vectors are re-embedded; stashed_at is kept too)."""
    return (
        seg.id,
        seg.session,
        seg.text,
        seg.type,
        seg.timestamp,
        seg.stashed_at,
        seg.topic,
        seg.source,
        seg.references,
        seg.referenced_by,
        seg.expires_at,
        seg.protected,
        seg.sha256,
        seg.tokens,
    )


def everything(store: StashStore) -> list[tuple]:
    out = []
    for session in ("a", "b"):
        out += sorted(shape(s) for s in store.list(session=session))
    return out


def test_export_then_import_keeps_every_field_and_resumes(tmp_path: Path) -> None:
    with StashStore.open(tmp_path / "a.db", fake()) as a:
        fill(a)
        assert export_store(a, tmp_path / "out.jsonl") == 4
        want = everything(a)
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["format"] == "contextsieve.stash" and json.loads(lines[-1])["segments"] == 4
    with StashStore.open(tmp_path / "b.db", fake()) as b:
        r = import_store(b, tmp_path / "out.jsonl")
        assert (r.written, r.skipped, r.total) == (4, 0, 4)
        assert everything(b) == want
        again = import_store(b, tmp_path / "out.jsonl")  # an interrupted import is resumed by running it again
        assert (again.written, again.skipped) == (0, 4) and everything(b) == want
        hits = b.retrieve("queue", session="a")
        assert hits and all(h.segment.session == "a" for h in hits)


def test_a_damaged_or_foreign_file_writes_nothing(tmp_path: Path) -> None:
    with StashStore.open(tmp_path / "a.db", fake()) as a:
        fill(a)
        export_store(a, tmp_path / "out.jsonl")
    good = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    cases = {
        "cut short": "".join(good[:-1]),
        "sha256": "".join(good).replace("queue runs", "queue stops"),
        "says 4 segments but holds 3": "".join(good[:2] + good[3:]),
        "not a contextsieve stash export": '{"format": "other"}\n{"end": true}\n',
        "format version": "".join(good).replace('"version": 2', '"version": 9', 1),
    }
    for expect, text in cases.items():
        p = tmp_path / "bad.jsonl"
        p.write_text(text, encoding="utf-8")
        with StashStore.open(tmp_path / "c.db", fake()) as c:
            with pytest.raises(InputError, match=expect):
                import_store(c, p)
            assert c.stats()["segments"] == 0
    with StashStore.open(tmp_path / "d.db", fake()) as d:  # the same id with another text: refused whole
        d.stash([{"text": "something else", "id": "plan-1"}], session="a")
        with pytest.raises(StashError, match="other segments under the ids"):
            import_store(d, tmp_path / "out.jsonl")
        assert d.stats()["segments"] == 1
    assert len(read_file(tmp_path / "out.jsonl")) == 4
    import os

    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="not a regular file"):  # would block forever on the read
        read_file(tmp_path / "fifo")


def test_sqlite_to_postgres_to_sqlite_returns_identical_segments(tmp_path: Path, postgres_uri: str) -> None:
    with StashStore.open(tmp_path / "a.db", fake()) as a:
        fill(a)
        want = everything(a)
        with StashStore.open(postgres_uri, fake()) as pg:
            r = migrate(a, pg)
            assert (r.written, r.total) == (4, 4) and everything(pg) == want
            assert migrate(a, pg).skipped == 4  # resumable: nothing twice
            with StashStore.open(tmp_path / "back.db", fake()) as back:
                migrate(pg, back)
                assert everything(back) == want


def test_the_cli_names_a_missing_file_without_a_traceback(tmp_path: Path) -> None:
    with StashStore.open(tmp_path / "a.db", fake()) as a:
        fill(a)
        export_store(a, tmp_path / "out.jsonl")
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "contextsieve",
            "stash",
            "import",
            str(tmp_path / "missing.jsonl"),
            str(tmp_path / "n.db"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "no file at" in bad.stderr
    assert not (tmp_path / "n.db").exists()  # the store is not created for a file that cannot be read


def _rewrite(path: Path, change) -> None:  # noqa: ANN001
    """Change the segment lines of an export (``change(list of dicts)``) and seal it again."""
    import hashlib

    lines = path.read_text(encoding="utf-8").splitlines()
    body = [json.loads(x) for x in lines[1:-1]]
    change(body)
    out = [json.dumps(d, ensure_ascii=False) for d in body]
    digest = hashlib.sha256("".join(x + "\n" for x in out).encode()).hexdigest()
    end = {"end": True, "segments": len(out), "sha256": digest}
    path.write_text("\n".join([lines[0], *out, json.dumps(end)]) + "\n", encoding="utf-8")


@pytest.mark.parametrize("source", ["sqlite", "postgres"])
def test_an_export_with_vectors_is_imported_without_embedding_and_checked(
    tmp_path: Path, source: str, request: pytest.FixtureRequest
) -> None:
    """Issue 28: vectors are optional in the file; an import into a store of the same model, form
    and chunking writes them after embedding a sample to check them (a file whose vectors are not the
    model's is refused, nothing written); any other store embeds the texts itself."""
    where = str(request.getfixturevalue("postgres_uri")) if source == "postgres" else str(tmp_path / "a.db")
    with StashStore.open(where, fake()) as a:
        fill(a)
        assert export_store(a, tmp_path / "v.jsonl", vectors=True) == 4
        want = everything(a)
        hits = [(h.segment.id, round(h.score, 5)) for h in a.retrieve("queue", session="a")]
    head = json.loads((tmp_path / "v.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert head["vectors"]["model"] == "fake/1" and head["vectors"]["dim"] == 64
    embedder = fake()
    with StashStore.open(tmp_path / "b.db", embedder) as b:
        r = import_store(b, tmp_path / "v.jsonl")
        assert (r.written, r.vectors_reused) == (4, 4)
        assert embedder.texts <= 4  # the spot check only
        assert everything(b) == want
        got = [(h.segment.id, round(h.score, 5)) for h in b.retrieve("queue", session="a")]
        assert [g[0] for g in got] == [h[0] for h in hits]  # scores: PostgreSQL's exact, SQLite's int8 search
        assert all(abs(g[1] - h[1]) < 0.01 for g, h in zip(got, hits))
    other = fake()
    other.model_id = "fake/2"  # type: ignore[misc]
    with StashStore.open(tmp_path / "c.db", other) as c:
        assert import_store(c, tmp_path / "v.jsonl").vectors_reused == 0  # another model: embedded here

    def swap(body: list[dict]) -> None:  # two segments' vectors exchanged: unit vectors, wrong ones
        body[0]["vectors"], body[1]["vectors"] = body[1]["vectors"], body[0]["vectors"]

    _rewrite(tmp_path / "v.jsonl", swap)
    with StashStore.open(tmp_path / "d.db", fake()) as d:
        with pytest.raises(StashError, match="not what fake/1 gives"):
            import_store(d, tmp_path / "v.jsonl")
        assert d.stats()["segments"] == 0

    def scale(body: list[dict]) -> None:
        import base64

        import numpy as np

        v = np.frombuffer(base64.b64decode(body[0]["vectors"]), dtype="<f4") * 2
        body[0]["vectors"] = base64.b64encode(v.astype("<f4").tobytes()).decode()

    export_store(StashStore.open(tmp_path / "b.db", fake()), tmp_path / "w.jsonl", vectors=True)
    _rewrite(tmp_path / "w.jsonl", scale)
    with StashStore.open(tmp_path / "e.db", fake()) as e:
        with pytest.raises(InputError, match="not finite unit vectors"):
            import_store(e, tmp_path / "w.jsonl")
