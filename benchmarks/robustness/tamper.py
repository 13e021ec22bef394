"""Flip bytes in the files contextsieve writes for itself and check that each flip is detected or harmless.

    python -m benchmarks.robustness.tamper [--flips 500] [--seed 1] [--kinds stash,graph]

For each file kind, one byte at a random position gets a random bit flipped (a fresh copy of the file
each time), then the file is opened as the library opens it. Outcomes: *detected* (a typed
:class:`~contextsieve.errors.ContextSieveError`, or for the embedding cache a row rejected by its
digest and embedded again), *harmless* (it opens and serves exactly what the untouched file served),
*silent* (it opens and serves something else: the target is 0), *untyped* (another exception: 0).
A model entry that no longer names an existing graph file counts as harmless: the model is built again.

Kinds: the saved HNSW graph of a chunk index (its state file and its graph file; a flip that makes
the graph unusable counts as detected when a :class:`GraphFileWarning` says so and the index then
serves what the untouched graph served, from a graph built again), a stash store (SQLite: its
segments read back, each session's listing (what the session index serves), three retrievals, then
each session's listing in pages of 4; a flip in stored vectors counts as detected when their checksum leaves them out
and every text, field and listing still reads as written), the embedding cache (SQLite), the built
model graph (``.onnx``) and its cache entry (``.json``). Agent and session files are the user's own
text (any edit is an edit, validated on load) and are fuzzed by ``benchmarks.robustness.fuzz`` instead.
``--kinds`` runs only the kinds whose names start with one of its comma-separated words (``stash``,
``graph``, ``embedding``, ``model``).
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

from contextsieve.errors import ContextSieveError, GraphFileWarning
from contextsieve.models.cache import ModelCache
from contextsieve.models.cpu import cpu_summary
from contextsieve.retrieval.cache import EmbeddingCache
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig
from contextsieve.retrieval.graphfile import load_graph, save_graph

Reader = Callable[[Path], object]


def _unit(n: int, d: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_files(folder: Path) -> dict[str, tuple[Path, Reader]]:
    """The untouched files and, per kind, what reading one serves (compared across flips)."""
    vectors = _unit(3000, 32, 1)
    groups = [(i, vectors[i : i + 1]) for i in range(3000)]
    saved = ChunkIndex(32, IndexConfig(backend="hnsw"))
    saved.add(groups)
    save_graph(saved, folder / "graph")
    queries = _unit(8, 32, 2)

    def read_graph(p: Path) -> object:
        index = ChunkIndex(32, IndexConfig(backend="hnsw"))
        index.defer_hnsw = True
        index.add(groups)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            load_graph(index, p.parent)
            index.finish_loading()
        found = [[s for s, _ in index.search(q[None], 10)] for q in queries]
        return ("rejected" if any(issubclass(w.category, GraphFileWarning) for w in seen) else "all", found)

    texts = [f"text {i}" for i in range(400)]
    cache = EmbeddingCache(folder / "embeddings.sqlite", "tamper/1")
    cache.put(texts, _unit(400, 32, 3))
    cache.close()

    def read_cache(p: Path) -> object:
        c = EmbeddingCache(p, "tamper/1")
        try:
            got = c.get(texts, dim=32)
            return (
                "rejected" if c.rejected or len(got) < len(texts) else "all",
                {i: v.tobytes() for i, v in got.items()},
            )
        finally:
            c.close()

    from contextsieve import Embedder

    Embedder(variant="int8", cache_dir=folder / "models")
    entry = next((folder / "models" / "models").glob("*.json"))
    onnx = next((folder / "models" / "models").glob("*.onnx"))

    def read_model(p: Path) -> object:
        got = ModelCache(folder / "models").load(entry)
        if got is None:
            return None
        data = got.path.read_bytes()
        return data[:64] + data[-64:]

    from contextsieve.stash.backend import Filters
    from contextsieve.stash.sqlite import SqliteConfig
    from contextsieve.stash.store import StashStore
    from tests.helpers.crash import HashEmbedder

    store_path = folder / "stash.db"
    plain = SqliteConfig(save_graph=False)
    with StashStore.open(store_path, HashEmbedder(), backend_config=plain) as store:
        for k in range(8):
            store.stash(
                [
                    {"text": f"note {k}-{i} about the crash test " * (1 + i), "topic": f"t{i}", "source": f"s{k}"}
                    for i in range(5)
                ],
                session=f"sess{k % 3}",
            )

    def read_stash(p: Path) -> object:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            with StashStore.open(p, HashEmbedder(), backend_config=plain) as st:
                sessions = [[x.id for x in st.list(session=f"sess{k}")] for k in range(3)]
                segs = st.backend.get(st.backend.select_ids(Filters()))
                listing = [(x.id, x.session, x.text, x.type, x.timestamp, x.topic, x.source, x.tokens) for x in segs]
                found = [[r.segment.id for r in st.retrieve(f"note {k} crash", session=f"sess{k}")] for k in range(3)]
                pages = [  # after a search: the store's in-memory table is loaded
                    [x.id for o in range(0, 20, 4) for x in st.list(session=f"sess{k}", limit=4, offset=o)]
                    for k in range(3)
                ]
                rejected = bool(st.backend.corrupt) or any("checksum" in str(w.message) for w in seen)
        return ("rejected" if rejected else "all", (listing, sessions, pages), found)

    return {
        "stash store (SQLite)": (store_path, read_stash),
        "graph state": (folder / "graph" / "state.npz", read_graph),
        "graph file": (next((folder / "graph").glob("graph-*.bin")), read_graph),
        "embedding cache": (folder / "embeddings.sqlite", read_cache),
        "model graph (.onnx)": (onnx, read_model),
        "model entry (.json)": (entry, read_model),
    }


def run(flips: int, seed: int, kinds: tuple[str, ...] = ()) -> dict[str, Counter[str]]:
    """Flip ``flips`` bits one at a time in each file kind (only those whose names start with one of
    ``kinds``, when given); the outcomes counted per kind."""
    rng = random.Random(seed)
    stats: dict[str, Counter[str]] = {}
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory(prefix="contextsieve-tamper-") as tmp:
        folder = Path(tmp)
        files = make_files(folder)
        for kind, (path, read) in files.items():
            if kinds and not kind.startswith(kinds):
                continue
            s = stats.setdefault(kind, Counter())
            original = path.read_bytes()
            backup = folder / "backup"
            backup.write_bytes(original)
            want = read(path)
            for _ in range(flips):
                data = bytearray(original)
                pos = rng.randrange(len(data))
                data[pos] ^= 1 << rng.randrange(8)
                for extra in path.parent.glob(path.name + "-*"):  # SQLite's -wal / -shm of the last try
                    extra.unlink()
                path.write_bytes(bytes(data))
                try:
                    got = read(path)
                except ContextSieveError:
                    s["detected"] += 1
                except Exception as e:  # noqa: BLE001 - what this benchmark counts
                    s["untyped"] += 1
                    print(f"{kind} byte {pos}: {e!r}"[:300], file=sys.stderr)
                else:
                    if kind == "embedding cache" and isinstance(got, tuple) and got[0] == "rejected":
                        clean = all(v == want[1][i] for i, v in got[1].items())  # type: ignore[index]
                        s["detected" if clean else "silent"] += 1
                    elif kind.startswith("stash") and isinstance(got, tuple) and got[0] == "rejected":
                        s["detected" if got[1] == want[1] else "silent"] += 1  # type: ignore[index]
                    elif kind.startswith("graph") and isinstance(got, tuple) and got[0] == "rejected":
                        s["detected" if got[1] == want[1] else "silent"] += 1  # type: ignore[index]
                    elif got == want or (kind.startswith("model") and got is None):
                        s["harmless"] += 1  # None: the entry names no graph file any more, so it is built again
                    else:
                        s["silent"] += 1
                        print(f"{kind} byte {pos}: served something else", file=sys.stderr)
                s["flips"] += 1
            shutil.copyfile(backup, path)
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flips", type=int, default=500, help="flips per file kind (default 500)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--kinds", default="", help="only the kinds whose names start with these comma-separated words (e.g. stash)"
    )
    args = ap.parse_args(argv)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    stats = run(args.flips, args.seed, kinds)
    only = f", kinds {','.join(kinds)}" if kinds else ""
    print(f"# tamper: {args.flips} flips per kind, seed {args.seed}{only}; {cpu_summary()}")
    cols = ["flips", "detected", "harmless", "silent", "untyped"]
    print(f"{'file':<22}" + "".join(f"{c:>10}" for c in cols))
    total: Counter[str] = Counter()
    for kind, s in stats.items():
        total.update(s)
        print(f"{kind:<22}" + "".join(f"{s[c]:>10}" for c in cols))
    print(f"{'all':<22}" + "".join(f"{total[c]:>10}" for c in cols))
    return 1 if total["silent"] or total["untyped"] else 0


if __name__ == "__main__":
    sys.exit(main())
