"""Selection in the agent loop. A task's later requests size their offer by their message
(``tool_base_n``, ``tool_chunk_n``) and carry ``task_tools`` of the task's first message's tools
(``via="task"``), from the ``task_servers`` servers it ranks highest."""

from __future__ import annotations

import pytest

from contextsieve.agent.agent import Agent, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, Tool
from contextsieve.agent.settings import AgentSettings
from contextsieve.errors import InputError
from contextsieve.selection.chunk_store import ChunkStore
from contextsieve.session.requests import CARRY_REASON
from contextsieve.session.session import Session
from tests.helpers.fake_embedder import FakeEmbedder

G = IncludeMode.AGENT
TOOLS = {
    "git": [
        ("git_create_branch", "create a new branch from main or another start point"),
        ("git_checkout", "switch the working tree to a branch"),
        ("git_add", "stage files for the next commit"),
        ("git_commit", "record the staged changes as a commit with a message"),
        ("git_log", "show the commit history of a branch"),
        ("git_status", "show what is modified in the working tree"),
    ],
    "notes": [
        ("write_note", "write a note with a title and text"),
        ("find_notes", "search notes by words"),
        ("delete_note", "delete a note"),
        ("tag_note", "add a tag to a note"),
    ],
    "mail": [
        ("send_mail", "send an email message to a person"),
        ("read_inbox", "list the newest email messages"),
        ("reply_mail", "reply to an email message"),
    ],
}
TASK = "Create a new branch fix from main and switch to it."
STEP = "Done, fix exists."
LIMITS = {"tool_top_n": 4, "tool_base_n": 3, "task_tools": 2, "tool_query_split": "sentences"}


@pytest.fixture
def agent() -> Agent:
    return Agent(
        servers={s: McpServer(s, default_include=G) for s in TOOLS},
        tools=[Tool(s, n, d) for s, tools in TOOLS.items() for n, d in tools],
    )


def session(agent: Agent, **settings: object) -> Session:
    return Session(agent, ChunkStore(FakeEmbedder()), **{**LIMITS, **settings})  # type: ignore[arg-type]


def tools_via(request: object, via: str | None = None) -> list[ItemKey]:
    entries = request.context.entries  # type: ignore[attr-defined]
    return [e.key for e in entries if e.key.kind.value == "tool" and (via is None or e.via == via)]


def oracle(agent: Agent, first: set[ItemKey], own: set[ItemKey], n: int, n_servers: int) -> list[ItemKey]:
    """The task's tools a later request carries, from the tool search's ranking of the task (the same
    search without cut-offs): the first ``n`` of the ``n_servers`` best servers not selected yet."""
    ranking = [m.tool.key for m in session(agent).search_tools(TASK, 50)]
    servers: list[str] = []
    for k in ranking:
        if k.server not in servers:
            servers.append(k.server)
    top = set(servers[:n_servers])
    return [k for k in ranking if k.server in top and k not in first and k not in own][:n]


def test_a_later_step_carries_the_tasks_best_tools_not_selected_yet(agent: Agent) -> None:
    s = session(agent)
    first = s.build_request(TASK)
    assert tools_via(first, "task") == []  # the task's first request carries nothing
    assert 1 <= len(first.tools) <= 4  # and aims for tool_top_n
    s.record_reply(first, "")
    second = s.build_request(STEP)
    s.record_reply(second, "")
    own, carried = tools_via(second, "query"), tools_via(second, "task")
    assert len(own) <= 2  # min(tool_top_n, tool_base_n) minus the 2 places the task's tools take
    assert carried == oracle(agent, set(tools_via(first)), set(own), 2, 2)
    assert len(carried) == 2
    gave = [d for d in second.context.dropped if d.reason == CARRY_REASON]  # the step's own lowest-ranked tools
    assert len(own) + len(gave) <= 3 and len(own) >= 1  # tool_base_n 3 places: own first, then carried
    assert not {d.entry.key for d in gave} & set(own)
    assert {t["name"] for t in second.tools} >= {f"{k.server}_{k.name}" for k in carried}
    explained = {k: s.explain(STEP, k) for k in agent.table().keys}  # the next request, the session unchanged
    third = s.build_request(STEP)
    s.record_reply(third, "")
    again = tools_via(third, "task")
    assert again and not set(again) & (set(tools_via(first)) | set(tools_via(second)))  # walks on down the ranking
    for k, ex in explained.items():
        assert ex.included == (k in set(tools_via(third))), str(ex)
        if k in again:
            assert "carried from the task" in " ".join(ex.reasons)


def test_new_task_starts_over_and_task_tools_zero_carries_nothing(agent: Agent) -> None:
    s = session(agent)
    first = s.build_request(TASK)
    s.record_reply(first, "")
    s.record_reply(s.build_request(STEP), "")
    s.new_task()
    assert [t["name"] for t in s.build_request(TASK).tools] == [t["name"] for t in first.tools]  # a first again
    off = session(agent, task_tools=0)
    off.record_reply(off.build_request(TASK), "")
    later = off.build_request("stage files and record a commit with a message")
    assert tools_via(later, "task") == []
    assert len(later.tools) <= 3  # tool_base_n, and no more than tool_top_n


def test_without_sizing_and_task_tools_a_later_request_selects_as_a_first_one(agent: Agent) -> None:
    old = {"tool_base_n": None, "task_tools": 0}
    s = session(agent, **old)
    s.record_reply(s.build_request(TASK), "")
    later = [t["name"] for t in s.build_request(STEP).tools]
    assert later == [t["name"] for t in session(agent, **old).build_request(STEP).tools]


def test_a_request_with_no_reply_recorded_since_the_last_starts_a_task_of_its_own(agent: Agent) -> None:
    """A host that sends independent requests through one session (a benchmark harness, a one-shot
    tool) records no replies: each request selects as a task's first, as before issue 41."""
    s = session(agent)
    s.build_request(TASK)
    alone = s.build_request(STEP)
    assert tools_via(alone, "task") == []
    assert [t["name"] for t in alone.tools] == [t["name"] for t in session(agent).build_request(STEP).tools]
    s.record_reply(alone, "")  # now a reply: the next request is a step of the task STEP started
    step = s.build_request(TASK)
    assert tools_via(step, "query") and len(tools_via(step, "query")) <= 2


def test_the_offer_size_follows_the_message() -> None:
    s = AgentSettings(tool_top_n=10, tool_base_n=5, tool_chunk_n=1).for_tools()
    assert [s.tool_offer_size(n) for n in (1, 2, 3, 6, 9)] == [5, 6, 7, 10, 10]
    assert AgentSettings(tool_top_n=10, tool_base_n=None).for_tools().tool_offer_size(3) == 10
    assert AgentSettings(tool_top_n=4, tool_base_n=5).for_tools().tool_offer_size(1) == 4  # a cap
    for bad in ({"task_tools": -1}, {"tool_base_n": 0}, {"task_servers": 0}, {"tool_chunk_n": 1.5}):
        with pytest.raises(InputError):
            AgentSettings(**bad)  # type: ignore[arg-type]
    assert AgentSettings().with_overrides("reference").task_tools == 0


def test_a_step_records_no_misses(agent: Agent) -> None:
    """A tool carried from the task was offered for the task, and a step's own tools may be the ones a
    later step calls: the model leaving them at this step is no evidence against them (a task's first
    request records its misses)."""
    s = session(agent)
    first = s.build_request(TASK)
    s.record_reply(first, "")
    step = s.build_request(STEP)
    assert tools_via(step, "task") and tools_via(step, "query")
    assert s.record_outcome(step, [])["misses"] == []
    assert sorted(s.record_outcome(first, [])["misses"]) == sorted(str(k) for k in tools_via(first, "query"))


def test_a_step_that_moved_on_carries_nothing_and_one_that_says_little_does(agent: Agent) -> None:
    """A step whose own best tool is of another server and matches it about as well as the task's
    best tool matches the task has moved on: nothing is carried, its own tools keep every place. A
    step that says little ("Done, fix exists.") finds weak tools and still carries the task's."""
    s = session(agent, task_servers=1)
    s.record_reply(s.build_request(TASK), "")
    step = s.build_request("send an email message to a person")
    assert tools_via(step, "query")[0] == ItemKey.parse("tool:mail:send_mail")
    assert tools_via(step, "task") == []
    assert not step.context.dropped
    s.record_reply(step, "")
    assert [k.server for k in tools_via(s.build_request(STEP), "task")] == ["git", "git"]


def test_a_step_records_its_place_in_the_task_and_a_replay_can_continue_it(agent: Agent) -> None:
    """A step's request context records ``task_step`` (how many requests of its task came before):
    a replay of a saved session (the inspect page) continues the task there instead of starting one."""
    s = session(agent)
    first = s.build_request(TASK)
    s.record_reply(first, "")
    step = s.build_request(STEP)
    assert "task_step" not in first.context.settings and step.context.settings["task_step"] == 1
    replay = session(agent)
    replay.build_request(TASK)
    replay.continue_task()
    again = replay.build_request(STEP)
    assert again.context.keys() == step.context.keys()
