"""Learning from use is on by default and kept: what an agent loaded from a file learns survives its
restarts under its own identity (a rename too), holds no user's words unless asked (vectors and tool
keys), is bounded, never reaches another agent, and is forgotten with one command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from contextsieve import Engine
from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.agent.registry import AgentRegistry
from contextsieve.agent.usage import KEEP_PER_TOOL, UsageLog, example_hash

SECRET = "roll back checkout for customer Zyxwvut-4242 after the 502s"
ROLLBACK = ItemKey(ItemKind.TOOL, "rollback", "ops")
RERUN = ItemKey(ItemKind.TOOL, "rerun", "ci")


def _agent_file(path: Path, name: str = "ops-desk") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "name": name,
        "systemPrompt": "You run operations.",
        "mcpServers": {
            "ops": {
                "type": "stdio",
                "command": "ops-mcp",
                "serverToolDefaults": {"include": "agent"},
                "tools": {"rollback": {"description": "Undo a service deploy", "inputSchema": {"type": "object"}}},
            },
            "ci": {
                "type": "stdio",
                "command": "ci-mcp",
                "serverToolDefaults": {"include": "agent"},
                "tools": {
                    "rerun": {"description": "Rerun the failed release pipeline", "inputSchema": {"type": "object"}}
                },
            },
        },
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _engine(path: Path, int8, data: Path, **kw: object) -> Engine:  # noqa: ANN001
    return Engine.from_file(path, embedder=int8, cache_dir=False, registry=AgentRegistry(data / "agents.sqlite"), **kw)


def test_learning_is_kept_under_the_identity_without_the_words(tmp_path: Path, int8, monkeypatch) -> None:  # noqa: ANN001
    data = tmp_path / "data"
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(data))
    path = _agent_file(tmp_path / "desk" / "agent.yaml")
    first = _engine(path, int8, data)
    before = first.session(tool_top_n=1, keyword_weight=0.0).build_request(SECRET).context.entries
    first.record_tool_calls(SECRET, [RERUN if before[-1].key == ROLLBACK else ROLLBACK])
    learned = RERUN if before[-1].key == ROLLBACK else ROLLBACK
    assert first.history_path == data / "history.sqlite"
    for f in data.rglob("*"):
        assert not f.is_file() or b"Zyxwvut" not in f.read_bytes(), f  # the vector, not the words
    path.rename(path.with_name("renamed.yaml"))
    again = _engine(path.with_name("renamed.yaml"), int8, data)  # a restart, the file renamed meanwhile
    assert again.store.usage().counts(again.store.usage_scope) == {learned: 1}
    chosen = again.session(tool_top_n=1, keyword_weight=0.0).build_request(SECRET + " now").context.entries
    # the learned tool comes first, in a place of its own (history adds one: the request's own tool stays)
    assert [e.key for e in chosen if e.key.kind is ItemKind.TOOL] == [learned, before[-1].key]
    tool = next(c for c in again.store.chunks_of(learned).chunks if c.text.startswith("example request"))
    assert tool.text == "example request (kept as a vector)"
    other = _engine(_agent_file(tmp_path / "other" / "agent.yaml", "billing"), int8, data)
    assert other.store.usage().counts(other.store.usage_scope) == {}  # never another agent's
    # the one command that forgets
    env = {"CONTEXTSIEVE_DATA": str(data), "PATH": "", "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "contextsieve", "history", str(path.with_name("renamed.yaml")), "--forget"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0 and "forgot 1 recorded requests" in done.stdout, done.stderr
    assert _engine(path.with_name("renamed.yaml"), int8, data).store.usage().counts(again.store.usage_scope) == {}


def test_the_words_are_kept_only_when_asked(tmp_path: Path, int8, monkeypatch) -> None:  # noqa: ANN001
    data = tmp_path / "data"
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(data))
    path = _agent_file(tmp_path / "desk" / "agent.yaml")
    _engine(path, int8, data, remember_requests=True).record_tool_calls(SECRET, [ROLLBACK])
    assert any(b"Zyxwvut" in f.read_bytes() for f in data.glob("history.sqlite*"))  # the file or its WAL
    engine = _engine(path, int8, data, remember_requests=True)
    assert engine.store.usage().examples(engine.store.usage_scope, 5) == {ROLLBACK: (SECRET,)}
    code = Engine(engine.agent.__class__(name="made-in-code"), embedder=int8, cache_dir=False)
    assert code.history_path is None  # an agent made in code learns in memory unless asked


def test_the_history_is_bounded(tmp_path: Path) -> None:
    log = UsageLog(tmp_path / "h.sqlite")
    rng = np.random.default_rng(7)
    for i in range(KEEP_PER_TOOL + 20):
        log.record("a", f"request {i}", [ROLLBACK], vector=rng.standard_normal(8))
    kept = log.records("a", 1000)[ROLLBACK]
    assert len(kept) == KEEP_PER_TOOL and kept[0].text is None and kept[0].vector is not None
    assert np.isclose(np.linalg.norm(kept[0].vector), 1.0, atol=1e-3)
    with pytest.raises(Exception, match="finite"):
        log.record("a", "bad vector", [ROLLBACK], vector=np.full(8, np.nan))
    assert len(log.records("a", 1000)[ROLLBACK]) == KEEP_PER_TOOL  # nothing written


@pytest.mark.parametrize("where", ["file", "memory"])
def test_both_bounds_hold_in_a_file_and_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """Issue (a hostile probe): the history in memory kept its bound per tool only, so an agent of many
    tools went past the bound per agent. Both keep the newest, per tool and per agent, another agent's
    records untouched (the bounds shrunk: 5 per tool, 12 per agent)."""
    import contextsieve.agent.usage as usage

    monkeypatch.setattr(usage, "KEEP_PER_TOOL", 5)
    monkeypatch.setattr(usage, "KEEP_PER_AGENT", 12)
    log = UsageLog(tmp_path / "h.sqlite" if where == "file" else None)
    tools = [ItemKey(ItemKind.TOOL, f"t{i}", "srv") for i in range(6)]
    rng = np.random.default_rng(3)
    log.record("b", "the other agent's request", [tools[0]], vector=rng.standard_normal(8))
    for n in range(48):
        log.record("a", f"request {n}", [tools[n % 6]], vector=rng.standard_normal(8))
    kept = log.records("a", 1000)
    assert sorted(e.hash for v in kept.values() for e in v) == sorted(
        example_hash(f"request {n}") for n in range(36, 48)
    )
    assert {k.name: len(v) for k, v in kept.items()} == {f"t{i}": 2 for i in range(6)}
    assert sum(len(v) for v in log.records("b", 1000).values()) == 1


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_clock_stepped_back_does_not_make_the_newest_records_the_oldest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Issue (a hostile probe): records were ordered by the wall clock, so after it stepped back an hour
    (a correction, a snapshot restored) every new record was the oldest and the bound forgot it first.
    A new log on the file (a restart) reads the newest time once; records stay in the order written."""
    import contextsieve.agent.usage as usage

    monkeypatch.setattr(usage, "KEEP_PER_TOOL", 5)
    path = tmp_path / "h.sqlite" if where == "file" else None
    rng = np.random.default_rng(4)
    real = usage.time.time
    monkeypatch.setattr(usage.time, "time", lambda: real() + 3600)  # an hour fast
    log = UsageLog(path)
    for i in range(5):
        log.record("a", f"old {i}", [ROLLBACK], vector=rng.standard_normal(8))
    monkeypatch.setattr(usage.time, "time", real)  # corrected
    if path is not None:
        log = UsageLog(path)  # a restart: the newest time comes from the file
    for i in range(3):
        log.record("a", f"new {i}", [ROLLBACK], vector=rng.standard_normal(8))
    kept = [e.hash for e in log.records("a", 1000)[ROLLBACK]]  # newest first
    assert kept == [example_hash(m) for m in ("new 2", "new 1", "new 0", "old 4", "old 3")]
    if path is not None:  # a damaged time far ahead (a bit flip) does not stop the clock at it
        import sqlite3

        with sqlite3.connect(path) as db:
            db.execute("UPDATE examples SET at = 1e300 WHERE agent = 'a' AND hash = ?", (example_hash("old 3"),))
        db.close()
        log = UsageLog(path)
        log.record("b", "first", [ROLLBACK], vector=rng.standard_normal(8))
        log.record("b", "second", [ROLLBACK], vector=rng.standard_normal(8))
        assert [e.hash for e in log.records("b", 10)[ROLLBACK]] == [example_hash("second"), example_hash("first")]
        assert all(e.at < real() + 3700 for e in log.records("b", 10)[ROLLBACK])  # after "old 4", not the damage


def test_a_vector_of_another_model_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    UsageLog(path, model="model-a").record("a", "hello", [ROLLBACK], vector=np.ones(4))
    assert UsageLog(path, model="model-b").records("a", 5) == {}  # no text to embed again: left out
    UsageLog(path, model="model-a", keep_text=True).record("a", "hello", [ROLLBACK], vector=np.ones(4))
    again = UsageLog(path, model="model-b").records("a", 5)[ROLLBACK][0]
    assert again.text == "hello" and again.vector is None  # embedded again from its text


DAMAGE = {  # a damaged record of the log, as a bit flip or a hand edit leaves it
    "a short vector": "UPDATE examples SET vector = substr(vector, 1, 700) WHERE tool = 'rollback'",
    "an odd number of bytes": "UPDATE examples SET vector = substr(vector, 1, 767) WHERE tool = 'rollback'",
    "a vector stored as text": "UPDATE examples SET vector = 'hello' WHERE tool = 'rollback'",
    "a vector of NaN": "UPDATE examples SET vector = CAST(x'007e' || substr(vector, 3) AS BLOB) "
    "WHERE tool = 'rollback'",
    "a time that is text": "UPDATE examples SET at = 'noon' WHERE tool = 'rollback'",
    "text that is not UTF-8": "UPDATE examples SET message = CAST(x'ff41' AS TEXT) WHERE tool = 'rollback'",
    # still a finite, non-zero vector of the model's length: only the record's check (CRC-32) tells
    "a bit flipped in a vector": "FLIP",
    "a bit flipped in a request's hash": "UPDATE examples SET hash = substr(hash, 1, 10) || "
    "CASE substr(hash, 11, 1) WHEN 'a' THEN 'b' ELSE 'a' END || substr(hash, 12) WHERE tool = 'rollback'",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_record_is_left_out_and_the_rest_is_used(tmp_path: Path, int8, damage: str) -> None:  # noqa: ANN001
    import sqlite3

    from contextsieve.errors import UsageLogWarning

    path = tmp_path / "history.sqlite"
    engine = _engine(_agent_file(tmp_path / "agent.yaml"), int8, tmp_path, history=path)
    engine.record_tool_calls("undo the checkout deploy", [ROLLBACK])
    engine.record_tool_calls("rerun the release pipeline", [RERUN])
    db = sqlite3.connect(path)
    if DAMAGE[damage] == "FLIP":  # the lowest bit of the 51st value
        (blob,) = db.execute("SELECT vector FROM examples WHERE tool = 'rollback'").fetchone()
        flipped = blob[:100] + bytes([blob[100] ^ 1]) + blob[101:]
        db.execute("UPDATE examples SET vector = ? WHERE tool = 'rollback'", (flipped,))
    else:
        db.execute(DAMAGE[damage])
    db.commit()
    rows = db.execute("SELECT * FROM examples ORDER BY tool").fetchall() if "UTF-8" not in damage else None
    db.close()
    with pytest.warns(UsageLogWarning, match="damaged records"):
        again = _engine(tmp_path / "agent.yaml", int8, tmp_path, history=path)
        again.index()
    kept = again.store.examples
    # a record whose text alone is damaged keeps its vector (the text read with the bad bytes replaced)
    assert set(kept) == ({RERUN, ROLLBACK} if "UTF-8" in damage else {RERUN})
    assert all(e.vector is not None and e.vector.shape == (384,) for v in kept.values() for e in v)
    session = again.session(tool_top_n=1, keyword_weight=0.0)
    assert session.build_request("rerun the release pipeline").context.entries[0].key == RERUN
    if rows is not None:  # read, not repaired or deleted: the file is as it was
        db = sqlite3.connect(path)
        assert db.execute("SELECT * FROM examples ORDER BY tool").fetchall() == rows
        db.close()


def test_a_vector_written_before_the_check_is_read_and_a_checked_one_holds_its_crc(tmp_path: Path) -> None:
    """A record keeps its vector's float16 values, a marker byte and the CRC-32 of the request's hash and
    the values (an odd length); one written before the check (the values alone) is read as it was."""
    import sqlite3
    import warnings
    import zlib

    from contextsieve.agent.usage import example_hash

    path = tmp_path / "history.sqlite"
    v = np.random.default_rng(5).standard_normal(384).astype(np.float32)
    UsageLog(path, model="m").record("a", "undo the checkout deploy", [ROLLBACK], vector=v)
    db = sqlite3.connect(path)
    (blob,) = db.execute("SELECT vector FROM examples").fetchone()
    raw = (v / np.linalg.norm(v)).astype("<f2").tobytes()
    h = example_hash("undo the checkout deploy")
    assert blob == raw + b"\x01" + zlib.crc32(h.encode() + raw).to_bytes(4, "little")
    db.execute("UPDATE examples SET vector = substr(vector, 1, 768)")  # as an earlier version wrote it
    db.commit()
    db.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (kept,) = UsageLog(path, model="m").records("a", 5, dim=384)[ROLLBACK]
    assert kept.vector is not None and kept.vector.tobytes() == raw


def test_a_history_file_that_is_no_database_leaves_selection_working(
    tmp_path: Path,
    int8,  # noqa: ANN001
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from contextsieve.cli.main import main
    from contextsieve.errors import EmbeddingCacheError, UsageLogWarning

    path = tmp_path / "history.sqlite"
    junk = np.random.default_rng(3).integers(0, 256, 50_000, dtype=np.uint8).tobytes()
    path.write_bytes(junk)
    advice = r"not a database; to start anew, move the file aside \(it holds the learned history of every agent"
    with pytest.warns(UsageLogWarning, match=advice + r".*\. Selection goes on without the learned history"):
        engine = _engine(_agent_file(tmp_path / "agent.yaml"), int8, tmp_path, history=path)
        engine.index()
    assert engine.store.examples == {} and engine.store.misses == {}
    chosen = engine.session(tool_top_n=1, keyword_weight=0.0).build_request("rerun the release pipeline")
    assert [e.key for e in chosen.context.entries if e.key.kind is ItemKind.TOOL] == [RERUN]
    with pytest.raises(EmbeddingCacheError, match="not a database"):  # recording says so (hooks fail open on it)
        engine.record_tool_calls("rerun the release pipeline", [RERUN])
    assert path.read_bytes() == junk  # neither repaired nor replaced: the user decides
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(tmp_path))  # the command that forgets says what to do instead
    assert main(["history", str(tmp_path / "agent.yaml"), "--forget"]) == 1
    assert "not a database; to start anew, move the file aside" in capsys.readouterr().err
    assert path.read_bytes() == junk
