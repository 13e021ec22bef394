"""contextsieve.evaluation without a model: reading tasks (both shapes, every way of naming a tool, groups),
the measures of hand-made runs, the folds, and what the history records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contextsieve import InputError, ItemKey, ItemKind, example_agent_path, load_agent
from contextsieve.evaluation.runner import TaskRun, evaluate, folds_of, record_history, scores
from contextsieve.evaluation.tasks import Step, Task, example_tasks_path, read_tasks


def _k(server: str, name: str) -> ItemKey:
    return ItemKey(ItemKind.TOOL, name, server)


TRACK, TICKET, REPLY, CLOSE = (
    _k("helpdesk", "track_parcel"),
    _k("helpdesk", "get_ticket"),
    _k("helpdesk", "reply_to_customer"),
    _k("helpdesk", "update_ticket"),
)
FETCH, SEARCH = _k("web", "fetch_url"), _k("web", "web_search")


def test_both_shapes_and_every_way_of_naming_a_tool(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    rows = [
        {"message": "Where is parcel 4512?", "tools": ["helpdesk_track_parcel"]},
        {
            "id": "web",
            "message": "Stripe status?",
            "tools": [["web:fetch_url", "web_web_search"], "tool:web:fetch_url"],
        },
        {
            "steps": [
                {"message": "Reply on 902.", "tools": ["helpdesk:get_ticket", "helpdesk:reply_to_customer"]},
                {"message": "Thanks!", "tools": []},
                {"message": "Close it.", "tools": ["helpdesk:update_ticket"]},
            ]
        },
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    tasks = read_tasks(path, load_agent(example_agent_path()))
    assert [t.id for t in tasks] == ["line 1", "web", "line 3"]
    assert tasks[0] == Task((Step("Where is parcel 4512?", ((TRACK,),)),), ((TRACK,),), "line 1")
    assert tasks[1].needs == ((FETCH, SEARCH), (FETCH,))
    assert tasks[1].tools_in_order() == [FETCH]  # the group is satisfied by the tool listed for it
    loop = tasks[2]
    assert [s.needs for s in loop.steps] == [((TICKET,), (REPLY,)), (), ((CLOSE,),)]
    assert loop.needs == ((TICKET,), (REPLY,), (CLOSE,)) and loop.message == "Reply on 902."
    assert loop.tools_in_order() == [TICKET, REPLY, CLOSE]


def test_the_shipped_task_file_reads_against_the_example_agent() -> None:
    tasks = read_tasks(example_tasks_path(), load_agent(example_agent_path()))
    assert 8 <= len(tasks) <= 12 and len({t.id for t in tasks}) == len(tasks)
    assert any(len(t.steps) > 1 for t in tasks) and any(len(t.steps) == 1 for t in tasks)
    assert any(len(g) > 1 for t in tasks for g in t.needs)  # a group: any one of its tools will do


def _run(task: Task, *offered: set[ItemKey], sizes: tuple[int, ...] = ()) -> TaskRun:
    return TaskRun(
        task, tuple(frozenset(o) for o in offered), sizes or tuple(len(o) for o in offered), (1.0,) * len(offered)
    )


def test_the_measures_of_hand_made_runs() -> None:
    one = Task((Step("a", ((TRACK,), (FETCH, SEARCH))),), ((TRACK,), (FETCH, SEARCH)))
    two = Task((Step("b", ((TICKET,),)), Step("c", None)), ((TICKET,), (CLOSE,)))
    s = scores([_run(one, {TRACK, SEARCH, REPLY, CLOSE}), _run(two, {REPLY}, {TICKET, FETCH})])
    assert (s.tasks, s.requests) == (2, 3)
    assert s.recall == pytest.approx((1.0 + 0.5) / 2) and s.all_found == 0.5
    assert s.first_recall == pytest.approx((1.0 + 0.0) / 2)
    assert s.step_recall == pytest.approx((1.0 + 0.0) / 2)  # the step without its own needs does not count
    assert s.tools_per_request == pytest.approx(7 / 3) and s.tools_per_task == pytest.approx((4 + 3) / 2)
    assert s.precision == pytest.approx((2 / 4 + 0 / 1 + 1 / 2) / 3)
    assert scores([_run(one, set(), sizes=(0,))]).precision is None
    with pytest.raises(InputError):
        scores([])


def test_folds_are_by_position() -> None:
    assert folds_of(5, 2) == [[0, 2, 4], [1, 3]]
    assert folds_of(3, 3) == [[0], [1], [2]]


class _Recorder:
    """An engine stand-in that hears what a history records."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[ItemKey]]] = []

    def record_tool_calls(self, message: str, calls: list[ItemKey]) -> None:
        self.calls.append((message, list(calls)))


def test_the_history_records_each_task_as_a_host_does() -> None:
    loop = Task((Step("Reply on 902.", ((TICKET,), (REPLY,))), Step("Close it.", ((CLOSE,),))), ((TICKET,),))
    recorder = _Recorder()
    record_history(recorder, [loop, Task((Step("?", ((FETCH, SEARCH),)),), ((FETCH, SEARCH),))])  # type: ignore[arg-type]
    assert recorder.calls == [("Reply on 902.", [TICKET, REPLY, CLOSE]), ("?", [FETCH])]


def test_evaluate_checks_its_folds() -> None:
    task = Task((Step("a", ((TRACK,),)),), ((TRACK,),))
    with pytest.raises(InputError, match="3 folds need at least 3 tasks"):
        evaluate(lambda: None, [task, task], 3)  # type: ignore[arg-type,return-value]
    for bad in (-1, 1.5, True):
        with pytest.raises(InputError, match="folds"):
            evaluate(lambda: None, [task], bad)  # type: ignore[arg-type,return-value]


def test_tasks_of_one_message_in_two_folds_are_warned_of() -> None:
    """Issue (a hostile probe): a task file holding one task twice scored recall 1.0 with history (each
    copy found the other's tools recorded for its own words) and 0.67 cold, without a word."""
    from contextsieve.errors import EvaluationWarning
    from contextsieve.evaluation.runner import _warn_alike

    a, b = (
        Task((Step("Where is  my parcel?", ((TRACK,),)),), ((TRACK,),), "a"),
        Task((Step("b", ((TRACK,),)),), ((TRACK,),), "b"),
    )
    again = Task((Step("Where is my parcel? ", ((TRACK,),)),), ((TRACK,),), "again")  # as the history keys it
    with pytest.warns(
        EvaluationWarning, match="1 tasks have the message of a task in another fold \\('a' and 'again'\\)"
    ):
        _warn_alike([a, again, b], 2)  # folds 0 and 1
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _warn_alike([a, b, again], 2)  # one fold: scored alike, cold or not


def test_a_task_file_that_is_no_regular_file_or_no_text_is_refused_at_once(tmp_path: Path) -> None:
    import os

    agent = load_agent(example_agent_path())
    fifo = tmp_path / "tasks.fifo"
    os.mkfifo(fifo)  # reading it would wait for a writer forever
    with pytest.raises(InputError, match="not a regular file"):
        read_tasks(fifo, agent)
    with pytest.raises(InputError, match="not a regular file"):
        read_tasks(tmp_path, agent)
    split = tmp_path / "split.jsonl"  # JSON's escape of half a surrogate pair
    split.write_text('{"message": "\\ud800 where is my parcel", "tools": ["helpdesk:track_parcel"]}\n')
    with pytest.raises(InputError, match=r'split\.jsonl, line 1: "message" holds a lone surrogate'):
        read_tasks(split, agent)
