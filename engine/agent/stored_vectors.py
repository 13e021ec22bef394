"""The vectors a usage log keeps (:mod:`contextsieve.agent.usage`): float16 as its file holds them, each
distinct one once per read as a row of one matrix, and made unit float32 vectors for scoring.

A record's vector is written with a check (:func:`stored_blob`): its float16 values, a marker byte and
the CRC-32 of the request's hash and the values. A bit flipped in either then reads as a damaged record
(left out, with a warning), not as another valid vector. A vector written before the check (float16
values only: an even number of bytes, where a checked one has an odd number) is read as it is."""

from __future__ import annotations

import zlib

import numpy as np

from contextsieve.errors import InputError

__all__ = ["VectorBlock", "stored_blob", "stored_vector", "unit_vector", "checked_unit_vector"]

#: The byte after a checked vector's values (then its CRC-32, 4 bytes little-endian).
CHECKED = b"\x01"


class VectorBlock:
    """The vectors of one read of a log, each request's once, as rows of one float16 matrix (a year of
    history is tens of thousands of them: one block instead of a ``bytes`` object each, and a search
    gathers the rows it needs from it at once: :class:`~contextsieve.selection.recorded_requests.RequestVectors`).

    Args:
        upper: at most how many vectors are added (the matrix is made at the first, with this many rows;
            the pages of rows never filled are never touched, so they take no memory).
        dim: the length every vector must have (``None``: any; the matrix has the first one's, and a
            vector of another length is kept alone).
    """

    def __init__(self, upper: int, dim: int | None) -> None:
        self.upper = upper
        self.dim = dim
        self.matrix: np.ndarray | None = None
        self.filled = 0
        self.seen: dict[str, int | np.ndarray] | None = {}  # a request's hash -> its row (or its vector)

    @property
    def width(self) -> int | None:
        """The length of the matrix's rows (``None``: no row yet)."""
        return None if self.matrix is None else int(self.matrix.shape[1])

    def add(self, key: str, blob: object) -> int | np.ndarray | None:
        """Where the vector ``blob`` keeps (see :func:`stored_vector`) is: its row of the matrix (an
        ``int``), or the vector itself when it is no row (another length, or past ``upper``); ``None``
        when it is none. The same row for the same request (``key``, its hash) with the same values (whose
        check was read with the request's first record)."""
        assert self.seen is not None, "the read is done"
        got = self.seen.get(key)
        if got is not None and isinstance(blob, bytes):  # the values of a vector read (and checked) already
            kept = self.row(got) if isinstance(got, int) else got
            if kept.tobytes() == _unchecked(blob):
                return got
        raw = _values(blob, key)
        if raw is None:
            return None
        v = _vector(raw, self.dim)
        if v is None:
            return None
        if self.matrix is None and self.filled < self.upper:
            self.matrix = np.empty((self.upper, v.size), dtype="<f2")
        if self.matrix is not None and v.size == self.matrix.shape[1] and self.filled < self.upper:
            self.matrix[self.filled] = v
            where: int | np.ndarray = self.filled
            self.filled += 1
        else:
            alone = v.copy()  # not a view of the record's bytes: they are freed once read
            alone.flags.writeable = False  # shared by the records of one request, as the bytes were read-only
            where = alone
        self.seen.setdefault(key, where)
        return where

    def row(self, r: int) -> np.ndarray:
        """Row ``r`` of the matrix, a read-only view."""
        assert self.matrix is not None
        v = self.matrix[r]
        if self.seen is not None:  # while the read adds (after it, the matrix and so its views are read-only)
            v.flags.writeable = False
        return v

    def done(self) -> None:
        """Nothing more is added: the index of requests goes and the matrix becomes read-only."""
        self.seen = None
        if self.matrix is not None:
            self.matrix.flags.writeable = False


def stored_blob(vector: np.ndarray, key: str) -> bytes:
    """What a record keeps of ``vector`` (a request's, whose hash is ``key``): its float16 values, then
    :data:`CHECKED` and the CRC-32 of ``key`` and the values."""
    raw = np.asarray(vector).astype("<f2").tobytes()
    return raw + CHECKED + _crc(key, raw)


def _crc(key: str, raw: bytes) -> bytes:
    return zlib.crc32(raw, zlib.crc32(key.encode("utf-8", "replace"))).to_bytes(4, "little")


def stored_vector(blob: object, key: str, dim: int | None = None) -> np.ndarray | None:
    """The vector a record of the request ``key`` keeps, as kept (float16: half the memory of float32);
    ``None`` when it is not such a vector (of ``dim`` values, when given), empty, not finite or zero, or
    its check (:func:`stored_blob`) does not match. :func:`unit_vector` makes the unit vector of it."""
    raw = _values(blob, key)
    return None if raw is None else _vector(raw, dim)


def _values(blob: object, key: str) -> bytes | None:
    """The float16 values of ``blob`` (a checked one's after its check matched; ``None``: it did not)."""
    if not isinstance(blob, bytes):
        return None
    raw = _unchecked(blob)
    if raw is blob:  # written before the check
        return blob
    return raw if len(blob) >= 5 and blob[-5:-4] == CHECKED and _crc(key, raw) == blob[-4:] else None


def _unchecked(blob: bytes) -> bytes:
    """The float16 values of ``blob``, its check not read: a checked blob (an odd length) without its last
    5 bytes, one written before the check as it is."""
    return blob[:-5] if len(blob) % 2 else blob


def _vector(raw: bytes, dim: int | None) -> np.ndarray | None:
    if dim is not None and len(raw) != 2 * dim:
        return None
    v = np.frombuffer(raw, dtype="<f2")
    if not v.size or not np.isfinite(v).all():
        return None
    return v if float(np.linalg.norm(v.astype(np.float32))) > 0 else None


def unit_vector(vector: np.ndarray) -> np.ndarray:
    """``vector`` as float32 divided by its norm (an :attr:`Example.vector` as a chunk vector)."""
    v = np.asarray(vector).astype(np.float32)
    return v / float(np.linalg.norm(v))


def checked_unit_vector(vector: np.ndarray) -> np.ndarray:
    """``vector`` as a unit float32 vector; :class:`InputError` for all but a finite, non-zero 1-D real one."""
    raw = np.asarray(vector)
    if raw.ndim != 1 or raw.dtype.kind not in "iuf":
        raise InputError(f"an example's vector must be a 1-D array of real numbers, got {raw.ndim}-D {raw.dtype}")
    v = raw.astype(np.float32)
    norm = float(np.linalg.norm(v))
    if not v.size or not np.isfinite(v).all() or norm == 0.0:
        raise InputError("an example's vector must be a finite, non-zero vector")
    return unit_vector(v)
