"""Per-chunk terms a search adds to the ranking score besides the dense and keyword ones: a tool's
server profile (``server_weight``), its recorded misses (``outcome_weight``) and how its recorded
example requests count (:data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`). Each is an array over
the chunk rows of :meth:`~contextsieve.selection.chunk_store.ChunkStore.matrix`, or ``None`` when it
adds nothing."""

from __future__ import annotations

import numpy as np

from contextsieve.agent import settings as agent_settings
from contextsieve.agent.agent import ItemTable
from contextsieve.agent.settings import MISS_SIMILARITY
from contextsieve.kernels.scoring import query_scores
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.selection.recorded_requests import RecordedRequests

__all__ = ["server_boost", "outcome_penalty", "example_terms", "example_score", "summed"]


def server_boost(
    store: ChunkStore,
    table: ItemTable,
    mask: np.ndarray,
    owner: np.ndarray,
    qvec: np.ndarray,
    weight: float,
) -> np.ndarray | None:
    """Per chunk: ``weight`` x its tool's server profile score (best query chunk; see
    :meth:`ChunkStore.server_profiles`), 0 for rules and references; ``None`` when the weight is 0 or
    the candidates' tools come from fewer than two servers (a score every tool shares ranks nothing)."""
    if weight <= 0:
        return None
    servers = {table.items[i].server for i in np.flatnonzero(mask & table.tool).tolist()}
    if len(servers) < 2:
        return None
    profiles, of_item = store.server_profiles(table.keys)
    score = query_scores(profiles, qvec).max(axis=1)
    per_item = np.where(of_item >= 0, score[np.maximum(of_item, 0)], 0.0).astype(np.float32)
    return (np.float32(weight) * per_item)[owner]


def summed(*parts: np.ndarray | None) -> np.ndarray | None:
    """The sum of the per-chunk terms that are there (``None`` when none is)."""
    there = [p for p in parts if p is not None]
    if not there:
        return None
    out = there[0].copy() if len(there) > 1 else there[0]
    for p in there[1:]:
        out += p
    return out


def example_score(similarity: np.ndarray, gate: float | None = None) -> np.ndarray:
    """The ranking score of a recorded example request that a request matches at ``similarity`` cosine
    (at least the ``gate``, default :data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`): linear from
    :data:`~contextsieve.agent.settings.EXAMPLE_SCORE` there to 1 at 1, so a request much like an
    earlier one ranks its tool high while one merely near it ranks the tool as a weak description match
    would."""
    gate = agent_settings.EXAMPLE_SIMILARITY if gate is None else gate
    low = agent_settings.EXAMPLE_SCORE
    return (low + (similarity - gate) * (1.0 - low) / (1.0 - gate)).astype(np.float32)


def example_terms(
    examples: np.ndarray,
    chunks: np.ndarray,
    exclude: np.ndarray,
    qvec: np.ndarray,
    request_scores: np.ndarray | None = None,
    gate: float | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """How recorded example chunks (``examples``: bool per chunk row) are searched for the query
    vectors ``qvec``: ``exclude`` with those no query chunk matches at
    ``gate`` cosine or closer added (default :data:`~contextsieve.agent.settings.EXAMPLE_SIMILARITY`; an
    example speaks for its tool only for requests like itself), and per chunk what :func:`example_score`
    changes in the ranking score of the others (``None`` when no example is searched). ``request_scores``: per chunk
    row, the score of its recorded request for ``qvec``
    (:meth:`~contextsieve.selection.recorded_requests.NearRequests.best`: each request scored once,
    not once per tool it is an example of); without them, each example row is scored here."""
    live = examples & ~exclude
    if not live.any():
        return exclude, None
    rows = np.flatnonzero(live)
    if request_scores is not None:
        sims = request_scores[rows]
    else:
        sims = query_scores(chunks[rows], qvec).max(axis=1)
    gate = agent_settings.EXAMPLE_SIMILARITY if gate is None else gate
    near = sims >= gate
    out = exclude.copy()
    out[rows[~near]] = True
    if not near.any():
        return out, None
    change = np.zeros(exclude.shape[0], np.float32)
    change[rows[near]] = example_score(sims[near], gate) - sims[near]
    return out, change


def outcome_penalty(
    requests: tuple[RecordedRequests, np.ndarray] | None,
    mask: np.ndarray,
    owner: np.ndarray,
    weight: float,
) -> np.ndarray | None:
    """Per chunk: minus ``weight`` x how close the request is to its tool's recorded misses
    (``(cos - MISS_SIMILARITY) / (1 - MISS_SIMILARITY)``, clipped to 0..1, best pair of query chunk and
    miss); ``None`` when the weight is 0 or no candidate tool (``mask``, per item) has misses.
    ``requests``: the recorded requests (:meth:`~contextsieve.selection.chunk_store.ChunkStore.recorded_requests`)
    and each one's score for the request (:meth:`~contextsieve.selection.recorded_requests.NearRequests.best`)."""
    if weight <= 0 or requests is None:
        return None
    recorded, scores = requests
    misses = recorded.misses_of(np.flatnonzero(scores > MISS_SIMILARITY))  # only these can weigh: few
    misses = misses[mask[recorded.miss_item[misses]]]
    if not misses.size:
        return None
    sims = scores[recorded.miss_request[misses]]  # each request scored once, best query chunk
    closeness = np.clip((sims - MISS_SIMILARITY) / (1.0 - MISS_SIMILARITY), 0.0, 1.0)
    per_item = np.zeros(mask.shape[0], np.float32)
    np.maximum.at(per_item, recorded.miss_item[misses], closeness.astype(np.float32))
    if not per_item.any():
        return None
    return (np.float32(-weight) * per_item)[owner]
