"""The storage of the chunk index (:class:`ChunkRows`, the base of
:class:`~contextsieve.retrieval.chunks.ChunkIndex`): groups of chunk vectors added under integer keys,
each group a *slot* and its vectors consecutive int8 *chunk rows* (quantised in one call per add), with
removal by key, the per-row filter masks searches take, and exact scoring of chosen slots. Searching
(exact or through the HNSW graph) is :mod:`contextsieve.retrieval.chunks`'.

Keys are bounded so that every chunk has a graph label (:data:`KEY_BITS`: the key in the label's low
bits, the chunk's index in the group above them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from contextsieve.errors import InputError
from contextsieve.kernels.scoring import Int8Corpus, as_vectors, check_finite

__all__ = ["ChunkRows", "KEY_BITS", "MAX_KEY"]

#: Low bits of a graph label that hold the group's key (the 20 bits above: the chunk's index in it).
KEY_BITS = 43
#: Largest group key (keys lie in ``0 .. 2**KEY_BITS - 1``).
MAX_KEY = (1 << KEY_BITS) - 1
_MAX_CHUNKS = (1 << (63 - KEY_BITS)) - 1
#: Keys below this are also mapped to slots by an array (graph answers are mapped back in one
#: gather instead of a dict lookup per label); larger keys only by the dict. 4 bytes per key.
_DENSE_KEYS = 1 << 23


class ChunkRows:
    """Groups of int8 chunk rows under integer keys (see the module docstring). Not thread-safe.

    Args:
        dim: vector width (384 for MiniLM).
    """

    def __init__(self, dim: int) -> None:
        if dim < 1:
            raise InputError(f"dim must be positive, got {dim}")
        self.dim = dim
        self.slot_of: dict[int, int] = {}  # live key -> slot
        self._slot_by_key = np.full(0, -1, np.int32)  # the same for keys below _DENSE_KEYS (-1: none)
        self._key = np.zeros(0, np.int64)  # slot -> key
        self._firsts = np.zeros(0, np.int64)  # slot -> first chunk row
        self._counts = np.zeros(0, np.int64)  # slot -> chunk rows
        self._gone = np.zeros(0, np.bool_)  # slot -> removed
        self._digest: list[bytes] = []  # slot -> digest of the stored vectors (for saved graphs)
        self._slots = 0
        self._q8 = np.zeros((0, dim), np.int8)
        self._scale = np.zeros(0, np.float32)
        self._chunk_slot = np.zeros(0, np.int64)
        self._chunk_gone = np.zeros(0, np.bool_)
        self._gone_chunks = 0
        self._chunks = 0
        self._changes = 0  # adds and removes so far (the key of the all-live mask's memo)
        self._live_memo: tuple[int, tuple[np.ndarray, int]] | None = None

    # -- contents ---------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Live groups."""
        return len(self.slot_of)

    @property
    def slots(self) -> int:
        """Slots ever given (removed groups' included): slot masks have this length."""
        return self._slots

    @property
    def chunks(self) -> int:
        """Chunk rows ever added (removed ones included): chunk masks have this length."""
        return self._chunks

    @property
    def live_chunks(self) -> int:
        """Chunk rows of live groups."""
        return self._chunks - self._gone_chunks

    def key(self, slot: int) -> int:
        """The key a slot was added under."""
        return int(self._key[slot])

    def chunk_rows(self, slot: int) -> np.ndarray:
        """The chunk rows of a slot, in the order its vectors were given."""
        first = int(self._firsts[slot])
        return np.arange(first, first + int(self._counts[slot]), dtype=np.int64)

    def live_slots(self) -> np.ndarray:
        """Per slot: its group is live, ``[slots]``."""
        return ~self._gone[: self._slots]

    def chunk_slots(self) -> np.ndarray:
        """The slot of every chunk row, ``[chunks]`` (read-only)."""
        out = self._chunk_slot[: self._chunks]
        out.flags.writeable = False
        return out

    def _grow(self, names: tuple[str, ...], need: int, floor: int) -> None:
        cap = getattr(self, names[0]).shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap, floor)
        for name in names:
            old = getattr(self, name)
            grown = np.zeros((new,) + old.shape[1:], old.dtype)
            grown[:cap] = old
            setattr(self, name, grown)

    def _checked(
        self, groups: Sequence[tuple[int, object]], digests: Sequence[bytes] | None
    ) -> dict[int, tuple[np.ndarray, bytes]]:
        """The groups of an add, checked (InputError before anything changes), by key: ``(vectors,
        digest)`` (a key given twice: the last one counts)."""
        if digests is not None and len(digests) != len(groups):
            raise InputError(f"{len(groups)} groups but {len(digests)} digests")
        last = {}
        for j, (key, vecs) in enumerate(groups):
            if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
                raise InputError(f"group keys must be ints, got {key!r:.80}")
            if not 0 <= int(key) <= MAX_KEY:
                raise InputError(f"group keys must lie in 0..{MAX_KEY}, got {key}")
            a = np.asarray(vecs)
            if a.ndim == 1 and a.size % self.dim == 0:  # one group's vectors given flat
                a = a.reshape(-1, self.dim)
            v = as_vectors(a, "vectors", self.dim)
            if v.shape[0] > _MAX_CHUNKS:
                raise InputError(f"a group may have at most {_MAX_CHUNKS} chunk vectors")
            check_finite(v, "vectors")
            last[int(key)] = (v, digests[j] if digests is not None else b"")
        return last

    def _append(self, last: dict[int, tuple[np.ndarray, bytes]]) -> tuple[int, int, int]:
        """Store checked groups of new keys in new slots, quantising all their vectors in one call;
        returns the first new slot, the first new chunk row and the chunk rows added."""
        vecs = [v for v, _ in last.values()]
        q = Int8Corpus.from_vectors(np.concatenate(vecs) if len(vecs) > 1 else vecs[0])
        s0, c0 = self._slots, self._chunks
        total = q.q8.shape[0]
        self._grow(("_key", "_firsts", "_counts", "_gone"), s0 + len(last), 256)
        self._grow(("_q8", "_scale", "_chunk_slot", "_chunk_gone"), c0 + total, 1024)
        self._q8[c0 : c0 + total] = q.q8
        self._scale[c0 : c0 + total] = q.scale
        self._chunk_gone[c0 : c0 + total] = False
        c = c0
        for j, (key, (v, digest)) in enumerate(last.items()):
            s = s0 + j
            self._key[s] = key
            self._firsts[s] = c
            self._counts[s] = v.shape[0]
            self._gone[s] = False
            self._digest.append(digest)
            self._chunk_slot[c : c + v.shape[0]] = s
            self.slot_of[key] = s
            if key < _DENSE_KEYS:
                if key >= self._slot_by_key.shape[0]:
                    grown = np.full(min(_DENSE_KEYS, max(2 * self._slot_by_key.shape[0], key + 1, 1024)), -1, np.int32)
                    grown[: self._slot_by_key.shape[0]] = self._slot_by_key
                    self._slot_by_key = grown
                self._slot_by_key[key] = s
            c += v.shape[0]
        self._slots = s0 + len(last)
        self._chunks = c0 + total
        self._changes += 1
        return s0, c0, total

    def _forget(self, key: int) -> np.ndarray | None:
        """Mark the group added under ``key`` removed; its chunk rows, or None when there is none."""
        s = self.slot_of.pop(int(key), None)
        if s is None:
            return None
        if key < self._slot_by_key.shape[0]:
            self._slot_by_key[key] = -1
        self._gone[s] = True
        self._changes += 1
        first, count = int(self._firsts[s]), int(self._counts[s])
        self._chunk_gone[first : first + count] = True
        self._gone_chunks += count
        return np.arange(first, first + count)

    # -- filters and exact scoring ----------------------------------------------------------------

    def chunk_mask(self, slot_ok: np.ndarray | None) -> tuple[np.ndarray, int]:
        """Per chunk row: live and its slot passes ``slot_ok`` (``[slots]`` bools; ``None``: all);
        and how many rows pass."""
        n = self._chunks
        if slot_ok is None:  # every live row: kept until the next change (read-only)
            memo = self._live_memo
            if memo is None or memo[0] != self._changes:
                live = ~self._chunk_gone[:n]
                live.flags.writeable = False
                memo = self._live_memo = (self._changes, (live, n - self._gone_chunks))
            return memo[1]
        if slot_ok.shape != (self._slots,):
            raise InputError(f"a slot mask of shape {slot_ok.shape} for {self._slots} slots")
        ok = ~self._chunk_gone[:n]
        ok &= slot_ok[self._chunk_slot[:n]]
        return ok, int(ok.sum())

    def _exact_corpus(self, chunk_ok: np.ndarray, passing: int) -> tuple[np.ndarray | None, Int8Corpus, object]:
        """The rows an exact scan reads: the passing rows gathered when they are few (their row ids
        returned), else every row with the others excluded."""
        n = self._chunks
        if passing < 0.25 * n:
            rows = np.flatnonzero(chunk_ok)
            return rows, Int8Corpus(np.ascontiguousarray(self._q8[rows]), self._scale[rows]), None
        return None, Int8Corpus(self._q8[:n], self._scale[:n]), ~chunk_ok

    def scores(self, queries: object, slots: Sequence[int]) -> list[float]:
        """The score of each slot (its best chunk against the best query row), exactly, in one call."""
        if not slots:
            return []
        q = as_vectors(queries, "queries", self.dim)
        idx = np.asarray(slots, dtype=np.int64)
        firsts, counts = self._firsts[idx], self._counts[idx]
        owner = np.repeat(np.arange(idx.size), counts)
        rows = np.repeat(firsts, counts) + (np.arange(owner.size) - np.repeat(np.cumsum(counts) - counts, counts))
        if rows.size <= 4096:  # a few candidates: one BLAS product beats waking the kernel's thread pool
            best = ((self._q8[rows].astype(np.float32) @ q.T) * self._scale[rows, None]).max(axis=1)
        else:
            best, _ = Int8Corpus(np.ascontiguousarray(self._q8[rows]), self._scale[rows]).score_pool(q)
        out = np.full(idx.size, -math.inf)
        np.maximum.at(out, owner, best.astype(np.float64))
        return [float(x) for x in out]

    def _dequantised(self, rows: np.ndarray) -> np.ndarray:
        return self._q8[rows].astype(np.float32) * self._scale[rows, None]
