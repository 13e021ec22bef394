"""Calling the selection's cut in tests with its rule's fields as keywords."""

from __future__ import annotations

from typing import Any

import numpy as np

from contextsieve.selection.ranking import CutRule, Ranked, Selected
from contextsieve.selection.ranking import cut as cut_by_rule


def cut(
    ranked: Ranked,
    owner: np.ndarray,
    *,
    words: tuple[str, ...] | None = None,
    examples: np.ndarray | None = None,
    **rule: Any,
) -> tuple[list[Selected], list[Selected]]:
    """:func:`~contextsieve.selection.ranking.cut` with :class:`CutRule`'s fields as keywords."""
    return cut_by_rule(ranked, owner, CutRule(**rule), words=words, examples=examples)
