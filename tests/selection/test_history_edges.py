"""The history at its edges: processes that create its file at once, an agent passed to ``Engine`` after
``load_agent``, a late outcome of an earlier task, a user's words and the embedding cache, a tool found
through history at the include score, and arguments of the wrong kind."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import yaml

from contextsieve import Engine, load_agent
from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.agent.registry import AgentRegistry
from contextsieve.agent.usage import UsageLog, example_hash
from contextsieve.errors import EmbeddingCacheError, InputError

PARCEL = ItemKey(ItemKind.TOOL, "track_parcel", "helpdesk")
MARK = "Quokkaflute-7731"


def _agent_file(path: Path, name: str = "desk", prompt: str = "You help customers.") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tools = {
        "track_parcel": {"description": "Track a parcel by its tracking number"},
        "reply_to_customer": {"description": "Send a reply to the customer on their ticket"},
        "refund_payment": {"description": "Refund a customer's payment in full or in part"},
        "deploy_service": {"description": "Deploy a version of a service to production"},
        "rollback_service": {"description": "Roll a service back to its previous version"},
        "fetch_url": {"description": "Fetch a web page by URL and return its content as markdown"},
    }
    servers = {
        server: {
            "type": "stdio",
            "command": f"{server}-mcp",
            "serverToolDefaults": {"include": "agent"},
            "tools": {t: {**tools[t], "inputSchema": {"type": "object"}} for t in names},
        }
        for server, names in {
            "helpdesk": ["track_parcel", "reply_to_customer"],
            "payments": ["refund_payment"],
            "ops": ["deploy_service", "rollback_service"],
            "web": ["fetch_url"],
        }.items()
    }
    path.write_text(yaml.safe_dump({"name": name, "systemPrompt": prompt, "mcpServers": servers}))
    return path


def _record_at_once(path: str, barrier, out) -> None:  # noqa: ANN001
    barrier.wait()
    try:
        UsageLog(Path(path), keep_text=True).record("agent", "where is my parcel", [PARCEL])
        out.put("ok")
    except Exception as e:  # noqa: BLE001 - the parent asserts what each process saw
        out.put(repr(e))


def test_processes_that_create_the_history_file_at_once_all_record(tmp_path: Path) -> None:
    """Four processes opening a new history file together: each records (it used to fail in 12 of 20
    trials with "duplicate column name: vector" or "database is locked", and told the user to move a
    healthy file aside)."""
    ctx = multiprocessing.get_context("fork")
    for trial in range(4):
        path = tmp_path / f"h{trial}.sqlite"
        barrier, out = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_record_at_once, args=(str(path), barrier, out)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [out.get(timeout=5) for _ in procs] == ["ok"] * 4
        assert UsageLog(path, keep_text=True).counts("agent") == {PARCEL: 1}


def test_a_path_that_is_no_regular_file_is_refused_and_nothing_is_written_beside_it(tmp_path: Path) -> None:
    fifo = tmp_path / "history.fifo"
    os.mkfifo(fifo)
    with pytest.raises(EmbeddingCacheError, match="not a regular file"):
        UsageLog(fifo).counts("agent")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.fifo"]


def test_a_data_path_that_is_a_file_is_named_not_read_as_an_empty_history(tmp_path: Path) -> None:
    data = tmp_path / "data"  # $CONTEXTSIEVE_DATA naming a file
    data.write_text("not a folder")
    for path in (data / "history.sqlite", data / "deeper" / "history.sqlite"):
        with pytest.raises(EmbeddingCacheError, match="data is not a folder"):
            UsageLog(path).counts("agent")
        with pytest.raises(EmbeddingCacheError, match="data is not a folder"):
            UsageLog(path, keep_text=True).record("agent", "track my parcel", [PARCEL])
    assert data.read_text() == "not a folder"


def test_an_agent_passed_to_engine_keeps_its_history_under_its_file_not_its_name(
    tmp_path: Path,
    int8,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    """Two agent files of one name, each loaded with ``load_agent`` and passed to ``Engine``: what one
    learns is not the other's (it was kept under the bare name), and ``from_file`` finds it again."""
    data = tmp_path / "data"
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(data))
    p = _agent_file(tmp_path / "p" / "agent.yaml")
    q = _agent_file(tmp_path / "q" / "agent.yaml", prompt="You run the shop's operations.")
    first = Engine(load_agent(p), embedder=int8, cache_dir=False)
    first.record_tool_calls("where is my parcel", ["helpdesk:track_parcel"])
    other = Engine(load_agent(q), embedder=int8, cache_dir=False)
    assert other.store.usage().counts(other.store.usage_scope) == {}
    again = Engine.from_file(p, embedder=int8, cache_dir=False, registry=AgentRegistry(data / "agents.sqlite"))
    assert again.store.usage().counts(again.store.usage_scope) == {PARCEL: 1}
    assert again.store.forget_examples("helpdesk:track_parcel") == 1


def test_forget_examples_takes_a_tool_key_or_its_text_and_refuses_anything_else(
    tmp_path: Path,
    int8,  # noqa: ANN001
) -> None:
    for history in (tmp_path / "h.sqlite", False):
        engine = Engine(load_agent(_agent_file(tmp_path / "a.yaml")), embedder=int8, cache_dir=False, history=history)
        for text in ("helpdesk:track_parcel", "tool:helpdesk:track_parcel"):
            engine.record_tool_calls("where is my parcel", [text])
            assert engine.store.forget_examples(text) == 1
        engine.record_tool_calls("where is my parcel", [PARCEL])
        for bad in ("", ":", 3, ItemKey(ItemKind.RULE, "tone")):
            with pytest.raises(InputError):
                engine.store.forget_examples(bad)  # type: ignore[arg-type]
        assert engine.store.usage().counts(engine.store.usage_scope) == {PARCEL: 1}


def test_arguments_of_the_wrong_kind_are_input_errors_and_record_nothing(tmp_path: Path, int8) -> None:  # noqa: ANN001
    path = _agent_file(tmp_path / "a.yaml")
    engine = Engine(load_agent(path), embedder=int8, cache_dir=False, history=False)
    session = engine.session()
    request = session.build_request("where is my parcel?")
    for call in (
        lambda: engine.record_tool_calls(None, ["helpdesk:track_parcel"]),  # type: ignore[arg-type]
        lambda: engine.record_tool_calls(b"where", ["helpdesk:track_parcel"]),  # type: ignore[arg-type]
        lambda: engine.record_tool_calls("where is my parcel", None),  # type: ignore[arg-type]
        lambda: engine.record_tool_calls("where is my parcel", b"helpdesk:track_parcel"),  # type: ignore[arg-type]
        lambda: session.record_outcome(request, None),  # type: ignore[arg-type]
        lambda: session.record_reply("a request", "ok"),  # type: ignore[arg-type]
        lambda: session.record_reply(request, None),  # type: ignore[arg-type]
        lambda: session.record_reply(request, "\ud800"),
        lambda: Engine(str(path)),  # type: ignore[arg-type]
    ):
        with pytest.raises(InputError):
            call()
    assert engine.store.usage().counts(engine.store.usage_scope) == {}
    assert session.history == []


def test_the_usage_log_refuses_what_is_no_agent_tool_or_vector_and_writes_nothing(tmp_path: Path) -> None:
    """Issue (a hostile probe): the log's own methods raised a bare UnicodeEncodeError for a lone surrogate
    in an agent's or tool's name, ValueError for a vector of text and TypeError for ``per_tool="5"``, and
    kept a 2-D or complex vector flattened or cast."""
    import numpy as np

    log = UsageLog(tmp_path / "h.sqlite")
    vector = np.ones(8)
    odd = ItemKey(ItemKind.TOOL, "x\udc80", "s")
    for call in (
        lambda: log.record("desk\ud800", "where is my parcel", [PARCEL], vector=vector),
        lambda: log.record(None, "where is my parcel", [PARCEL], vector=vector),  # type: ignore[arg-type]
        lambda: log.record("desk", "where is my parcel", [odd], vector=vector),
        lambda: log.record("desk", "where is my parcel", [PARCEL], vector="abc"),  # type: ignore[arg-type]
        lambda: log.record("desk", "where is my parcel", [PARCEL], vector=np.ones((2, 4))),
        lambda: log.record("desk", "where is my parcel", [PARCEL], vector=np.ones(8) * (1 + 1j)),
        lambda: log.records("desk", "5"),  # type: ignore[arg-type]
        lambda: log.records("desk\ud800", 5),
        lambda: log.forget("desk\ud800"),
        lambda: log.forget("desk", odd),
    ):
        with pytest.raises(InputError):
            call()
    assert not (tmp_path / "h.sqlite").exists()  # nothing written, not even the file


def test_a_late_outcome_of_an_earlier_task_is_learned_under_that_task(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """The outcome of a step told after the next task began: its calls are examples of its own task's
    message (they were recorded under the task under way, and steered its requests)."""
    engine = Engine(load_agent(_agent_file(tmp_path / "a.yaml")), embedder=int8, cache_dir=False, history=False)
    session = engine.session()
    first = session.build_request("Refund order 1234, the parcel was lost")
    session.record_reply(first, "Refunded.")
    step = session.build_request("Now tell the customer it is done")
    session.record_reply(step, "Told.")
    assert step.context.settings["task_step"] == 1 and step.task == "Refund order 1234, the parcel was lost"
    session.new_task()
    session.build_request("Deploy version 2.5 of the payments service")
    got = session.record_outcome(step, ["helpdesk:reply_to_customer"])
    assert got == {"examples": ["tool:helpdesk:reply_to_customer"], "misses": [], "failed": []}
    kept = engine.store.usage().examples(engine.store.usage_scope, 10)
    reply = ItemKey(ItemKind.TOOL, "reply_to_customer", "helpdesk")
    assert kept == {reply: ("Refund order 1234, the parcel was lost",)}


def test_no_recorded_request_s_words_reach_the_embedding_cache(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """An in-memory history keeps the request's text, and its tool's chunk plan held it: the plan was
    stored in the embedding cache on disk. Such plans are not stored, and those an earlier version
    stored are deleted when the cache is next used."""
    cache = tmp_path / "cache"
    path = _agent_file(tmp_path / "a.yaml")
    engine = Engine(load_agent(path), embedder=int8, cache_dir=cache, history=False)
    engine.record_tool_calls(f"please refund {MARK} order 55 now", ["payments:refund_payment"])
    engine.session().build_request("the customer wants tracking for the parcel")
    for f in cache.iterdir():
        assert MARK.encode() not in f.read_bytes(), f
    db = sqlite3.connect(cache / "embeddings.sqlite")
    model = db.execute("SELECT model FROM plans").fetchone()[0]
    db.execute("INSERT INTO plans VALUES (?, 'old', ?)", (model, f'[["example request: {MARK}", "x", 1]]'.encode()))
    db.commit()
    fresh = Engine(load_agent(path), embedder=int8, cache_dir=cache, history=False)
    fresh.record_tool_calls("where is my parcel", ["helpdesk:track_parcel"])
    fresh.session().build_request("the customer wants tracking for the parcel")
    assert db.execute("SELECT COUNT(*) FROM plans WHERE key = 'old'").fetchone() == (0,)
    assert db.execute("SELECT COUNT(*) FROM plans").fetchone()[0] > 0  # the others stay
    db.close()


def test_a_forgotten_request_leaves_no_words_nor_digest_on_disk(
    tmp_path: Path,
    int8,
    monkeypatch: pytest.MonkeyPatch,  # noqa: ANN001
) -> None:
    """A hostile probe found, after `history --forget`: the request's text (``remember_requests``) or its
    digest in the history file's write-ahead log while another process had it open, and in its freed
    pages with SQLite's default ``secure_delete`` (off; this machine's build turns it on, so every
    connection here starts with it off, as SQLite's own default); and the digest and vector of every
    recorded request in the embedding cache, which a forget never touches, even with the history in
    memory. Now a request's words go to the cache only where the log keeps them too."""
    connect = sqlite3.connect

    def default_build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        db = connect(*args, **kwargs)
        db.execute("PRAGMA secure_delete=0")
        return db

    monkeypatch.setattr(sqlite3, "connect", default_build)
    cache = tmp_path / "cache"
    path = _agent_file(tmp_path / "a.yaml")
    digest = example_hash(f"please refund {MARK} order 55 now").encode()
    for remember, history in ((False, True), (False, False), (True, True)):
        data = tmp_path / f"data-{remember}-{history}"
        monkeypatch.setenv("CONTEXTSIEVE_DATA", str(data))
        engine = Engine.from_file(path, embedder=int8, cache_dir=cache, history=history, remember_requests=remember)
        engine.session().build_request("the customer wants tracking for the parcel")  # the items' vectors cached
        rows = connect(cache / "embeddings.sqlite").execute("SELECT COUNT(*) FROM vectors").fetchone()[0]
        engine.record_tool_calls("where is my parcel", ["helpdesk:track_parcel"])  # the page is not freed
        engine.record_tool_calls(f"please refund {MARK} order 55 now", ["payments:refund_payment"])
        embedded = engine.store.embedded_texts
        engine.record_tool_calls(f"please refund {MARK} order 55 now", ["helpdesk:reply_to_customer"])
        assert engine.store.embedded_texts == embedded  # one model call per message (memo or cache)
        engine.session().build_request("refund the order")
        added = connect(cache / "embeddings.sqlite").execute("SELECT COUNT(*) FROM vectors").fetchone()[0] - rows
        assert added == (2 if remember else 0)  # with the text kept, its vector is cached as an item's
        if not history:
            continue
        log = engine.store.usage().path
        assert log is not None and log.parent == data
        other = UsageLog(log, keep_text=remember, model=engine.store.usage().model)  # another process's open log
        assert other.counts(engine.store.usage_scope)
        assert engine.store.forget_examples("payments:refund_payment") == 1
        assert engine.store.forget_examples("helpdesk:reply_to_customer") == 1
        for f in data.iterdir():
            if f.name.startswith("history.sqlite"):
                assert MARK.encode() not in f.read_bytes() and digest not in f.read_bytes(), f
        assert other.counts(engine.store.usage_scope) == {PARCEL: 1}


def test_a_forget_in_another_process_reaches_a_running_engine(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """Issue (a hostile probe): after `contextsieve history AGENT --forget`, a running server went on
    offering the forgotten request's tool until it recorded something or restarted. Another engine on
    the file (another connection, as another process) forgets; the running one reads its records again
    at its next request, and only then (a record elsewhere changes nothing here)."""
    path = _agent_file(tmp_path / "a.yaml")
    history = tmp_path / "history.sqlite"
    running = Engine(load_agent(path), embedder=int8, cache_dir=False, history=history)
    running.record_tool_calls(f"please sort out {MARK}", ["web:fetch_url"])
    offered = [str(e.key) for e in running.select(f"please sort out {MARK}").context.entries]
    assert "tool:web:fetch_url" in offered
    other = Engine(load_agent(path), embedder=int8, cache_dir=False, history=history)
    reads = running.store.usage().all_records
    calls = []
    running.store.usage().all_records = lambda *a, **k: calls.append(1) or reads(*a, **k)  # type: ignore[method-assign]
    other.record_tool_calls("where is my parcel", ["helpdesk:track_parcel"])
    running.select("where is my parcel")
    assert not calls  # a record elsewhere: nothing read again
    assert other.store.forget_examples("web:fetch_url") == 1
    again = [str(e.key) for e in running.select(f"please sort out {MARK}").context.entries]
    assert calls == [1] and "tool:web:fetch_url" not in again
    running.select("where is my parcel")
    assert calls == [1]  # once per forget
    assert running.store.forget_examples("helpdesk:track_parcel") == 1  # its own forget reads them again itself
    calls.clear()
    other.record_tool_calls("refund the order", ["payments:refund_payment"])
    running.select("refund the order")
    assert not calls  # its own forget is not taken for another's once the file changes


def test_a_tool_found_through_history_at_the_include_score_adds_a_place(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """History adds a place instead of taking one, also when the example matches at the include score
    (it took the place of the request's last own tool)."""
    path = _agent_file(tmp_path / "a.yaml")
    message = "Look up what Stripe's status page says right now."
    cold = Engine(load_agent(path), embedder=int8, cache_dir=False, history=False)
    before = [t["name"] for t in cold.session(tool_top_n=3).build_request(message).tools]
    warm = Engine(load_agent(path), embedder=int8, cache_dir=False, history=False)
    warm.record_tool_calls("What does the Stripe status page say at the moment?", ["web:fetch_url"])
    request = warm.session(tool_top_n=3, context_include_score=0.7).build_request(message)
    entry = next(e for e in request.context.entries if e.key == ItemKey(ItemKind.TOOL, "fetch_url", "web"))
    assert entry.score >= 0.7
    after = [t["name"] for t in request.tools]
    assert len(before) == 3 and set(before) <= set(after) and len(after) == 4 and after[0] == "web_fetch_url"


def test_files_that_never_end_are_refused_unread(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """A session file that is a FIFO waited for a writer forever; a history path with a NUL raised a
    plain ValueError. Both are the library's errors now, at once."""
    from contextsieve.errors import SessionFileError
    from contextsieve.session.session import Session

    engine = Engine(load_agent(_agent_file(tmp_path / "a.yaml")), embedder=int8, cache_dir=False, history=False)
    fifo = tmp_path / "session.fifo"
    os.mkfifo(fifo)
    with pytest.raises(SessionFileError, match="FIFO"):
        Session.load(fifo, engine.agent, engine.store)
    with pytest.raises(EmbeddingCacheError, match="null byte"):
        UsageLog(tmp_path / "a\x00b.sqlite", keep_text=True).record("agent", "where is my parcel", [PARCEL])


def test_a_task_of_no_visible_text_does_not_stop_its_steps_from_learning(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """A task message of zero-width characters only is accepted, and so is the outcome of its steps
    (learned under it): refusing it there jammed a gateway conversation for every later task."""
    engine = Engine(load_agent(_agent_file(tmp_path / "a.yaml")), embedder=int8, cache_dir=False, history=False)
    session = engine.session()
    session.record_reply(session.build_request("\u200b\u2060"), "?")
    step = session.build_request("my parcel is late, track it")
    assert session.record_outcome(step, ["helpdesk:track_parcel"])["examples"] == ["tool:helpdesk:track_parcel"]


def test_the_plan_cleanup_never_waits_for_another_process(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """Deleting plans an earlier version stored with a request's words is a write: under another
    process's write lock it is skipped (done on a later use), and the request goes on at once."""
    import time

    cache = tmp_path / "cache"
    path = _agent_file(tmp_path / "a.yaml")
    Engine(load_agent(path), embedder=int8, cache_dir=cache, history=False).session().build_request("refund it")
    db = sqlite3.connect(cache / "embeddings.sqlite", isolation_level=None)
    model = db.execute("SELECT model FROM plans").fetchone()[0]
    db.execute("INSERT INTO plans VALUES (?, 'old', ?)", (model, f'[["example request: {MARK}", "x", 1]]'.encode()))
    db.execute("BEGIN IMMEDIATE")  # another process's write under way
    try:
        start = time.monotonic()
        fresh = Engine(load_agent(path), embedder=int8, cache_dir=cache, history=False)
        got = fresh.session().build_request("hi there")
        assert time.monotonic() - start < 10 and got.message == "hi there"
    finally:
        db.execute("ROLLBACK")
    assert db.execute("SELECT COUNT(*) FROM plans WHERE key = 'old'").fetchone() == (1,)  # left for a later use
    db.close()


def test_a_saved_session_of_any_size_loads(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """Session.load reads only a regular file, of any size: save writes no cap, so a long history over
    the 64 MiB of a file named on the command line loads (it was refused)."""
    from contextsieve.fileio import MAX_INPUT_BYTES
    from contextsieve.session.session import Session

    engine = Engine(load_agent(_agent_file(tmp_path / "a.yaml")), embedder=int8, cache_dir=False, history=False)
    session = engine.session()
    session.add_message("user", "where is my parcel?")
    saved = tmp_path / "session.json"
    session.save(saved)
    with saved.open("ab") as f:  # JSON allows whitespace after the value
        f.write(b" " * (MAX_INPUT_BYTES + 1))
    assert [m.content for m in Session.load(saved, engine.agent, engine.store).history] == ["where is my parcel?"]


def test_forgetting_is_all_or_nothing(tmp_path: Path) -> None:
    """Issue: `history --forget` deleted the examples, then failed on a damaged misses table and said so,
    with the examples gone (one autocommitted DELETE per table)."""
    path = tmp_path / "history.sqlite"
    log = UsageLog(path, keep_text=True)
    log.record("desk", "where is my parcel", [PARCEL])
    log.record("desk", "refund it", [PARCEL], "misses")
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE misses")
        db.execute("CREATE TABLE misses (x)")  # no agent column: the second DELETE fails
    db.close()  # damaged under the log's open connection (a new one is refused unread)
    with pytest.raises(EmbeddingCacheError, match="no such column: agent"):
        log.forget("desk", None, None)
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM examples").fetchone() == (1,)
    assert log.forget("desk", None, "examples") == 1  # the one kind alone still goes


def test_a_file_of_another_program_is_refused_unchanged(tmp_path: Path) -> None:
    """Issue: a history file of another schema was switched to WAL and given a misses table and two columns
    before the first query failed on it, even by a read."""
    path = tmp_path / "history.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE examples (id INTEGER PRIMARY KEY, body TEXT)")
        db.execute("INSERT INTO examples (body) VALUES ('mine')")
    db.close()
    before = path.read_bytes()
    log = UsageLog(path)
    for call in (lambda: log.counts("desk"), lambda: log.forget("desk", None, None)):
        with pytest.raises(EmbeddingCacheError) as e:
            call()
        assert str(e.value) == (
            f"the usage log {path} is not a contextsieve usage log (its table examples has the columns body, id): "
            "move that file aside for contextsieve to keep a history there"
        )
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.sqlite"]


def test_the_tally_counts_each_agent_and_tool_in_a_file_as_in_memory(tmp_path: Path) -> None:
    """``UsageLog.tally`` (what ``contextsieve history`` lists) counts, per agent and tool, the examples, the
    misses, the records that keep text and the newest time, whatever model made them, in a file as in
    memory; a file that does not exist holds nothing and is not made. ``rescope(keep=True)`` copies."""
    deploy = ItemKey(ItemKind.TOOL, "deploy_service", "ops")
    path = tmp_path / "data" / "history.sqlite"
    assert UsageLog(path).tally() == {} and not path.exists()
    v = np.ones(8, dtype=np.float32)
    logs = [UsageLog(path, keep_text=True, model="m"), UsageLog()]
    for log in logs:
        log.record("desk", "where is my parcel", [PARCEL], vector=v)
        log.record("desk", "ship it", [deploy], vector=v)
        log.record("desk", "where is my parcel", [deploy], "misses", vector=v)
        log.record("night", "deploy the fix", [deploy], vector=v)
    UsageLog(path, model="other").record("desk", "undo it", [deploy], vector=v)  # another model, no text
    file, memory = logs[0].tally(), logs[1].tally()
    assert set(file) == set(memory) == {"desk", "night"}
    assert {k: t[:3] for k, t in memory["desk"].items()} == {PARCEL: (1, 0, 1), deploy: (1, 1, 2)}
    assert {k: t[:3] for k, t in file["desk"].items()} == {PARCEL: (1, 0, 1), deploy: (2, 1, 2)}
    assert file["night"][deploy][:3] == memory["night"][deploy][:3] == (1, 0, 1)
    assert file["desk"][deploy].newest >= file["desk"][PARCEL].newest > 0
    for log in logs:  # a copy, counted alike in a file and in memory; a record the target holds stays its own
        assert log.rescope("night", "day", keep=True) == 1
        assert set(log.tally()) == {"desk", "night", "day"}
        assert log.counts("day") == log.counts("night") == {deploy: 1}
        assert log.rescope("night", "day", keep=True) == 0
        assert log.rescope("night", "day") == 0 and set(log.tally()) == {"desk", "day"}
