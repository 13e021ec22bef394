"""A deterministic bag-of-words embedder for engine tests where the model is beside the point."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np

DIM = 64


def _word_vec(word: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(DIM)
    return v / np.linalg.norm(v)


class FakeEmbedder:
    """Texts sharing words get positive similarity; identical word bags get 1.0.

    Attributes:
        calls: how many times :meth:`embed` was called, and ``texts`` how many texts in all.
    """

    model_id: str | None = None  # vectors of a test embedder are never cached on disk

    def __init__(self) -> None:
        self.calls = 0
        self.texts = 0

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            words = re.findall(r"[a-z0-9]+", t.lower())
            v = sum((_word_vec(w) for w in words), np.zeros(DIM))
            n = np.linalg.norm(v)
            out[i] = v / n if n else _word_vec("")  # never a zero vector
        return out

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + 2 for t in texts]
