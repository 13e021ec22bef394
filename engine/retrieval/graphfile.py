"""The one file format of a chunk index's HNSW graph, saved in a folder beside what holds the
vectors (the embedded stash keeps it next to its SQLite file), so that opening a large store does not
build the graph again (about a minute at 100,000 chunk vectors, ten at 1M).

Layout: a folder (``<store>.hnsw`` for a stash) holding ``graph-<sha256 prefix>.bin`` (hnswlib's
own file) and ``state.npz`` (a magic, the sha256 of the rest, then an npz: a JSON header with the
format, vector width, graph settings and the graph file's name, size and sha256; and per group the
graph held when it was saved, its key, chunk count and vector digest). ``state.npz`` is
replaced atomically and names its graph by content hash, so a reader sees a whole old pair or a whole
new pair; a lock file (``flock``) keeps two processes from saving or loading at the same moment.

A graph is trusted only as far as it is checked: one whose file does not match the recorded size and
sha256, or that was built with other settings or for vectors of another width, is not loaded (a
:class:`GraphFileWarning` says why and the index builds a new graph, which is then saved). Groups
added, changed or removed since the save (by another process, or after the last save of a process
that was killed) are found by comparing keys and vector digests with the index's and are added to or
deleted from the loaded graph, so it always holds exactly the index's live chunk vectors.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import warnings
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from contextsieve.errors import GraphFileWarning
from contextsieve.fileio import atomic_write_bytes
from contextsieve.models.weights import sha256_file
from contextsieve.retrieval.chunks import ChunkIndex
from contextsieve.retrieval.hnsw import import_hnswlib

__all__ = ["graph_folder", "save_graph", "load_graph"]

_MAGIC = b"CSGRAPH1"
_FORMAT = 2  # 2: labels hold the key in their low bits (chunks.graph_label)
_STATE = "state.npz"


def graph_folder(store: Path) -> Path:
    """Where the graph of the store file ``store`` is saved (``<store>.hnsw``)."""
    return store.with_name(store.name + ".hnsw")


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: saves are still atomic, only not serialised
        yield
        return
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _header(index: ChunkIndex) -> dict[str, object]:
    return {
        "format": _FORMAT,
        "dim": index.dim,
        "m": index.config.hnsw_m,
        "ef_construction": index.config.ef_construction,
    }


def save_graph(index: ChunkIndex, folder: Path) -> None:
    """Write ``index``'s graph and what it holds into ``folder`` (see the module docstring).

    Raises:
        OSError: the folder or a file in it cannot be written (nothing of the previous save is lost).
    """
    graph = index.graph
    if graph is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        tmp = folder / f".graph-{os.getpid()}-{secrets.token_hex(4)}.tmp"
        try:
            graph.save_index(str(tmp))
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
            sha = sha256_file(tmp)
            name = f"graph-{sha[:16]}.bin"
            size = tmp.stat().st_size
            os.replace(tmp, folder / name)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        rows, counts, digests = index.graph_contents()
        head = {**_header(index), "graph": name, "bytes": size, "sha256": sha}
        buf = io.BytesIO()
        np.savez(
            buf,
            header=np.frombuffer(json.dumps(head).encode(), np.uint8),
            rows=rows,
            counts=counts,
            digests=digests,
        )
        body = buf.getvalue()
        atomic_write_bytes(folder / _STATE, _MAGIC + hashlib.sha256(body).digest() + body, follow_symlinks=False)
        for old in folder.glob("graph-*.bin"):
            if old.name != name:
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()
        for stale in folder.glob(".graph-*.tmp"):  # left by a killed saver (saves hold the lock)
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
    index.graph_changes = 0


def _state(folder: Path, index: ChunkIndex) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray] | str:
    """The saved state, or why it cannot be used."""
    data = (folder / _STATE).read_bytes()
    if data[:8] != _MAGIC:
        return "its state file is not a contextsieve graph state (or of another format)"
    digest, body = data[8:40], data[40:]
    if hashlib.sha256(body).digest() != digest:
        return "its state file fails its sha256 check"
    try:
        z = np.load(io.BytesIO(body), allow_pickle=False)
        head = json.loads(bytes(z["header"]).decode())
        rows, counts, digests = z["rows"], z["counts"], z["digests"]
    except (KeyError, ValueError, TypeError, OSError, EOFError, zipfile.BadZipFile) as e:
        return f"its state file is unreadable ({type(e).__name__})"
    if not isinstance(head, dict) or any(head.get(k) != v for k, v in _header(index).items()):
        return f"it was saved with other settings ({head!r:.200})"
    if rows.dtype != np.int64 or counts.dtype != np.int64 or digests.dtype != np.dtype("S16"):
        return "its state arrays have the wrong types"
    if not rows.shape == counts.shape == digests.shape or rows.ndim != 1:
        return "its state arrays do not match"
    name = head.get("graph")
    if not isinstance(name, str) or not name.startswith("graph-") or "/" in name or "\\" in name:
        return "its state names no graph file"
    return head, rows, counts, digests


def load_graph(index: ChunkIndex, folder: Path) -> int | None:
    """Give ``index`` the graph saved in ``folder``, brought up to date with the index; returns the
    groups added to or removed from it, or None when there is no usable saved graph (a
    :class:`GraphFileWarning` says why when one was there but could not be used)."""
    if not (folder / _STATE).is_file():
        return None
    hnswlib = import_hnswlib()
    with _locked(folder):
        try:
            found = _state(folder, index)
            if isinstance(found, str):
                problem = found
            else:
                head, rows, counts, digests = found
                path = folder / str(head["graph"])
                if not path.is_file() or path.stat().st_size != head["bytes"]:
                    problem = f"its graph file {path.name} is missing or of the wrong size"
                elif sha256_file(path) != head["sha256"]:
                    problem = f"its graph file {path.name} fails its sha256 check"
                else:
                    graph = hnswlib.Index(space="ip", dim=index.dim)
                    graph.load_index(str(path), max_elements=max(2 * index.live_chunks, int(counts.sum()), 1024))
                    return index.adopt_graph(graph, rows, counts, digests)
        except (OSError, RuntimeError, MemoryError) as e:
            problem = f"it cannot be read ({type(e).__name__}: {e})"
    warnings.warn(
        f"the saved HNSW graph in {folder} is not used: {problem}; a new graph is built (and saved)",
        GraphFileWarning,
        stacklevel=4,
    )
    return None
