"""The chunk index the selection pipeline searches: exact (Numba/numpy kernels) or HNSW (hnswlib).

One interface: :meth:`ChunkIndex.add` rows (vector, item id, scope), :meth:`ChunkIndex.remove` rows
(marked deleted), :meth:`ChunkIndex.search` with max pooling over several query vectors and a scope
filter, :meth:`ChunkIndex.save` / :meth:`ChunkIndex.load` with a sha256 checksum.

With ``backend="auto"`` the index is exact up to :data:`HNSW_MIN_ROWS` live rows and switches to HNSW
above it, if hnswlib is installed (``pip install contextsieve[hnsw]``) and only if the HNSW graph
passes a recall guard (recall@10 against exact search on a sample of the index's own rows, raising
``ef`` up to 512 before giving up); otherwise it stays exact and says so with a warning.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from contextsieve.choices import IndexBackend
from contextsieve.errors import IndexFileError, InputError, MissingExtraError, brief
from contextsieve.fileio import atomic_write_bytes
from contextsieve.kernels.scoring import Hits, as_vectors, check_finite, score_pool_topk
from contextsieve.retrieval.hnsw import HnswIndex, add_to_graph, import_hnswlib, new_graph

__all__ = ["Scope", "IndexConfig", "ChunkIndex", "HNSW_MIN_ROWS", "HnswIndex"]

#: Live rows from which ``backend="auto"`` builds HNSW. Below it exact search needs no build, loses no
#: recall and writes no graph file, and costs a few ms; building the graphs costs tens of seconds per
#: 100k rows (``benchmarks.hnsw_table`` and ``benchmarks.kernels_table`` measure both).
HNSW_MIN_ROWS = 100_000

_MAGIC = b"CSIDX001"


class Scope(str, Enum):
    """What a chunk belongs to; searches can be limited to some scopes."""

    RULES = "rules"
    REFERENCES = "references"
    TOOLS = "tools"


_SCOPES = list(Scope)
_ALL = tuple(range(len(_SCOPES)))


@dataclass(frozen=True)
class IndexConfig:
    """Index settings.

    Attributes:
        backend: ``"auto"`` (exact, HNSW above ``hnsw_min_rows``), ``"exact"`` or ``"hnsw"``.
        hnsw_min_rows: live rows from which ``auto`` switches to HNSW (default 100,000).
        hnsw_m: HNSW graph degree (default 16).
        ef_construction: HNSW build beam (default 200).
        ef_search: HNSW search beam to start from (default 64; raised by the recall guard if needed).
        recall_guard: minimum recall@10 against exact search that HNSW must reach (default 0.95).
    """

    backend: IndexBackend = "auto"
    hnsw_min_rows: int = HNSW_MIN_ROWS
    hnsw_m: int = 16
    ef_construction: int = 200
    ef_search: int = 64
    recall_guard: float = 0.95

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "exact", "hnsw"):
            raise InputError(f"backend must be 'auto', 'exact' or 'hnsw', got {self.backend!r}")
        if not 0.0 < self.recall_guard <= 1.0:
            raise InputError(f"recall_guard must be in (0, 1], got {self.recall_guard}")


class ChunkIndex:
    """Chunk vectors with their item ids and scopes, searchable by max-pooled similarity.

    Args:
        dim: vector width (384 for MiniLM).
        config: :class:`IndexConfig` (defaults documented there).
    """

    def __init__(self, dim: int = 384, config: IndexConfig | None = None) -> None:
        if dim < 1:
            raise InputError(f"dim must be positive, got {dim}")
        self.dim = dim
        self.config = config or IndexConfig()
        self._vec = np.zeros((0, dim), dtype=np.float32)
        self._item = np.zeros(0, dtype=np.int64)
        self._scope = np.zeros(0, dtype=np.uint8)
        self._deleted = np.zeros(0, dtype=np.bool_)
        self._n = 0
        self._masks: dict[tuple[int, ...], np.ndarray] = {}
        self._hnsw: dict[int, HnswIndex] = {}  # scope code -> hnswlib.Index
        self._ef = self.config.ef_search
        self._hnsw_failed_at = 0  # live rows when HNSW last missed the recall guard (retry at 2x)
        if self.config.backend == "hnsw":
            import_hnswlib()

    # -- contents ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Live (not deleted) rows."""
        return int(self._n - self._deleted[: self._n].sum())

    @property
    def rows(self) -> int:
        """All rows ever added (deleted ones included): row ids run from 0 to ``rows - 1``."""
        return self._n

    @property
    def backend(self) -> str:
        """The search actually in use: ``"exact"`` or ``"hnsw"``."""
        return "hnsw" if self._hnsw else "exact"

    def vectors(self) -> np.ndarray:
        """All rows' vectors (deleted ones included), ``[rows, dim]``, read-only view."""
        v = self._vec[: self._n]
        v.flags.writeable = False
        return v

    def items(self) -> np.ndarray:
        """Item id of every row, ``[rows]``."""
        return self._item[: self._n].copy()

    def add(
        self, vectors: object, items: Sequence[int] | np.ndarray, scopes: Sequence[Scope | str] | Scope | str
    ) -> np.ndarray:
        """Append rows; returns their row ids. NaN/inf vectors are refused (nothing is added).

        Args:
            vectors: ``[n, dim]`` float vectors (unit length expected; not renormalised).
            items: the item id of each row (ints chosen by the caller).
            scopes: one scope for all rows, or one per row.
        """
        v = as_vectors(vectors, "vectors", self.dim)
        check_finite(v, "vectors")
        n = v.shape[0]
        it = _int_ids(items, "item ids")
        if it.shape[0] != n:
            raise InputError(f"{n} vectors but {it.shape[0]} item ids")
        if isinstance(scopes, (str, Scope)):
            sc = np.full(n, _scope_code(scopes), dtype=np.uint8)
        else:
            if not isinstance(scopes, (list, tuple, np.ndarray)):
                raise InputError(f"scopes must be a scope name or a list of them, got {type(scopes).__name__}")
            if len(scopes) != n:
                raise InputError(f"{n} vectors but {len(scopes)} scopes")
            sc = np.fromiter((_scope_code(s) for s in scopes), dtype=np.uint8, count=n)
        self._grow(self._n + n)
        rows = np.arange(self._n, self._n + n, dtype=np.int64)
        self._vec[rows] = v
        self._item[rows] = it
        self._scope[rows] = sc
        self._deleted[rows] = False
        self._n += n
        self._masks.clear()
        if self._hnsw:
            self._hnsw_add(rows)
        self._maybe_switch()
        return rows

    def remove(self, rows: Iterable[int]) -> None:
        """Mark rows deleted (they are never returned again; space is kept)."""
        r = _int_ids(rows, "row ids")
        if r.size and (r.min() < 0 or r.max() >= self._n):
            raise InputError(f"row ids must lie in 0..{self._n - 1}")
        self._deleted[r] = True
        self._masks.clear()
        for row in r.tolist():
            index = self._hnsw.get(int(self._scope[row]))
            if index is not None:
                try:
                    index.mark_deleted(row)
                except RuntimeError:
                    pass  # already deleted

    def _grow(self, need: int) -> None:
        cap = self._vec.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap, 64)
        for name, fill in (("_vec", 0.0), ("_item", 0), ("_scope", 0), ("_deleted", True)):
            old = getattr(self, name)
            grown = np.full((new,) + old.shape[1:], fill, dtype=old.dtype)
            grown[: old.shape[0]] = old
            setattr(self, name, grown)

    # -- search -----------------------------------------------------------------------------------

    def _exclude(self, scopes: tuple[int, ...]) -> np.ndarray:
        """Rows to skip: deleted, or outside ``scopes`` (cached until the next add/remove)."""
        if scopes not in self._masks:
            mask = self._deleted[: self._n].copy()
            if len(scopes) < len(_SCOPES):
                mask |= ~np.isin(self._scope[: self._n], np.array(scopes, dtype=np.uint8))
            self._masks[scopes] = mask
        return self._masks[scopes]

    def search(
        self, queries: object, k: int, *, scopes: Iterable[Scope | str] | Scope | str | None = None, exact: bool = False
    ) -> Hits:
        """The ``k`` best rows by max-pooled dot product over the query rows.

        Args:
            queries: ``[M, dim]`` query vectors (one per query chunk); M = 0 finds nothing.
            k: rows to return (fewer if fewer are live in the scopes).
            scopes: limit to these scopes (default: all).
            exact: force exact search even when HNSW is in use (for checks and explanations).

        Returns:
            :class:`~contextsieve.kernels.scoring.Hits`: row ids best first (ties: lower row), scores,
            and which query row gave each score.
        """
        if isinstance(scopes, (str, Scope)):
            scopes = [scopes]  # one scope, not its characters
        codes = tuple(sorted({_scope_code(s) for s in scopes})) if scopes is not None else _ALL
        q = as_vectors(queries, "queries", self.dim)
        if self._hnsw and not exact:
            return self._hnsw_search(q, k, codes)
        return score_pool_topk(q, self._vec[: self._n], k, exclude=self._exclude(codes))

    # -- HNSW -------------------------------------------------------------------------------------

    def _maybe_switch(self) -> None:
        cfg = self.config
        if self._hnsw or cfg.backend == "exact":
            return
        if cfg.backend == "auto" and len(self) < cfg.hnsw_min_rows:
            return
        if self._hnsw_failed_at and len(self) < 2 * self._hnsw_failed_at:
            return
        if cfg.backend == "auto":
            try:
                import_hnswlib()
            except MissingExtraError:
                warnings.warn(
                    f"the index has {len(self)} rows; exact search is used because hnswlib is missing "
                    "(pip install 'contextsieve[hnsw]' for faster search)",
                    stacklevel=3,
                )
                self.config = IndexConfig(**{**cfg.__dict__, "backend": "exact"})
                return
        self.build_hnsw()

    def build_hnsw(self) -> None:
        """Build the HNSW graphs (one per scope) and check the recall guard; exact stays if it fails."""
        import_hnswlib()  # MissingExtraError before anything changes
        self._hnsw = {}
        live = np.flatnonzero(~self._deleted[: self._n])
        for code in range(len(_SCOPES)):
            rows = live[self._scope[live] == code]
            if rows.size == 0:
                continue
            index = new_graph(
                self.dim, rows.size * 2, ef_construction=self.config.ef_construction, m=self.config.hnsw_m
            )
            index.add_items(self._vec[rows], rows)
            self._hnsw[code] = index
        if not self._passes_recall_guard():
            self._hnsw = {}
            self._hnsw_failed_at = len(self)
            warnings.warn(
                f"HNSW missed recall@10 >= {self.config.recall_guard} even at ef=512; exact search is kept",
                stacklevel=2,
            )

    def _hnsw_add(self, rows: np.ndarray) -> None:
        for code in np.unique(self._scope[rows]).tolist():
            sel = rows[self._scope[rows] == code]
            index = self._hnsw.get(code)
            if index is None:
                index = new_graph(
                    self.dim, sel.size * 2, ef_construction=self.config.ef_construction, m=self.config.hnsw_m
                )
                self._hnsw[code] = index
            index.set_ef(self._ef)
            add_to_graph(index, self._vec[sel], sel)

    def _hnsw_search(self, q: np.ndarray, k: int, codes: tuple[int, ...]) -> Hits:
        """k-NN per query row in each scope's graph, then max-pool per row and merge (vectorised)."""
        empty = Hits(np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.int32))
        if q.shape[0] == 0 or k <= 0:
            return empty
        parts = []
        for code in codes:
            index = self._hnsw.get(code)
            if index is None or index.element_count == 0:
                continue
            kk = min(k, index.element_count)
            ef = max(self._ef, kk)
            if index.ef != ef:
                index.set_ef(ef)
            try:
                labels, dist = index.knn_query(q, k=kk, num_threads=1)
            except RuntimeError:  # fewer live elements than kk
                labels, dist = _knn_fallback(index, q, kk)
            parts.append(
                (
                    labels.astype(np.int64).ravel(),
                    (1.0 - dist).astype(np.float32).ravel(),
                    np.repeat(np.arange(q.shape[0], dtype=np.int32), labels.shape[1]),
                )
            )
        if not parts:
            return empty
        if len(parts) == 1 and q.shape[0] == 1:  # one graph, one query: hnswlib's order is by distance
            rows, scores, which = parts[0]
            order = np.lexsort((rows, -scores))[:k]
            return Hits(rows[order], scores[order], which[order])
        rows, scores, which = (np.concatenate(x) for x in zip(*parts))  # hnswlib "ip" distance = 1 - dot
        if q.shape[0] > 1:  # max-pool: keep each row once, with its best score (lower query on ties)
            order = np.lexsort((which, -scores, rows))
            first = np.ones(order.size, dtype=bool)
            first[1:] = rows[order[1:]] != rows[order[:-1]]
            keep = order[first]
            rows, scores, which = rows[keep], scores[keep], which[keep]
        order = np.lexsort((rows, -scores))[:k]
        return Hits(rows[order], scores[order], which[order])

    def _passes_recall_guard(self, samples: int = 64, k: int = 10) -> bool:
        live = np.flatnonzero(~self._deleted[: self._n])
        if live.size <= k:
            return True
        rng = np.random.default_rng(0)
        pick = rng.choice(live, size=min(samples, live.size), replace=False)
        noise = rng.standard_normal((pick.size, self.dim)).astype(np.float32) * 0.02
        queries = self._vec[pick] + noise
        truth = [set(self.search(queries[i : i + 1], k, exact=True).idx.tolist()) for i in range(pick.size)]
        for ef in sorted({self._ef, 128, 256, 512}):
            if ef < self._ef:
                continue
            self._ef = ef
            got = [
                set(self._hnsw_search(queries[i : i + 1], k, tuple(range(len(_SCOPES)))).idx.tolist())
                for i in range(pick.size)
            ]
            recall = float(np.mean([len(g & t) / len(t) for g, t in zip(got, truth)]))
            if recall >= self.config.recall_guard:
                return True
        return False

    # -- persistence ------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the index (and HNSW graphs) to one file: magic, sha256, npz; via temp file + rename."""
        arrays: dict[str, np.ndarray] = {
            "vec": self._vec[: self._n],
            "item": self._item[: self._n],
            "scope": self._scope[: self._n],
            "deleted": self._deleted[: self._n],
            "meta": np.frombuffer(
                json.dumps({"dim": self.dim, "config": self.config.__dict__, "ef": self._ef}).encode(), dtype=np.uint8
            ),
        }
        with tempfile.TemporaryDirectory() as tmp:
            for code, index in self._hnsw.items():
                p = os.path.join(tmp, f"h{code}.bin")
                index.save_index(p)
                arrays[f"hnsw{code}"] = np.fromfile(p, dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as bool
        body = buf.getvalue()
        atomic_write_bytes(Path(path), _MAGIC + hashlib.sha256(body).digest() + body)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "ChunkIndex":
        """Read a file written by :meth:`save`; :class:`IndexFileError` if it is not intact."""
        path = Path(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError as e:
            raise IndexFileError(f"no index file at {path}") from e
        if data[:8] != _MAGIC:
            raise IndexFileError(f"{path} is not a contextsieve index (or of another format version)")
        digest, body = data[8:40], data[40:]
        if hashlib.sha256(body).digest() != digest:
            raise IndexFileError(f"{path} fails its sha256 check (truncated or modified)")
        try:
            z = np.load(io.BytesIO(body), allow_pickle=False)
            meta = json.loads(bytes(z["meta"]).decode())
            self = cls(int(meta["dim"]), IndexConfig(**meta["config"]))
            self._n = int(z["vec"].shape[0])
            self._vec = np.array(z["vec"], dtype=np.float32)
            self._item = np.array(z["item"], dtype=np.int64)
            self._scope = np.array(z["scope"], dtype=np.uint8)
            self._deleted = np.array(z["deleted"], dtype=np.bool_)
            self._ef = int(meta["ef"])
            graphs = {int(name[4:]): z[name] for name in z.files if name.startswith("hnsw")}
        except (KeyError, ValueError, TypeError, AttributeError, OSError, EOFError, zipfile.BadZipFile) as e:
            raise IndexFileError(f"{path} has a valid checksum but unreadable contents: {brief(e)}") from e
        problem = self._inconsistency(graphs)
        if problem:
            raise IndexFileError(f"{path} has a valid checksum but inconsistent contents: {problem}")
        if graphs:
            hnswlib = import_hnswlib()
            with tempfile.TemporaryDirectory() as tmp:
                for code, blob in graphs.items():
                    p = os.path.join(tmp, f"h{code}.bin")
                    blob.tofile(p)
                    index = hnswlib.Index(space="ip", dim=self.dim)
                    try:
                        index.load_index(p, max_elements=0)
                        index.set_ef(self._ef)
                        ids = np.asarray(index.get_ids_list(), dtype=np.int64)
                    except (RuntimeError, ValueError, MemoryError) as e:
                        raise IndexFileError(f"{path}: the HNSW graph of scope {code} is unreadable: {brief(e)}") from e
                    if ids.size and (ids.min() < 0 or ids.max() >= self._n or (self._scope[ids] != code).any()):
                        raise IndexFileError(f"{path}: the HNSW graph of scope {code} names rows it does not hold")
                    self._hnsw[code] = index
        return self

    def _inconsistency(self, graphs: dict[int, np.ndarray]) -> str:
        """What is wrong with freshly loaded arrays, or ``""`` (shapes, finite unit-free vectors, codes)."""
        n = self._n
        if self._vec.ndim != 2 or self._vec.shape[1] != self.dim:
            return f"vectors of shape {self._vec.shape} for dim {self.dim}"
        if any(a.shape != (n,) for a in (self._item, self._scope, self._deleted)):
            return "item, scope and deleted arrays do not match the vectors"
        if not np.isfinite(self._vec).all():
            return "vectors hold NaN or inf"
        if n and int(self._scope.max()) >= len(_SCOPES):
            return f"scope code {int(self._scope.max())} (known: 0..{len(_SCOPES) - 1})"
        if self._ef <= 0:
            return f"ef {self._ef}"
        if any(code not in _ALL or blob.dtype != np.uint8 or blob.ndim != 1 for code, blob in graphs.items()):
            return "an HNSW graph of an unknown scope or type"
        return ""


def _scope_code(scope: object) -> int:
    """The code of a scope given as :class:`Scope` or its name; :class:`InputError` otherwise."""
    try:
        return _SCOPES.index(Scope(scope))
    except ValueError:
        raise InputError(f"unknown scope {scope!r:.80}; scopes: {', '.join(s.value for s in _SCOPES)}") from None


def _int_ids(values: object, what: str) -> np.ndarray:
    """Integer ids as int64: bools, floats and values outside int64 are refused (never truncated)."""
    seq = list(values) if not isinstance(values, np.ndarray) else values.reshape(-1).tolist()  # type: ignore[call-overload]
    for v in seq:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise InputError(f"{what} must be ints, got {v!r:.80} ({type(v).__name__})")
        if not -(2**63) <= int(v) < 2**63:
            raise InputError(f"{what} must fit in int64, got {v}")
    return np.asarray(seq, dtype=np.int64).reshape(-1)


def _knn_fallback(index: HnswIndex, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """knn_query with k lowered until hnswlib can fill it (it raises when live elements < k)."""
    while k > 1:
        k -= 1
        try:
            return index.knn_query(q, k=k, num_threads=1)
        except RuntimeError:
            continue
    return np.zeros((q.shape[0], 0), dtype=np.int64), np.zeros((q.shape[0], 0), dtype=np.float32)
