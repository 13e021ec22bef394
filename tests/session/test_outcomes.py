"""Learning from the outcome (issue 29): Session.record_outcome keeps called tools as examples and the
request's other selected tools as misses; a request close to a tool's misses lowers its ranking score
by outcome_weight x closeness (checked against a numpy oracle), explain says so, the misses persist
like the examples, a later call of the tool removes its miss, and outcome_weight=0 turns it off."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.agent.settings import MISS_SIMILARITY
from contextsieve.engine import Engine
from contextsieve.errors import InputError, UnknownItemError
from tests.helpers.fake_embedder import FakeEmbedder


class Named(FakeEmbedder):
    model_id = "fake-for-outcomes"  # a model id: the disk cache and the usage log are used


def agent() -> Agent:
    g = IncludeMode.AGENT
    return Agent(
        name="travel",
        servers={"w": McpServer("w", default_include=g), "t": McpServer("t", default_include=g)},
        tools=[
            Tool("w", "forecast", "weather forecast rain sun for a city tomorrow"),
            Tool("w", "air_quality", "air quality pollution for a city tomorrow"),
            Tool("t", "flights", "search flights to a city"),
            Tool("t", "hotels", "book hotels in a city"),
        ],
    )


FORECAST = ItemKey(ItemKind.TOOL, "forecast", "w")
AIR = ItemKey(ItemKind.TOOL, "air_quality", "w")
MSG = "rain in Paris tomorrow for a city trip"


def test_misses_lower_a_tool_by_the_weight_times_closeness_and_explain_says_so(tmp_path: Path) -> None:
    e = Engine(
        agent(), embedder=Named(), cache_dir=tmp_path, remember_requests=True, history=tmp_path / "history.sqlite"
    )
    s = e.session(outcome_weight=0.25, keyword_weight=0.0)
    request = s.build_request(MSG)
    offered = {t["name"] for t in request.tools}
    assert {"w_forecast", "w_air_quality"} <= offered
    before = {x.key: x.score for x in request.context.entries}
    done = s.record_outcome(request, ["w_forecast"])
    assert done["examples"] == [str(FORECAST)] and str(AIR) in done["misses"] and done["failed"] == []
    assert s.outcomes[str(AIR)] == {"offered": 1, "called": 0, "failed": 0}
    assert s.outcomes[str(FORECAST)] == {"offered": 1, "called": 1, "failed": 0}

    # the same message again: closeness 1, so air_quality's ranking loses exactly the weight
    trace = s.build_request(MSG).trace
    assert trace is not None
    facts = trace.facts(AIR)
    assert facts is not None and facts.outcome == pytest.approx(-0.25, abs=1e-5)
    assert trace.facts(ItemKey(ItemKind.TOOL, "flights", "t")).outcome == 0.0  # type: ignore[union-attr]
    reasons = " ".join(s.explain(MSG, AIR).reasons)
    assert "not called" in reasons and "0.250" in reasons

    # the oracle: per chunk, -weight x clip((max cos(query, miss) - MISS_SIMILARITY) / (1 - it), 0, 1)
    other = "pollution city tomorrow please"
    t2 = s.build_request(other).trace
    assert t2 is not None
    miss = FakeEmbedder().embed([MSG])[0]
    q = FakeEmbedder().embed([other])
    closeness = np.clip(((q @ miss).max() - MISS_SIMILARITY) / (1 - MISS_SIMILARITY), 0, 1)
    assert t2.facts(AIR).outcome == pytest.approx(-0.25 * closeness, abs=1e-5)  # type: ignore[union-attr]

    # off switch: weight 0 gives the scores as if nothing were recorded (examples aside)
    off = e.session(outcome_weight=0.0, keyword_weight=0.0).build_request(MSG).trace
    assert off is not None and off.facts(AIR).outcome == 0.0  # type: ignore[union-attr]
    assert {
        x.key: x.score for x in e.session(outcome_weight=0.0, keyword_weight=0.0).build_request(MSG).context.entries
    }[AIR] == pytest.approx(before[AIR])

    # persisted beside the examples: a new engine on the same folder has the miss
    e2 = Engine(
        agent(), embedder=Named(), cache_dir=tmp_path, remember_requests=True, history=tmp_path / "history.sqlite"
    )
    assert e2.store.usage().examples("travel", 10, "misses")[AIR] == (MSG,)
    t3 = e2.session(outcome_weight=0.25).build_request(MSG).trace
    assert t3 is not None and t3.facts(AIR).outcome == pytest.approx(-0.25, abs=1e-5)  # type: ignore[union-attr]

    # the tool called later for the same message: its miss is gone
    s2 = e2.session(outcome_weight=0.25)
    s2.record_outcome(s2.build_request(MSG), ["w:air_quality"])
    assert AIR not in e2.store.usage().examples("travel", 10, "misses")
    assert AIR in e2.store.usage().examples("travel", 10)


def test_bad_outcomes_are_typed_and_record_nothing(tmp_path: Path) -> None:
    e = Engine(
        agent(), embedder=Named(), cache_dir=tmp_path, remember_requests=True, history=tmp_path / "history.sqlite"
    )
    s = e.session()
    request = s.build_request(MSG)
    with pytest.raises(InputError):
        s.record_outcome(request, ["w_forecast"], failed=["w_air_quality"])  # failed but not called
    with pytest.raises(UnknownItemError):
        s.record_outcome(request, ["w_forecast", "w:nope"])
    with pytest.raises(InputError):
        s.record_outcome(request, "w_forecast")  # one str, not a list
    with pytest.raises(InputError):
        s.record_outcome("not a request", [])  # type: ignore[arg-type]
    with pytest.raises(InputError):
        e.session(outcome_weight=1.5)
    assert e.store.usage().examples("travel", 10) == {} and e.store.usage().examples("travel", 10, "misses") == {}
    assert s.outcomes == {}
    # a failed call is counted, never an example
    done = s.record_outcome(request, ["w_forecast"], failed=["w_forecast"])
    assert done["examples"] == [] and done["failed"] == [str(FORECAST)]
    assert s.outcomes[str(FORECAST)]["failed"] == 1
    assert FORECAST not in e.store.usage().examples("travel", 10)
    assert s.forget_outcomes() >= 1 and e.store.usage().examples("travel", 10, "misses") == {}
