"""An agent on folders this user may not write (a read-only root file system, an edge machine's image):
selection works, the agent is found by the registry (moved since), its learned history is read,
nothing is written, and each fallback is a warning; a stash store there is read (stats, namespaces,
export, retrieval) and refuses writes with the library's error.

The processes run with the data and cache folders made read-only. As root, whom file modes do not
stop, they run without the capabilities that override them (``setpriv``, as in
``tests/kernels/test_compiled.py``); where that cannot be done the test is skipped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.read_only import prefix as _prefix
from tests.helpers.read_only import set_writable as _set_writable
from tests.helpers.read_only import setting as _setting
from tests.helpers.read_only import tree as _tree

RECORD = """
import json
from contextsieve import Engine
engine = Engine.from_file(AGENT)
keys = [t.key for t in engine.agent.tools if t.key.name in ("read_file", "git_log")]
engine.record_tool_calls("show me the log of the notes file", keys)
print(json.dumps(sorted(str(k) for k in keys)))
"""

READ = """
import json, warnings
from contextsieve import Engine
from contextsieve.errors import EmbeddingCacheError
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    engine = Engine.from_file(AGENT)
    request = engine.session().build_request("show me the log of the notes file")
    counts = engine.store.usage().counts(engine.store.usage_scope)
    try:
        engine.record_tool_calls("another request", [engine.agent.tools[0].key])
        refused = ""
    except EmbeddingCacheError as e:
        refused = str(e)
print(json.dumps({
    "tools": len(request.tools),
    "counts": {str(k): v for k, v in counts.items()},
    "warnings": [(type(w.message).__name__, str(w.message)) for w in caught],
    "refused": refused,
}))
"""


def test_read_only_data_and_cache_folders_select_read_the_history_and_write_nothing(tmp_path: Path) -> None:
    prefix = _prefix()
    data, cache = tmp_path / "data", tmp_path / "cache"
    cache.mkdir()
    agent, env = _setting(tmp_path, data=data)

    def run(args: list[str], cache_dir: Path, with_prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*with_prefix, *args],
            env={**env, "CONTEXTSIEVE_CACHE": str(cache_dir)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )

    recorded = run([sys.executable, "-c", f"AGENT = {str(agent)!r}\n" + RECORD], tmp_path / "writable-cache")
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    keys = json.loads(recorded.stdout.strip().splitlines()[-1])
    assert len(keys) == 2
    moved = tmp_path / "moved"  # the agent's folder moved since: found by the registry, read without writing
    moved.mkdir()
    agent = agent.rename(moved / "agent.yaml")
    setup = f"AGENT = {str(agent)!r}\n"
    try:
        _set_writable(data, False)
        _set_writable(cache, False)
        before = _tree(data)
        read = run([sys.executable, "-c", setup + READ], cache, prefix)
        assert read.returncode == 0, read.stderr[-3000:]
        got = json.loads(read.stdout.strip().splitlines()[-1])
        # selection worked, and read the history the writable run recorded
        assert got["tools"] > 0
        assert {k: got["counts"].get(k) for k in keys} == {k: 1 for k in keys}
        # recording into it is refused with the library's error, naming the file
        assert "history.sqlite" in got["refused"]
        # each fallback said so: the model graph and the embedding cache kept in memory
        kinds = [k for k, _ in got["warnings"]]
        texts = " | ".join(m for _, m in got["warnings"])
        assert kinds.count("CacheFolderWarning") == 2, texts
        assert "graph" in texts and "embedding cache" in texts and "CONTEXTSIEVE_CACHE" in texts
        assert "UsageLogWarning" not in kinds, texts
        assert kinds.count("AgentRegistryWarning") == 1 and "(moved)" in texts and "read without writing" in texts
        listed = run([sys.executable, "-m", "contextsieve", "history", str(agent)], cache, prefix)
        assert listed.returncode == 0, listed.stderr[-3000:]
        for key in keys:
            assert f"{key}\t1 examples\t0 misses" in listed.stdout
        # the list of every agent's history reads the registry without writing too (it named no file)
        every = run([sys.executable, "-m", "contextsieve", "history"], cache, prefix)
        assert every.returncode == 0 and every.stderr == "", every.stderr[-3000:]
        (line,) = every.stdout.splitlines()[1:-1]
        assert line.startswith("agent:") and "\t2 examples\t0 misses\t" in line and "\tagent '" in line, line
        assert "Traceback" not in read.stderr + listed.stderr
        # nothing was written: no -shm or -wal beside the history, no cache files
        assert _tree(data) == before
        assert not any(cache.iterdir())
    finally:
        _set_writable(data, True)
        _set_writable(cache, True)


FILL_STORE = """
from contextsieve import StashStore
with StashStore.open(STORE) as store:
    store.stash(["We decided to ship the release on Friday.", "The cat sleeps on the sofa."], session="team")
"""

READ_STORE = """
import json
from contextsieve import StashStore
from contextsieve.errors import StashError
with StashStore.open(STORE, create=False) as store:
    hits = store.retrieve("when do we ship the release?", session="team", top_k=1)
    try:
        store.stash(["one more"], session="team")
        refused = ""
    except StashError as e:
        refused = str(e)
    print(json.dumps({"segments": store.stats()["segments"], "top": hits[0].segment.text, "refused": refused}))
"""


def test_a_stash_in_a_read_only_folder_is_read_and_refuses_writes(tmp_path: Path) -> None:
    prefix = _prefix()
    data = tmp_path / "data"
    _, env = _setting(tmp_path, data=data, cache=tmp_path / "cache")
    store = data / "team.db"

    def run(args: list[str], with_prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*with_prefix, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)

    setup = f"STORE = {str(store)!r}\n"
    filled = run([sys.executable, "-c", setup + FILL_STORE])
    assert filled.returncode == 0, filled.stderr[-3000:]
    out = tmp_path / "out"
    out.mkdir()
    try:
        _set_writable(data, False)
        before = _tree(data)
        read = run([sys.executable, "-c", setup + READ_STORE], prefix)
        assert read.returncode == 0, read.stderr[-3000:]
        got = json.loads(read.stdout.strip().splitlines()[-1])
        assert got["segments"] == 2 and "Friday" in got["top"]
        assert "readonly" in got["refused"] and str(store) in got["refused"]
        listed = run([sys.executable, "-m", "contextsieve", "stash", "namespaces", str(store)], prefix)
        assert listed.returncode == 0 and listed.stdout.startswith("team\t2 segments"), listed.stdout + listed.stderr
        exported = run(
            [sys.executable, "-m", "contextsieve", "stash", "export", str(store), str(out / "team.jsonl")], prefix
        )
        assert exported.returncode == 0, exported.stderr[-3000:]
        assert len((out / "team.jsonl").read_text(encoding="utf-8").splitlines()) >= 2
        assert _tree(data) == before
    finally:
        _set_writable(data, True)


SELECT_NEW = """
import json, warnings
from contextsieve import Engine
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    engine = Engine.from_file(AGENT, history=False)
    first = engine.session().build_request("roll the deploy back to yesterday's build")
    again = engine.session().build_request("roll the deploy back to yesterday's build")
print(json.dumps({
    "same": [t["name"] for t in first.tools] == [t["name"] for t in again.tools],
    "warnings": [(type(w.message).__name__, str(w.message)) for w in caught],
}))
"""


def test_a_read_only_embedding_cache_another_process_holds_open_is_read_and_not_written(tmp_path: Path) -> None:
    """Found by probing: a cache folder copied (or made read-only) while a process held its SQLite files
    open keeps their ``-shm`` file, so the cache opens, and its first write raised "attempt to write a
    readonly database" out of every request. It is read, and writes are skipped with one warning."""
    import sqlite3

    prefix = _prefix()
    cache = tmp_path / "cache"
    agent, env = _setting(tmp_path, data=tmp_path / "data", cache=cache)
    code = f"AGENT = {str(agent)!r}\n" + SELECT_NEW
    filled = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert filled.returncode == 0, filled.stderr[-3000:]
    held = sqlite3.connect(cache / "embeddings.sqlite")  # another process holds it: -shm and -wal stay
    try:
        held.execute("SELECT count(*) FROM vectors").fetchone()
        assert (cache / "embeddings.sqlite-shm").exists()
        _set_writable(cache, False)
        before = _tree(cache)
        text = agent.read_text(encoding="utf-8")  # a rule the cache has no vectors or plan of
        agent.write_text(
            text.replace(
                "rules:\n",
                "rules:\n  - name: rollbacks\n    description: How to roll a deploy back\n    priorityLevel: 60\n"
                "    text: Roll back to the last green build and say which one.\n    include: agent\n",
                1,
            ),
            encoding="utf-8",
        )
        newer = code.replace("yesterday's build", "the build of last Tuesday")  # texts the cache lacks
        run = subprocess.run(
            [*prefix, sys.executable, "-c", newer], env=env, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, run.stderr[-3000:]
        got = json.loads(run.stdout.strip().splitlines()[-1])
        assert got["same"]
        cache_said = [m for k, m in got["warnings"] if k == "CacheFolderWarning" and "embedding cache" in m]
        assert len(cache_said) == 1 and "readonly" in cache_said[0], got["warnings"]
        assert _tree(cache) == before
    finally:
        held.close()
        _set_writable(cache, True)


def test_a_data_folder_that_cannot_be_entered_is_warned_of_not_a_traceback(tmp_path: Path) -> None:
    """Found by probing: a data folder of mode 000 raised a bare ``PermissionError`` out of
    ``Engine.from_file`` (the registry asked whether its file exists)."""
    prefix = _prefix()
    data = tmp_path / "data"
    agent, env = _setting(tmp_path, data=data)
    data.chmod(0)
    try:
        picked = subprocess.run(
            [*prefix, sys.executable, "-m", "contextsieve", "select", str(agent), "where is my parcel"],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        listed = subprocess.run(
            [*prefix, sys.executable, "-m", "contextsieve", "history", str(agent)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        data.chmod(0o755)
    assert picked.returncode == 0, picked.stderr[-3000:]
    assert "warning: cannot open the agent registry" in picked.stderr and "Permission denied" in picked.stderr
    assert listed.returncode == 1
    assert "error: cannot open the usage log" in listed.stderr and "Permission denied" in listed.stderr
    assert "Traceback" not in picked.stderr + listed.stderr


SECRET = "The Lisbon office closes early on 24 December."


async def _serve_calls(params: Any, stash: bool) -> dict[str, Any]:
    """What ``serve`` offers and answers: its tool names, a selection, and (``stash``) a retrieve and a
    refused stash."""
    from mcp import Client

    from tests.helpers.mcp_results import refused, result

    out: dict[str, Any] = {}
    async with Client(params, read_timeout_seconds=300) as c:
        out["tools"] = sorted(t.name for t in (await c.list_tools()).tools)
        out["selected"] = result(await c.call_tool("select_context", {"message": "where is my parcel"}))
        if stash:
            got = result(await c.call_tool("retrieve_stashed_context", {"query": "when does the Lisbon office close"}))
            out["found"] = [s["text"] for s in got["segments"]]
            out["refused"] = await refused(
                c.call_tool("stash_context", {"segments": [{"text": "one more"}]}), "readonly"
            )
    return out


def test_serve_on_a_read_only_data_folder_reads_the_agents_stash_or_serves_without_one(tmp_path: Path) -> None:
    """Found by probing: ``serve AGENT`` on a read-only data folder did not start ("cannot use the stash
    folder ...: Permission denied; move that file away ..."): its default store was opened for writing.
    Now an existing store is read (retrieval works, a stash is refused with the error), and where the
    agent has none, serve starts without the stash tools; each is said on stderr."""
    import anyio
    from mcp import Client, StdioServerParameters

    prefix = _prefix()
    data, empty = tmp_path / "data", tmp_path / "empty"
    agent, env = _setting(tmp_path, data=data, cache=tmp_path / "cache")
    empty.mkdir()

    def params(with_prefix: tuple[str, ...], folder: Path) -> StdioServerParameters:
        command = [*with_prefix, sys.executable, "-m", "contextsieve", "serve", str(agent), "--offline"]
        return StdioServerParameters(
            command=command[0], args=command[1:], env={**env, "CONTEXTSIEVE_DATA": str(folder)}, cwd=str(tmp_path)
        )

    async def fill() -> None:
        from tests.helpers.mcp_results import result

        async with Client(params((), data), read_timeout_seconds=300) as c:
            result(await c.call_tool("stash_context", {"segments": [{"text": SECRET}]}))

    anyio.run(fill)
    assert len(list((data / "stash").glob("*.db"))) == 1
    try:
        _set_writable(data, False)
        _set_writable(empty, False)
        before = _tree(data)
        got = anyio.run(_serve_calls, params(prefix, data), True)
        assert got["found"][:1] == [SECRET]
        assert "may not be written" in got["refused"] or "readonly" in got["refused"]
        assert got["selected"]["items"] or got["selected"]
        assert "stash_context" in got["tools"]
        assert _tree(data) == before
        bare = anyio.run(_serve_calls, params(prefix, empty), False)
        assert "select_context" in bare["tools"]
        assert not [t for t in bare["tools"] if "stash" in t], bare["tools"]
        said = subprocess.run(
            [*prefix, sys.executable, "-m", "contextsieve", "serve", str(agent), "--offline"],
            input="",
            env={**env, "CONTEXTSIEVE_DATA": str(empty)},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert said.returncode == 0, said.stderr[-3000:]
        assert "serving without the stash tools" in said.stderr and "move that file away" not in said.stderr
        assert not any(empty.iterdir())
    finally:
        _set_writable(data, True)
        _set_writable(empty, True)
