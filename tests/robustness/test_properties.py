"""Hypothesis property tests of the public API and the agent-file loader under hostile input.

The targets live in :mod:`tests.helpers.properties` (``python -m benchmarks.robustness.fuzz`` runs them at length);
here each runs a bounded number of examples: every call either returns a result that keeps its
properties or raises a :class:`~contextsieve.errors.ContextSieveError`.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.properties import TARGETS, State, make_state, outcome

EXAMPLES = {
    "agent_file": 150,
    "embed": 150,
    "request": 200,
    "stash_api": 150,
    "mcp_tools": 150,
    "mcp_stdio": 150,
    "mcp_http": 150,
}


@pytest.fixture(scope="module")
def state(int8, model_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[State]:  # noqa: ANN001
    s = make_state(int8, Path(tmp_path_factory.mktemp("properties")), model_cache)
    yield s
    s.close()


@pytest.mark.parametrize("target", TARGETS, ids=[t.name for t in TARGETS])
def test_hostile_input_gets_a_result_or_a_typed_error(target, state: State) -> None:  # noqa: ANN001
    @settings(
        max_examples=EXAMPLES.get(target.name, 300),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(rng=st.randoms(use_true_random=False))
    def run(rng: random.Random) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kind, err = outcome(target, state, rng)
        assert kind in ("ok", "typed"), f"{kind}: {err!r}"[:2000]

    run()


TEXT = st.text(
    st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, categories=["Cs"])),
    max_size=300,
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(message=TEXT, key=st.one_of(TEXT, st.sampled_from(["rule:refunds", "reference:pricing", "tool:fs:read_file"])))
def test_any_unicode_text_reaches_every_text_entry_point_safely(message: str, key: str) -> None:
    """Plain Hypothesis text (lone surrogates included) into each place text enters the engine: a
    message with a lone surrogate is an InputError everywhere; any other text gets a result."""
    from contextsieve.engine import Engine
    from contextsieve.errors import InputError, UnknownItemError
    from contextsieve.retrieval.text import query_chunks
    from tests.helpers.agents import make_agent
    from tests.helpers.fake_embedder import FakeEmbedder

    engine = Engine(make_agent(), embedder=FakeEmbedder(), cache_dir=False)
    session = engine.session()
    surrogate = any(0xD800 <= ord(c) <= 0xDFFF for c in message)
    assert all(isinstance(c, str) and c for c in query_chunks(message))
    for call in (lambda: session.build_request(message), lambda: session.expand_from(message)):
        if surrogate:
            with pytest.raises(InputError, match="surrogate"):
                call()
        else:
            call()
    known = engine.agent.has(key) if ":" in key and not any(0xD800 <= ord(c) <= 0xDFFF for c in key) else False
    try:
        explanation = session.explain(message, key)
    except (InputError, UnknownItemError):
        assert surrogate or not known
    else:
        assert known and not surrogate and str(explanation.key) == key


def test_cases_the_fuzz_found() -> None:
    """Each raised an untyped error before (found by ``python -m benchmarks.robustness.fuzz``)."""
    import numpy as np

    from contextsieve.agent.items import ItemKey
    from contextsieve.agent.settings import AgentSettings
    from contextsieve.errors import InputError
    from contextsieve.kernels import scoring as K
    from contextsieve.retrieval.chunks import ChunkIndex
    from contextsieve.retrieval.text import query_chunks
    from tests.helpers.agents import make_agent

    q, c = np.ones((1, 4), np.float32), np.ones((3, 4), np.float32)
    assert K.score_pool_topk(q, c, 2**70).idx.tolist() == [0, 1, 2]  # OverflowError in the Numba path
    for k in (True, 1.5, "2", None):
        with pytest.raises(InputError, match="k must be an int"):
            K.top_k(np.zeros(3, np.float32), k)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        query_chunks(object())  # type: ignore[arg-type]
    with pytest.raises(InputError):
        make_agent().get({"a": 1})  # type: ignore[arg-type]
    with pytest.raises(InputError):
        ItemKey.parse(7)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="keys must be ints"):
        ChunkIndex(4).add([(0, c), ("1", c)])  # type: ignore[list-item]
    with pytest.raises(InputError, match="unknown preset"):
        AgentSettings().with_overrides({"x": 1})  # type: ignore[arg-type]
    assert not make_agent().has("nonsense:key:here:x")
    with pytest.raises(InputError, match="setting query_pooling must be one of"):
        AgentSettings(query_pooling=np.array(["max", "mean"]))  # type: ignore[arg-type]  # ValueError before


def test_a_float_setting_too_large_for_a_float_is_an_agent_file_error(tmp_path: Path) -> None:
    """Found by the fuzz: ``topP: 1e400`` written as an integer raised OverflowError."""
    from contextsieve.agent.agentfile import load_agent
    from contextsieve.errors import AgentFileError

    path = tmp_path / "a.yaml"
    path.write_text("name: a\nsettings:\n  topP: " + "1" + "0" * 400 + "\n", encoding="utf-8")
    with pytest.raises(AgentFileError, match="settings.topP"):
        load_agent(path)
