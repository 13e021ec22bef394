"""An embedder that loads its model on first use: what an :class:`~contextsieve.Engine` made without an
embedder holds, so a request that needs no search (and a stash that only opens) loads no model."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from contextsieve.models.embedder import Embedder

__all__ = ["LazyEmbedder"]


class LazyEmbedder:
    """Loads :class:`contextsieve.Embedder` on first use (a request that needs no search loads no model).

    Its :attr:`model_id` is known before the model loads (:func:`~contextsieve.models.embedder.plan_model`),
    so a stash store opens without loading it. Threads that need the model while another loads it wait
    for that load (one load per process, never two).

    Args:
        kwargs: :class:`~contextsieve.models.embedder.Embedder`'s arguments (default: MiniLM as
            :func:`~contextsieve.models.embedder.plan_model` picks it for this CPU).
    """

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._emb: Embedder | None = None
        self._id: str | None = None
        self._lock = threading.Lock()

    @property
    def is_loaded(self) -> bool:
        """Whether the model is loaded (no call will wait for it)."""
        return self._emb is not None

    @property
    def loaded(self) -> Embedder:
        """The embedder, loaded now if it is not yet."""
        return self.load()

    def load(self) -> Embedder:
        """Load the model if it is not loaded yet (once; other threads wait for that load); returns it."""
        if self._emb is None:
            with self._lock:
                if self._emb is None:
                    from contextsieve.models.embedder import Embedder

                    self._emb = Embedder(**self._kwargs)
        return self._emb

    @property
    def model_id(self) -> str:
        if self._emb is not None:
            return self._emb.model_id
        if self._id is None:
            from contextsieve.models.embedder import plan_model

            self._id = plan_model(**self._kwargs).model_id
        return self._id

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        return self.loaded.embed(texts, show_progress=show_progress)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return self.loaded.count_tokens(texts)
