"""Tasks to measure tool selection on: each a user's message, or the messages of its steps, with the tools
each needs; read from a JSON Lines file (``contextsieve eval``) or built by a benchmark.

A line of a task file is one task, in one of two shapes:

- ``{"message": "...", "tools": [...]}``: one request per task (the message alone);
- ``{"steps": [{"message": "...", "tools": [...]}, ...]}``: a task run as an agent loop, one request per
  step (the first step's message is the task's; a step may need no tool: ``"tools": []``).

Both may carry an ``"id"`` (a string, shown in errors; default ``line N``). A tool is named as the agent
knows it: ``SERVER:TOOL``, ``tool:SERVER:TOOL`` or the name a model is offered (``SERVER_TOOL``); a list
in the list (``["web:search", "brave:search"]``) is a group of which any one tool will do. Blank lines
are skipped; anything else is an :class:`~contextsieve.errors.InputError` naming the file and line.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import ItemKey
from contextsieve.errors import ContextSieveError, InputError, check_text

__all__ = ["Group", "Step", "Task", "read_tasks", "parse_task", "task_needs", "example_tasks_path"]

#: Tools of which any one satisfies a need, in the order they were named (the first is the one a
#: history records).
Group = tuple[ItemKey, ...]

_TASK_FIELDS = {"message", "tools", "steps", "id"}
_STEP_FIELDS = {"message", "tools"}
_SHAPES = 'a task is {"message": "...", "tools": [...]} or {"steps": [{"message": "...", "tools": [...]}, ...]}'


@dataclass(frozen=True)
class Step:
    """One request of a task: its message and the tool groups it needs (``None``: not annotated per
    step; the task's groups count then, each at the first step that offers it)."""

    message: str
    needs: tuple[Group, ...] | None = None


@dataclass(frozen=True)
class Task:
    """A task: its steps (one for a one-request task) and every tool group it needs."""

    steps: tuple[Step, ...]
    needs: tuple[Group, ...]
    id: str = ""

    @property
    def message(self) -> str:
        """The task's first message (what a host records its calls under)."""
        return self.steps[0].message

    def tools_in_order(self) -> list[ItemKey]:
        """The tools the task was done with, in order: the first tool of each group, the steps' groups
        first, a group left out when a tool already listed satisfies it (what a history records)."""
        chosen: list[ItemKey] = []
        for group in [g for s in self.steps for g in (s.needs or ())] + list(self.needs):
            if not any(k in chosen for k in group):
                chosen.append(group[0])
        return chosen


def example_tasks_path() -> Path:
    """The task file shipped beside the bundled example agent (``contextsieve/data/example_tasks.jsonl``):
    ``contextsieve eval $(contextsieve example-agent) $(contextsieve example-agent --tasks)``."""
    return Path(str(resources.files("contextsieve").joinpath("data/example_tasks.jsonl")))


def read_tasks(path: str | Path, agent: Agent) -> list[Task]:
    """The tasks of a JSON Lines file (see the module docstring), their tools checked against ``agent``;
    :class:`InputError` naming the file and line of the first problem, or when the file holds no task."""
    path = Path(path)
    if path.exists() and not path.is_file():  # a FIFO would wait for a writer forever, a device never end
        raise InputError(f"the task file {path} is not a regular file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the task file {path} as UTF-8 text: {e}") from e
    tasks = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise InputError(f"{where}: not JSON ({e}); each line is one task: {_SHAPES}") from None
        tasks.append(parse_task(obj, agent, where, f"line {n}"))
    if not tasks:
        raise InputError(f"{path} holds no task; each line is one task: {_SHAPES}")
    return tasks


def parse_task(obj: object, agent: Agent, where: str = "task", default_id: str = "") -> Task:
    """One task from its JSON object (see the module docstring); ``where`` opens every error message."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object; {_SHAPES}")
    unknown = sorted(set(obj) - _TASK_FIELDS)
    if unknown:
        raise InputError(f"{where}: unknown field {unknown[0]!r}; {_SHAPES} (and an optional id)")
    task_id = obj.get("id", default_id)
    if not isinstance(task_id, str):
        raise InputError(f"{where}: id must be a string, got {json.dumps(task_id)[:40]}")
    if "steps" in obj:
        if "message" in obj or "tools" in obj:
            raise InputError(f'{where}: give "message" and "tools", or "steps", not both')
        raw = obj["steps"]
        if not isinstance(raw, list) or not raw:
            raise InputError(f'{where}: "steps" must be a non-empty list of {{"message": "...", "tools": [...]}}')
        steps = []
        for i, step in enumerate(raw, 1):
            at = f"{where}, step {i}"
            if not isinstance(step, dict):
                raise InputError(f'{at}: expected {{"message": "...", "tools": [...]}}')
            extra = sorted(set(step) - _STEP_FIELDS)
            if extra:
                raise InputError(f'{at}: unknown field {extra[0]!r}; a step is {{"message": "...", "tools": [...]}}')
            steps.append(Step(_message(step, at), _groups(step, agent, at, empty_ok=True)))
        needs = task_needs(steps)
        if not needs:
            raise InputError(f"{where}: no step names a tool; name the tools each step needs")
        return Task(tuple(steps), needs, task_id)
    if "message" not in obj:
        raise InputError(f'{where}: no "message" and no "steps"; {_SHAPES}')
    needs = _groups(obj, agent, where, empty_ok=False)
    return Task((Step(_message(obj, where), needs),), needs, task_id)


def _message(obj: dict[str, Any], where: str) -> str:
    message = obj.get("message")
    if not isinstance(message, str) or not message.strip():
        raise InputError(f'{where}: "message" must be a non-empty string')
    return check_text(message, f'{where}: "message"')


def _groups(obj: dict[str, Any], agent: Agent, where: str, *, empty_ok: bool) -> tuple[Group, ...]:
    """The ``"tools"`` of a task or step as groups (a string: a group of one; a list: any of its tools)."""
    if "tools" not in obj:
        raise InputError(f'{where}: no "tools": list the tools it needs (SERVER:TOOL or the offered name)')
    raw = obj["tools"]
    if not isinstance(raw, list):
        raise InputError(f'{where}: "tools" must be a list of tool names, got {json.dumps(raw)[:60]}')
    if not raw and not empty_ok:
        raise InputError(f'{where}: "tools" is empty: name at least one tool the message needs')
    groups = []
    for entry in raw:
        names = entry if isinstance(entry, list) else [entry]
        if not names or not all(isinstance(n, str) and n for n in names):
            raise InputError(
                f"{where}: a tool is a non-empty string (or a list of them: any one will do), "
                f"got {json.dumps(entry)[:60]}"
            )
        groups.append(tuple(_key(n, agent, where) for n in dict.fromkeys(names)))
    return _union(groups)


def _key(name: str, agent: Agent, where: str) -> ItemKey:
    from contextsieve.session.outcomes import tool_keys  # (the selection's modules load only when tasks are read)

    try:
        return tool_keys(agent, [name], "tools")[0]
    except ContextSieveError:
        known = [f"{k.server}:{k.name}" for k in (t.key for t in agent.tools)]
        close = difflib.get_close_matches(name, known + list(agent.tool_names()), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InputError(
            f"{where}: the agent has no tool {name!r}{hint}; name tools as SERVER:TOOL or by the name offered "
            "to the model (SERVER_TOOL): `contextsieve tools AGENT` lists them"
        ) from None


def _union(groups: Iterable[Group]) -> tuple[Group, ...]:
    """Groups each once, in order."""
    return tuple(dict.fromkeys(groups))


def task_needs(steps: Sequence[Step]) -> tuple[Group, ...]:
    """Every group the steps need, each once, in order."""
    return _union(g for s in steps for g in s.needs or ())
