"""Agent files: the current YAML format, the legacy directory, migrations, round trips, errors."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest
import yaml

from contextsieve.agent.agentfile import load_agent, save_agent
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind
from contextsieve.errors import AgentFileError, AgentFileWarning

CURRENT = """\
metadata:
  name: Optimizer
  created: '2025-11-26T10:00:00Z'
  autonomous: false
settings: {maxChatTurns: 20, maxOutputTokens: 4000, temperature: 0, topP: 0.05,
           mostRecentModel: 'gemini:gemini-2.5-flash',
           contextTopK: 20, contextTopN: 5, contextIncludeScore: 0.7, toolPermission: tool, theme: dark}
systemPrompt: You are an autonomous agent.
rules:
  - name: be-brief
    description: Keep answers short
    priorityLevel: 100
    text: Answer in at most three sentences.
    include: always
references:
  - name: testRef
    description: Test Reference
    priorityLevel: 500
    text: |-
      Full name is Bob Dickinson
      Lives in Carnation, WA
    include: agent
    embeddings:
      - [-0.04078000411391258, -0.043175067752599716]
      - [-0.05780867859721184, 0.017749670892953873]
providers: {gemini: {GOOGLE_API_KEY: xyz}}
supervisors: [{type: guardian, id: g1, name: Guard, config: {}}]
mcpServers:
  fetch:
    type: stdio
    command: uvx
    args: [mcp-server-fetch]
    serverToolDefaults: {permissionRequired: true, include: agent}
    tools:
      fetch:
        permissionRequired: false
        description: Fetches a URL from the internet and returns its contents as markdown
        hash: 25309c0b
  tools: {type: internal, tool: tools, serverToolDefaults: {permissionRequired: false, include: manual},
          tools: {listTools: {include: agent, description: List the tools of the agent}}}
"""


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


def test_current_format_loads_with_migrations(tmp_path: Path) -> None:
    agent = load_agent(write(tmp_path / "a.yaml", CURRENT))
    assert agent.name == "Optimizer" and agent.system_prompt == "You are an autonomous agent."
    s = agent.settings
    assert (s.llm.model, s.llm.temperature, s.llm.top_p, s.llm.max_output_tokens) == (
        "gemini:gemini-2.5-flash",
        0.0,
        0.05,
        4000,
    )
    assert (s.model, s.temperature, s.max_chat_turns) == ("gemini:gemini-2.5-flash", 0.0, 20)  # the old names read llm
    assert agent.get("reference:testRef").text == "Full name is Bob Dickinson\nLives in Carnation, WA"
    fetch = agent.get("tool:fetch:fetch")
    assert agent.include_mode(fetch) is IncludeMode.AGENT and agent.permission_required(fetch) is False
    assert agent.include_mode(agent.get("tool:tools:listTools")) is IncludeMode.AGENT
    assert agent.get("rule:be-brief").include is IncludeMode.ALWAYS


def test_round_trip_keeps_unused_fields(tmp_path: Path) -> None:
    agent = load_agent(write(tmp_path / "a.yaml", CURRENT))
    save_agent(agent, tmp_path / "b.yaml")
    doc = yaml.safe_load((tmp_path / "b.yaml").read_text())
    assert doc["providers"] == {"gemini": {"GOOGLE_API_KEY": "xyz"}} and doc["supervisors"][0]["id"] == "g1"
    assert (
        doc["settings"]["theme"] == "dark"
        and doc["settings"]["model"] == "gemini:gemini-2.5-flash"
        and "mostRecentModel" not in doc["settings"]
    )
    assert doc["references"][0]["embeddings"][0] == [-0.04078000411391258, -0.043175067752599716]
    assert doc["mcpServers"]["fetch"]["tools"]["fetch"]["hash"] == "25309c0b"
    assert "[-0.04078000411391258, -0.043175067752599716]" in (tmp_path / "b.yaml").read_text()  # vectors on one line
    again = load_agent(tmp_path / "b.yaml")
    assert [r.key for r in again.all_items()] == [r.key for r in agent.all_items()]
    assert again.settings == agent.settings and again.system_prompt == agent.system_prompt
    assert again.get("reference:testRef").text == agent.get("reference:testRef").text
    folder = tmp_path / "dir"
    folder.mkdir()
    save_agent(agent, folder / "tsagent.yaml")
    assert load_agent(folder).name == "Optimizer"


def test_legacy_directory(tmp_path: Path) -> None:
    d = tmp_path / "bob"
    (d / "rules").mkdir(parents=True)
    (d / "refs").mkdir()
    (d / "tsagent.json").write_text(
        json.dumps(
            {
                "metadata": {"name": "Bob"},
                "settings": {
                    "maxChatTurns": "10",
                    "contextTopK": "15",
                    "temperature": "0.2",
                    "contextIncludeScore": "0.8",
                    "mostRecentModel": "x:y",
                },
                "mcpServers": {
                    "fs": {
                        "type": "stdio",
                        "command": "fs",
                        "args": [],
                        "toolInclude": {"serverDefault": "agent", "tools": {"write": "manual"}},
                        "toolPermissionRequired": {"serverDefault": False},
                        "toolEmbeddings": {"tools": {}},
                    }
                },
            }
        )
    )
    (d / "prompt.md").write_text("# Bob\nYou help Bob.")
    (d / "rules" / "zero.mdt").write_text(
        '---\n{\n  "name": "zero",\n  "description": "d",\n  "priorityLevel": 0,\n  "include": '
        '"always"\n}---\nRule text\n---\nwith a rule line\n'
    )
    (d / "rules" / "plain.mdt").write_text("---\ndescription: yaml front matter\nenabled: true\n---\nPlain rule.\n")
    (d / "refs" / "about.mdt").write_text(
        '---\n{"name": "about", "description": "", "priorityLevel": 500, "include": "agent"}---\nAbout Bob.\n'
    )
    catalog = {"fs": [{"name": "write", "description": "write a file"}, {"name": "read", "description": "read a file"}]}
    agent = load_agent(d, tools=catalog)
    assert agent.system_prompt == "# Bob\nYou help Bob."
    assert (
        agent.settings.llm.max_chat_turns,
        agent.settings.context_top_k,
        agent.settings.llm.temperature,
        agent.settings.llm.model,
    ) == (10, 15, 0.2, "x:y")
    zero = agent.get("rule:zero")
    assert zero.priority == 0 and zero.text == "Rule text\n---\nwith a rule line" and zero.include is IncludeMode.ALWAYS
    plain = agent.get("rule:plain")
    assert (plain.name, plain.priority, plain.include, plain.description) == (
        "plain",
        500,
        IncludeMode.MANUAL,
        "yaml front matter",
    )
    assert (
        agent.include_mode(agent.get("tool:fs:read")) is IncludeMode.AGENT
        and agent.include_mode(agent.get("tool:fs:write")) is IncludeMode.MANUAL
    )
    assert agent.permission_required(agent.get("tool:fs:read")) is False
    save_agent(agent, d / "tsagent.yaml")  # migrated next to the legacy files, which stay
    again = load_agent(d, tools=catalog)
    assert again.get(ItemKey(ItemKind.RULE, "zero")).priority == 0 and (d / "tsagent.json").exists()
    assert again.include_mode(again.get("tool:fs:write")) is IncludeMode.MANUAL  # the migrated fields were written


@pytest.mark.parametrize(
    "text, where",
    [
        ("rules: {a: 1}", "rules/references"),
        ("settings: {contextTopK: lots}", "settings.contextTopK"),
        ("settings: {contextTopK: 500}", "settings"),
        ("rules: [{name: 'bad name', text: x}]", "rules[0]"),
        ("rules: [{name: ok}]", "rules[0]"),
        ("references: [{name: r, text: t, include: sometimes}]", "references[0]"),
        ("mcpServers: {s: {serverToolDefaults: {include: never}}}", "mcpServers.s"),
        ("- just\n- a list", "top level"),
        ("rules: [", "not valid YAML"),
        ('rules: [{name: r, text: "a \\ud800 b"}]', "rules[0]"),
        ("rules: [{name: r, text: [1, 2]}]", "rules[0].text"),
        ("mcpServers: {s: {serverToolDefaults: x}}", "mcpServers.s.serverToolDefaults"),
        ("mcpServers: {s: {tools: {t1: agent}}}", "mcpServers.s.tools.t1"),
        ("mcpServers: {s: {tools: {t1: {permissionRequired: 'no'}}}}", "mcpServers.s.tools"),
        ("metadata: {autonomous: 'false'}", "metadata.autonomous"),
        ('rules: [{name: "rule\\n", text: x}]', "rules[0]"),
        ("rules: []\nrules: [{name: a, text: b}]", "duplicate key 'rules'"),
        ("x: " + "[" * 100_000 + "]" * 100_000, "nested more than 64"),
        ("a: &a [x, x]\nb: [" + ", ".join(["*a"] * 101) + "]", "more than 100 aliases"),
        (  # an alias bomb within the alias limit: 9 levels of 9 shared lists (9**9 leaves if expanded)
            "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9 if i else ["x"] * 9) + "]\n" for i in range(9))
            + "rules: [{name: r, text: t, priorityLevel: *l8}]",
            "rules[0]",
        ),
    ],
)
def test_malformed_files_name_the_file_and_field(tmp_path: Path, text: str, where: str) -> None:
    p = write(tmp_path / "bad.yaml", text)
    with pytest.raises(AgentFileError) as e:
        load_agent(p)
    assert str(p) in str(e.value) and where in str(e.value)


def test_failed_save_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agent = load_agent(write(tmp_path / "a.yaml", CURRENT))
    target = write(tmp_path / "out.yaml", "original")

    def boom(*a: object, **k: object) -> str:
        raise RuntimeError("disk full")

    monkeypatch.setattr(yaml, "dump", boom)
    with pytest.raises(RuntimeError):
        save_agent(agent, target)
    assert target.read_text() == "original" and sorted(p.name for p in tmp_path.iterdir()) == ["a.yaml", "out.yaml"]


def test_missing_paths(tmp_path: Path) -> None:
    with pytest.raises(AgentFileError, match="no such agent file"):
        load_agent(tmp_path / "nope.yaml")
    with pytest.raises(AgentFileError, match="no tsagent"):
        load_agent(tmp_path)
    os.mkfifo(tmp_path / "pipe.yaml")  # there, but no file to read (it was "no such agent file")
    with pytest.raises(AgentFileError, match=r"pipe\.yaml: not a regular file or folder$"):
        load_agent(tmp_path / "pipe.yaml")
    with pytest.raises(AgentFileError, match="cannot read: File name too long$"):  # was a raw OSError
        load_agent(tmp_path / ("a" * 300 + ".yaml"))


def _saved_and_loaded(agent, tmp_path: Path, catalog=None):  # noqa: ANN001, ANN202
    out = tmp_path / "saved.yaml"
    save_agent(agent, out)
    return load_agent(out, tools=catalog), yaml.safe_load(out.read_text(encoding="utf-8"))


def test_untouched_files_round_trip_to_the_same_document(tmp_path: Path) -> None:
    from contextsieve import example_agent_path

    for src in (write(tmp_path / "a.yaml", CURRENT), example_agent_path()):
        want = yaml.safe_load(src.read_text(encoding="utf-8"))
        want["settings"]["model"] = want["settings"].pop("mostRecentModel", want["settings"].get("model"))
        if want["settings"]["model"] is None:
            del want["settings"]["model"]
        _, got = _saved_and_loaded(load_agent(src), tmp_path)
        assert got == want, src


def test_every_kind_of_edit_survives_save_and_load(tmp_path: Path) -> None:
    """Failed before the fix: the loaded document won over the agent's own fields on save."""
    from contextsieve.agent.agent import McpServer
    from contextsieve.agent.items import Reference, Rule, Tool

    agent = load_agent(write(tmp_path / "a.yaml", CURRENT))
    agent.name, agent.autonomous, agent.system_prompt = "Renamed", True, "A new prompt."
    agent.settings = agent.settings.with_overrides(context_top_n=9, keyword_weight=0.1, model="x:y")
    agent.upsert(Rule("added-rule", "Say please.", "politeness", 10, IncludeMode.AGENT))
    agent.upsert(
        Rule("be-brief", "Answer in one sentence.", "Keep answers short", 100, IncludeMode.ALWAYS)
    )  # changed text
    agent.delete("reference:testRef")  # a rename: delete, then add under the new name
    agent.upsert(Reference("test-ref-2", "Full name is Bob Dickinson", "Test Reference", 500, IncludeMode.AGENT))
    agent.delete("tool:tools:listTools")  # a deleted declared tool must not come back
    fetch = agent.get("tool:fetch:fetch")
    assert isinstance(fetch, Tool)
    agent.upsert(
        Tool("fetch", "fetch", "Downloads a web page", {"type": "object"}, IncludeMode.MANUAL, True)
    )  # changed
    agent.add_server(
        McpServer(
            "time", {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"]}, IncludeMode.AGENT, False, "clock"
        )
    )
    agent.upsert(Tool("time", "get_current_time", "Current time in a timezone"))
    agent.remove_server("tools")
    again, doc = _saved_and_loaded(agent, tmp_path)
    assert (again.name, again.autonomous, again.system_prompt) == ("Renamed", True, "A new prompt.")
    assert (again.settings.context_top_n, again.settings.keyword_weight, again.settings.llm.model) == (9, 0.1, "x:y")
    assert [r.name for r in again.rules] == ["added-rule", "be-brief"] and again.get(
        "rule:be-brief"
    ).text == "Answer in one sentence."
    assert [r.name for r in again.references] == ["test-ref-2"]
    assert sorted(str(t.key) for t in again.tools) == ["tool:fetch:fetch", "tool:time:get_current_time"]
    f = again.get("tool:fetch:fetch")
    assert (f.description, again.include_mode(f), again.permission_required(f)) == (
        "Downloads a web page",
        IncludeMode.MANUAL,
        True,
    )
    assert doc["mcpServers"]["fetch"]["tools"]["fetch"]["hash"] == "25309c0b"  # unknown tool fields kept
    assert set(doc["mcpServers"]) == {"fetch", "time"} and doc["mcpServers"]["time"]["description"] == "clock"
    assert again.include_mode(again.get("tool:time:get_current_time")) is IncludeMode.AGENT
    assert doc["providers"] == {"gemini": {"GOOGLE_API_KEY": "xyz"}} and doc["settings"]["theme"] == "dark"


def test_changed_items_lose_stale_foreign_embeddings(tmp_path: Path) -> None:
    from contextsieve.agent.items import Reference

    agent = load_agent(write(tmp_path / "a.yaml", CURRENT))
    _, doc = _saved_and_loaded(agent, tmp_path)
    assert "embeddings" in doc["references"][0]  # untouched: kept
    old = agent.get("reference:testRef")
    agent.upsert(Reference(old.name, "New text", old.description, old.priority, old.include, extra=dict(old.extra)))
    _, doc = _saved_and_loaded(agent, tmp_path)
    assert "embeddings" not in doc["references"][0]  # the reference system would read them as current


def test_catalog_tools_are_not_written_into_the_file(tmp_path: Path) -> None:
    catalog = {
        "fetch": [
            {"name": "fetch", "description": "From the live server", "inputSchema": {"type": "object"}},
            {"name": "head", "description": "HEAD a URL"},
        ]
    }
    agent = load_agent(write(tmp_path / "a.yaml", CURRENT), tools=catalog)
    again, doc = _saved_and_loaded(agent, tmp_path, catalog)
    entry = doc["mcpServers"]["fetch"]["tools"]
    assert (
        "head" not in entry
        and entry["fetch"]["description"] == "Fetches a URL from the internet and returns its contents as markdown"
    )
    assert again.get("tool:fetch:fetch").description == "From the live server"
    offline = load_agent(tmp_path / "saved.yaml")  # overrides of tools it never saw are kept
    save_agent(offline, tmp_path / "offline.yaml")
    assert (
        yaml.safe_load((tmp_path / "offline.yaml").read_text())["mcpServers"]["fetch"]["tools"]["fetch"][
            "permissionRequired"
        ]
        is False
    )


def _legacy(tmp_path: Path) -> Path:
    d = tmp_path / "legacy"
    (d / "rules").mkdir(parents=True)
    (d / "tsagent.json").write_text(json.dumps({"metadata": {"name": "L"}}))
    return d


def test_legacy_mdt_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    """Failed before the fix with a raw UnicodeDecodeError."""
    d = _legacy(tmp_path)
    (d / "rules" / "latin.mdt").write_bytes(b'---\n{"name": "latin"}---\nCaf\xe9\n')
    with pytest.raises(AgentFileError, match=r"latin\.mdt: file: not UTF-8"):
        load_agent(d)
    (d / "rules" / "latin.mdt").unlink()
    (d / "prompt.md").write_bytes(b"\xff\xfe")
    with pytest.raises(AgentFileError, match=r"prompt\.md: file: not UTF-8"):
        load_agent(d)


def test_legacy_files_with_a_byte_order_mark_read_as_without_it(tmp_path: Path) -> None:
    """Issue: a Windows editor's BOM made tsagent.json "cannot read as JSON", hid a rule's front matter
    (the rule lost its name, priority and mode) and opened the system prompt with U+FEFF."""
    bom = b"\xef\xbb\xbf"
    d = _legacy(tmp_path)
    (d / "tsagent.json").write_bytes(bom + json.dumps({"metadata": {"name": "L"}}).encode())
    (d / "prompt.md").write_bytes(bom + b"You help L.")
    (d / "rules" / "first.mdt").write_bytes(
        bom + b'---\n{"name": "first", "priorityLevel": 7, "include": "always"}---\nBe brief.\n'
    )
    agent = load_agent(d)
    rule = agent.get("rule:first")
    assert (agent.name, agent.system_prompt) == ("L", "You help L.")
    assert (rule.priority, rule.include, rule.text) == (7, IncludeMode.ALWAYS, "Be brief.")


def test_legacy_folder_reads_regular_files_inside_it_only(tmp_path: Path) -> None:
    import os

    d = _legacy(tmp_path)
    os.mkfifo(d / "rules" / "pipe.mdt")  # would block the load forever if opened
    with pytest.raises(AgentFileError, match=r"pipe\.mdt: file: is not a regular file"):
        load_agent(d)
    (d / "rules" / "pipe.mdt").unlink()
    secret = tmp_path / "secret.txt"
    secret.write_text('---\n{"name": "s"}---\nsecret\n')
    (d / "rules" / "s.mdt").symlink_to(secret)
    with pytest.raises(AgentFileError, match="outside the agent folder"):
        load_agent(d)


def test_saving_to_a_folder_writes_its_tsagent_yaml(tmp_path: Path) -> None:
    """Failed before: IsADirectoryError (issue 10 item 5)."""
    agent = load_agent(write(tmp_path / "a.yaml", CURRENT))
    folder = tmp_path / "agent-folder"
    folder.mkdir()
    assert save_agent(agent, folder) == folder / "tsagent.yaml"
    assert load_agent(folder).name == "Optimizer"


def test_a_catalog_listing_a_server_the_agent_does_not_declare_is_named(tmp_path: Path) -> None:
    catalog = {
        "fetch": [{"name": "fetch", "description": "From the live server"}],
        "fethc": [{"name": "head", "description": "HEAD a URL"}],
    }
    with pytest.warns(AgentFileWarning) as caught:
        agent = load_agent(write(tmp_path / "a.yaml", CURRENT), tools=catalog)
    said = [str(w.message) for w in caught if "catalog" in str(w.message)]
    assert len(said) == 1
    assert "'fethc'" in said[0] and "did you mean 'fetch'?" in said[0] and "not offered" in said[0]
    assert said[0] in agent.load_warnings
    assert "tool:fethc:head" not in {str(t.key) for t in agent.tools}
    # a catalog of the agent's own servers says nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error", AgentFileWarning)
        load_agent(tmp_path / "a.yaml", tools={"fetch": catalog["fetch"]})
