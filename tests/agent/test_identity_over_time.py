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
    # found by the file id at another path, the old one gone: renamed, or a freed inode given to a new file
    renamed = AgentPrint("desk", "/old/billing.yaml", "1:2", frozenset({"p1", "p2", "p3", "p4", "x"}))
    assert match(renamed, [old], exists=gone).how == "moved"  # type: ignore[union-attr]  # its name: 4 of 6
    reborn = AgentPrint("billing-bot", "/old/billing.yaml", "1:2", frozenset({"p1", "p2", "p3", "p4", "y"}))
    assert match(reborn, [old], exists=gone) is None  # another name and 4 of 6: another agent on the inode
    assert match(reborn, [old], exists=there).how == "same file"  # type: ignore[union-attr]  # a hard link
    retitled = AgentPrint("Desk", "/old/billing.yaml", "1:2", parts)
    assert match(retitled, [old], exists=gone).how == "moved"  # type: ignore[union-attr]  # renamed inside: all parts
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
    assert any(
        issubclass(w.category, AgentRegistryWarning) and "cannot open the agent registry" in str(w.message)
        for w in caught
    )
    engine.agent.add_server(McpServer("s"))
    engine.agent.upsert(_tool("s", "t"))
    assert engine.agent.tool_names().name(ItemKey(ItemKind.TOOL, "t", "s")) == "s_t"  # names go on in memory


def test_a_path_that_is_not_utf8_fails_open_and_a_name_that_is_not_text_is_refused(
    tmp_path: Path, registry: AgentRegistry
) -> None:
    """Failed before: a bare UnicodeEncodeError out of the registry for a file name of bytes that are
    not UTF-8 (its path holds a surrogate escape), and for an agent named with a lone surrogate, made
    in code or read from a file (a hostile probe)."""
    from contextsieve.agent.agent import Agent
    from contextsieve.agent.agentfile import load_agent
    from contextsieve.errors import AgentFileError, InputError

    odd = Path(os.fsdecode(bytes(tmp_path / "agent") + b"\xff.yaml"))
    write_agent(odd)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = load(odd, registry)
    assert engine.resolution is None  # the registry could not keep it: the identity of its path, said
    assert engine.agent.identity == path_identity("travel-desk", str(odd.resolve()))
    assert any(issubclass(w.category, AgentRegistryWarning) and "not valid UTF-8" in str(w.message) for w in caught)
    assert [r.path for r in registry.records()] == []  # nothing half written
    with pytest.raises(AgentFileError, match="the file name: .*lone surrogate"):
        load_agent(write_agent(Path(os.fsdecode(bytes(tmp_path / "b") + b"\xff.yaml")), name=None))
    with pytest.raises(AgentFileError, match="name: .*lone surrogate"):
        load_agent(write_agent(tmp_path / "c.yaml", name="desk \ud800"))
    with pytest.raises(InputError, match="agent's name holds a lone surrogate"):
        Agent(name="desk \ud800")
    with pytest.raises(InputError, match="agent's name must be a string"):
        Agent(name=None)  # type: ignore[arg-type]


def test_learned_examples_follow_the_agent(tmp_path: Path, registry: AgentRegistry) -> None:
    """Examples kept with --remember-requests were scoped by the file's path: a rename lost them."""
    servers = {"ops": {"type": "stdio", "command": "x"}}
    path = write_agent(tmp_path / "proj" / "agent.yaml", mcpServers=servers)
    key = ItemKey(ItemKind.TOOL, "restart", "ops")

    class Named(FakeEmbedder):
        model_id = "fake-for-history"  # a model id: its history may be kept in a file

    def engine(at: Path) -> Engine:
        e = Engine.from_file(
            at, registry=registry, embedder=Named(), cache_dir=tmp_path / "cache", remember_requests=True
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
    UsageLog(tmp_path / "cache" / "usage.sqlite", keep_text=True).record(str(old.resolve()), "restart checkout", [key])
    e = engine(old)
    assert e.store.usage().examples(e.agent.identity, 5) == {key: ("restart checkout",)}
    assert e.store.usage().examples(str(old.resolve()), 5) == {}


# -- what a hostile or careless user met (found by probing the first version) ------------------------


def _store(path: Path, int8):  # noqa: ANN001, ANN202
    from contextsieve.stash.store import StashStore

    return StashStore.open(path, int8)


def _engine(path: Path, registry: AgentRegistry, int8) -> Engine:  # noqa: ANN001
    return Engine.from_file(path, registry=registry, embedder=int8, cache_dir=False)


def test_agents_made_alike_but_named_apart_never_share(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """alice-private and bob-public each had only a server named github: one print, so bob took alice's
    identity (and her stash) on a shared store, and once her file was gone on the default store too; two
    files holding only a name matched each other."""
    from contextsieve.cli.agent_data import settle

    servers = {"github": {"type": "stdio", "command": "github-mcp"}}
    alice_file = tmp_path / "a" / "agent.yaml"
    alice_file.parent.mkdir()
    alice_file.write_text(yaml.safe_dump({"name": "alice-private", "mcpServers": servers}))
    bob_file = tmp_path / "b" / "agent.yaml"
    bob_file.parent.mkdir()
    bob_file.write_text(yaml.safe_dump({"name": "bob-public", "mcpServers": servers}))
    with _store(tmp_path / "shared.db", int8) as shared:
        for registry in (
            AgentRegistry(tmp_path / "r1" / "agents.sqlite"),
            AgentRegistry(tmp_path / "r2" / "agents.sqlite"),
        ):
            alice = _engine(alice_file, registry, int8)
            settle(alice, shared, explicit=True, registry=registry)
            shared.stash(["the payroll password is hunter2"], session="agent:" + alice.agent.identity)
            bob = _engine(bob_file, registry, int8)
            settle(bob, shared, explicit=True, registry=registry)
            assert bob.agent.identity != alice.agent.identity
            assert shared.list(session="agent:" + bob.agent.identity) == []
    registry = AgentRegistry(tmp_path / "r3" / "agents.sqlite")
    first = _engine(alice_file, registry, int8).agent.identity
    alice_file.unlink()
    assert _engine(bob_file, registry, int8).agent.identity != first  # not "moved": another name
    app = tmp_path / "app" / "agent.yaml"
    app.parent.mkdir()
    app.write_text("name: first\n")
    one = _engine(app, registry, int8).agent.identity
    app.write_text("name: second\n")
    assert _engine(app, registry, int8).agent.identity != one  # made of nothing: the names tell them apart


def test_containers_with_registries_of_their_own_on_one_store(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """Two containers' /app/agent.yaml (other agents), each with a fresh data folder, one shared store: the
    second is born with the same path identity, finds the first one's segments under it, and is given an
    identity of its own instead."""
    from contextsieve.cli.agent_data import settle

    app = tmp_path / "app" / "agent.yaml"
    with _store(tmp_path / "shared.db", int8) as shared:
        write_agent(app, None, "You answer payroll questions.", rules=RULES[:1])
        payroll = _engine(app, AgentRegistry(tmp_path / "c1" / "agents.sqlite"), int8)
        settle(payroll, shared, explicit=True, registry=AgentRegistry(tmp_path / "c1" / "agents.sqlite"))
        shared.stash(["the bonus pool is 2 million"], session="agent:" + payroll.agent.identity)
        write_agent(app, None, "You plan trips.", rules=RULES[1:])
        fresh = AgentRegistry(tmp_path / "c2" / "agents.sqlite")
        trips = _engine(app, fresh, int8)
        assert trips.agent.identity == payroll.agent.identity  # what a fresh registry gives first ...
        notes = settle(trips, shared, explicit=True, registry=fresh)
        assert trips.agent.identity != payroll.agent.identity  # ... and the store's record corrects
        assert any("another agent's" in n for n in notes), notes
        assert shared.list(session="agent:" + trips.agent.identity) == []
        again = _engine(app, fresh, int8)
        assert again.agent.identity == trips.agent.identity  # and the registry keeps it


def test_a_known_agent_keeps_its_identity_on_a_shared_store(tmp_path: Path, int8) -> None:  # noqa: ANN001
    """An agent the registry knows ran once with --stash on a store where a look-alike had stashed: it
    took the look-alike's identity and lost its own default store."""
    from contextsieve.cli.agent_data import settle

    registry = AgentRegistry(tmp_path / "data" / "agents.sqlite")
    a = write_agent(tmp_path / "a" / "agent.yaml")
    b = write_agent(tmp_path / "b" / "agent.yaml")
    with _store(tmp_path / "shared.db", int8) as shared:
        ea = _engine(a, registry, int8)
        settle(ea, shared, explicit=True, registry=registry)
        shared.stash(["a's note"], session="agent:" + ea.agent.identity)
        mine = _engine(b, registry, int8).agent.identity  # b is known to the registry from now on
        eb = _engine(b, registry, int8)
        settle(eb, shared, explicit=True, registry=registry)
        assert eb.agent.identity == mine


def test_a_new_identity_is_never_one_with_a_store(tmp_path: Path) -> None:
    registry = AgentRegistry(tmp_path / "data" / "agents.sqlite")
    path = write_agent(tmp_path / "app" / "agent.yaml", None)
    taken = path_identity("agent", str(path.resolve()))
    (tmp_path / "data" / "stash").mkdir(parents=True)
    (tmp_path / "data" / "stash" / f"{taken}.db").write_bytes(b"")  # an earlier agent's store
    assert load(path, registry).agent.identity != taken


def test_a_declared_id_that_is_another_agents_is_said(tmp_path: Path, registry: AgentRegistry) -> None:
    alice = load(write_agent(tmp_path / "a" / "agent.yaml", "alice", "You run payroll."), registry)
    other = write_agent(tmp_path / "b" / "agent.yaml", "mallory", "You sell hats.", id=alice.agent.identity)
    found = load(other, registry)
    assert found.agent.identity == alice.agent.identity
    assert "looks like another agent" in found.resolution.note()  # type: ignore[union-attr]


def test_adopt_refuses_what_is_no_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from contextsieve.cli.agent_data import adopt
    from contextsieve.errors import InputError

    path = write_agent(tmp_path / "agent.yaml")
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(tmp_path / "data"))
    for bad in ("agent:../../../escaped", "agent:x/y", "agent:a\nb"):
        with pytest.raises(InputError, match="must be"):
            adopt(argparse.Namespace(agent=path, namespace=bad, stash=None, source=None))
    with pytest.raises(InputError, match="no agent agent:nobody-1234567890 is known"):
        adopt(argparse.Namespace(agent=path, namespace="agent:nobody-1234567890", stash=None, source=None))
    assert not list((tmp_path).rglob("escaped*"))


def test_adopt_brings_what_the_agent_learned(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    int8,  # noqa: ANN001
) -> None:
    """Issue (a hostile probe): `stash adopt AGENT agent:OLD` said it moved or lost nothing, and the
    examples the agent had learned under its identity before were left there, where no command reaches
    them. They come along to the adopted identity now."""
    import argparse

    from contextsieve.agent.usage import UsageLog
    from contextsieve.cli.agent_data import adopt

    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(tmp_path / "data"))
    old = Engine.from_file(write_agent(tmp_path / "old" / "agent.yaml"), embedder=int8, cache_dir=False)
    path = write_agent(tmp_path / "new" / "agent.yaml", prompt="You help travellers and their families.")
    engine = Engine.from_file(path, embedder=int8, cache_dir=False)
    before = engine.agent.identity
    assert before != old.agent.identity
    engine.agent.add_server(McpServer("s"))
    engine.agent.upsert(_tool("s", "t"))
    engine.record_tool_calls("book a train to Lyon", ["s:t"])
    log = engine.store.usage().path
    assert log is not None
    adopt(argparse.Namespace(agent=path, namespace="agent:" + old.agent.identity, stash=None, source=None))
    assert capsys.readouterr().out.endswith(f"(1 recorded requests it had learned as {before} kept)\n")
    kept = UsageLog(log, model=engine.store.usage().model)
    assert kept.counts(old.agent.identity) == {ItemKey(ItemKind.TOOL, "t", "s"): 1}
    assert kept.counts(before) == {}


def test_adopt_into_a_declared_id_brings_what_the_agent_learned_before(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    int8,  # noqa: ANN001
) -> None:
    """Issue (a hostile probe): an agent file that gained an `id:` left the examples it had learned under its
    earlier identity there, and `stash adopt AGENT agent:OLD` (the command `serve` names) brought its stash
    only, or refused when it had stashed nothing. The learned examples come too: moved from the history,
    or copied with the segments `--from` another store (the source left as it was)."""
    import argparse

    from contextsieve.agent.usage import UsageLog
    from contextsieve.cli.agent_data import adopt
    from contextsieve.stash.store import StashStore

    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(tmp_path / "data"))
    t = ItemKey(ItemKind.TOOL, "t", "s")
    olds = []
    for folder in ("moved", "copied"):
        path = write_agent(tmp_path / folder / "agent.yaml", name=f"{folder}-desk")
        engine = Engine.from_file(path, embedder=int8, cache_dir=False)
        engine.agent.add_server(McpServer("s"))
        engine.agent.upsert(_tool("s", "t"))
        engine.record_tool_calls("book a train to Lyon", ["s:t"])
        olds.append((path, engine.agent.identity))
    store = tmp_path / "old.db"
    with StashStore.open(str(store), int8) as s:
        s.stash(["Maya: I moved to Lisbon in May."], session="agent:" + olds[1][1])
    log = UsageLog(tmp_path / "data" / "history.sqlite", model=engine.store.usage().model)
    for (path, old), source in zip(olds, (None, str(store))):
        path.write_text(path.read_text() + f"id: {path.parent.name}-prod\n")
        adopt(argparse.Namespace(agent=path, namespace="agent:" + old, stash=None, source=source))
        out = capsys.readouterr().out
        verb = "copied" if source else "moved"
        assert f"; 1 recorded requests it had learned {verb}, agent " in out, out
        assert out.startswith("copied 1 segments of" if source else f"no segments of agent:{old} to bring"), out
        assert log.counts(f"{path.parent.name}-prod") == {t: 1}
        assert log.counts(old) == ({t: 1} if source else {})


def test_adopt_knows_its_own_store_by_any_spelling_and_a_refusal_makes_no_store(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    int8,  # noqa: ANN001
) -> None:
    """Issue (a hostile probe): `stash adopt AGENT agent:OLD --from stash/ID.db`, the agent's own store
    spelled relative, copied the store into itself and failed; a refused adopt left an empty default store."""
    import argparse

    from contextsieve.cli.agent_data import adopt
    from contextsieve.errors import InputError
    from contextsieve.stash.store import StashStore

    data = tmp_path / "data"
    monkeypatch.setenv("CONTEXTSIEVE_DATA", str(data))
    path = write_agent(tmp_path / "agent.yaml", id="desk-prod")
    store = data / "stash" / "desk-prod.db"
    with pytest.raises(InputError, match="holds no segments under 'agent:nobody-1234567890'"):
        adopt(argparse.Namespace(agent=path, namespace="agent:nobody-1234567890", stash=None, source=None))
    assert not store.exists()
    store.parent.mkdir(parents=True, exist_ok=True)
    with StashStore.open(str(store), int8) as s:
        s.stash(["Maya: I moved to Lisbon in May."], session="agent:old-desk-1234567890")
    monkeypatch.chdir(data)
    adopt(
        argparse.Namespace(agent=path, namespace="agent:old-desk-1234567890", stash=None, source="stash/desk-prod.db")
    )
    assert capsys.readouterr().out.startswith("moved 1 segments of agent:old-desk-1234567890 into agent:desk-prod")
