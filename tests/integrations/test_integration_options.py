"""The keyword options of ``ToolSelector.from_tools`` and ``ContextSieveToolFilter`` (``**options`` typed
by a TypedDict): every keyword still works as before, and an unknown one is the TypeError Python gave
for a function with those keyword parameters."""

from __future__ import annotations

from typing import Any

import pytest

from contextsieve.agent.items import IncludeMode, Reference, Rule
from contextsieve.errors import InputError
from contextsieve.integrations.openai_agents import ContextSieveToolFilter, FilterOptions
from contextsieve.integrations.selector import SELECTOR_OPTIONS, SelectorOptions, ToolSelector, ToolSpec
from contextsieve.session.offer import OfferConfig
from tests.helpers.fake_embedder import FakeEmbedder


def test_from_tools_takes_every_option_by_keyword() -> None:
    rule = Rule("tone", "Answer briefly.", include=IncludeMode.AGENT)
    reference = Reference("faq", "Refunds take five days.", include=IncludeMode.AGENT)
    selector = ToolSelector.from_tools(
        [ToolSpec("get_time", "the current time", server="clock"), ToolSpec("refund", "refund an order")],
        always_include=["get_time"],
        max_tools=1,
        rules=[rule],
        references=[reference],
        system_prompt="You help.",
        name="helper",
        embedder=FakeEmbedder(),
        cache_dir=False,
        offer=OfferConfig(mode="stable"),
        stash=None,
        stash_session=None,
        preset="normal",
        server_descriptions={"clock": "time and dates"},
    )
    agent = selector.session.agent
    assert (agent.name, agent.system_prompt, selector.max_tools) == ("helper", "You help.", 1)
    assert agent.get(rule.key) is not None and agent.get(reference.key) is not None
    assert agent.server_descriptions()["clock"] == "time and dates"
    assert selector.session.offer.mode == "stable"
    assert selector.choose("refund my order").tools[0] == "get_time"
    # the defaults: what the parameters defaulted to
    plain = ToolSelector.from_tools([ToolSpec("t")], embedder=FakeEmbedder(), cache_dir=False)
    assert (plain.session.agent.name, plain.session.agent.system_prompt) == ("agent", "")
    assert set(SelectorOptions.__annotations__) == SELECTOR_OPTIONS


def test_an_unknown_keyword_is_the_same_type_error() -> None:
    with pytest.raises(TypeError, match=r"^ToolSelector\.from_tools\(\) got an unexpected keyword argument 'embeder'$"):
        ToolSelector.from_tools([ToolSpec("t")], embeder=FakeEmbedder())  # type: ignore[call-arg]
    with pytest.raises(
        TypeError, match=r"^ContextSieveToolFilter\.__init__\(\) got an unexpected keyword argument 'max_tool'$"
    ):
        ContextSieveToolFilter(max_tool=3)  # type: ignore[call-arg]


def test_the_filter_takes_its_options_by_keyword() -> None:
    assert set(FilterOptions.__annotations__) == {"always_include", "max_tools", "offer", "embedder", "cache_dir"}
    sieve = ContextSieveToolFilter(
        always_include=["t"], max_tools=2, offer=OfferConfig(), embedder=FakeEmbedder(), cache_dir=False, sync=False
    )
    assert sieve.selector is None and sieve.fail_open
    selector = ToolSelector.from_tools([ToolSpec("t", "a tool")], embedder=FakeEmbedder(), cache_dir=False)
    bad: list[tuple[dict[str, Any], str]] = [
        ({"max_tools": 0}, "max_tools must be None or an int >= 1"),
        ({"always_include": "t"}, "always_include must be a list of tool names, not one str"),
        ({"always_include": [1]}, "always_include must hold tool names"),
        ({"offer": "stable"}, "offer must be an OfferConfig"),
        ({"selector": selector, "max_tools": 2, "cache_dir": False}, "with a selector, give max_tools, cache_dir to"),
    ]
    for kwargs, message in bad:
        with pytest.raises(InputError, match=message):
            ContextSieveToolFilter(**kwargs)
