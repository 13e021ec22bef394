"""The reference format's LLM settings (model, temperature, top_p, max_output_tokens, max_chat_turns):
apart from selection in ``AgentSettings.llm``, loaded from agent files and written back as before, and
still set by their own names where settings are overridden."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import yaml

from contextsieve import AgentSettings, LlmSettings
from contextsieve.agent.agentfile import load_agent, save_agent
from contextsieve.agent.settings import LLM_SETTINGS
from contextsieve.errors import AgentFileError, AgentFileWarning, InputError


def test_defaults_and_ranges_are_the_reference_formats() -> None:
    llm = AgentSettings().llm
    assert llm == LlmSettings(model=None, temperature=0.5, top_p=0.5, max_output_tokens=1000, max_chat_turns=20)
    assert LLM_SETTINGS == ("model", "temperature", "top_p", "max_output_tokens", "max_chat_turns")
    for name, bad, message in [
        ("temperature", 1.5, "setting temperature must be a number in 0.0..1.0, got 1.5"),
        ("top_p", "high", "setting top_p must be a number in 0.0..1.0, got 'high'"),
        ("max_output_tokens", 0, "setting max_output_tokens must be an int in 1..10000000, got 0"),
        ("max_chat_turns", 2.0, "setting max_chat_turns must be an int in 1..1000000, got 2.0"),
    ]:
        with pytest.raises(InputError) as e:
            LlmSettings(**{name: bad})
        assert str(e.value) == message
        with pytest.raises(InputError) as e:
            AgentSettings().with_overrides(**{name: bad})
        assert str(e.value) == message


def test_overrides_by_the_old_names_set_llm() -> None:
    s = AgentSettings().with_overrides("aggressive", temperature=0.2, model="a:b", context_top_n=4)
    assert (s.llm.temperature, s.llm.model, s.llm.top_p, s.context_top_n) == (0.2, "a:b", 0.5, 4)
    assert (s.temperature, s.model) == (0.2, "a:b")  # read by the old names too
    given = s.with_overrides(llm=LlmSettings(top_p=0.9), max_chat_turns=3)  # the names apply to the llm given
    assert given.llm == LlmSettings(top_p=0.9, max_chat_turns=3)
    assert s.for_tools().llm == s.llm
    with pytest.raises(InputError, match="unknown settings"):
        AgentSettings().with_overrides(temprature=0.2)
    with pytest.raises(InputError, match="setting llm must be an LlmSettings, got dict"):
        AgentSettings().with_overrides(llm={"temperature": 0.2}, top_p=0.1)
    with pytest.raises(InputError, match="setting llm must be an LlmSettings, got dict"):
        AgentSettings(llm={"temperature": 0.2})  # type: ignore[arg-type]


def test_the_constructor_names_where_an_llm_setting_went() -> None:
    with pytest.raises(InputError) as e:
        AgentSettings(temperature=0.2)  # type: ignore[call-arg]
    assert "AgentSettings(llm=LlmSettings(temperature=...))" in str(e.value)
    assert AgentSettings(llm=LlmSettings(temperature=0.2)).temperature == 0.2
    with pytest.raises(AttributeError):
        AgentSettings().temperature = 0.3  # type: ignore[misc]


def test_as_dict_is_json_and_what_overrides_take() -> None:
    s = AgentSettings().with_overrides(temperature=0.1, model="x:y", tool_settings={"keyword_weight": 0.5})
    d = json.loads(json.dumps(s.as_dict()))
    assert "llm" not in d and d["temperature"] == 0.1 and d["model"] == "x:y"
    assert AgentSettings().with_overrides(**d) == s


def test_agent_files_load_and_save_them_under_the_reference_names(tmp_path: Path) -> None:
    src = tmp_path / "a.yaml"
    src.write_text(
        "name: a\nsettings: {mostRecentModel: 'p:m', topP: 0.3, maxChatTurns: '7', contextsieve: {tool_top_n: 4}}\n",
        encoding="utf-8",
    )
    agent = load_agent(src)
    assert agent.settings.llm == LlmSettings(model="p:m", top_p=0.3, max_chat_turns=7)
    agent.settings = agent.settings.with_overrides(temperature=0.9)
    out = save_agent(agent, tmp_path / "b.yaml")
    settings = yaml.safe_load(out.read_text(encoding="utf-8"))["settings"]
    assert settings == {
        "model": "p:m",
        "topP": 0.3,
        "maxChatTurns": 7,
        "temperature": 0.9,
        "contextsieve": {"tool_top_n": 4},
    }
    assert load_agent(out).settings == agent.settings


@pytest.mark.parametrize(
    "text, where",
    [
        ("settings: {contextsieve: {llm: {temperature: 0.2}}}", "settings.contextsieve.llm: unknown setting"),
        ("settings: {contextsieve: {temperature: 0.2}}", "['temperature'] are reference settings"),
        ("settings: {temperature: 2}", "settings: setting temperature must be a number in 0.0..1.0, got 2.0"),
    ],
)
def test_an_llm_setting_in_the_wrong_place_is_an_error(tmp_path: Path, text: str, where: str) -> None:
    p = tmp_path / "agent.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(AgentFileError, match=re.escape(where)):
        load_agent(p)


def test_an_llm_key_under_settings_says_where_they_go(tmp_path: Path) -> None:
    p = tmp_path / "agent.yaml"
    p.write_text("settings: {llm: {temperature: 0.2}}", encoding="utf-8")
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        load_agent(p)
    said = [str(w.message) for w in got if issubclass(w.category, AgentFileWarning)]
    assert said == [
        f"{p}: settings.llm: unknown key (the LLM settings go under settings by their own names: maxChatTurns, "
        "maxOutputTokens, temperature, topP, model); it is kept in the file but not read"
    ]
