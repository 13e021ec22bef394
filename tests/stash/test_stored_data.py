"""What a stash keeps: edge values refused unchanged, times to the microsecond, fields and texts changed
behind the store caught, format upgrades, why a result ranked, supersession and index terms."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from contextsieve.errors import InputError, StashIntegrityWarning
from contextsieve.stash.config import StashConfig
from contextsieve.stash.store import StashStore
from tests.helpers.stash_store import UTC, count, fake

EDGE_CASES = [
    ("not a list", lambda s: s.stash(None), "must be a segment or a list"),  # type: ignore[arg-type]
    (
        "expiry past year 9999 in UTC",
        lambda s: s.stash(
            [{"text": "x", "expires_at": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))}]
        ),
        "out of range",
    ),
    (
        "time before year 1 in UTC",
        lambda s: s.stash([{"text": "y", "timestamp": datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5)))}]),
        "out of range",
    ),
    ("filter past year 9999", lambda s: s.retrieve("x", filters={"end_time": "9999-12-31T23:00:00-05:00"}), "range"),
    ("offset past 64 bits", lambda s: s.list(offset=2**63), "offset must be"),
    ("min_similarity past a float", lambda s: s.retrieve("x", min_similarity=10**400), "min_similarity must be"),
    ("lone surrogate in a filter", lambda s: s.list(filters={"topics": ["a\udfff"]}), "lone surrogate"),
    ("lone surrogate in a query", lambda s: s.retrieve("why \ud800"), "lone surrogate"),
    ("max_age of 1e308 days", lambda s: s.cleanup_old(1e308), "max_age must be"),
    ("max_age of timedelta.max", lambda s: s.cleanup_old(timedelta.max), "max_age must be"),
    ("max_age past a float", lambda s: s.cleanup_old(10**400), "max_age must be"),
    ("NUL in the text", lambda s: s.stash(["a\x00b"]), "NUL"),
    ("NUL in the topic", lambda s: s.stash([{"text": "ok", "topic": "t\x00"}]), "NUL"),
    ("NUL in the session", lambda s: s.stash(["ok"], session="s\x00"), "NUL"),
]


@pytest.mark.parametrize("case", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_edge_values_are_typed_errors_that_change_nothing_on_both_backends(store: StashStore, case) -> None:  # noqa: ANN001
    """Issue 27 items 6-7: times out of range, huge offsets and ages, None, NUL characters: the same
    InputError on SQLite and PostgreSQL (NUL used to be stored by one and a storage error on the
    other), nothing written."""
    _, call, match = case
    store.stash(["a segment that stays"])
    with pytest.raises(InputError, match=match):
        call(store)
    assert [s.text for s in store.list()] == ["a segment that stays"]
    assert store.cleanup_old(3_000_000) == 0  # the largest ages are fine: nothing is that old


def _tamper(location: str, sql: str, args: tuple) -> None:
    """Change a stored row behind the store's back (as a flipped bit or an edit would)."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as c:
            c.execute(sql.replace("segments", "stash_segments").replace("?", "%s"), args)
    else:
        db = sqlite3.connect(location)
        with db:
            db.execute(sql, args)
        db.close()


def _flip_in_index(path: str, index: str, old: bytes, new: bytes) -> None:
    """Change bytes inside one index's page of a closed SQLite store (as a flipped bit on disk would)."""
    db = sqlite3.connect(path)
    page = db.execute("PRAGMA page_size").fetchone()[0]
    root = db.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (index,)).fetchone()[0]
    db.close()
    assert not Path(path + "-wal").exists()  # closed: every page is in the file
    data = bytearray(Path(path).read_bytes())
    at = data.index(old, (root - 1) * page, root * page)
    data[at : at + len(new)] = new
    Path(path).write_bytes(bytes(data))


FAR_TIMES = [
    datetime(1, 1, 2, 0, 0, 0, 999_999, tzinfo=UTC),
    datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
    datetime(2026, 3, 1, 12, 30, 45, 123_457, tzinfo=UTC),
    datetime(9999, 12, 30, 23, 59, 59, 999_999, tzinfo=UTC),
]


def test_times_keep_every_microsecond_far_from_1970_on_both_backends(location: str, tmp_path: Path) -> None:
    """Issue 27 item 6: times are integer microseconds on both backends (float seconds turned
    0001-01-02T00:00:00.999999 into 00:00:01); filters are exact to the microsecond; an export and
    import keeps them."""
    from contextsieve.stash.transfer import export_store, import_store

    with StashStore.open(location, fake()) as s:
        ids = s.stash(
            [{"text": f"moment {i}", "timestamp": t, "expires_at": FAR_TIMES[-1]} for i, t in enumerate(FAR_TIMES)]
        ).segment_ids
        assert [seg.timestamp for seg in s.get(ids)] == FAR_TIMES
        assert {seg.expires_at for seg in s.get(ids)} == {FAR_TIMES[-1]}
        for i, t in enumerate(FAR_TIMES):
            one = timedelta(microseconds=1)
            exact = s.list(filters={"start_time": t.isoformat(), "end_time": t.isoformat()})
            assert [seg.id for seg in exact] == [ids[i]]
            assert ids[i] not in {seg.id for seg in s.list(filters={"start_time": (t + one).isoformat()})}
            assert ids[i] not in {seg.id for seg in s.list(filters={"end_time": (t - one).isoformat()})}
        found = s.retrieve("moment", top_k=4, now=FAR_TIMES[2])  # ages from -8,000 to +8,000 years rank
        assert sorted(r.segment.id for r in found) == sorted(ids)
        assert export_store(s, tmp_path / "out.jsonl") == 4
    with StashStore.open(tmp_path / "copy.db", fake()) as c:
        import_store(c, tmp_path / "out.jsonl")
        assert sorted(seg.timestamp for seg in c.list()) == FAR_TIMES


def test_fields_changed_behind_the_store_are_a_typed_error_naming_the_segment(location: str) -> None:
    """Issue 27 item 4, metadata: a row whose topic, source, times or token count changed on disk
    fails its fields check on read (both backends); the other rows still read."""
    from contextsieve.errors import StashIntegrityError

    with StashStore.open(location, fake()) as s:
        ids = s.stash([{"text": "release on friday", "topic": "plans"}, "lunch: two pizzas"]).segment_ids
    for column, value in (("topic", "other"), ("created", 1), ("tokens", 999), ("source", "elsewhere")):
        with StashStore.open(location, fake()) as s:
            before = s.get([ids[0]])[0]
        _tamper(location, f"UPDATE segments SET {column} = ? WHERE id = ?", (value, ids[0]))
        with StashStore.open(location, fake()) as s:
            with pytest.raises(StashIntegrityError, match=ids[0]):
                s.get([ids[0]])
            assert [seg.text for seg in s.get([ids[1]])] == ["lunch: two pizzas"]
        _tamper(location, f"UPDATE segments SET {column} = ? WHERE id = ?", (_column_value(before, column), ids[0]))
        with StashStore.open(location, fake()) as s:
            assert s.get([ids[0]])[0] == before  # restored: it reads again


def _column_value(seg, column: str):  # noqa: ANN001, ANN202
    from contextsieve.stash.backend import to_epoch

    return {"topic": seg.topic, "created": to_epoch(seg.timestamp), "tokens": seg.tokens, "source": seg.source}[column]


def _as_format_3(location: str) -> None:
    """Turn a store into what contextsieve wrote before format 4 (float seconds, no fields check),
    the way that version's schema held it."""
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as c:
            c.execute(
                "ALTER TABLE stash_segments DROP COLUMN fields, DROP COLUMN superseded_by, "
                + ", ".join(
                    f"ALTER COLUMN {col} TYPE double precision USING {col} / 1000000.0"
                    for col in ("created", "stashed", "expires")
                )
            )
            c.execute("UPDATE stash_meta SET value = 'contextsieve-stash-3' WHERE key = 'format'")
        return
    db = sqlite3.connect(location)
    with db:
        seq = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'segments'").fetchone()[0]
        db.execute(
            """CREATE TABLE old (row INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, session TEXT NOT NULL,
            text TEXT NOT NULL, type TEXT NOT NULL, created REAL NOT NULL, stashed REAL NOT NULL, tokens INTEGER
            NOT NULL, topic TEXT, source TEXT NOT NULL, sha256 TEXT NOT NULL, model TEXT NOT NULL, expires REAL,
            protected INTEGER NOT NULL, chunks INTEGER NOT NULL, vectors BLOB NOT NULL, digest BLOB NOT NULL,
            terms TEXT NOT NULL)"""
        )
        db.execute(
            "INSERT INTO old SELECT row, id, session, text, type, created / 1000000.0, stashed / 1000000.0, tokens, "
            "topic, source, sha256, model, expires / 1000000.0, protected, chunks, vectors, digest, terms FROM segments"
        )
        db.execute("DROP TABLE segments")
        db.execute("ALTER TABLE old RENAME TO segments")
        db.execute("CREATE INDEX segments_created ON segments (created)")
        db.execute("UPDATE meta SET value = 'contextsieve-stash-3' WHERE key = 'format'")
        db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'segments'", (seq,))
    db.close()


def test_a_format_3_store_is_upgraded_on_open_keeping_everything(location: str) -> None:
    """A store written before times were integers (format 3: float seconds) is upgraded once when
    opened, in one transaction: texts, times (to what float seconds kept: exact near today), ids,
    references and search all stay; new segments continue its row numbers; the tag says format 4."""
    from contextsieve.stash.backend import FORMAT

    t = datetime(2025, 6, 1, 8, 0, 0, 250_001, tzinfo=UTC)
    with StashStore.open(location, fake()) as s:
        first = s.stash([{"text": "the deploy runs on friday", "timestamp": t}]).segment_ids
        later = s.stash([{"text": "see the deploy note", "references": first}, "a segment deleted later"])
        s.delete([later.segment_ids[1]])
        before = s.list()
    _as_format_3(location)
    with StashStore.open(location, fake()) as s:
        assert s.list() == before and s.get(first)[0].timestamp == t
        assert s.retrieve("deploy friday", top_k=1)[0].segment.id == first[0]
        assert s.backend.setting("format") == FORMAT
        new = s.stash(["a segment after the upgrade"]).segment_ids
        assert {seg.id for seg in s.list()} == {*[b.id for b in before], *new}
        assert new[0] not in {b.id for b in before} and s.get(new)[0].text == "a segment after the upgrade"
    with StashStore.open(location, fake()) as s:  # opened again: nothing more to do
        assert len(s.list()) == 3


def test_a_stored_text_changed_behind_the_store_is_a_typed_error_naming_it(location: str) -> None:
    """Issue 27 item 4: every read checks a segment's text against its sha256 (both backends)."""
    from contextsieve.errors import StashIntegrityError

    with StashStore.open(location, fake()) as s:
        ids = s.stash(["the deploy key is in vault", "lunch: two pizzas"]).segment_ids
    _tamper(location, "UPDATE segments SET text = ? WHERE id = ?", ("the deploy key is in a drawer", ids[0]))
    with StashStore.open(location, fake()) as s:
        with pytest.raises(StashIntegrityError, match=ids[0]):
            s.get([ids[0]])
        assert [seg.text for seg in s.get([ids[1]])] == ["lunch: two pizzas"]  # the others still read
        with pytest.raises(StashIntegrityError):
            s.list()


def test_a_result_says_why_it_ranked(store: StashStore) -> None:
    """Issue 28 (also): results carry what a host needs to decide without a second call."""
    store.stash([{"text": "the deploy broke the queue", "source": "ci"}, "lunch at noon"], session="s")
    hit = store.retrieve("deploy queue", session="s")[0]
    assert sum(hit.parts.values()) == pytest.approx(hit.score)
    assert set(hit.parts) == {"dense", "keyword", "day", "names", "speaker", "recency"} and hit.parts["keyword"] > 0
    d = hit.to_dict()
    assert d["why"] == {k: round(v, 4) for k, v in hit.parts.items()} and d["source"] == "ci"
    assert {"keyword", "stashed_at", "timestamp", "tokens", "type"} <= set(d)


def test_a_newer_segment_supersedes_older_ones_on_both_backends(location: str, tmp_path: Path) -> None:
    """Issue 28, supersession: ``supersedes`` hides the old segments from default retrieval (the
    newest of a chain competes), says so both ways (``supersedes`` / ``superseded_by``), keeps the old
    ones retrievable with ``include_superseded``; deleting the newer one makes the older current again;
    bad supersessions are typed errors that write nothing; an export and import keeps the chains."""
    from contextsieve.stash.transfer import export_store, import_store

    with StashStore.open(location, fake()) as s:
        s.stash([{"text": "the release is on friday", "id": "plan-1"}, "lunch is at noon"])
        b = s.stash([{"text": "the release moved to monday", "id": "plan-2", "supersedes": ["plan-1"]}])
        assert b.segment_ids == ("plan-2",)
        found = {r.segment.id: r.segment for r in s.retrieve("release", top_k=5)}
        assert "plan-1" not in found and found["plan-2"].supersedes == ("plan-1",)
        every = {r.segment.id: r for r in s.retrieve("release", top_k=5, include_superseded=True)}
        assert every["plan-1"].segment.superseded_by == "plan-2"
        assert every["plan-1"].to_dict()["superseded_by"] == "plan-2"
        assert every["plan-2"].to_dict()["supersedes"] == ["plan-1"]
        assert {x.id: x.superseded_by for x in s.list()}["plan-1"] == "plan-2"
        # a chain: the newest wins; the middle one is superseded too
        s.stash([{"text": "the release is on tuesday after all", "id": "plan-3", "supersedes": ["plan-2"]}])
        assert [r.segment.id for r in s.retrieve("release", top_k=5) if "release" in r.segment.text] == ["plan-3"]
        n = count(s)
        for bad, match in (
            ({"text": "x", "supersedes": ["no-such-id"]}, "not in session"),
            ({"text": "y", "supersedes": "plan-3"}, "list of segment ids"),
            ({"text": "z", "supersedes": [None]}, "non-empty string"),
        ):
            with pytest.raises(InputError, match=match):
                s.stash([bad])
        with pytest.raises(InputError, match="not in session"):
            s.stash([{"text": "other session", "supersedes": ["plan-3"]}], session="elsewhere")
        with pytest.raises(InputError, match="itself superseded"):  # no loops: the same text as the
            s.stash([{"text": "the release is on friday", "supersedes": ["plan-3"]}])  # superseded plan-1
        assert count(s) == n
        export_store(s, tmp_path / "out.jsonl")
        s.delete(["plan-3"])  # the one it superseded is current again
        assert "plan-2" in {r.segment.id for r in s.retrieve("release", top_k=5)}
    other = str(tmp_path / "copy.db") if location.startswith("postgresql://") else None
    if other is not None:  # PostgreSQL -> SQLite; SQLite -> a fresh SQLite otherwise
        target = other
    else:
        target = str(tmp_path / "copy2.db")
    with StashStore.open(target, fake()) as c:
        import_store(c, tmp_path / "out.jsonl")
        import_store(c, tmp_path / "out.jsonl")  # run again: nothing changes, no error
        chains = {x.id: x.superseded_by for x in c.list()}
        assert chains["plan-1"] == "plan-2" and chains["plan-2"] == "plan-3" and chains["plan-3"] is None
        assert [r.segment.id for r in c.retrieve("release", top_k=5) if "release" in r.segment.text] == ["plan-3"]


def test_supersession_reaches_another_process_of_the_same_sqlite_store(tmp_path: Path) -> None:
    """The in-memory table of a second store on the same file learns of a supersession (and of its
    undoing) through the change log."""
    path = tmp_path / "shared.db"
    with StashStore.open(path, fake()) as a, StashStore.open(path, fake()) as b:
        a.stash([{"text": "the release is on friday", "id": "p1"}])
        assert [r.segment.id for r in b.retrieve("release")] == ["p1"]
        a.stash([{"text": "the release moved to monday", "id": "p2", "supersedes": ["p1"]}])
        assert [r.segment.id for r in b.retrieve("release")] == ["p2"]
        a.delete(["p2"])
        assert [r.segment.id for r in b.retrieve("release")] == ["p1"]


def test_a_close_restatement_is_proposed_as_superseding(location: str) -> None:
    """``propose_supersede``: a new segment whose meaning is that close to a current one of its
    session is reported (not marked); stashing it again with ``supersedes`` marks it (a duplicate of
    a stored text makes the stored one supersede)."""

    with StashStore.open(location, fake(), StashConfig(propose_supersede=0.9)) as s:
        s.stash([{"text": "the release date is friday the fifth", "id": "d1"}, "lunch is at noon"])
        r = s.stash(["the release date is friday the fifth again"])
        (new,) = r.segment_ids
        assert r.may_supersede == {new: "d1"}
        assert s.stash(["pizza for lunch today"]).may_supersede == {}
        again = s.stash([{"text": "the release date is friday the fifth again", "supersedes": ["d1"]}])
        assert again.segment_ids == (new,) and again.stashed == 0
        assert s.get(["d1"])[0].superseded_by == new


def test_changed_index_terms_or_a_null_field_are_caught_not_served(tmp_path: Path) -> None:
    """Issue 27 item 4 (found by benchmarks.robustness.tamper): the fields check covers the keyword index terms, so
    a store that loads a row whose terms changed leaves it out of search with a warning (its text still
    reads); a value of another type where a count was is a StashIntegrityError, not a TypeError."""
    from contextsieve.errors import StashIntegrityError

    path = str(tmp_path / "s.db")
    with StashStore.open(path, fake()) as s:
        ids = s.stash(["the deploy key is in vault", "lunch: two pizzas"]).segment_ids
    _tamper(path, "UPDATE segments SET terms = ? WHERE id = ?", ("pizza pizza pizza", ids[0]))
    with pytest.warns(StashIntegrityWarning, match="fail their check"):
        with StashStore.open(path, fake()) as s:
            assert [r.segment.id for r in s.retrieve("pizza", top_k=5)] == [ids[1]]
            assert s.get([ids[0]])[0].text == "the deploy key is in vault"
    _tamper(path, "UPDATE segments SET chunks = ? WHERE id = ?", ("two", ids[1]))  # as a flipped type byte reads
    with StashStore.open(path, fake()) as s:
        with pytest.raises(StashIntegrityError, match=ids[1]):
            s.get([ids[1]])


def test_a_session_index_that_hides_a_row_is_a_typed_error_not_a_shorter_list(tmp_path: Path) -> None:
    """Issue 47 defect 7 (found by benchmarks.robustness.tamper): a flipped bit in the session index
    (``segments_session_hash``) made ``list`` (and ``list_stashed_context``) drop a row without a word,
    while ``get``, retrieval and export still found it. Before a search the listing indexes are checked
    against the table, after one a listing is held against the in-memory table: either way, whole or
    in pages, the hidden row is a StashIntegrityError naming the index and the fix."""
    from contextsieve.errors import StashIntegrityError

    path = str(tmp_path / "s.db")
    texts = ["the deploy key is in vault", "lunch: two pizzas", "the cat is grey", "a fourth note", "a fifth"]
    with StashStore.open(path, fake()) as s:
        ids = s.stash(texts, session="session-alpha").segment_ids
        s.stash(["another session's note"], session="session-beta")
        assert len(s.list(session="session-alpha")) == 5
    _flip_in_index(path, "segments_session_hash", b"session-alpha", b"session-alphq")  # a -> q: one bit
    with StashStore.open(path, fake()) as s:
        assert sorted(x.id for x in s.get(ids, session="session-alpha")) == sorted(ids)  # the rows are intact
        damaged = "damaged: its index segments_session_hash does not match its table .*REINDEX"
        with pytest.raises(StashIntegrityError, match=damaged):
            s.list(session="session-alpha")  # before any search: the indexes are checked against the table
        assert [r.segment.text for r in s.retrieve("pizzas", session="session-alpha", top_k=1)] == [texts[1]]
        with pytest.raises(StashIntegrityError, match=damaged):  # after one: held against the in-memory table
            for offset in range(0, 6, 2):
                s.list(session="session-alpha", limit=2, offset=offset)
        assert [x.text for x in s.list(session="session-beta")] == ["another session's note"]
    db = sqlite3.connect(path)
    db.execute("REINDEX")
    db.close()
    with StashStore.open(path, fake()) as s:
        assert sorted(x.id for x in s.list(session="session-alpha")) == sorted(ids)


def test_a_listing_behind_another_writer_is_read_again_not_an_error(tmp_path: Path) -> None:
    """The check of a listing against the in-memory table never mistakes another process's write for
    damage: a table held from before a delete (a ``reading()`` scope) disagrees with the listing, which
    is then read again with and without the indexes (the same rows) and returned."""
    path = str(tmp_path / "s.db")
    with StashStore.open(path, fake()) as a, StashStore.open(path, fake()) as b:
        ids = a.stash(["one", "two", "three"], session="s").segment_ids
        assert len(a.list(session="s")) == 3
        with a.backend.reading():  # a's table stays as it is now
            assert b.delete([ids[0]], session="s") == 1
            b.stash(["four"], session="s")
            assert sorted(x.text for x in a.list(session="s")) == ["four", "three", "two"]
            assert sorted(x.text for x in a.list(session="s", limit=1, offset=2)) in (["two"], ["three"], ["four"])


def test_listings_held_against_a_loaded_table_read_no_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once a search has loaded the in-memory table, a sound store's listings (whole, in pages, filtered,
    after writes) are checked against it alone: the scan of the table and its indexes runs for none."""
    from contextsieve.stash.sqlite import SqliteBackend

    path = str(tmp_path / "s.db")
    with StashStore.open(path, fake()) as s:
        ids = s.stash([f"note {i} about the deploy" for i in range(12)], session="s").segment_ids
        s.stash([{"text": "a decision", "type": "decision", "topic": "t"}], session="s")
        s.stash(["elsewhere"], session="other")
        s.retrieve("deploy", session="s")
        scans: list[int] = []
        monkeypatch.setattr(SqliteBackend, "_check_indexes", lambda self: scans.append(1))
        pages = [x.id for o in range(0, 14, 5) for x in s.list(session="s", limit=5, offset=o)]
        assert len(pages) == 13 == len(set(pages))
        assert [x.text for x in s.list(session="s", filters={"types": ["decision"]})] == ["a decision"]
        s.delete([ids[3]], session="s")
        s.protect([ids[4]], session="s")
        assert len(s.list(session="s", filters={"protected": False})) == 11
        assert s.list(session="s", offset=20) == [] and len(s.list(session="other")) == 1
        assert scans == []
