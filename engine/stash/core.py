"""What every part of the stash store shares (:class:`StashCore`, the base of
:class:`~contextsieve.stash.store.StashStore`): its backend, embedder, settings and lock, checked when
the store is opened, and the steps the role modules use: the usable check, embedding a segment's
chunks and a query's sentences, the one write, and public ids resolved within a session.

The role modules (:mod:`~contextsieve.stash.write`, :mod:`~contextsieve.stash.retrieve`,
:mod:`~contextsieve.stash.records`, :mod:`~contextsieve.stash.maintenance`) take a :class:`StashCore`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import numpy as np

from contextsieve.errors import EmbedderOutputError, InputError, StashModelError, UnknownSegmentError, brief, check_text
from contextsieve.models.registry import model_family
from contextsieve.retrieval.embedding import TextEmbedder, checked_vectors
from contextsieve.retrieval.query import Query
from contextsieve.retrieval.text import query_chunks, token_windows
from contextsieve.stash.backend import SegmentRow, StashBackend
from contextsieve.stash.config import StashConfig
from contextsieve.stash.ids import qualified
from contextsieve.stash.segment import ContextSegment, SegmentType, check_ids

__all__ = [
    "StashCore",
    "Progress",
    "PROGRESS_PART",
    "EMBED_FORM_KEY",
    "MAX_TOP_K",
    "check_count",
    "utc_now",
    "with_model",
]

#: Largest ``top_k`` of a retrieve (and the default bound of :func:`check_count`).
MAX_TOP_K = 1_000
#: Meta key of how a store embeds its segments: ``"type"`` (``<type>: <text>``) or ``"plain"``.
EMBED_FORM_KEY = "stash:embed-form"
#: ``progress(done, total)``: texts embedded so far out of all a call embeds.
Progress = Callable[[int, int], None]
#: Texts embedded between two calls of a stash's ``progress`` callback.
PROGRESS_PART = 64


def utc_now() -> datetime:
    """The current time, aware, in UTC."""
    return datetime.now(timezone.utc)


def check_count(value: object, what: str, upper: int = MAX_TOP_K) -> int:
    """``value`` if it is an int in ``1..upper`` (default :data:`MAX_TOP_K`); else InputError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= upper:
        raise InputError(f"{what} must be an int in 1..{upper}, got {brief(value)}")
    return value


def with_model(s: ContextSegment, model: str, chunks: int) -> ContextSegment:
    """``s`` embedded with ``model`` into ``chunks`` chunk vectors."""
    return dataclasses.replace(s, embedding_model=model, chunks=chunks)


class StashCore:
    """A stash store's state and shared steps (see the module docstring); arguments and errors as
    :class:`~contextsieve.stash.store.StashStore`.

    Attributes:
        backend, embedder, config: as given (``config`` defaults to :class:`StashConfig`).
        model_id: the embedder's model id (recorded on the store's first write).
        lock: held around each write (an ``RLock``).
        rebuilding: the store was opened to rebuild it; every other call refuses until the rebuild ends.
        embed_type: whether segments are embedded as ``<type>: <text>`` (see :attr:`StashConfig.embed_type`).
    """

    def __init__(
        self, backend: StashBackend, embedder: TextEmbedder, config: StashConfig | None = None, *, rebuild: bool = False
    ) -> None:
        self.backend = backend
        self.embedder = embedder
        self.config = config or StashConfig()
        model = getattr(embedder, "model_id", None)
        if not isinstance(model, str) or not model:
            raise InputError("the stash needs an embedder with a model_id (its vectors are kept on disk)")
        self.model_id = model
        self.lock = threading.RLock()
        self.rebuilding = rebuild
        meta = backend.meta()
        if not rebuild:
            if meta.rebuild_to is not None:
                raise StashModelError(
                    f"the stash {backend.location} is being re-embedded with {meta.rebuild_to}; finish it with "
                    f"`contextsieve stash rebuild {backend.location}`"
                )
            if meta.model is not None and model_family(meta.model) != model_family(model):
                raise StashModelError(
                    f"the stash {backend.location} holds vectors of {meta.model}, not of {model}; re-embed it with "
                    f"`contextsieve stash rebuild {backend.location}` (or open it with the model it was made with)"
                )
        recorded = backend.setting(EMBED_FORM_KEY)
        if recorded is None and meta.model is not None:
            recorded = "plain"  # segments written before the form was recorded: embedded without a type
        want = self.config.embed_type
        if recorded is not None and want is not None and want != (recorded == "type"):
            raise InputError(
                f"the stash {backend.location} embeds segments {'with' if recorded == 'type' else 'without'} their "
                f"type (embed_type={recorded == 'type'}); open it with embed_type=None, or export it and import it "
                "into a new store to change that"
            )
        #: Whether segments are embedded as ``<type>: <text>`` (see :attr:`StashConfig.embed_type`).
        self.embed_type: bool = recorded == "type" if recorded is not None else want is not False

    def check_usable(self) -> None:
        """StashModelError when the store was opened to rebuild it (and the rebuild has not ended)."""
        if self.rebuilding:
            raise StashModelError("this store was opened to rebuild it; call rebuild() and open it again")

    # -- embedding --------------------------------------------------------------------------------

    def embed(self, texts: list[str], show_progress: bool = False, progress: Progress | None = None) -> np.ndarray:
        """Checked vectors of ``texts`` (``[len(texts), dim]``), ``progress`` called after each
        :data:`PROGRESS_PART` texts when given."""
        if not texts:
            return np.zeros((0, 0), np.float32)
        if progress is None:
            return checked_vectors(self.embedder.embed(texts, show_progress=show_progress), len(texts))
        parts = []
        for lo in range(0, len(texts), PROGRESS_PART):  # parts of the same work, each one reported
            part = texts[lo : lo + PROGRESS_PART]
            parts.append(checked_vectors(self.embedder.embed(part, show_progress=show_progress), len(part)))
            progress(lo + len(part), len(texts))
        return np.concatenate(parts)

    def segment_vectors(
        self,
        texts: Sequence[str],
        types: Sequence[SegmentType],
        show_progress: bool,
        progress: Progress | None = None,
    ) -> tuple[list[np.ndarray], list[int]]:
        """Chunk vectors of each text (long texts windowed; each chunk as ``<type>: <chunk>`` when the
        store embeds types) and each text's model tokens."""
        cfg = self.config
        tokens = self.embedder.count_tokens(list(texts))
        pieces: list[list[str]] = []
        for text, n in zip(texts, tokens):
            if n <= cfg.chunk_tokens:
                pieces.append([text])
            else:
                pieces.append(token_windows(text, self.embedder.count_tokens, cfg.chunk_tokens, cfg.overlap_tokens))
        if self.embed_type:
            pieces = [[f"{SegmentType(t).value}: {p}" for p in ps] for ps, t in zip(pieces, types)]
        flat = [p for ps in pieces for p in ps]
        vectors = self.embed(flat, show_progress, progress)
        out: list[np.ndarray] = []
        start = 0
        for ps in pieces:
            out.append(vectors[start : start + len(ps)])
            start += len(ps)
        return out, [int(n) for n in tokens]

    def embed_query(self, query: object, given: np.ndarray | None = None) -> np.ndarray:
        """The vectors of ``query``'s sentences (:func:`~contextsieve.retrieval.text.query_chunks`), one row
        each: ``given`` checked against them when the caller has them, else a request's
        :class:`~contextsieve.retrieval.query.Query`'s own (its sentences are those; no second split
        and no model call when its model is of the store's family), else embedded here."""
        if isinstance(query, Query):
            n, own, model = query.n_sentences, query.vectors, query.model_id
            same = model is not None and model_family(model) == model_family(self.model_id)
            if given is None and own is not None and query.complete and n and same:
                try:  # its sentences are query_chunks(query.text)
                    return checked_vectors(np.asarray(own[:n]), n)
                except EmbedderOutputError as e:
                    raise InputError(f"the query's vectors: {e}") from e
            query = query.text
        if not isinstance(query, str):
            raise InputError(f"query must be a string, got {type(query).__name__}")
        check_text(query, "the query")  # a lone surrogate is refused as in stashed texts, not embedded
        chunks = query_chunks(query)
        if not chunks:
            raise InputError("query is empty")
        if given is None:
            return self.embed(chunks)
        arr = np.asarray(given)
        if arr.ndim != 2 or arr.shape[0] != len(chunks) or arr.dtype.kind != "f":
            raise InputError(
                f"query_vectors must be float [{len(chunks)}, dim] (one per query sentence), "
                f"got {arr.dtype} {arr.shape}"
            )
        try:
            return checked_vectors(arr, len(chunks))
        except EmbedderOutputError as e:
            raise InputError(f"query_vectors: {e}") from e

    # -- writes and ids ---------------------------------------------------------------------------

    def insert(
        self, rows: Sequence[SegmentRow], dedup: bool, supersede: Sequence[tuple[str, str]] = ()
    ) -> dict[int, str]:
        """Write rows and supersessions (one transaction), recording the model on a store's first write."""
        with self.lock:
            if rows and self.backend.meta().model is None:
                self.backend.put_setting(EMBED_FORM_KEY, "type" if self.embed_type else "plain", replace=False)
                self.backend.set_meta(self.model_id, int(rows[0].vectors.shape[1]), None)
            return self.backend.insert(rows, dedup, supersede)

    def resolve(self, ids: Sequence[str], session: str) -> dict[str, str]:
        """The stored id of each public id of ``session``: a name the session chose (stored with its
        session mark), else the id itself (a generated id, or one chosen before ids were per session);
        an id of no segment of the session maps to itself."""
        if not ids:
            return {}
        marked = {i: qualified(session, i) for i in ids}
        found = self.backend.sessions_of([*marked.values(), *ids])
        return {i: marked[i] if found.get(marked[i]) == session else i for i in ids}

    def owned(self, ids: object, session: str, what: str = "segment_ids") -> list[str]:
        """The stored ids of public ``ids`` of ``session``; :class:`UnknownSegmentError` for any
        that is no segment of the session (whether or not another session has one by that name)."""
        if isinstance(ids, str):
            ids = [ids]
        wanted = check_ids(ids, what)
        if not wanted:
            raise InputError(f"{what} is empty")
        stored = self.resolve(wanted, session)
        found = self.backend.sessions_of(list(stored.values()))
        unknown = [i for i in wanted if found.get(stored[i]) != session]
        if unknown:
            raise UnknownSegmentError(f"no segment {unknown[:5]} in session {session!r}")
        return [stored[i] for i in wanted]
