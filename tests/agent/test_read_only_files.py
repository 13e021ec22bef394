"""Files an edge image or another user left that this user may not read or write, beside folders it may:
each is read where it can be, built around where it cannot (with a warning), named with what to do
where neither works, and never left in a state that keeps a later writer out.

Found by probing the read-only folders of ``test_read_only_folders.py`` as a hostile user. Run as root
without the capabilities that override file modes (:mod:`tests.helpers.read_only`)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from tests.helpers.read_only import prefix, run, set_writable, setting, tree

CLI = [sys.executable, "-m", "contextsieve"]
ASK = "show me the log of the notes file"


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One Numba cache folder for the module's processes: the kernels are compiled once."""
    folder = tmp_path_factory.mktemp("numba")
    folder.chmod(0o755)
    return folder


def _picked(out: str) -> str:
    """What ``select`` printed, without its timing."""
    return re.sub(r"\(\d+ ms\)", "", out)


def _env(env: dict[str, str], kernels: Path, **more: Path) -> dict[str, str]:
    return {**env, "NUMBA_CACHE_DIR": str(kernels), **{k: str(v) for k, v in more.items()}}


def test_build_fails_where_it_cannot_keep_what_it_builds_and_checks_a_filled_read_only_cache(
    tmp_path: Path, kernels: Path
) -> None:
    """``contextsieve build`` on a cache it may not write exited 0, printed ``-> None``, built each graph
    twice and said the kernels went into the cache. Its job is to fill the cache: that is an error now,
    and a filled read-only cache (an image's) is checked and passes."""
    pre = prefix()
    cache, no_kernels = tmp_path / "cache", tmp_path / "no-kernels"
    agent, env = setting(tmp_path, data=tmp_path / "data", cache=cache)
    env = _env(env, kernels)
    no_kernels.mkdir()
    set_writable(cache, False)
    set_writable(no_kernels, False)
    try:
        empty = run([*CLI, "build", "--variant", "int8"], env, tmp_path, pre)
        assert empty.returncode == 1, empty.stdout + empty.stderr
        assert "error: contextsieve build cannot fill the cache" in empty.stderr and str(cache) in empty.stderr
        assert "-> None" not in empty.stdout and empty.stderr.count("building the") == 1
        assert "in memory: the model cache may not be written" in empty.stderr
        assert not any(cache.iterdir())
        set_writable(cache, True)
        filled = run([*CLI, "build"], env, tmp_path)  # every candidate graph, the measured choice, the kernels
        assert filled.returncode == 0, filled.stderr[-3000:]
        set_writable(cache, False)
        before = tree(cache)
        checked = run([*CLI, "build"], env, tmp_path, pre)
        assert checked.returncode == 0, checked.stderr[-3000:]
        assert "int8: loaded from cache" in checked.stdout and "cached choice" in checked.stdout
        assert "scoring kernels: loaded from the cache" in checked.stdout
        measured = run([*CLI, "build", "--force"], env, tmp_path, pre)  # a choice it cannot keep
        assert measured.returncode == 1, measured.stdout
        assert "cannot keep the measured variant choice" in measured.stderr
        no_room = run([*CLI, "build", "--variant", "int8"], {**env, "NUMBA_CACHE_DIR": str(no_kernels)}, tmp_path, pre)
        assert no_room.returncode == 1, no_room.stdout
        assert "cannot keep the scoring kernels" in no_room.stderr and str(no_kernels) in no_room.stderr
        assert "$NUMBA_CACHE_DIR naming one" in no_room.stderr and not re.search(r"no-kernels/\.?tmp", no_room.stderr)
        assert "compiling" not in no_room.stdout
        assert tree(cache) == before and not any(no_kernels.iterdir())
    finally:
        set_writable(cache, True)
        set_writable(no_kernels, True)


def test_a_model_cache_this_user_may_not_read_is_built_around_and_a_file_in_its_way_is_named(
    tmp_path: Path, kernels: Path
) -> None:
    """A cached graph of mode 000 raised a bare ``PermissionError``, a models folder of mode 000 said
    "cache entry ... unreadable; rebuild with rebuild=True or delete it" (neither helps). Now the graph
    is built again: it replaces the unreadable file where the folder may be written (a readable file),
    and is used from memory with a warning where it may not. A cache path under a regular file names it."""
    from contextsieve.errors import ModelCacheError
    from contextsieve.models.embedder import Embedder

    pre = prefix()
    cache = tmp_path / "cache"
    agent, env = setting(tmp_path, data=tmp_path / "data", cache=cache)
    env = _env(env, kernels)
    select = [*CLI, "select", str(agent), ASK]
    first = run(select, env, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (graph,) = (cache / "models").glob("*.onnx")
    graph.chmod(0)
    rebuilt = run(select, env, tmp_path, pre)
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert "Traceback" not in rebuilt.stderr and "warning" not in rebuilt.stderr
    assert stat.S_IMODE(graph.stat().st_mode) == 0o644 and _picked(rebuilt.stdout) == _picked(first.stdout)
    models = cache / "models"
    models.chmod(0)
    try:
        around = run(select, env, tmp_path, pre)
    finally:
        models.chmod(0o755)
    assert around.returncode == 0, around.stderr[-3000:]
    assert "warning: cannot keep the built" in around.stderr and "Permission denied" in around.stderr
    assert "rebuild=True" not in around.stderr and _picked(around.stdout) == _picked(first.stdout)
    in_the_way = tmp_path / "notes.txt"
    in_the_way.write_text("a file, not a folder", encoding="utf-8")
    with pytest.raises(ModelCacheError, match=r"notes\.txt is a file, not a folder; set \$CONTEXTSIEVE_CACHE"):
        Embedder(variant="int8", cache_dir=in_the_way / "cache")


def _history_env(tmp_path: Path, kernels: Path) -> tuple[Path, Path, dict[str, str]]:
    data = tmp_path / "data"
    agent, env = setting(tmp_path, data=data, cache=tmp_path / "cache")
    env = _env(env, kernels)
    code = (
        "from contextsieve import Engine\n"
        f"engine = Engine.from_file({str(agent)!r})\n"
        "engine.record_tool_calls(MESSAGE, [t.key for t in engine.agent.tools if t.key.name == 'git_log'])\n"
    )
    recorded = run([sys.executable, "-c", f"MESSAGE = {ASK!r}\n" + code], env, tmp_path)
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    return agent, data, env


def test_read_only_history_files_an_empty_one_one_with_an_unmerged_log_and_one_of_mode_444(
    tmp_path: Path, kernels: Path
) -> None:
    """In a read-only data folder an empty ``history.sqlite`` failed with "no such table", and a
    write-ahead log without its ``-shm`` file with a bare "unable to open database file". A history of
    mode 444 in a writable folder was read through SQLite files made beside it, read-only as the file
    was, that kept every writer out once the file was made writable again."""
    pre = prefix()
    agent, data, env = _history_env(tmp_path, kernels)
    history = [*CLI, "history", str(agent)]

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "history.sqlite").write_bytes(b"")
    set_writable(empty, False)
    try:
        listed = run(history, {**env, "CONTEXTSIEVE_DATA": str(empty)}, tmp_path, pre)
    finally:
        set_writable(empty, True)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "history in" in listed.stdout and "examples" not in listed.stdout

    logged = tmp_path / "logged"
    logged.mkdir()
    held = sqlite3.connect(data / "history.sqlite")  # a change left in the log, then the folder copied
    try:
        held.execute("PRAGMA wal_autocheckpoint = 0")
        held.execute("UPDATE examples SET at = at + 1")
        held.commit()
        for name in ("history.sqlite", "history.sqlite-wal", "agents.sqlite"):
            (logged / name).write_bytes((data / name).read_bytes())
    finally:
        held.close()
    assert (logged / "history.sqlite-wal").stat().st_size > 0
    set_writable(logged, False)
    try:
        unmerged = run(history, {**env, "CONTEXTSIEVE_DATA": str(logged)}, tmp_path, pre)
    finally:
        set_writable(logged, True)
    assert unmerged.returncode == 1
    assert "write-ahead log" in unmerged.stderr and "history.sqlite-shm, which is missing" in unmerged.stderr
    assert "Traceback" not in unmerged.stderr

    for name in ("history.sqlite", "agents.sqlite"):
        (data / name).chmod(0o444)
    try:
        read = run(history, env, tmp_path, pre)
        assert read.returncode == 0, read.stderr[-3000:]
        assert "tool:git:git_log\t1 examples\t0 misses" in read.stdout
        assert sorted(p.name for p in data.iterdir()) == ["agents.sqlite", "history.sqlite"]
    finally:
        for name in ("history.sqlite", "agents.sqlite"):
            (data / name).chmod(0o644)
    held = sqlite3.connect(data / "history.sqlite")  # a process holds it: its -shm is there, then made 444
    try:
        held.execute("SELECT count(*) FROM examples").fetchone()
        (data / "history.sqlite-shm").chmod(0o444)
        forgot = run([*CLI, "history", str(agent), "--forget"], env, tmp_path, pre)
    finally:
        (data / "history.sqlite-shm").chmod(0o644)
        held.close()
    assert forgot.returncode == 1 and "Traceback" not in forgot.stderr
    assert "history.sqlite-shm may not be written by this user; it holds no data: delete it" in forgot.stderr
    again = "from contextsieve import Engine\n" + (
        f"engine = Engine.from_file({str(agent)!r})\n"
        "engine.record_tool_calls('another request', [t.key for t in engine.agent.tools if t.key.name == 'git_log'])\n"
        "print(engine.store.usage().counts(engine.store.usage_scope))\n"
    )
    written = run([sys.executable, "-c", again], env, tmp_path, pre)
    assert written.returncode == 0, written.stderr[-3000:]
    assert ": 2}" in written.stdout


def test_read_only_store_and_embedding_cache_files_are_read_with_nothing_made_beside_them(
    tmp_path: Path, kernels: Path
) -> None:
    """A stash store of mode 444 opened to read (``stash stats``) still made ``-shm`` and ``-wal`` files
    beside it; a filled embedding cache in a read-only folder (an image's) was not read at all."""
    pre = prefix()
    cache = tmp_path / "cache"
    agent, data, env = _history_env(tmp_path, kernels)
    store = data / "team.db"
    fill = (
        "from contextsieve import StashStore\n"
        f"with StashStore.open({str(store)!r}) as s:\n"
        "    s.stash(['We ship on Friday.'], session='team')\n"
    )
    assert run([sys.executable, "-c", fill], env, tmp_path).returncode == 0
    store.chmod(0o444)
    try:
        stats = run([*CLI, "stash", "stats", str(store)], env, tmp_path, pre)
        rebuilt = run([*CLI, "stash", "rebuild", str(store)], env, tmp_path, pre)  # nothing to re-embed
    finally:
        store.chmod(0o644)
    assert rebuilt.returncode == 0 and rebuilt.stdout.startswith("re-embedded 0 segments"), rebuilt.stderr[-3000:]
    assert stats.returncode == 0, stats.stderr[-3000:]
    assert json.loads(stats.stdout)["segments"] == 1
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("team")) == ["team.db"]
    shelf = tmp_path / "shelf"  # an export into a folder this user may not write names the file asked for
    shelf.mkdir(mode=0o555)
    try:
        exported = run([*CLI, "stash", "export", str(store), str(shelf / "team.jsonl")], env, tmp_path, pre)
        copied = run([*CLI, "stash", "migrate", str(store), str(shelf / "copy.db")], env, tmp_path, pre)
    finally:
        shelf.chmod(0o755)
    assert copied.returncode == 1  # SQLite said only "unable to open database file"
    assert f"cannot create the stash {shelf / 'copy.db'}: {shelf} may not be written by this user" in copied.stderr
    assert exported.returncode == 1
    assert f"cannot write the export {shelf / 'team.jsonl'}: Permission denied" in exported.stderr
    assert ".tmp" not in exported.stderr and not any(shelf.iterdir())

    read = (  # the texts embedded are counted: the items' vectors come from the cache, only the ask is embedded
        "import warnings\n"
        "from contextsieve import Engine\n"
        "from contextsieve.models.embedder import Embedder\n"
        "embedded, plain = [], Embedder.embed\n"
        "Embedder.embed = lambda self, texts, *a, **k: embedded.extend(texts) or plain(self, texts, *a, **k)\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        f"    engine = Engine.from_file({str(agent)!r}, history=False)\n"
        f"    print([t['name'] for t in engine.session().build_request({ASK!r}).tools])\n"
        "print(len(embedded), len(engine.agent.tools))\n"
        "for w in caught:\n"
        "    print(type(w.message).__name__, w.message)\n"
    )
    first = run([sys.executable, "-c", read], env, tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    set_writable(cache, False)
    before = tree(cache)
    try:
        again = run([sys.executable, "-c", read], env, tmp_path, pre)
    finally:
        set_writable(cache, True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[0] == first.stdout.splitlines()[0]
    embedded, tools = map(int, again.stdout.splitlines()[1].split())
    assert embedded <= 2 < tools, again.stdout
    said = [line for line in again.stdout.splitlines() if line.startswith("CacheFolderWarning")]
    assert len(said) == 1 and "embedding cache" in said[0] and "what it holds is still read" in said[0], said
    assert tree(cache) == before
    assert os.path.exists(cache / "embeddings.sqlite")


LONG_READER = """
import sys
from contextsieve import StashStore
with StashStore.open(STORE, create=False) as store:
    for _ in range(2):
        top = [h.segment.text for h in store.retrieve("when do we ship", session="team")][:1]
        print(store.stats()["segments"], top, flush=True)
        sys.stdin.readline()
"""


def test_a_long_reader_of_a_store_it_may_not_write_sees_what_a_writer_adds_later(tmp_path: Path, kernels: Path) -> None:
    """A store of mode 444 with no ``-wal`` and ``-shm`` beside it is opened as immutable (nothing may be
    made beside it); a reader that stays (``serve``) kept the rows it first saw after the owner added,
    renamed or deleted some, where SQLite leaves reads undefined. It opens the file again once it changed."""
    import subprocess

    from contextsieve import StashStore

    pre = prefix()
    _, env = setting(tmp_path, data=tmp_path / "data", cache=tmp_path / "cache")
    env = _env(env, kernels)
    store = tmp_path / "data" / "team.db"
    with StashStore.open(store) as s:
        s.stash(["The cat sleeps on the sofa."], session="team")
    store.chmod(0o444)
    reader = subprocess.Popen(
        [*pre, sys.executable, "-c", f"STORE = {str(store)!r}\n" + LONG_READER],
        env=env,
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdin is not None
        first = reader.stdout.readline()
        assert first.startswith("1 "), first + (reader.stderr.read() if reader.poll() is not None else "")
        with StashStore.open(store) as s:  # the owner (root here) writes the file
            s.stash(["We ship the release on Friday."], session="team")
        reader.stdin.write("\n")
        reader.stdin.flush()
        second = reader.stdout.readline()
        reader.stdin.write("\n")
        reader.stdin.close()
        assert reader.wait(timeout=300) == 0, reader.stderr.read()[-3000:]
    finally:
        if reader.poll() is None:
            reader.kill()
        store.chmod(0o644)
    assert second.startswith("2 ") and "Friday" in second, second


def test_empty_files_where_nothing_may_be_written_are_no_store_and_no_cache(tmp_path: Path, kernels: Path) -> None:
    """A zero-byte default stash store in a read-only folder stopped ``serve`` ("no stash store ...: a store
    is made by its first writer: serve"), and a zero-byte ``embeddings.sqlite`` of mode 444 stopped
    ``select``; each is what no file is there: serve goes on without the stash tools, select without
    the cache, each with a warning."""
    pre = prefix()
    cache, data = tmp_path / "cache", tmp_path / "data"
    agent, env = setting(tmp_path, data=data, cache=cache)
    env = _env(env, kernels)
    serve = [*CLI, "serve", str(agent), "--offline"]
    made = run(serve, env, tmp_path)  # the host leaves at once: the agent's default store is made
    assert made.returncode == 0, made.stderr[-3000:]
    (store,) = (data / "stash").glob("*.db")
    store.write_bytes(b"")
    set_writable(data / "stash", False)
    try:
        served = run(serve, env, tmp_path, pre)
    finally:
        set_writable(data / "stash", True)
    assert served.returncode == 0, served.stderr[-3000:]
    assert "serving without the stash tools" in served.stderr and "Traceback" not in served.stderr
    (cache / "embeddings.sqlite").write_bytes(b"")
    (cache / "embeddings.sqlite").chmod(0o444)
    try:
        picked = run([*CLI, "select", str(agent), ASK], env, tmp_path, pre)
    finally:
        (cache / "embeddings.sqlite").chmod(0o644)
    assert picked.returncode == 0, picked.stderr[-3000:]
    assert "warning: cannot open the embedding cache" in picked.stderr and "kept in memory" in picked.stderr
    assert (cache / "embeddings.sqlite").stat().st_size == 0


def test_the_files_beside_a_linked_database_are_looked_for_beside_its_target(tmp_path: Path) -> None:
    """SQLite makes a linked database's ``-wal`` and ``-shm`` beside the file the link points to; a
    leftover read-only ``-shm`` there was never named (they were looked for beside the link)."""
    from contextsieve.retrieval.cache import sqlite_files

    target = tmp_path / "real" / "history.sqlite"
    target.parent.mkdir()
    target.write_bytes(b"")
    link = tmp_path / "history.sqlite"
    link.symlink_to(target)
    assert sqlite_files(link) == (target, Path(f"{target}-wal"), Path(f"{target}-shm"))
