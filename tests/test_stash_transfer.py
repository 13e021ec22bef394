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
from contextsieve.stash import StashStore
from contextsieve.stash.segment import ContextSegment
from contextsieve.stash.transfer import export_store, import_store, migrate, read_file

from .fake_embedder import FakeEmbedder


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
