"""Agent files that name their mistakes (issue 40, item 3).

A key nobody reads is a warning with its likely meaning; an empty file, an unknown MCP server type or
include mode is an error listing the valid values; every error names its place once; YAML errors name
the file, line and column. Files of the reference format (every key it defines) load without warnings.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import yaml

from contextsieve.agent.agentfile import example_agent_path, load_agent, save_agent
from contextsieve.errors import AgentFileError, AgentFileWarning

ROOT = Path(__file__).resolve().parents[2]
UNREAD = "it is kept in the file but not read"


def write(p: Path, text: str) -> Path:
    p.write_text(text, encoding="utf-8")
    return p


def load_quietly(path: Path) -> tuple[object, list[str]]:
    """The agent and every AgentFileWarning its load issued (all shown: no once-per-place filter)."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        agent = load_agent(path)
    return agent, [str(w.message) for w in got if issubclass(w.category, AgentFileWarning)]


# --- unknown keys: a warning with the likely meaning, the load goes on ---------------------------------


@pytest.mark.parametrize(
    "text, where, hint",
    [
        ("rulez:\n  - {name: a, text: b}\n", "rulez", "did you mean 'rules'?"),
        ("settings: {contextTopn: 3}\n", "settings.contextTopn", "did you mean 'contextTopN'?"),
        ("settings: {context_top_n: 3}\n", "settings.context_top_n", "did you mean 'contextTopN'?"),
        ("settings: {keyword_weight: 0.3}\n", "settings.keyword_weight", "it belongs under settings.contextsieve"),
        ("contextTopN: 3\nrules: []\n", "contextTopN", "it belongs under settings"),
        ("description: a shop bot\nrules: []\n", "description", "it belongs under metadata"),
        ("metadata: {nmae: bot}\n", "metadata.nmae", "did you mean 'name'?"),
        ("tools: {s: [{name: t}]}\nrules: []\n", "tools", "tools belong under mcpServers.<server>.tools"),
        ("refs: []\nrules: []\n", "refs", "did you mean 'references'?"),
        ("systemPromt: Be kind.\n", "systemPromt", "did you mean 'systemPrompt'?"),
        ("rules: [{name: a, text: b, descripton: d}]\n", "rules[0].descripton", "did you mean 'description'?"),
        ("references: [{name: a, text: b, priority: 3}]\n", "references[0].priority", "did you mean 'priorityLevel'?"),
        ("mcpServers: {s: {type: stdio, comand: x}}\n", "mcpServers.s.comand", "did you mean 'command'?"),
        (
            "mcpServers: {s: {command: x, include: agent}}\n",
            "mcpServers.s.include",
            "it belongs under serverToolDefaults",
        ),
        (
            "mcpServers: {s: {command: x, serverToolDefaults: {inclde: agent}}}\n",
            "mcpServers.s.serverToolDefaults.inclde",
            "did you mean 'include'?",
        ),
        (
            "mcpServers: {s: {command: x, tools: {t: {description: d, permissionRequried: false}}}}\n",
            "mcpServers.s.tools.t.permissionRequried",
            "did you mean 'permissionRequired'?",
        ),
        (  # an unquoted comma in a flow mapping: the rest of the text became a key
            "mcpServers: {s: {command: x, tools: {t: {description: Look up a payment, its amount}}}}\n",
            "mcpServers.s.tools.t.its amount",
            "a key without a value: the rest of a text cut at a comma inside {...}? put the text in quotes",
        ),
        (  # nothing close: the keys of that place
            "mcpServers: {s: {command: x, tools: {t: {description: d, zzz: 1}}}}\n",
            "mcpServers.s.tools.t.zzz",
            "known here: permissionRequired, include, embeddings, hash, description, inputSchema, summary",
        ),
    ],
)
def test_a_key_nobody_reads_is_a_warning_with_its_likely_meaning(
    tmp_path: Path, text: str, where: str, hint: str
) -> None:
    p = write(tmp_path / "agent.yaml", text)
    with pytest.warns(AgentFileWarning) as got:
        agent = load_agent(p)
    expected = f"{p}: {where}: unknown key ({hint}); {UNREAD}"
    assert [str(w.message) for w in got] == [expected]
    assert agent.load_warnings == (expected,)  # kept for explain / the inspect page
    assert got[0].filename == __file__  # shown at the caller's line, not inside contextsieve


def test_each_problem_is_warned_once_and_the_keys_survive_a_save(tmp_path: Path) -> None:
    p = write(tmp_path / "agent.yaml", "rulez: [{name: a, text: b}]\nsettings: {contextTopn: 3, theme: dark}\n")
    agent, got = load_quietly(p)
    assert len(got) == 2 and len(set(got)) == 2 and tuple(got) == agent.load_warnings  # type: ignore[attr-defined]
    assert "rulez:" in got[0] and "settings.contextTopn:" in got[1]
    saved = yaml.safe_load(save_agent(agent, tmp_path / "out.yaml").read_text(encoding="utf-8"))  # type: ignore[arg-type]
    assert saved["rulez"] == [{"name": "a", "text": "b"}] and saved["settings"]["contextTopn"] == 3


def test_a_file_full_of_unknown_keys_gets_a_bounded_list(tmp_path: Path) -> None:
    p = write(tmp_path / "agent.yaml", "rules: []\n" + "".join(f"k{i}: 1\n" for i in range(500)))
    agent, got = load_quietly(p)
    assert len(got) == 20 and got[-1] == f"{p}: 481 more keys that nobody reads (not listed)"
    assert agent.load_warnings == tuple(got)  # type: ignore[attr-defined]


def test_legacy_front_matter_keys_are_checked_where_they_are_written(tmp_path: Path) -> None:
    d = tmp_path / "bob"
    (d / "rules").mkdir(parents=True)
    (d / "tsagent.json").write_text(json.dumps({"metadata": {"name": "Bob"}, "setings": {}}))
    (d / "rules" / "a.mdt").write_text("---\ndescription: d\nincldue: agent\nenabled: true\n---\nRule text.\n")
    agent, got = load_quietly(d)
    assert got == [
        f"{d / 'rules' / 'a.mdt'}: front matter.incldue: unknown key (did you mean 'include'?); {UNREAD}",
        f"{d / 'tsagent.json'}: setings: unknown key (did you mean 'settings'?); {UNREAD}",
    ]
    assert agent.get("rule:a").text == "Rule text."  # type: ignore[attr-defined]


# --- mistakes that are errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "null\n", "~\n", "{}\n", "---\n"])
def test_an_empty_file_is_an_error(tmp_path: Path, text: str) -> None:
    p = write(tmp_path / "agent.yaml", text)
    with pytest.raises(AgentFileError) as e:
        load_agent(p)
    assert str(e.value).startswith(f"{p}: is empty: an agent file needs at least one of name, systemPrompt, rules")


@pytest.mark.parametrize(
    "text, where, what",
    [
        (
            "mcpServers: {s: {type: stdoi, command: x}}",
            "mcpServers.s.type",
            "'stdoi' is not an MCP server type (did you mean 'stdio'?)",
        ),
        ("mcpServers: {s: {type: htpp, url: 'http://x'}}", "mcpServers.s.type", "'htpp' is not an MCP server type"),
        ("mcpServers: {s: {transport: ssse, url: 'http://x'}}", "mcpServers.s.transport", "(did you mean 'sse'?)"),
        ("mcpServers: {s: {type: 5, command: x}}", "mcpServers.s.type", "5 is not an MCP server type"),
    ],
)
def test_an_unknown_server_type_is_an_error_at_load(tmp_path: Path, text: str, where: str, what: str) -> None:
    p = write(tmp_path / "agent.yaml", text)
    with pytest.raises(AgentFileError) as e:
        load_agent(p)
    message = str(e.value)
    assert message.startswith(f"{p}: {where}: ") and what in message
    assert message.endswith("; valid: stdio, streamable-http, sse, internal")


def test_every_server_type_the_client_starts_loads(tmp_path: Path) -> None:
    servers = {
        "a": {"type": "stdio", "command": "x", "args": []},
        "b": {"type": "sse", "url": "http://x"},
        "c": {"type": "streamable-http", "url": "http://x"},
        "d": {"type": "internal", "tool": "rules"},
        "e": {"type": "http", "url": "http://x"},  # spellings the MCP client takes too
        "f": {"transport": "streamableHttp", "url": "http://x"},
        "g": {"command": "x"},  # no type: stdio by its command
    }
    agent, got = load_quietly(write(tmp_path / "agent.yaml", json.dumps({"mcpServers": servers})))
    assert got == [] and sorted(agent.servers) == sorted(servers)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text, where",
    [
        ("rules: [{name: a, text: b, include: agnet}]", "rules[0].include"),
        ("references: [{name: a, text: b, include: expansion}]", "references[0].include"),
        (
            "mcpServers: {s: {command: x, serverToolDefaults: {include: agnet}}}",
            "mcpServers.s.serverToolDefaults.include",
        ),
        ("mcpServers: {s: {command: x, tools: {t: {include: agnet}}}}", "mcpServers.s.tools.t.include"),
        (
            "mcpServers: {s: {command: x, tools: {t: {description: d, include: agnet}}}}",
            "mcpServers.s.tools.t.include",
        ),
        (  # the legacy field, migrated to serverToolDefaults
            'mcpServers: {s: {command: x, toolInclude: {serverDefault: "agnet"}}}',
            "mcpServers.s.serverToolDefaults.include",
        ),
    ],
)
def test_an_unknown_include_mode_lists_the_valid_ones(tmp_path: Path, text: str, where: str) -> None:
    p = write(tmp_path / "agent.yaml", text)
    with pytest.raises(AgentFileError) as e:
        load_agent(p)
    message = str(e.value)
    assert message.startswith(f"{p}: {where}: ") and message.endswith("; valid: always, manual, agent")
    if "agnet" in text:
        assert "'agnet' is not an include mode (did you mean 'agent'?)" in message


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "rules: [{name: a, text: b}, {name: c, text: d}, {name: e, text: f}, {name: g}]",
            "rules[3].text: is required",
        ),
        (
            "rules: [{name: a, text: b}, {name: c, text: d}, {name: e, text: f}, {name: g, txt: h}]",
            "rules[3].text: is required (the item has 'txt': did you mean 'text'?)",
        ),
        ("references: [{text: t}]", "references[0].name: is required"),
        ("rules: [{name: r, text: [1, 2]}]", "rules[0].text: must be a string, got list"),
        ("rules: [{name: r, text: t, summary: 3}]", "rules[0].summary: must be a string, got int"),
        (
            "mcpServers: {s: {command: x, tools: {t: {description: d, summary: [x]}}}}",
            "mcpServers.s.tools.t.summary: must be a string, got list",
        ),
        (
            "mcpServers: {s: {command: x, tools: {t: {description: d, inputSchema: [x]}}}}",
            "mcpServers.s.tools.t.inputSchema: must be a mapping, got list",
        ),
        (
            "mcpServers: {s: {command: x, serverToolDefaults: {permissionRequired: 'no'}}}",
            "mcpServers.s.serverToolDefaults.permissionRequired: must be true or false, got str 'no'",
        ),
    ],
)
def test_an_error_names_its_place_once(tmp_path: Path, text: str, expected: str) -> None:
    p = write(tmp_path / "agent.yaml", text)
    with pytest.raises(AgentFileError) as e:
        load_agent(p)
    assert str(e.value) == f"{p}: {expected}"


def test_an_unknown_contextsieve_setting_says_what_it_likely_is(tmp_path: Path) -> None:
    p = write(tmp_path / "agent.yaml", "settings: {contextsieve: {keyword_weigth: 1}}")
    with pytest.raises(AgentFileError) as e:
        load_agent(p)
    assert (
        str(e.value) == f"{p}: settings.contextsieve.keyword_weigth: unknown setting (did you mean 'keyword_weight'?)"
    )


@pytest.mark.parametrize(
    "text, where",
    [
        ("rules: [\n  {name: a\n", "line 3, column 1: expected ',' or '}', but got '<stream end>'"),
        ("rules:\n  - name: a\n\ttext: b\n", "line 3, column 1: found character '\\t' that cannot start any token"),
        ("rules: []\nsettings: {}\nrules: [{name: a, text: b}]\n", "line 3, column 1: duplicate key 'rules'"),
        ("x: " + "[" * 100 + "]" * 100, "line 1, column 67: nested more than 64 levels deep"),
    ],
)
def test_a_yaml_error_names_the_file_line_and_column(tmp_path: Path, text: str, where: str) -> None:
    p = write(tmp_path / "agent.yaml", text)
    with pytest.raises(AgentFileError) as e:
        load_agent(p)
    message = str(e.value)
    assert message.startswith(f"{p}: not valid YAML: {where}") and "<unicode string>" not in message


def test_a_legacy_front_matter_yaml_error_names_the_mdt_file(tmp_path: Path) -> None:
    d = tmp_path / "bob"
    (d / "rules").mkdir(parents=True)
    (d / "tsagent.json").write_text(json.dumps({"metadata": {"name": "Bob"}}))
    mdt = write(d / "rules" / "a.mdt", '---\n{"name": "a", \n---\nRule text.\n')
    with pytest.raises(AgentFileError) as e:
        load_agent(d)
    assert str(e.value).startswith(f"{mdt}: front matter: not YAML/JSON: line 2, column 1: ")


# --- files of the reference format load without warnings -----------------------------------------------

#: Every key the reference format defines (tsagent-notes.md §1; the zod schemas of TeamSparkAI/tsagent
#: a229ec4), in the places it defines them, plus the legacy server fields it still migrates.
EVERY_REFERENCE_KEY = """\
metadata:
  name: Everything
  version: 1.0.2
  description: Every key of the reference format
  iconUrl: https://example.com/icon.png
  documentationUrl: https://example.com/docs
  provider: {organization: Example LLC, url: https://example.com}
  autonomous: false
  skills: [{id: s1, name: Skill, description: d, tags: [a], examples: [e]}]
  tools: [{name: t, description: d, parameters: {type: object, properties: {}}, prompt: p}]
  created: 2025-04-07T17:32:29.081Z
  lastAccessed: 2025-04-07T17:32:29.081Z
settings:
  maxChatTurns: 20
  maxOutputTokens: 4000
  temperature: 0
  topP: 0.05
  theme: light
  systemPath: /usr/bin:/bin
  model: gemini:gemini-2.5-flash
  contextTopK: 20
  contextTopN: 5
  contextIncludeScore: 0.7
  toolPermission: tool
systemPrompt: You are an agent.
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
    text: Test Reference
    include: agent
    embeddings: # Delete embeddings when editing item, they will be automatically regenerated
      - [-0.04078000411391258, -0.043175067752599716]
providers:
  ollama: {}
  docker: {BASE_URL: http://localhost:12434/engines/v1}
mcpServers:
  fetch:
    type: stdio
    command: uvx
    args: [mcp-server-fetch]
    env: {FOO: bar}
    cwd: /tmp
    serverToolDefaults: {permissionRequired: true, include: agent}
    tools:
      fetch: {permissionRequired: false, include: agent, embeddings: [[0.1, 0.2]], hash: 25309c0b}
  remote: {type: sse, url: 'https://example.com/sse', headers: {Authorization: Bearer x}}
  stream: {type: streamable-http, url: 'https://example.com/mcp'}
  tools: {type: internal, tool: tools, serverToolDefaults: {permissionRequired: false, include: manual},
          tools: {listTools: {include: agent, embeddings: [[0.1]], hash: f39def}}}
  old:
    type: stdio
    command: old-server
    args: []
    toolInclude: {serverDefault: agent, tools: {a: manual}}
    toolPermissionRequired: {serverDefault: false, tools: {a: true}}
    toolEmbeddings: {tools: {a: {embeddings: [[0.1]], hash: abc}}}
supervisors: [{type: guardian, id: g1, name: Guard, config: {}}]
"""

#: contextsieve's own keys (its extensions of the format) in their places.
EVERY_CONTEXTSIEVE_KEY = """\
name: own-keys
settings:
  contextTopN: 3
  contextsieve: {tool_top_n: 2, keyword_weight: 0.5}
rules: [{name: a, text: b, summary: what it is about}]
mcpServers:
  shop:
    transport: stdio
    command: shop-mcp
    description: The shop's own server
    tools:
      book: {description: Book a repair slot, inputSchema: {type: object}, summary: repairs}
"""


def _notes_examples() -> list[str]:
    """The YAML examples of the reference notes (``../shared/reference/tsagent-notes.md`` §1, beside the
    repository where the project keeps it; none when it is not there)."""
    notes = ROOT.parent / "shared" / "reference" / "tsagent-notes.md"
    if not notes.is_file():
        return []
    blocks = re.findall(r"```yaml\n(.*?)```", notes.read_text(encoding="utf-8"), flags=re.S)
    return ["references:\n" + b if b.lstrip().startswith("- name") else b for b in blocks]  # an excerpt of a list


def _doc_agent_files() -> list[tuple[str, str]]:
    """Agent files written in the README and docs: ``yaml`` blocks and the YAML a Python example writes."""
    out = []
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = md.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, flags=re.S)):
            out.append((f"{md.name} yaml block {i}", block))
        for i, block in enumerate(re.findall(r'\.write_text\(\n\s*"""\n(.*?)"""', text, flags=re.S)):
            out.append((f"{md.name} python example {i}", block))
    return out


def test_reference_format_files_load_without_warnings(tmp_path: Path) -> None:
    docs = _doc_agent_files()
    assert len(docs) >= 2  # the README's bikes.yaml, docs/mcp.md's dev-helper
    texts = [("every reference key", EVERY_REFERENCE_KEY), ("every contextsieve key", EVERY_CONTEXTSIEVE_KEY)]
    texts += [(f"tsagent-notes example {i}", t) for i, t in enumerate(_notes_examples())] + docs
    for i, (what, text) in enumerate(texts):
        agent, got = load_quietly(write(tmp_path / f"{i}.yaml", text))
        assert got == [], what
    agent, got = load_quietly(write(tmp_path / "every.yaml", EVERY_REFERENCE_KEY))
    assert agent.settings.context_top_n == 5 and agent.get("reference:testRef").include.value == "agent"  # type: ignore[attr-defined]


def test_a_legacy_folder_with_every_key_loads_without_warnings(tmp_path: Path) -> None:
    d = tmp_path / "bob"
    (d / "rules").mkdir(parents=True)
    (d / "refs").mkdir()
    doc = yaml.safe_load(EVERY_REFERENCE_KEY)
    legacy = {k: doc[k] for k in ("metadata", "settings", "providers", "mcpServers", "supervisors")}
    legacy["settings"] = {"maxChatTurns": "10", "mostRecentModel": "x:y", "theme": "dark", "systemPath": "/bin"}
    (d / "tsagent.json").write_text(json.dumps(legacy, default=str))  # the dates as strings, as JSON has them
    (d / "prompt.md").write_text("You help Bob.")
    (d / "rules" / "a.mdt").write_text(
        '---\n{\n  "name": "a",\n  "description": "d",\n  "priorityLevel": 0,\n  "include": "always"\n}---\nA.\n'
    )
    (d / "refs" / "b.mdt").write_text("---\nname: b\ndescription: d\nenabled: true\ninclude: agent\n---\nB.\n")
    agent, got = load_quietly(d)
    assert got == [] and agent.settings.llm.model == "x:y"  # type: ignore[attr-defined]


def _agent_files_in_the_repo() -> list[Path]:
    """Agent files kept as files in the repository (test and benchmark data, the bundled example)."""
    found = [example_agent_path()]
    for folder in (ROOT / "tests" / "data", ROOT / "benchmarks" / "data", ROOT / "engine" / "data"):
        for pattern in ("*.yaml", "*.yml", "tsagent.json"):
            found += [p for p in folder.rglob(pattern) if p.resolve() != example_agent_path().resolve()]
    return found


@pytest.mark.parametrize(
    "path",
    _agent_files_in_the_repo(),
    ids=lambda p: p.name,
)
def test_agent_files_in_the_repo_load_without_warnings(path: Path) -> None:
    _, got = load_quietly(path.parent if path.name == "tsagent.json" else path)
    assert got == []
