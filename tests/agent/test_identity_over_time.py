"""An agent's identity follows the agent, not its file's path: a rename, a move of its folder, a hard
link, a symlink and an edit of its name keep it; another agent written at the same path, or a copy beside
the original, gets its own; a declared ``id`` holds everywhere. Its tools' names are kept with it, so a
name once given never means another tool, in this process or the next."""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import pytest
import yaml

from contextsieve import Engine
from contextsieve.agent.agent import McpServer
from contextsieve.agent.identity import AgentPrint, AgentRecord, birth, match, path_identity
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Tool
from contextsieve.agent.registry import AgentRegistry
from contextsieve.errors import AgentRegistryWarning, UnknownItemError
from tests.helpers.fake_embedder import FakeEmbedder

RULES = [
    {"name": "refunds", "text": "Refunds over 500 EUR need a manager's approval.", "include": "agent"},
    {"name": "tone", "text": "Answer in two sentences at most.", "include": "always"},
    {"name": "privacy", "text": "Never repeat an IBAN back to the customer.", "include": "agent"},
]


def write_agent(
    path: Path, name: str | None = "travel-desk", prompt: str = "You help travellers.", **extra: object
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {"systemPrompt": prompt, "rules": RULES, **extra}
    if name is not None:
        doc = {"name": name, **doc}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def load(path: Path, registry: AgentRegistry) -> Engine:
    return Engine.from_file(path, registry=registry, embedder=FakeEmbedder(), cache_dir=False)


@pytest.fixture
def registry(tmp_path: Path) -> AgentRegistry:
    return AgentRegistry(tmp_path / "data" / "agents.sqlite")


def test_rename_move_link_and_name_edit_keep_the_identity(tmp_path: Path, registry: AgentRegistry) -> None:
    first = write_agent(tmp_path / "proj" / "agent.yaml")
    born = load(first, registry)
    assert born.resolution is not None and born.resolution.how == "new"
    identity = born.agent.identity
    assert identity == path_identity("travel-desk", str(first.resolve()))  # what an earlier version gave it

    renamed = first.with_name("billing.yaml")
    first.rename(renamed)
    again = load(renamed, registry)
    assert (again.agent.identity, again.resolution.how) == (identity, "moved")  # type: ignore[union-attr]
    assert "it was at" in again.resolution.note()  # type: ignore[union-attr]

    shutil.move(str(tmp_path / "proj"), str(tmp_path / "moved" / "proj"))
    moved = tmp_path / "moved" / "proj" / "billing.yaml"
    assert load(moved, registry).agent.identity == identity

    text = moved.read_text().replace("name: travel-desk", "name: Travel Desk")
    moved.write_text(text)
    edited = load(moved, registry)
    assert edited.agent.name == "Travel Desk" and edited.agent.identity == identity
    assert edited.resolution.how == "same file"  # type: ignore[union-attr]

    link = tmp_path / "hard.yaml"
    os.link(moved, link)
    assert load(link, registry).agent.identity == identity  # the same file under a second name
    sym = tmp_path / "sym.yaml"
    sym.symlink_to(moved)
    assert load(sym, registry).agent.identity == identity
    assert load(moved, registry).agent.identity == identity  # the original path still is the agent


def test_another_agent_at_the_same_path_gets_its_own(tmp_path: Path, registry: AgentRegistry) -> None:
    """Two containers' /app/agent.yaml on one data volume: the path is the same, the agents are not."""
    path = tmp_path / "app" / "agent.yaml"
    write_agent(path, None, "You answer payroll questions.", rules=RULES[:1])
    payroll = load(path, registry).agent.identity
    write_agent(path, None, "You plan trips.", rules=RULES[1:])
    trips = load(path, registry).agent.identity
    assert payroll != trips and payroll.startswith("agent-") and trips.startswith("agent-")
    write_agent(path, None, "You answer payroll questions.", rules=RULES[:1])
    assert load(path, registry).agent.identity == payroll  # each finds its own again
    write_agent(path, None, "You plan trips.", rules=RULES[1:])
    assert load(path, registry).agent.identity == trips


def test_a_copy_beside_the_original_is_another_agent_named_as_similar(tmp_path: Path, registry: AgentRegistry) -> None:
    original = write_agent(tmp_path / "a" / "agent.yaml")
    first = load(original, registry).agent.identity
    copy = tmp_path / "b" / "agent.yaml"
    copy.parent.mkdir()
    shutil.copy(original, copy)
    engine = load(copy, registry)
    assert engine.agent.identity != first and engine.resolution.how == "new"  # type: ignore[union-attr]
    assert [r.identity for r in registry.similar(engine.agent)] == [first]
    assert registry.adopt(engine.agent, first).identity == first  # the one command that makes it the same
    assert load(copy, registry).agent.identity == first
    assert load(original, registry).agent.identity == first


def test_a_declared_id_holds_everywhere(tmp_path: Path, registry: AgentRegistry) -> None:
    a = write_agent(tmp_path / "a" / "agent.yaml", id="travel-desk-prod")
    b = write_agent(tmp_path / "b" / "other.yaml", name="Other", id="travel-desk-prod")
    assert load(a, registry).agent.identity == load(b, registry).agent.identity == "travel-desk-prod"


def test_the_matching_rules_on_records() -> None:
    parts = frozenset({"p1", "p2", "p3", "p4", "p5"})
    old = AgentRecord("desk-1", AgentPrint("desk", "/old/agent.yaml", "1:2", parts), 10.0)
    gone = lambda _p: False  # noqa: E731
    there = lambda _p: True  # noqa: E731
    moved = AgentPrint("desk", "/new/agent.yaml", "1:9", parts)
    assert match(moved, [old], exists=gone).how == "moved"  # type: ignore[union-attr]
    assert match(moved, [old], exists=there) is None  # the old file is still there: a copy
    assert match(moved, [old], exists=there, anywhere=True).how == "store"  # type: ignore[union-attr]
    four = AgentPrint("desk", "/new/agent.yaml", "", frozenset({"p1", "p2", "p3", "p4", "x"}))
    assert match(four, [old], exists=gone) is None  # 4 of 6: too little for another path
    same = AgentPrint("Desk", "/old/agent.yaml", "", frozenset({"p1", "p2", "p3", "p4", "x"}))
    assert match(same, [old], exists=there).how == "same file"  # type: ignore[union-attr]  # 4 of 6 in place
    rewritten = AgentPrint("desk", "/old/agent.yaml", "", frozenset({"p1", "p2", "p3", "x", "y"}))
    assert match(rewritten, [old], exists=there) is None  # 3 of 7: more rewritten than kept
    other = AgentPrint("desk", "/old/agent.yaml", "", frozenset({"q1", "q2"}))
    assert match(other, [old], exists=there) is None
    assert birth(other, {"desk-1"}.__contains__) == path_identity("desk", "/old/agent.yaml")
    taken = birth(other, {path_identity("desk", "/old/agent.yaml")}.__contains__)
    assert taken.startswith("desk-") and taken != path_identity("desk", "/old/agent.yaml")


def _tool(server: str, name: str) -> Tool:
    return Tool(server, name, f"{name} on {server}", {"type": "object"}, include=IncludeMode.AGENT)


def test_a_tool_name_never_changes_meaning(tmp_path: Path, registry: AgentRegistry) -> None:
    """Issue 47 item 3: a tool added later used to take the name the host held (rule 3 moved the older
    tool to 12 hex digits) and the gateway forwarded the next call to the newcomer."""
    path = write_agent(tmp_path / "agent.yaml")
    engine = load(path, registry)
    agent = engine.agent
    agent.add_server(McpServer("a_b"))
    agent.upsert(_tool("a_b", "c"))
    held = agent.tool_names().name(ItemKey(ItemKind.TOOL, "c", "a_b"))
    assert held == "a_b_c"
    agent.add_server(McpServer("a"))
    agent.upsert(_tool("a", "b_c"))  # its plain name is a_b_c too
    names = agent.tool_names()
    assert names.name(ItemKey(ItemKind.TOOL, "c", "a_b")) == held == "a_b_c"
    newcomer = names.name(ItemKey(ItemKind.TOOL, "b_c", "a"))
    assert newcomer != held and newcomer.startswith("a_b_c_")
    # a server naming its tool as the newcomer's hashed name cannot take it
    agent.add_server(McpServer("x"))
    server, _, tool = newcomer.partition("_")
    agent.add_server(McpServer(server))
    agent.upsert(_tool(server, tool))
    assert agent.tool_names().name(ItemKey(ItemKind.TOOL, "b_c", "a")) == newcomer
    # the next process of the agent gives every tool the same name, whatever order they come in
    later = load(path, registry).agent
    for s in ("a", "x", server, "a_b"):
        later.add_server(McpServer(s))
    for t in reversed(agent.tools):
        later.upsert(t)
    assert {n: str(k) for n, k in later.tool_names().items()} == {n: str(k) for n, k in agent.tool_names().items()}
    # a tool that is gone: its name is a clear error, never another tool, also once something new comes
    later.delete(ItemKey(ItemKind.TOOL, "c", "a_b"))
    later.add_server(McpServer("a_b_c"))
    with pytest.raises(UnknownItemError, match="no longer has"):
        later.tool_names().key(held)
    assert held not in later.tool_names()
    later.upsert(Tool("a_b", "c", "back again", {"type": "object"}))
    assert later.tool_names().name(ItemKey(ItemKind.TOOL, "c", "a_b")) == held  # the same tool: its name


def test_a_registry_that_cannot_be_written_fails_open(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("a file where the data folder should be")
    path = write_agent(tmp_path / "agent.yaml")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = load(path, AgentRegistry(tmp_path / "data" / "agents.sqlite"))
    assert engine.resolution is None
    assert engine.agent.identity == path_identity("travel-desk", str(path.resolve()))
    assert any(issubclass(w.category, AgentRegistryWarning) and "cannot be opened" in str(w.message) for w in caught)
    engine.agent.add_server(McpServer("s"))
    engine.agent.upsert(_tool("s", "t"))
    assert engine.agent.tool_names().name(ItemKey(ItemKind.TOOL, "t", "s")) == "s_t"  # names go on in memory


def test_learned_examples_follow_the_agent(tmp_path: Path, registry: AgentRegistry) -> None:
    """Examples kept with --remember-requests were scoped by the file's path: a rename lost them."""
    servers = {"ops": {"type": "stdio", "command": "x"}}
    path = write_agent(tmp_path / "proj" / "agent.yaml", mcpServers=servers)
    key = ItemKey(ItemKind.TOOL, "restart", "ops")

    def engine(at: Path) -> Engine:
        e = Engine.from_file(
            at, registry=registry, embedder=FakeEmbedder(), cache_dir=tmp_path / "cache", remember_requests=True
        )
        e.agent.upsert(Tool("ops", "restart", "Restart a service", {"type": "object"}, include=IncludeMode.AGENT))
        return e

    engine(path).record_tool_calls("the checkout service is down, bring it back", [key])
    moved = tmp_path / "moved.yaml"
    path.rename(moved)
    kept = engine(moved).store.usage().examples(registry.records()[0].identity, 5)
    assert kept == {key: ("the checkout service is down, bring it back",)}
    # examples an earlier version kept under the file's path move to the identity on first use
    from contextsieve.agent.usage import UsageLog

    old = write_agent(tmp_path / "old" / "agent.yaml", mcpServers=servers)
    UsageLog(tmp_path / "cache" / "usage.sqlite").record(str(old.resolve()), "restart checkout", [key])
    e = engine(old)
    assert e.store.usage().examples(e.agent.identity, 5) == {key: ("restart checkout",)}
    assert e.store.usage().examples(str(old.resolve()), 5) == {}
