"""The crash harness: writers that write in a loop in a forked child and acknowledge each write, the
checks that open what a killed writer left as a user would, and :func:`run`, which forks, kills with
SIGKILL at random moments and counts kills, acknowledged writes, writes lost, corrupt files and temp
files. Shared by ``tests/robustness/test_crash.py`` (a short run) and ``python -m benchmarks.robustness.crash``
(its docstring says what each writer writes and how it is checked); ``HashEmbedder`` also serves
``benchmarks.robustness.tamper``.
"""

from __future__ import annotations

import os
import random
import select
import signal
import sqlite3
import sys
import tempfile
import time
import warnings
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from contextsieve.agent.agentfile import example_agent_path, load_agent, save_agent
from contextsieve.agent.items import IncludeMode, Reference
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, GraphFileWarning
from contextsieve.fileio import atomic_write_bytes
from contextsieve.models.cache import ModelCache
from contextsieve.retrieval.cache import EmbeddingCache
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig
from contextsieve.retrieval.graphfile import load_graph, save_graph
from contextsieve.session.messages import Message
from contextsieve.stash.store import StashStore

Ack = Callable[[int], None]


# -- writers (run in the child) ------------------------------------------------------------------


def _version_of_agent(path: Path) -> int:
    agent = load_agent(path)
    return int(agent.system_prompt.split()[0][1:])


def w_agent_save(folder: Path, ack: Ack) -> None:
    path = folder / "tsagent.yaml"
    agent = load_agent(path if path.exists() else example_agent_path())
    k = _version_of_agent(path) if path.exists() else 0
    big = " ".join(f"Paragraph {i} of the handbook says what to do in case {i}." for i in range(1600))
    agent.upsert(Reference("handbook", big, "the long handbook", 900, IncludeMode.MANUAL))
    while True:
        k += 1
        agent.system_prompt = f"v{k} You are a careful agent."
        save_agent(agent, path)
        ack(k)


def _unit(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    v = rng.standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _cache_texts(k: int) -> list[str]:
    return [f"batch {k} text {i}" for i in range(50)]


def w_embedding_cache(folder: Path, ack: Ack) -> None:
    cache = EmbeddingCache(folder / "embeddings.sqlite", "crash/1")
    marker = folder / "cache-next"
    k = int(marker.read_text() or 0) if marker.exists() else 0
    rng = np.random.default_rng(os.getpid())
    while True:
        k += 1
        atomic_write_bytes(marker, str(k).encode())  # tells the next child where to go on
        cache.put(_cache_texts(k), _unit(rng, 50, 32))
        ack(k)


_GRAPH = IndexConfig(backend="hnsw")


def _graph_version(k: int, *, defer: bool) -> ChunkIndex:
    """The chunk index of version ``k`` of the graph writer (its vectors follow from ``k``)."""
    rng = np.random.default_rng(k)
    n = int(rng.integers(500, 3000))
    index = ChunkIndex(32, _GRAPH)
    index.defer_hnsw = defer
    index.add([(k * 10_000 + i, v[None]) for i, v in enumerate(_unit(rng, n, 32))])
    return index


def w_graph_save(folder: Path, ack: Ack) -> None:
    k = int((folder / "version").read_text()) if (folder / "version").exists() else 0
    while True:
        k += 1
        save_graph(_graph_version(k, defer=False), folder / "graph")
        atomic_write_bytes(folder / "version", str(k).encode())  # where the next writer starts (not checked)
        ack(k)


def w_session_save(folder: Path, ack: Ack) -> None:
    path = folder / "session.json"
    engine = Engine(load_agent(example_agent_path()), embedder=None, cache_dir=False)
    session = engine.load_session(path) if path.exists() else engine.session()
    k = int(session.history[-1].content.split()[1]) if session.history else 0
    while True:
        k += 1
        session.history.append(Message("user", f"message {k} " + "words " * 200))
        session.history.append(Message("assistant", f"reply {k}"))
        del session.history[:-400]
        session.save(path)
        ack(k)


def w_model_build(folder: Path, ack: Ack) -> None:
    from contextsieve import Embedder

    while True:
        Embedder(variant="int8", cache_dir=folder / "models", rebuild=True)
        ack(1)


class HashEmbedder:
    """A deterministic 32-d embedder (word hashes), so the stash writer needs no model in the child."""

    model_id = "crash-hash/1"

    def embed(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        out = np.zeros((len(texts), 32), np.float32)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, zlib.crc32(w.encode()) % 32] += 1.0
            out[i, 0] += 0.5
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def count_tokens(self, texts: list[str]) -> list[int]:
        return [len(t.split()) + 2 for t in texts]


def _stash_texts(k: int) -> list[str]:
    return [f"batch {k} segment {i} " + "about the crash test " * (1 + i * 20) for i in range(5)]


def w_stash(folder: Path, ack: Ack) -> None:
    with StashStore.open(folder / "stash.db", HashEmbedder()) as store:
        k = int(str(store.stats()["segments"])) // 5
        while True:
            k += 1
            store.stash([{"text": t, "id": f"b{k}-{i}"} for i, t in enumerate(_stash_texts(k))], session="crash")
            ack(k)
            store.retrieve(f"batch {k // 2} segment", session="crash", top_k=3)


def w_stash_mcp(folder: Path, ack: Ack) -> None:
    """The stash written through MCP: ``stash_context`` calls of the SDK's in-memory client to
    :func:`~contextsieve.mcp_server.server.build_server` (acknowledged when the tool's result came back)."""
    import anyio
    from mcp import Client

    from contextsieve.mcp_server.common import ServeConfig
    from contextsieve.mcp_server.server import build_server

    embedder = HashEmbedder()
    engine = Engine(load_agent(example_agent_path()), embedder=embedder, cache_dir=folder / "engine-cache")
    with StashStore.open(folder / "stash-mcp.db", embedder) as store:
        start = int(str(store.stats()["segments"])) // 5

        async def main() -> None:
            server = build_server(engine, ServeConfig(stash_session="crash"), stash=store)
            async with Client(server, mode="legacy") as client:
                k = start
                while True:
                    k += 1
                    segments = [{"text": t, "id": f"b{k}-{i}"} for i, t in enumerate(_stash_texts(k))]
                    r = await client.call_tool("stash_context", {"segments": segments})
                    if r.is_error:
                        raise RuntimeError(str(r.content)[:300])
                    ack(k)

        anyio.run(main)


# -- checks (run in the parent) ------------------------------------------------------------------


def c_agent_save(folder: Path) -> int | None:
    path = folder / "tsagent.yaml"
    return _version_of_agent(path) if path.exists() else None


def _integrity(db: Path) -> None:
    """SQLite's own check of a database file; a corrupt one is an error."""
    con = sqlite3.connect(db)
    ok = con.execute("PRAGMA integrity_check").fetchone()[0]
    con.close()
    if ok != "ok":
        raise ContextSieveError(f"integrity_check: {ok}")


def c_embedding_cache(folder: Path, acked: int, rng: random.Random, history: list[int]) -> int | None:
    db = folder / "embeddings.sqlite"
    if not db.exists():
        return None
    _integrity(db)
    cache = EmbeddingCache(db, "crash/1")
    try:
        # the last acknowledged batch and three earlier acknowledged ones (a batch whose put never
        # returned may be missing: it was never acknowledged)
        batches = [acked] + [rng.choice(history) for _ in range(3)] if acked else []
        for k in batches:
            got = cache.get(_cache_texts(k), dim=32)
            if len(got) != 50:
                return k - 1  # an acknowledged batch is missing: report it as lost
        if cache.rejected:
            raise ContextSieveError(f"{cache.rejected} rows failed verification")
    finally:
        cache.close()
    return acked


def c_graph_save(folder: Path, acked: int) -> int | None:
    """The version of the saved graph: the acknowledged one or the next (written when killed)."""
    if not (folder / "graph" / "state.npz").exists():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphFileWarning)  # a graph that cannot be used is corrupt
        for k in (acked, acked + 1) if acked else (1,):
            index = _graph_version(k, defer=True)
            if load_graph(index, folder / "graph") == 0:
                return k
    return acked - 1 if acked else None  # a whole older version: the acknowledged one was lost


def c_session_save(folder: Path) -> int | None:
    path = folder / "session.json"
    if not path.exists():
        return None
    engine = Engine(load_agent(example_agent_path()), embedder=None, cache_dir=False)
    history = engine.load_session(path).history
    return int(history[-1].content.split()[1]) if history else 0


def c_model_build(folder: Path) -> int | None:
    cache = ModelCache(folder / "models")
    entries = sorted((folder / "models" / "models").glob("*.json")) if (folder / "models" / "models").exists() else []
    found = None
    for entry in entries:
        if cache.load(entry) is not None:
            found = 1
    return found


def c_stash(folder: Path, acked: int, history: list[int], name: str = "stash.db") -> int | None:
    db = folder / name
    if not db.exists():
        return None
    _integrity(db)
    with StashStore.open(db, HashEmbedder()) as store:
        want = sorted(set(history))
        ids = [f"b{k}-{i}" for k in want for i in range(5)]
        got = {s.id: s.text for s in store.get(ids, session="crash")} if ids else {}
        for k in want:
            texts = _stash_texts(k)
            if any(got.get(f"b{k}-{i}") != texts[i] for i in range(5)):
                return k - 1  # an acknowledged batch is missing or changed
        if store.stats()["failed_checksum"]:  # stats loads and verifies every stored vector (no kernel
            # runs here: the parent forks the next writer, and a fork after GNU OpenMP is unsafe)
            raise ContextSieveError("stored vectors fail their checksum")
    return acked


WRITERS: dict[str, tuple[Callable[[Path, Ack], None], float]] = {
    "agent_save": (w_agent_save, 0.6),
    "embedding_cache": (w_embedding_cache, 0.3),
    "graph_save": (w_graph_save, 0.8),
    "session_save": (w_session_save, 0.4),
    "model_build": (w_model_build, 9.0),
    "stash": (w_stash, 0.6),
    "stash_mcp": (w_stash_mcp, 1.5),
}
SHARE = {
    "agent_save": 0.24,
    "embedding_cache": 0.24,
    "graph_save": 0.24,
    "session_save": 0.24,
    "model_build": 0.04,
    "stash": 0.24,
    "stash_mcp": 0.24,
}


def _fork(name: str, folder: Path) -> tuple[int, int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write until killed
        os.close(r)
        code = 0
        try:
            WRITERS[name][0](folder, lambda k: os.write(w, f"{k}\n".encode()))
        except BaseException as e:  # noqa: BLE001 - reported through the exit code
            os.write(2, f"writer {name} failed: {e!r}\n".encode())
            code = 3
        os._exit(code)
    os.close(w)
    return pid, r


def _read_acks(fd: int, timeout: float) -> list[int]:
    data = b""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        ready, _, _ = select.select([fd], [], [], max(0.0, left))
        if not ready:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return [int(x) for x in data.split()]


def _temps(folder: Path) -> int:
    return sum(1 for p in folder.rglob(".*.tmp"))


def _final_write(name: str, folder: Path) -> None:
    """One write of the kind the writer makes, in this process, to the same file."""
    if name == "agent_save" and (folder / "tsagent.yaml").exists():
        save_agent(load_agent(folder / "tsagent.yaml"), folder / "tsagent.yaml")
    elif name == "embedding_cache" and (folder / "cache-next").exists():
        atomic_write_bytes(folder / "cache-next", (folder / "cache-next").read_bytes())
    elif name == "graph_save" and (folder / "version").exists():
        save_graph(_graph_version(int((folder / "version").read_text()), defer=False), folder / "graph")
    elif name == "session_save" and (folder / "session.json").exists():
        engine = Engine(load_agent(example_agent_path()), embedder=None, cache_dir=False)
        engine.load_session(folder / "session.json").save(folder / "session.json")
    elif name == "stash" and (folder / "stash.db").exists():
        with StashStore.open(folder / "stash.db", HashEmbedder()) as store:
            store.stash(["one more"], session="final")
    elif name == "model_build":
        from contextsieve import Embedder

        Embedder(variant="int8", cache_dir=folder / "models", rebuild=True).close()


def _check(name: str, folder: Path, acked: int, rng: random.Random, history: list[int]) -> int | None:
    if name == "embedding_cache":
        return c_embedding_cache(folder, acked, rng, history)
    if name == "stash":
        return c_stash(folder, acked, history)
    if name == "stash_mcp":
        return c_stash(folder, acked, history, "stash-mcp.db")
    if name == "graph_save":
        return c_graph_save(folder, acked)
    return {"agent_save": c_agent_save, "session_save": c_session_save}.get(name, c_model_build)(folder)


def run(kills: int, seed: int, names: list[str]) -> dict[str, Counter[str]]:
    rng = random.Random(seed)
    stats: dict[str, Counter[str]] = {n: Counter() for n in names}
    last_ack = dict.fromkeys(names, 0)
    acked_all: dict[str, list[int]] = {n: [] for n in names}
    weights = [SHARE[n] for n in names]
    with tempfile.TemporaryDirectory(prefix="contextsieve-crash-") as tmp:
        folders = {n: Path(tmp) / n for n in names}
        for f in folders.values():
            f.mkdir()
        for i in range(kills):
            name = rng.choices(names, weights)[0]
            folder, window = folders[name], WRITERS[name][1]
            pid, fd = _fork(name, folder)
            acks = _read_acks(fd, rng.uniform(0.0, window) + (1.0 if name == "model_build" else 0.3))
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            acks += _read_acks(fd, 0.0)
            os.close(fd)
            s = stats[name]
            s["kills"] += 1
            if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3:
                s["writer errors"] += 1
            s["acked"] += len(acks)
            if acks:
                last_ack[name] = max(last_ack[name], max(acks))
                acked_all[name] += acks
            s["temps at kill"] += _temps(folder)
            try:
                version = _check(name, folder, last_ack[name], rng, acked_all[name])
            except (ContextSieveError, OSError, ValueError, IndexError, KeyError, sqlite3.Error) as e:
                s["corrupt"] += 1
                print(f"kill {i} {name}: corrupt: {e!r}"[:300], file=sys.stderr)
                continue
            if last_ack[name] and (version is None or version < last_ack[name]):
                s["lost"] += 1
                print(f"kill {i} {name}: acknowledged {last_ack[name]}, found {version}", file=sys.stderr)
        for name in names:  # one clean write each: a killed writer's temp files must be gone after it
            try:
                _final_write(name, folders[name])
            except (ContextSieveError, OSError, ValueError) as e:
                stats[name]["corrupt"] += 1
                print(f"final write {name}: {e!r}"[:300], file=sys.stderr)
            stats[name]["temps left"] = _temps(folders[name])
    return stats
