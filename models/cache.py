"""The on-disk cache of built models: atomic writes, content-addressed files, verified on every load.

Layout under the cache root (``$CONTEXTSIEVE_CACHE``, else ``$XDG_CACHE_HOME/contextsieve``, else
``~/.cache/contextsieve``)::

    models/<name>-<variant>-<output>-<key>.json      # entry: which .onnx, its sha256, provenance
    models/<name>-<variant>-<output>-<key>-<sha>.onnx
    weights/<path-hash>.json                         # memo of a weights file's sha256 by size + mtime

``key`` hashes the weights' sha256, the builder version, the variant and the output kind, so a new
model file or a new builder never reuses an old graph. The ``.onnx`` file is named by its own content
hash and written before the entry, each through a temp file + rename, so concurrent builders never
leave an entry that points at other bytes, and a reader never sees half a file. A build runs under an
exclusive lock on ``<entry>.lock`` (:meth:`ModelCache.build_lock`): of several processes that miss
the cache at once, one builds and the others wait and then load its file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from contextsieve.errors import ModelCacheError
from contextsieve.fileio import CACHE_ENV as CACHE_ENV  # kept importable from here (tests, the CLI)
from contextsieve.fileio import atomic_write_bytes
from contextsieve.fileio import default_cache_dir as default_cache_dir  # the cache root of every layer
from contextsieve.models.weights import sha256_file

__all__ = ["ModelCache", "CachedModel"]

#: Seconds a process waits for another one's build of the same model before giving up (a build
#: takes 5-20 s on 2 cores; the lock is released by the OS if the builder dies).
BUILD_LOCK_TIMEOUT = 600.0


@dataclass(frozen=True)
class CachedModel:
    """A verified model file of the cache (sessions load it by path: the bytes are never held in Python,
    which keeps about 30 MB off a loaded embedder), and whether it was built just now. A graph built where
    the cache cannot be written has no ``path`` and is used from ``data`` (its serialized bytes)."""

    path: Path | None
    weights_sha256: str
    built: bool
    build_seconds: float
    data: bytes | None = None

    @property
    def model(self) -> Path | bytes:
        """What a session loads: the file, or the bytes of a graph the cache could not keep."""
        if self.data is not None:
            return self.data
        assert self.path is not None
        return self.path


class ModelCache:
    """Stores built ONNX models under ``root`` (see the module docstring for the layout)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()

    def _not_a_folder(self, path: Path) -> str:
        blocked = next((p for p in reversed(path.parents) if os.path.exists(p) and not os.path.isdir(p)), path)
        return (
            f"cannot use the model cache {self.root}: {blocked} is a file, not a folder; set ${CACHE_ENV} to a "
            "folder (or move that file away)"
        )

    def writable(self) -> bool:
        """Whether a built graph can be kept: the cache's ``models`` folder, or the nearest folder of it that
        exists, may be written by this user."""
        folder = next((p for p in (self.root / "models", self.root, *self.root.parents) if os.path.exists(p)), None)
        ids = os.access in os.supports_effective_ids
        return folder is not None and os.access(folder, os.W_OK | os.X_OK, effective_ids=ids)

    def weights_sha256(self, weights: Path) -> str:
        """sha256 of a weights file, memoised by (real path, size, mtime) so loads skip the 90 MB hash."""
        weights = Path(weights).resolve()
        st = weights.stat()
        memo = self.root / "weights" / (hashlib.sha256(str(weights).encode()).hexdigest()[:24] + ".json")
        try:
            m = json.loads(memo.read_text())
            if m["size"] == st.st_size and m["mtime_ns"] == st.st_mtime_ns:
                return str(m["sha256"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        sha = sha256_file(weights)
        try:
            atomic_write_bytes(
                memo,
                follow_symlinks=False,
                data=json.dumps(
                    {"path": str(weights), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}
                ).encode(),
            )
        except OSError:
            pass  # a read-only cache still works; it just hashes again next time
        return sha

    def entry_path(self, stem: str, key_parts: dict[str, str]) -> Path:
        key = hashlib.sha256(json.dumps(key_parts, sort_keys=True).encode()).hexdigest()[:16]
        return self.root / "models" / f"{stem}-{key}.json"

    def load(self, entry: Path) -> CachedModel | None:
        """The verified model of ``entry``; ``None`` when absent.

        The file's sha256 is checked here, read in 1 MiB blocks, and the session then reads the same
        file: files are content-named and only ever replaced by rename, so what was checked is what loads.

        An entry or model file this user may not read is absent too: the graph is built again (and
        replaces it where the folder may be written).

        Raises :class:`ModelCacheError` when it fails verification, or when a file stands where a folder
        of the cache should be."""
        try:
            meta = json.loads(entry.read_text())
        except (FileNotFoundError, PermissionError):
            return None
        except NotADirectoryError as e:
            raise ModelCacheError(self._not_a_folder(entry)) from e
        except (OSError, ValueError) as e:
            raise ModelCacheError(
                f"cache entry {entry} is unreadable ({e}); rebuild with rebuild=True or delete it"
            ) from e
        try:
            name, expected = meta["onnx"], meta["onnx_sha256"]
        except (KeyError, TypeError) as e:
            raise ModelCacheError(f"cache entry {entry} lacks field {e}; rebuild with rebuild=True or delete it") from e
        if not isinstance(name, str) or Path(name).name != name or not name.endswith(".onnx"):
            # confined to the entry's folder: a path (or '..') would read a file outside the cache
            raise ModelCacheError(
                f"cache entry {entry} names {str(name)[:80]!r}, not a .onnx file of its folder; "
                "rebuild with rebuild=True"
            )
        path = entry.parent / name
        if path.exists() and not path.is_file():  # a FIFO or a device would block the hash, a folder fail it
            raise ModelCacheError(f"cached model {path} is not a regular file; delete it or rebuild with rebuild=True")
        try:
            actual = sha256_file(path)
        except (FileNotFoundError, PermissionError):
            return None
        if actual != expected:
            raise ModelCacheError(
                f"cached model {path} does not match its recorded sha256 (tampered or truncated: "
                f"expected {expected[:16]}..., found {actual[:16]}...); refusing to load it. "
                "Rebuild with Embedder(..., rebuild=True) or delete the file."
            )
        return CachedModel(path, str(meta.get("weights_sha256", "")), built=False, build_seconds=0.0)

    @contextlib.contextmanager
    def build_lock(self, entry: Path, timeout: float = BUILD_LOCK_TIMEOUT) -> Iterator[None]:
        """Hold the exclusive build lock of ``entry`` (an ``flock`` on ``<entry>.lock``).

        Waits up to ``timeout`` seconds for another process's build, then raises
        :class:`ModelCacheError`. Where locking is unavailable (no ``fcntl``, a read-only cache folder)
        the build goes ahead unlocked: concurrent builders still write whole, verified files.
        """
        try:
            import fcntl
        except ImportError:  # Windows: builds are still atomic, just not deduplicated
            yield
            return
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(entry.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            yield
            return
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise ModelCacheError(
                            f"another process has been building {entry.stem} for over {timeout:.0f} s "
                            f"(lock {entry.with_suffix('.lock')}); try again or delete the lock file"
                        ) from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)  # releases the lock

    def store(self, entry: Path, data: bytes, meta: dict[str, object]) -> Path:
        """Write ``data`` (content-named) and then its entry; returns the ``.onnx`` path."""
        sha = hashlib.sha256(data).hexdigest()
        path = entry.with_name(f"{entry.stem}-{sha[:16]}.onnx")
        atomic_write_bytes(path, data, follow_symlinks=False, keep_mode=False)
        record = {
            **meta,
            "onnx": path.name,
            "onnx_sha256": sha,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        atomic_write_bytes(
            entry, json.dumps(record, indent=1, sort_keys=True).encode(), follow_symlinks=False, keep_mode=False
        )
        for old in entry.parent.glob(f"{entry.stem}-*.onnx"):  # older builds of the same key
            if old != path:
                try:
                    old.unlink()
                except OSError:
                    pass
        return path
