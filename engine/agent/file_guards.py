"""Reading an agent file's text and YAML with guards against hostile or broken files.

YAML goes through a safe loader that refuses duplicate keys, nesting deeper than
:data:`MAX_YAML_DEPTH` and more than :data:`MAX_YAML_ALIASES` aliases (alias bombs); its errors give
the line and column (:func:`yaml_problem`). A legacy agent folder's files are read only when they are
regular files inside the folder (:func:`read_folder_file`: a FIFO or a device would hang the load, a
link leading outside would read another file). Every failure is an :class:`AgentFileError` naming the
file.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from contextsieve.agent.file_checks import fail
from contextsieve.errors import AgentFileError

__all__ = ["MAX_YAML_DEPTH", "MAX_YAML_ALIASES", "load_yaml", "yaml_problem", "read_yaml", "read_folder_file"]

#: Most nested collections an agent file may have (real ones have under 10), and most aliases
#: (``*name`` references; the reference system writes none): bounds the work of a hostile file.
MAX_YAML_DEPTH = 64
MAX_YAML_ALIASES = 100


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys, deep nesting and alias bombs."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise yaml.MarkedYAMLError(
                    problem=f"more than {MAX_YAML_ALIASES} aliases", problem_mark=self.peek_event().start_mark
                )
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.MarkedYAMLError(
                    problem=f"nested more than {MAX_YAML_DEPTH} levels deep", problem_mark=self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise yaml.MarkedYAMLError(
                    problem=f"duplicate key {key[:80]!r} (the last would win)", problem_mark=key_node.start_mark
                )
            if isinstance(key, str):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, name: str) -> Any:
    """YAML through :class:`_Loader` (safe types only); ``name`` (the file) is what its errors' marks name."""
    loader = _Loader(text)
    loader.name = name  # else PyYAML's marks say "<unicode string>"
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_problem(e: yaml.YAMLError | RecursionError) -> str:
    """What is wrong with a YAML text, where: ``line 3, column 1: expected ',' or '}', but got '<stream
    end>' (while parsing a flow mapping at line 2, column 3)`` (lines and columns from 1)."""
    if not isinstance(e, yaml.MarkedYAMLError) or e.problem_mark is None:
        return str(e)[:300] or type(e).__name__
    mark = e.problem_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {str(e.problem)[:300]}"
    if e.context:
        started = e.context_mark
        at = f" at line {started.line + 1}, column {started.column + 1}" if started is not None else ""
        text += f" ({e.context}{at})"
    return text


#: What the error for an empty agent file says it needs.
_EMPTY = (
    "is empty: an agent file needs at least one of name, systemPrompt, rules, references or mcpServers "
    "(e.g. `rules: [{name: tone, text: Be brief., include: always}]`; the bundled example: "
    "contextsieve.example_agent_path())"
)


def read_yaml(path: Path) -> dict[str, Any]:
    """An agent file's YAML (or JSON) document through :func:`load_yaml`: a non-empty mapping, else
    :class:`AgentFileError` naming the file (YAML errors with their line and column)."""
    try:
        doc = load_yaml(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise AgentFileError(f"{path}: cannot read: {e}") from e
    except (yaml.YAMLError, RecursionError) as e:
        raise AgentFileError(f"{path}: not valid YAML: {yaml_problem(e)}") from e
    if doc is None or doc == {}:
        raise AgentFileError(f"{path}: {_EMPTY}")
    if not isinstance(doc, dict):
        raise fail(path, "top level", f"must be a mapping, got {type(doc).__name__}")
    return doc


def read_folder_file(path: Path, folder: Path, where: str) -> str:
    """A legacy agent folder's text file: a regular file inside ``folder`` (a FIFO, a device or a link
    leading outside would hang the load or read another file), decoded as UTF-8 (a byte order mark before
    it dropped: Windows editors write one, and it would hide a rule's front matter); else
    :class:`AgentFileError` naming the file."""
    try:
        real = path.resolve(strict=True)
        if not real.is_relative_to(folder.resolve(strict=True)):
            raise fail(path, where, f"is a link to {real}, outside the agent folder")
        if not stat.S_ISREG(real.stat().st_mode):
            raise fail(path, where, "is not a regular file")
        data = real.read_bytes()
    except OSError as e:
        raise fail(path, where, f"cannot read: {e.strerror or e}") from e
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise fail(path, where, f"not UTF-8 text (byte {e.start}: {data[e.start : e.start + 1]!r})") from e
