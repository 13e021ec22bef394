"""Tasks to measure tool selection on: each a user's message, or the messages of its steps, with the tools
each needs; read from a JSON Lines file (``contextsieve eval``) or built by a benchmark.

A line of a task file is one task, in one of two shapes:

- ``{"message": "...", "tools": [...]}``: one request per task (the message alone);
- ``{"steps": [{"message": "...", "tools": [...]}, ...]}``: a task run as an agent loop, one request per
  step (the first step's message is the task's; a step may need no tool: ``"tools": []``).

Both may carry an ``"id"`` (a string, shown in errors and reports, one task's each; default
``line N``). A tool is named as the agent knows it: ``SERVER:TOOL``, ``tool:SERVER:TOOL`` or the name
a model is offered (``SERVER_TOOL``); a list in the list (``["web:search", "brave:search"]``) is a
group of which any one tool will do. A ``:`` or ``%`` inside a server's or tool's own name is written
``%3A`` or ``%25`` (as :class:`ItemKey` writes it).
Blank lines are skipped; a line ends at ``"\\n"`` (``"\\r\\n"`` too), is UTF-8 text of at most
:data:`MAX_LINE_BYTES` bytes, and every string in it valid Unicode (no lone surrogate such as the escape
``"\\ud800"``); anything else is an :class:`~contextsieve.errors.InputError` naming the file and line.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from contextsieve.agent.agent import Agent
from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.errors import ContextSieveError, InputError, brief, check_text

__all__ = [
    "MAX_LINE_BYTES",
    "Group",
    "Step",
    "Task",
    "read_tasks",
    "parse_task",
    "task_needs",
    "example_tasks_path",
]

#: The longest line (one task) a task file may hold, in bytes without its end: 8 MiB, room for a task of
#: several steps each with a message at the MCP server's limit (``ServeConfig.max_message_chars``, 100,000
#: characters) even when written all in JSON ``\\u`` escapes (up to 12 bytes a character). A longer line
#: is refused without being read whole, so reading a task file takes memory for one line, not the file.
MAX_LINE_BYTES = 8 * 1024 * 1024

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


class _TwiceGiven(ValueError):
    """A JSON object of the task file names one key twice (``json`` keeps the last value silently)."""


def _one_value_a_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _TwiceGiven(k)
        out[k] = v
    return out


def read_tasks(path: str | Path, agent: Agent) -> list[Task]:
    """The tasks of a JSON Lines file (see the module docstring), their tools checked against ``agent``;
    :class:`InputError` naming the file and line of the first problem, or when the file holds no task.

    The file is read one line at a time (memory for its longest line, not for the whole file); a line is
    ended by ``"\\n"`` alone (a ``"\\r"`` before it is dropped, and so is a UTF-8 byte order mark before
    the first line), so U+2028, U+2029 and U+0085 inside a JSON string are text, and a line longer than
    :data:`MAX_LINE_BYTES` is refused unread."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():  # a FIFO would wait for a writer forever, a device never end
            raise InputError(f"the task file {path} is not a regular file")
    except OSError as e:  # a name too long, a folder on the way that may not be searched
        raise InputError(f"cannot read the task file {path}: {e.strerror or e}") from e
    tasks = []
    seen: dict[str, int] = {}  # id -> its line
    for n, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}, line {n}"
        try:
            obj = json.loads(line, object_pairs_hook=_one_value_a_key)
        except _TwiceGiven as e:
            raise InputError(f"{where}: the key {brief(e.args[0])} is given twice in one object; {_SHAPES}") from None
        except ValueError as e:
            raise InputError(f"{where}: not JSON ({e}); each line is one task: {_SHAPES}") from None
        except RecursionError:
            raise InputError(f"{where}: not a task: its JSON is nested too deeply to read; {_SHAPES}") from None
        task = parse_task(obj, agent, where, f"line {n}")
        if task.id in seen:  # the ids name the missed tasks in the report: one id, one task
            given = isinstance(obj, dict) and "id" in obj
            raise InputError(
                f"{where}: the id {task.id!r}"
                + ("" if given else " (this line's own, as it gives none)")
                + f" is the task's of line {seen[task.id]} too; ids name one task each"
            )
        seen[task.id] = n
        tasks.append(task)
    if not tasks:
        raise InputError(f"{path} holds no task; each line is one task: {_SHAPES}")
    return tasks


_BOM = "\ufeff".encode()


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Each line of the file and its number, as text without its end (``"\\n"`` or ``"\\r\\n"``), read
    one at a time; :class:`InputError` naming the line for one longer than :data:`MAX_LINE_BYTES` or
    not UTF-8."""
    try:
        f = path.open("rb")
    except OSError as e:
        raise InputError(f"cannot read the task file {path}: {e}") from e
    with f:
        n = 0
        while True:
            n += 1
            try:
                raw = f.readline(MAX_LINE_BYTES + 2)  # room for the line's end
            except OSError as e:
                raise InputError(f"cannot read the task file {path} at line {n}: {e}") from e
            if not raw:
                return
            line = raw[:-1] if raw.endswith(b"\n") else raw
            line = line[:-1] if line.endswith(b"\r") else line
            if n == 1 and line.startswith(_BOM):  # a byte order mark (Windows editors) is no part of the task
                line = line[len(_BOM) :]
            if len(line) > MAX_LINE_BYTES:
                raise InputError(
                    f"{path}, line {n}: longer than {MAX_LINE_BYTES:,} bytes, the limit for one task "
                    "(each line is one task)"
                )
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}, line {n}: cannot read the task file as UTF-8 text: {e}") from None
            yield n, text


def parse_task(obj: object, agent: Agent, where: str = "task", default_id: str = "") -> Task:
    """One task from its JSON object (see the module docstring); ``where`` opens every error message."""
    if not isinstance(obj, dict):
        raise InputError(f"{where}: expected a JSON object; {_SHAPES}")
    unknown = sorted(set(obj) - _TASK_FIELDS)
    if unknown:
        raise InputError(f"{where}: unknown field {unknown[0]!r}; {_SHAPES} (and an optional id)")
    task_id = obj.get("id", default_id)
    if not isinstance(task_id, str):
        raise InputError(f"{where}: id must be a string, got {_shown(task_id, 40)}")
    check_text(task_id, f"{where}: id")
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
        raise InputError(f'{where}: "tools" must be a list of tool names, got {_shown(raw, 60)}')
    if not raw and not empty_ok:
        raise InputError(f'{where}: "tools" is empty: name at least one tool the message needs')
    groups = []
    for entry in raw:
        names = entry if isinstance(entry, list) else [entry]
        if not names or not all(isinstance(n, str) and n for n in names):
            raise InputError(
                f"{where}: a tool is a non-empty string (or a list of them: any one will do), got {_shown(entry, 60)}"
            )
        for name in names:
            check_text(name, f"{where}: the tool name {_shown(name, 60)}")
        groups.append(tuple(_key(n, agent, where) for n in dict.fromkeys(names)))
    return _union(groups)


def _key(name: str, agent: Agent, where: str) -> ItemKey:
    from contextsieve.session.outcomes import tool_keys  # (the selection's modules load only when tasks are read)

    try:
        return tool_keys(agent, [name], "tools")[0]
    except ContextSieveError:
        known = _known_names(agent)
        folded = {k.casefold(): v for k, v in reversed(known.items())}  # the first form of a fold wins
        hint = folded.get(name.casefold(), "")  # HELPDESK:TRACK_PARCEL: another case of a known name
        if not hint:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = known[close[0]] if close else ""
        shown = repr(name) if len(name) <= 200 else brief(name)
        raise InputError(
            f"{where}: the agent has no tool {shown}"
            + (f" (did you mean {hint!r}?)" if hint and hint != name else "")
            + "; name tools as SERVER:TOOL or by the name offered to the model (SERVER_TOOL), a : or % in a "
            "server's or tool's name as %3A or %25: `contextsieve tools AGENT` lists them"
        ) from None


def _known_names(agent: Agent) -> dict[str, str]:
    """What a refused tool name is compared with, each mapped to the name to suggest: a name the reader
    accepts for the same tool (``SERVER:TOOL`` with a ``:`` or ``%`` in a part escaped as :class:`ItemKey`
    escapes it, or the whole key when the escaped server is a kind such as ``tool``). Each tool is compared
    in every way it may be written (escaped or not, with ``tool:`` or without) and by its offered name."""
    kinds = {k.value for k in ItemKind}
    known: dict[str, str] = {}
    for key in (t.key for t in agent.tools):
        full = str(key)  # tool:SERVER:TOOL, each part escaped
        short = full.split(":", 1)[1]
        accepted = full if short.split(":", 1)[0] in kinds else short
        plain = f"{key.server}:{key.name}"
        for form in (plain, short, f"tool:{plain}", full):
            known.setdefault(form, accepted)
    for offered in agent.tool_names():
        known.setdefault(offered, offered)
    return known


def _shown(value: object, limit: int) -> str:
    """``value`` as JSON, cut to ``limit`` characters, for an error message (a short repr when it is too
    deeply nested for JSON)."""
    try:
        return json.dumps(value)[:limit]
    except (RecursionError, ValueError):
        return brief(value)


def _union(groups: Iterable[Group]) -> tuple[Group, ...]:
    """Groups each once, in order."""
    return tuple(dict.fromkeys(groups))


def task_needs(steps: Sequence[Step]) -> tuple[Group, ...]:
    """Every group the steps need, each once, in order."""
    return _union(g for s in steps for g in s.needs or ())
