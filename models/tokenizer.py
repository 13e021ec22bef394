"""WordPiece tokenisation with HF ``tokenizers``: truncation like sentence-transformers, length-sorted batches.

The ``tokenizer.json`` shipped with all-MiniLM-L6-v2 says ``truncation: 128`` and ``padding: Fixed(128)``.
Both are wrong for sentence-transformers parity (it truncates at ``max_seq_length`` = 256) and for speed
(a one-sentence query padded to 128 tokens costs 5x). :class:`TextTokenizer` overrides both: it
truncates at ``max_length`` and pads each batch only to that batch's longest text.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from contextsieve.errors import ModelError, ModelFilesNotFoundError

__all__ = ["Batch", "TextTokenizer"]


@dataclass(frozen=True)
class Batch:
    """One padded batch: ``index`` gives each row's position in the caller's text list."""

    index: np.ndarray  # int64 [b]
    input_ids: np.ndarray  # int64 [b, s]
    attention_mask: np.ndarray  # int64 [b, s]


class TextTokenizer:
    """Tokenise texts for a BERT encoder.

    Safe to use from several threads: no call changes the tokenizers' settings.

    Args:
        tokenizer: a loaded HF ``tokenizers.Tokenizer``; its padding and truncation settings are replaced.
        max_length: truncation length in tokens, special tokens included (default 256 for MiniLM).
    """

    def __init__(self, tokenizer: Tokenizer, max_length: int = 256) -> None:
        if max_length < 2:
            raise ModelError(f"max_length must be >= 2 tokens, got {max_length}")
        self._tok = tokenizer
        self.max_length = int(max_length)
        self._tok.enable_truncation(self.max_length)
        self._tok.no_padding()
        # A second tokenizer that never truncates, for full-length counts: switching one shared
        # tokenizer's truncation off and on would let another thread's encode run untruncated. Made on
        # the first full count (20 ms: a restarted agent whose chunk plans are cached never needs it).
        self._full: Tokenizer | None = None
        self._full_lock = threading.Lock()
        self.pad_id = int(self._tok.token_to_id("[PAD]") or 0)

    @classmethod
    def from_file(cls, path: Path, max_length: int = 256) -> "TextTokenizer":
        """Load ``tokenizer.json`` from ``path``."""
        path = Path(path)
        if not path.is_file():
            raise ModelFilesNotFoundError(f"missing tokenizer file {path}")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on a bad file
            raise ModelError(f"cannot load tokenizer {path}: {e}") from e
        return cls(tok, max_length)

    def encode_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text (truncated, with special tokens, no padding)."""
        return [e.ids for e in self._tok.encode_batch(list(texts))] if texts else []

    def count_tokens(self, texts: Sequence[str], *, truncate: bool = False) -> list[int]:
        """Number of model tokens of each text, special tokens included.

        With ``truncate=False`` (default) the full length is counted, so callers can see what a
        ``max_length`` window would cut; with ``True`` the count is capped at ``max_length``.
        """
        if not texts:
            return []
        tok = self._tok if truncate else self._untruncated()
        return [len(e.ids) for e in tok.encode_batch(list(texts))]

    def _untruncated(self) -> Tokenizer:
        with self._full_lock:
            if self._full is None:
                full = Tokenizer.from_str(self._tok.to_str())
                full.no_truncation()
                self._full = full
            return self._full

    def batches(
        self, texts: Sequence[str], max_rows: int, max_tokens: int | None = None, call_cost: int = 0
    ) -> Iterator[Batch]:
        """Yield padded batches sorted by length (longest first); ``Batch.index`` maps rows back.

        A batch holds at most ``max_rows`` texts and, when ``max_tokens`` is set, at most that many
        padded tokens (rows x width; a single text longer than the budget still forms its own batch).
        Sorting keeps padding low, and a token budget keeps each batch's activations in cache.

        ``call_cost`` (tokens, default 0) is what one more call costs in padded-token equivalents. With
        it, the cut points between batches are chosen to minimise ``calls x call_cost + padded tokens``
        (dynamic programming over the sorted lengths): a long text does not pad a few short ones to its
        width when a second call is cheaper. 0 fills each batch greedily up to the limits.
        """
        if max_rows < 1 or (max_tokens is not None and max_tokens < 1) or call_cost < 0:
            raise ModelError(
                f"max_rows and max_tokens must be >= 1 and call_cost >= 0, got {max_rows}, {max_tokens}, {call_cost}"
            )
        ids = self.encode_ids(texts)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = np.argsort(-lengths, kind="stable")
        for start, stop in _cuts(lengths[order].tolist(), max_rows, max_tokens, call_cost):
            idx = order[start:stop]
            width = int(lengths[idx[0]])
            input_ids = np.full((len(idx), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            for row, j in enumerate(idx):
                n = int(lengths[j])
                input_ids[row, :n] = ids[j]
                mask[row, :n] = 1
            yield Batch(idx, input_ids, mask)


def _cuts(lengths: list[int], max_rows: int, max_tokens: int | None, call_cost: int) -> list[tuple[int, int]]:
    """Batches ``[start, stop)`` over lengths sorted longest first (see :meth:`TextTokenizer.batches`)."""

    def rows_at(start: int) -> int:
        width = max(lengths[start], 1)
        return max_rows if max_tokens is None else max(1, min(max_rows, max_tokens // width))

    n = len(lengths)
    if call_cost == 0:
        out, start = [], 0
        while start < n:
            stop = min(n, start + rows_at(start))
            out.append((start, stop))
            start = stop
        return out
    best = [0] + [0] * n
    back = [0] * (n + 1)
    limit = [rows_at(i) for i in range(n)]
    for stop in range(1, n + 1):
        cost, cut = -1, stop - 1
        for start in range(stop - 1, max(-1, stop - 1 - max_rows), -1):
            if stop - start > limit[start]:
                break  # wider batches only get wider going back (lengths sorted longest first)
            c = best[start] + call_cost + (stop - start) * lengths[start]
            if cost < 0 or c < cost:
                cost, cut = c, start
        best[stop], back[stop] = cost, cut
    out = []
    stop = n
    while stop > 0:
        out.append((back[stop], stop))
        stop = back[stop]
    return out[::-1]
