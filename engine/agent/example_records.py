"""A usage log's records as a read gives them (:mod:`contextsieve.agent.usage`): :class:`Example`, and a
file's read kept as columns (:class:`RecordColumns`), each tool's newest records a sequence over them
(:class:`ExampleRecords`).

A year of history is tens of thousands of records. As an :class:`Example` object each, with its time
as a float object and its vector as an array view, they took 120 to 180 bytes a record beside the
vectors themselves (8 MB at the caps, ``python -m benchmarks.speed.history_memory``); as columns a
record is 24 bytes, and its :class:`Example` is made when it is read (each read makes a new one,
equal field by field, its vector a view of the same row of the read's matrix).
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import numpy as np

from contextsieve.agent.stored_vectors import VectorBlock

if TYPE_CHECKING:
    from contextsieve.agent.items import ItemKey

__all__ = ["Example", "ExampleRecords", "RecordColumns", "keep_range", "stamps", "vector_widths"]


@dataclass(frozen=True, slots=True, eq=False)
class Example:
    """One recorded request of a tool. Two are equal when their fields are, the vectors bit for bit
    (each read of a file's record makes a new one, its vector a new view of the same row).

    Attributes:
        hash: the SHA-256 of the request as kept (its identity in the log).
        text: the request (``None``: kept as a vector only, the default).
        vector: its vector (``None``: none of the log's model is kept: embed ``text``): as a file keeps
            it (float16, a read-only row of the read's matrix; :func:`~contextsieve.agent.stored_vectors.unit_vector`
            makes it a unit float32 vector), or the unit float32 vector recorded in memory.
        at: when it was recorded last (seconds since the epoch).
    """

    hash: str
    text: str | None
    vector: np.ndarray | None
    at: float

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Example):
            return NotImplemented
        if (self.hash, self.text, self.at) != (other.hash, other.text, other.at):
            return False
        a, b = self.vector, other.vector
        if a is None or b is None:
            return a is b
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()

    def __hash__(self) -> int:
        return hash((self.hash, self.text, self.at))

    def without_vector(self) -> Example:
        """This request without its vector (one of another length than the model's: embed its text again)."""
        return Example(self.hash, self.text, None, self.at)


class RecordColumns:
    """The records of one read of a log file, as columns: per record its request (an index into
    :attr:`hashes`, each request's hash once), its time, and its vector's row of the read's
    :class:`~contextsieve.agent.stored_vectors.VectorBlock` (``-1``: a vector of another length, kept
    in :attr:`loose`, or none). Texts (kept only with ``keep_text``) by record.

    Args:
        vectors: the read's vectors.
    """

    __slots__ = ("vectors", "hashes", "hash_of", "at", "row", "loose", "texts", "_ids")

    def __init__(self, vectors: VectorBlock) -> None:
        self.vectors = vectors
        self.hashes: list[str] = []
        self.hash_of = array("q")
        self.at = array("d")
        self.row = array("q")
        self.loose: dict[int, np.ndarray] = {}  # record -> a vector that is no row of the matrix
        self.texts: dict[int, str] = {}  # record -> its text
        self._ids: dict[str, int] | None = {}  # a hash -> its index in hashes, while the read adds

    def __len__(self) -> int:
        return len(self.at)

    def add(self, hash: str, text: str | None, vector: int | np.ndarray | None, at: float) -> None:
        """Add a record: ``vector`` is its row of :attr:`vectors` (an ``int``), a vector of no row, or ``None``."""
        assert self._ids is not None, "the read is done"
        i = len(self.at)
        h = self._ids.get(hash)
        if h is None:
            h = self._ids[hash] = len(self.hashes)
            self.hashes.append(hash)
        self.hash_of.append(h)
        self.at.append(at)
        if isinstance(vector, int):
            self.row.append(vector)
        else:
            self.row.append(-1)
            if vector is not None:
                self.loose[i] = vector
        if text is not None:
            self.texts[i] = text

    def truncate(self, n: int) -> None:
        """Drop the records from the ``n``-th on (a read of a kind begun again); their hashes stay."""
        del self.hash_of[n:], self.at[n:], self.row[n:]
        for kept in (self.loose, self.texts):
            for i in [i for i in kept if i >= n]:
                del kept[i]

    def done(self) -> None:
        """The read is over: the index of hashes goes (a year of history is tens of thousands)."""
        self._ids = None
        self.vectors.done()

    def ordered(self, start: int, stop: int) -> bool:
        """Whether records ``start`` to ``stop`` are newest first, ties by hash (as a log sorts them)."""
        at = np.frombuffer(self.at, dtype=np.float64)[start:stop]
        step = np.diff(at)
        if (step > 0).any():
            return False
        hashes, of = self.hashes, self.hash_of
        return all(hashes[of[start + i]] <= hashes[of[start + i + 1]] for i in np.flatnonzero(step == 0).tolist())

    def example(self, i: int) -> Example:
        """Record ``i`` as an :class:`Example` (made now)."""
        r = self.row[i]
        vector = self.vectors.row(r) if r >= 0 else self.loose.get(i)
        return Example(self.hashes[self.hash_of[i]], self.texts.get(i), vector, self.at[i])


class ExampleRecords(Sequence[Example]):
    """The records ``start`` to ``stop`` of a read's :class:`RecordColumns` (one tool's, newest first),
    as a read-only sequence of :class:`Example` made as they are read (equal to the tuple of them; not
    a tuple: ``+`` and ``*`` are not defined)."""

    __slots__ = ("columns", "start", "stop")

    def __init__(self, columns: RecordColumns, start: int, stop: int) -> None:
        self.columns = columns
        self.start = start
        self.stop = stop

    def __len__(self) -> int:
        return self.stop - self.start

    @overload
    def __getitem__(self, i: int) -> Example: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[Example]: ...

    def __getitem__(self, i: int | slice) -> Example | Sequence[Example]:
        n = self.stop - self.start
        if isinstance(i, slice):
            lo, hi, step = i.indices(n)
            if step != 1:
                return tuple(self.columns.example(self.start + j) for j in range(lo, hi, step))
            return ExampleRecords(self.columns, self.start + lo, self.start + max(lo, hi))
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError("record index out of range")
        return self.columns.example(self.start + j)

    def __iter__(self) -> Iterator[Example]:
        example = self.columns.example
        for i in range(self.start, self.stop):
            yield example(i)

    def __eq__(self, other: object) -> bool:
        """Equal to a sequence of the same examples (a tuple of them, say), in order."""
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"ExampleRecords({len(self)} records)"


def stamps(records: Sequence[Example]) -> Iterator[tuple[str, float]]:
    """Each record's hash and time, in order (of :class:`ExampleRecords` without making its examples)."""
    if isinstance(records, ExampleRecords):
        c = records.columns
        for i in range(records.start, records.stop):
            yield c.hashes[c.hash_of[i]], c.at[i]
    else:
        for e in records:
            yield e.hash, e.at


def vector_widths(recorded: Iterable[Sequence[Example]]) -> Counter[int]:
    """How many records of ``recorded`` have a vector of each length."""
    widths: Counter[int] = Counter()
    for records in recorded:
        if isinstance(records, ExampleRecords):
            c = records.columns
            rows = np.frombuffer(c.row, dtype=np.int64)[records.start : records.stop]
            if c.vectors.width is not None and (rows >= 0).any():
                widths[c.vectors.width] += int((rows >= 0).sum())
            widths.update(int(v.shape[0]) for i, v in c.loose.items() if records.start <= i < records.stop)
        else:
            widths.update(e.vector.shape[0] for e in records if e.vector is not None)
    return widths


def keep_range(
    out: dict[ItemKey, Sequence[Example]], key: ItemKey, columns: RecordColumns, start: int, per_tool: int
) -> None:
    """Keep the records from ``start`` to the end of ``columns`` as ``key``'s. They are newest first
    (SQLite's order) unless damaged names or hashes broke it: two stored names read as one key (a byte
    that is not UTF-8, read replaced), or a hash stored as bytes; then ``key``'s records, with any it
    already has, are sorted as a log in memory sorts them."""
    stop = len(columns)
    if stop == start:
        return
    got: Sequence[Example] = ExampleRecords(columns, start, stop)
    if key in out or not columns.ordered(start, stop):
        got = tuple(sorted([*out.get(key, ()), *got], key=lambda e: (-e.at, e.hash))[:per_tool])
    out[key] = got
