"""A store's namespaces (sessions) and moving one into another, on both backends: ``StashStore.namespaces``
lists each with its segment count and last stash time; ``StashStore.rename_namespace`` moves every
segment of one into another in one transaction (ids, references, supersession, protection and times
kept), seen at once by another store on the same file that had loaded its in-memory table (whatever its
index) and by another process; ``contextsieve stash namespaces`` and ``stash rename`` print them."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import sqlite3
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from contextsieve.cli.main import main
from contextsieve.errors import InputError, StashIntegrityError, StashIntegrityWarning, UnknownSegmentError
from contextsieve.models.cache import CACHE_ENV
from contextsieve.retrieval.chunks import IndexConfig
from contextsieve.stash.ids import qualified
from contextsieve.stash.results import Namespace
from contextsieve.stash.segment import MAX_LABEL_CHARS, ContextSegment
from contextsieve.stash.sqlite import SqliteBackend, SqliteConfig
from contextsieve.stash.store import StashStore
from tests.helpers.stash_store import fake

OLD, NEW = "framework:run-1", "agent:travel-1"
WORD = "harbour"  # in every text: a query for it reaches each segment
ALL = {"top_k": 50, "min_similarity": -1.0}


def _fill(store: StashStore) -> tuple[list[str], list[str]]:
    """OLD: a protected segment of a chosen id ("ferry"), one that refers to it, one expiring, one superseded
    by a later one (which refers to the first); NEW: two of its own. Returns (OLD's ids, NEW's ids)."""
    first = store.stash(
        [
            {"text": f"{WORD} ferry timetable for the island", "protected": True, "topic": "travel", "id": "ferry"},
            {"text": f"{WORD} tickets bought at the pier", "references": ["ferry"]},
            {"text": f"{WORD} parking ends on friday", "expires_in_days": 30, "source": "notes.md"},
        ],
        session=OLD,
    ).segment_ids
    later = store.stash(
        [{"text": f"{WORD} parking ends on saturday instead", "supersedes": [first[2]], "references": ["ferry"]}],
        session=OLD,
    ).segment_ids
    own = store.stash([f"{WORD} hotel booked by the station", f"{WORD} museum closed on mondays"], session=NEW)
    return [*first, *later], list(own.segment_ids)


def _by_id(store: StashStore, session: str) -> dict[str, ContextSegment]:
    return {s.id: s for s in store.list(session=session, limit=1000)}


def _retrieved(store: StashStore, session: str) -> set[str]:
    return {r.segment.id for r in store.retrieve(WORD, session=session, **ALL)}  # type: ignore[arg-type]


def _utc(t: datetime | None) -> datetime:
    assert t is not None and t.utcoffset() == timedelta(0)
    return t


# -- namespaces ------------------------------------------------------------------------------------


def test_an_empty_store_has_no_namespaces(store: StashStore) -> None:
    assert store.namespaces() == []


def test_each_namespace_has_its_segment_count_and_last_stash_time(store: StashStore) -> None:
    old, own = _fill(store)
    store.stash([f"{WORD} ferry timetable for the island"], session=OLD)  # a duplicate: no segment added
    spaces = store.namespaces()
    assert [(n.name, n.segments) for n in spaces] == [(NEW, len(own)), (OLD, len(old))]  # by name
    for n in spaces:
        assert isinstance(n, Namespace)
        latest = max(s.stashed_at for s in store.list(session=n.name))
        assert _utc(n.last_stashed) == latest
        assert n.last_stashed.tzinfo == timezone.utc
    store.delete(own, session=NEW)
    assert [n.name for n in store.namespaces()] == [OLD]  # a namespace left empty is gone


# -- rename ----------------------------------------------------------------------------------------


def test_rename_moves_every_segment_and_keeps_everything_else(store: StashStore) -> None:
    old, own = _fill(store)
    before, theirs = _by_id(store, OLD), _by_id(store, NEW)
    last = {n.name: n.last_stashed for n in store.namespaces()}
    assert store.rename_namespace(OLD, NEW) == len(old) == len(before)
    assert store.list(session=OLD) == [] and _retrieved(store, OLD) == set()
    after = _by_id(store, NEW)
    assert set(after) == {*old, *own}
    for i, s in before.items():  # ids, references both ways, supersession, protection, times, expiry kept
        assert after[i] == dataclasses.replace(s, session=NEW)
    for i, s in theirs.items():
        assert after[i] == s
    assert after["ferry"].protected and after["ferry"].referenced_by == tuple(sorted([old[1], old[3]]))
    assert after[old[2]].superseded_by == old[3] and after[old[3]].supersedes == (old[2],)
    assert [n.name for n in store.namespaces()] == [NEW]
    (moved,) = store.namespaces()
    assert moved.segments == len(old) + len(own) and moved.last_stashed == max(last.values())
    assert [s.id for s in store.get(old, session=NEW)] == old
    with pytest.raises(UnknownSegmentError):
        store.get(old[:1], session=OLD)
    assert _retrieved(store, NEW) == {*old, *own} - {old[2]}  # the superseded one stays out of retrieval
    assert [s.id for s in store.retrieve_by_reference(old[1], session=NEW)] == [old[1], "ferry"]
    later = store.stash([{"text": f"{WORD} return ferry at six", "references": ["ferry"]}], session=NEW)
    assert _by_id(store, NEW)["ferry"].referenced_by == tuple(sorted([old[1], old[3], *later.segment_ids]))
    stats = store.stats(session=NEW)
    assert stats["segments"] == len(old) + len(own) + 1 and stats["protected"] == 1
    store.protect([old[1]], session=NEW)
    assert _by_id(store, NEW)[old[1]].protected


def test_a_chosen_id_meets_one_of_the_same_name(store: StashStore) -> None:
    """An id chosen in OLD ("ferry") is a name within OLD, and the same name in NEW after the move (the
    test above). When NEW has a "ferry" of its own, that one keeps the name, and NEW shows the moved one
    by its stored id, which the segments that refer to it name too: nothing is lost or mixed up."""
    old, own = _fill(store)
    text = f"{WORD} the new ferry company"
    assert store.stash([{"text": text, "id": "ferry"}], session=NEW).segment_ids == ("ferry",)
    assert store.rename_namespace(OLD, NEW) == len(old)
    after = _by_id(store, NEW)
    assert after["ferry"].text == text and not after["ferry"].referenced_by
    (moved,) = [i for i, s in after.items() if s.text == f"{WORD} ferry timetable for the island"]
    assert moved.startswith("ferry~") and after[moved].protected
    assert after[moved].referenced_by == tuple(sorted([old[1], old[3]]))
    assert after[old[1]].references == after[old[3]].references == (moved,)
    assert set(after) == {moved, "ferry", *old[1:], *own}
    assert [s.text for s in store.get([moved, "ferry"], session=NEW)] == [after[moved].text, text]
    assert [s.id for s in store.retrieve_by_reference(old[1], session=NEW)] == [old[1], moved]
    assert _retrieved(store, NEW) == {moved, "ferry", old[1], old[3], *own}


def test_a_damaged_segment_stays_damaged_after_the_move(tmp_path: Path) -> None:
    """A row whose fields fail their check (changed outside contextsieve) moves with the rest, but its
    check is not written again for NEW: it still fails there, in search and on read. A chosen id whose
    vectors fail their digest keeps its stored id (the digest covers the id: it is not written again
    either), so it stays out of search until a rebuild; its fields are sound and it reads as before."""
    path = tmp_path / "s.db"
    ferry = qualified(OLD, "ferry")  # how the chosen id is stored
    with StashStore.open(path, fake()) as store:
        old, own = _fill(store)
        assert store.backend.sessions_of([ferry]) == {ferry: OLD}
    with sqlite3.connect(path) as db:
        db.execute("UPDATE segments SET tokens = tokens + 1 WHERE id = ?", (old[1],))
        db.execute("UPDATE segments SET vectors = zeroblob(length(vectors)) WHERE id = ?", (ferry,))
    with StashStore.open(path, fake()) as store:
        assert store.rename_namespace(OLD, NEW) == len(old)
        with pytest.warns(StashIntegrityWarning):
            found = _retrieved(store, NEW)
        assert found == {old[3], *own}
        assert isinstance(store.backend, SqliteBackend) and store.backend.corrupt == {old[1], ferry}
        with pytest.raises(StashIntegrityError, match=old[1]):
            store.get([old[1]], session=NEW)
        (seg,) = store.get([ferry], session=NEW)
        assert seg.protected and seg.referenced_by == tuple(sorted([old[1], old[3]]))
        with pytest.raises(UnknownSegmentError):
            store.get(["ferry"], session=NEW)


def test_renaming_a_missing_or_the_same_namespace_moves_nothing(store: StashStore) -> None:
    old, own = _fill(store)
    spaces = store.namespaces()
    assert store.rename_namespace("nobody", NEW) == 0
    assert store.rename_namespace(OLD, OLD) == 0
    assert store.namespaces() == spaces


@pytest.mark.parametrize("which", ["old", "new"])
@pytest.mark.parametrize("bad", ["", "   ", "x" * (MAX_LABEL_CHARS + 1), "a\x00b", 7, None])
def test_an_invalid_name_is_refused_and_changes_nothing(store: StashStore, which: str, bad: Any) -> None:
    _fill(store)
    spaces, before = store.namespaces(), _by_id(store, OLD)
    names = (bad, NEW) if which == "old" else (OLD, bad)
    with pytest.raises(InputError):
        store.rename_namespace(*names)
    assert store.namespaces() == spaces and _by_id(store, OLD) == before


def test_a_rename_that_fails_midway_changes_nothing(store: StashStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """All or nothing: the rows are moved, then the write fails before it commits; none stay moved."""
    old, own = _fill(store)
    spaces, before = store.namespaces(), _by_id(store, OLD)
    assert _retrieved(store, OLD) == set(old) - {old[2]}  # the embedded store's table is loaded
    backend = store.backend
    moves = type(backend)._rename_session

    def move_then_fail(db: Any, old_name: str, new_name: str) -> list[int]:
        rows = moves(backend, db, old_name, new_name)
        assert len(rows) == len(old)
        raise OSError("the disk is gone")

    monkeypatch.setattr(backend, "_rename_session", move_then_fail)
    with pytest.raises(OSError, match="the disk is gone"):
        store.rename_namespace(OLD, NEW)
    monkeypatch.undo()
    assert store.namespaces() == spaces and _by_id(store, OLD) == before
    assert _retrieved(store, OLD) == set(old) - {old[2]} and _retrieved(store, NEW) == set(own)
    with StashStore.open(store.backend.location, fake()) as fresh:
        assert fresh.namespaces() == spaces and _retrieved(fresh, NEW) == set(own)


# -- other stores and processes see the move ---------------------------------------------------------

CONFIGS = {
    "default": SqliteConfig(),
    "exact": SqliteConfig(index=IndexConfig(backend="exact"), save_graph=False),
    "hnsw": SqliteConfig(index=IndexConfig(backend="hnsw", ef_search=256, exact_below=0.0)),
}


def _seen(store: StashStore, old: list[str]) -> dict[str, Any]:
    """What ``store`` sees of OLD's segments under both names: by retrieval, listing and id."""
    return {
        "retrieved new": _retrieved(store, NEW),
        "retrieved old": _retrieved(store, OLD),
        "retrieved anywhere": {
            (r.segment.id, r.segment.session)
            for r in store.retrieve(WORD, session=OLD, cross_session=True, **ALL)  # type: ignore[arg-type]
        },
        "listed new": set(_by_id(store, NEW)),
        "listed old": set(_by_id(store, OLD)),
        "got new": [s.id for s in store.get(old, session=NEW, missing_ok=True)],
        "got old": [s.id for s in store.get(old, session=OLD, missing_ok=True)],
    }


def _expected(old: list[str], own: list[str]) -> dict[str, Any]:
    current = {*old, *own} - {old[2]}
    return {
        "retrieved new": current,
        "retrieved old": set(),
        "retrieved anywhere": {(i, NEW) for i in current},
        "listed new": {*old, *own},
        "listed old": set(),
        "got new": old,
        "got old": [],
    }


@pytest.mark.parametrize("config", list(CONFIGS))
def test_another_store_that_loaded_its_table_sees_the_rename(tmp_path: Path, config: str) -> None:
    """A second StashStore on the file (its own in-memory table, loaded by a search before the move)
    finds the moved segments under NEW and none under OLD, in every index; so do the writer, which had
    loaded its table too, and a store opened after the move (which loads it from the file)."""
    path, cfg = tmp_path / "s.db", CONFIGS[config]
    writer = StashStore.open(path, fake(), backend_config=cfg)
    reader = StashStore.open(path, fake(), backend_config=cfg)
    old, own = _fill(writer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StashIntegrityWarning)  # a row failing its check on load says so
        for s in (writer, reader):
            assert _retrieved(s, OLD) == set(old) - {old[2]} and set(_by_id(s, OLD)) == set(old)
        assert writer.rename_namespace(OLD, NEW) == len(old)
        for s in (reader, writer):
            assert _seen(s, old) == _expected(old, own)
        with StashStore.open(path, fake(), backend_config=cfg) as fresh:
            assert _seen(fresh, old) == _expected(old, own)
            assert isinstance(fresh.backend, SqliteBackend) and fresh.backend.corrupt == set()
    for s in (writer, reader):
        assert isinstance(s.backend, SqliteBackend) and s.backend.corrupt == set()
        assert s.backend.integrity_check() == "ok"
        if config == "hnsw":
            assert s.stats()["search"] == "hnsw"
        else:
            assert s.stats()["search"] == "exact"
        s.close()


def _other_process(location: str, old: list[str], ready: Any, go: Any, out: Any) -> None:
    with StashStore.open(location, fake()) as s:
        ready.put((sorted(_retrieved(s, OLD)), sorted(_by_id(s, OLD))))  # its table loaded before the move
        if go.wait(300):
            out.put(_seen(s, old))


def test_another_process_sees_the_rename(location: str) -> None:
    with StashStore.open(location, fake()) as store:
        old, own = _fill(store)
        ctx = mp.get_context("spawn")  # a forked child may inherit a busy Numba / ORT thread pool
        ready: mp.Queue[Any] = ctx.Queue()
        out: mp.Queue[Any] = ctx.Queue()
        go = ctx.Event()
        child = ctx.Process(target=_other_process, args=(location, old, ready, go, out))
        child.start()
        try:
            assert ready.get(timeout=300) == (sorted(set(old) - {old[2]}), sorted(old))
            assert store.rename_namespace(OLD, NEW) == len(old)
            go.set()
            assert out.get(timeout=300) == _expected(old, own)
        finally:
            go.set()
            child.join(60)
        assert child.exitcode == 0


# -- the command line ------------------------------------------------------------------------------


@pytest.fixture
def cli_cache(model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The session's model cache for the default model the commands open a store with."""
    monkeypatch.setenv(CACHE_ENV, str(model_cache))
    return model_cache


@pytest.fixture
def real_store(cli_cache: Path, tmp_path: Path) -> Path:
    """A store made with the default model, holding OLD and NEW."""
    path = tmp_path / "s.db"
    with StashStore.open(path) as store:
        _fill(store)
    return path


def test_stash_namespaces_and_rename_print_what_they_did(real_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with StashStore.open(real_store, create=False) as store:
        last = {n.name: n.last_stashed for n in store.namespaces()}
    capsys.readouterr()
    assert main(["stash", "namespaces", str(real_store)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{NEW}\t2 segments\tlast stashed {_utc(last[NEW]):%Y-%m-%d %H:%M}",
        f"{OLD}\t4 segments\tlast stashed {_utc(last[OLD]):%Y-%m-%d %H:%M}",
    ]
    assert main(["stash", "rename", str(real_store), OLD, NEW]) == 0
    assert capsys.readouterr().out == f"moved 4 segments from {OLD} to {NEW}\n"
    assert main(["stash", "namespaces", str(real_store)]) == 0
    when = max(_utc(t) for t in last.values())
    assert capsys.readouterr().out == f"{NEW}\t6 segments\tlast stashed {when:%Y-%m-%d %H:%M}\n"
    assert main(["stash", "rename", str(real_store), OLD, NEW]) == 1  # nothing left to move: said
    assert f"has no namespace '{OLD}'" in capsys.readouterr().err
    assert main(["stash", "rename", str(real_store), NEW, " "]) == 1
    assert "session must not be empty" in capsys.readouterr().err
    with StashStore.open(real_store, create=False) as store:
        assert [(n.name, n.segments) for n in store.namespaces()] == [(NEW, 6)]
        assert _retrieved(store, NEW) == set(_by_id(store, NEW)) - {
            s.id for s in store.list(session=NEW) if s.superseded_by
        }
        assert store.get(["ferry"], session=NEW)[0].protected


def test_stash_namespaces_of_an_empty_store(
    cli_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.db"
    StashStore.open(path).close()
    assert main(["stash", "namespaces", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: no segments\n"


@pytest.mark.parametrize("action", [["namespaces"], ["rename", OLD, NEW]])
def test_namespaces_and_rename_on_a_missing_store_create_nothing(
    action: list[str], cli_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo" / "stash.db"
    assert main(["stash", action[0], str(missing), *action[1:]]) == 1
    assert capsys.readouterr().err.startswith(f"contextsieve: error: no stash store at {missing} (no such file)")
    assert list(tmp_path.iterdir()) == []
