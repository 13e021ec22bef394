"""Agent files of the reference system: the current single YAML file and the legacy directory.

Formats and migrations follow ``../shared/reference/tsagent-notes.md`` §1:

- current: one YAML (or JSON) file, or a folder holding ``tsagent.yaml`` / ``tsagent.yml``;
- legacy: a folder with ``tsagent.json`` (settings as strings), ``prompt.md``, ``rules/*.mdt`` and
  ``refs/*.mdt`` (front matter between ``---`` lines, then the text);
- migrations: ``mostRecentModel`` -> ``model``; legacy string settings -> numbers; legacy
  ``toolInclude`` / ``toolPermissionRequired`` -> ``serverToolDefaults`` and ``tools.<name>``.
  Unlike the reference's legacy loader, an explicit ``priorityLevel: 0`` stays 0 (it became 500 there).

Everything this library does not use is kept and written back on save, including ``embeddings``
lists, which come from another runtime's quantized model and are never used as vectors here.
Tool descriptions are not part of the reference format (tools come from the live MCP server):
a ``description`` / ``inputSchema`` under ``mcpServers.<server>.tools.<tool>`` (a contextsieve
extension) or a ``tools`` catalog (server -> MCP ``tools/list`` entries) supplies them.
Other contextsieve extensions: ``summary`` on a rule or reference and on
``mcpServers.<server>.tools.<tool>``, and ``description`` on ``mcpServers.<server>`` (contextual
embeddings); ``settings.contextsieve`` (a mapping of :class:`AgentSettings` field names, e.g.
``keyword_weight`` or ``tool_settings``, written back only where they differ from the defaults).
The reference's LLM settings (``model``, ``temperature``, ``topP``, ``maxOutputTokens``,
``maxChatTurns``) load into :class:`~contextsieve.agent.settings.LlmSettings` (``AgentSettings.llm``).

Mistakes are named. A key in a place where neither this library nor the reference format defines it
(``rulez:``, ``settings.contextTopn``) is kept but read by nobody: the load issues an
:class:`~contextsieve.errors.AgentFileWarning` with its likely meaning ("did you mean 'rules'?") and
keeps it in :attr:`Agent.load_warnings <contextsieve.Agent.load_warnings>`; keys the reference format
defines but this library does not use (``providers``, ``supervisors``, ``theme``, ...) load silently.
An empty file, an unknown MCP server ``type`` or include mode is an :class:`AgentFileError` listing
the valid values; every error names the file and the place once, YAML errors the line and column.

This module reads agent files (:func:`load_agent`) and saves them (:func:`save_agent`); its parts live
beside it in :mod:`contextsieve.agent`: ``file_guards`` (safe YAML and file reading), ``file_checks``
(keys, fields and the load warnings), ``file_servers`` (MCP servers and their tools), ``tool_limits``
(what is kept of a listed tool) and ``file_writer`` (the document and YAML a save writes).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from contextsieve.agent.agent import Agent
from contextsieve.agent.file_checks import (
    FRONT_MATTER_KEYS,
    MAX_LOAD_WARNINGS,
    OWN_SETTINGS,
    SETTING_NAMES,
    closest,
    document_unknown_keys,
    fail,
    issue_warnings,
    read_flag,
    read_include,
    read_string,
    unknown_keys,
)
from contextsieve.agent.file_guards import load_yaml, read_folder_file, read_yaml, yaml_problem
from contextsieve.agent.file_servers import servers_and_tools
from contextsieve.agent.file_writer import to_yaml
from contextsieve.agent.identity import declared_id
from contextsieve.agent.items import IncludeMode, Reference, Rule
from contextsieve.agent.settings import AgentSettings
from contextsieve.errors import AgentFileError, ContextSieveError, InputError, brief, check_text
from contextsieve.fileio import atomic_write_bytes

__all__ = ["load_agent", "save_agent", "example_agent_path"]

_INTS = {"maxChatTurns", "maxOutputTokens", "contextTopK", "contextTopN"}
_FLOATS = {"temperature", "topP", "contextIncludeScore"}
_ITEM_FIELDS = {"name", "description", "priorityLevel", "text", "include", "summary"}


def example_agent_path() -> Path:
    """The bundled example agent (``contextsieve/data/example_agent.yaml``): a support and engineering
    assistant with rules, references and MCP tools of several servers."""
    return Path(str(resources.files("contextsieve").joinpath("data/example_agent.yaml")))


_R = TypeVar("_R", Rule, Reference)


def load_agent(path: str | Path, *, tools: Mapping[str, list[dict[str, Any]]] | None = None) -> Agent:
    """Load an agent file or folder (see the module docstring).

    Raises :class:`AgentFileError` naming the file, the place and what is wrong (an empty file, a
    malformed field, an unknown MCP server type or include mode with the valid ones, YAML that does
    not parse with its line and column). Keys that nobody reads (neither contextsieve nor the
    reference format defines them, e.g. ``rulez:``) do not stop the load: each is issued as an
    :class:`~contextsieve.errors.AgentFileWarning` with its likely meaning and kept in
    :attr:`Agent.load_warnings <contextsieve.Agent.load_warnings>`.
    """
    path = Path(path)
    try:
        if path.is_dir():
            for name in ("tsagent.yaml", "tsagent.yml"):
                if (path / name).is_file():
                    return _from_document(read_yaml(path / name), path / name, tools)
            if (path / "tsagent.json").is_file():
                return _load_legacy(path, tools)
            for name in ("tsagent.yaml", "tsagent.yml", "tsagent.json"):  # one there that cannot be read as a file
                found = path / name
                if found.is_symlink() and not found.exists():
                    raise AgentFileError(f"{found}: a link that leads to no file (a loop, or its target is gone)")
                if found.exists():
                    raise AgentFileError(f"{found}: not a regular file")
            raise AgentFileError(f"{path}: no tsagent.yaml, tsagent.yml or tsagent.json in this folder")
        if not path.is_file():
            missing = not path.exists() and not path.is_symlink()
            raise AgentFileError(f"{path}: {'no such agent file' if missing else 'not a regular file or folder'}")
    except OSError as e:  # a name too long, a folder on the way that may not be searched
        raise AgentFileError(f"{path}: cannot read: {e.strerror or e}") from e
    if path.suffix == ".json" and path.name == "tsagent.json":
        return _load_legacy(path.parent, tools)
    return _from_document(read_yaml(path), path, tools)


def save_agent(agent: Agent, path: str | Path) -> Path:
    """Write ``agent`` as a current-format YAML file (temp file + rename: never half written) and return
    the file written. A folder (an agent folder, legacy or current) gets its ``tsagent.yaml``, as the
    reference system migrates; a symlink is written through (see :mod:`contextsieve.fileio`)."""
    target = Path(path)
    if target.is_dir():
        target = target / "tsagent.yaml"
    atomic_write_bytes(target, to_yaml(agent).encode("utf-8"))
    return target


def _settings(raw: Any, path: Path, legacy: bool = False) -> AgentSettings:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise fail(path, "settings", "must be a mapping")
    raw = dict(raw)
    if "model" not in raw and "mostRecentModel" in raw:
        raw["model"] = raw["mostRecentModel"]
    values: dict[str, Any] = {}
    for key, field_name in SETTING_NAMES.items():
        if key not in raw or raw[key] is None:
            continue
        v = raw[key]
        try:
            if key in _INTS:
                v = int(v) if legacy or isinstance(v, str) else v
            elif key in _FLOATS:
                v = float(v)
        except (TypeError, ValueError, OverflowError) as e:
            raise fail(path, f"settings.{key}", f"not a number: {brief(v)}") from e
        values[field_name] = v
    own = raw.get("contextsieve")
    if own is not None:
        if not isinstance(own, dict):
            raise fail(path, "settings.contextsieve", "must be a mapping of contextsieve setting names to values")
        clash = sorted(set(own) & set(SETTING_NAMES.values()))
        if clash:
            raise fail(path, "settings.contextsieve", f"{clash} are reference settings: set them under settings")
        names = list(OWN_SETTINGS)
        for key in own:
            if key not in names:
                near = closest(key, names)
                hint = f"did you mean {near!r}?" if near else "contextsieve settings: " + ", ".join(names)
                raise fail(path, f"settings.contextsieve.{key}", f"unknown setting ({hint})")
        values.update(own)
    try:  # the LLM settings go into llm; names unknown to AgentSettings are an error
        return AgentSettings().with_overrides(**values)
    except ContextSieveError as e:
        raise fail(path, "settings", str(e)) from e


def _item(cls: type[_R], raw: Any, path: Path, where: str, legacy: bool = False) -> _R:
    if not isinstance(raw, dict):
        raise fail(path, where, "must be a mapping")
    extra = {k: v for k, v in raw.items() if k not in _ITEM_FIELDS}
    prio = raw.get("priorityLevel", 500)
    if legacy and prio in (None, ""):
        prio = 500
    try:
        return cls(
            name=read_string(raw, "name", path, where, required=True),
            text=read_string(raw, "text", path, where, required=True),
            description=read_string(raw, "description", path, where),
            priority=int(prio) if isinstance(prio, str) else prio,
            include=read_include(raw.get("include") or None, path, f"{where}.include") or IncludeMode.MANUAL,
            summary=read_string(raw, "summary", path, where),
            extra=extra,
        )
    except AgentFileError:
        raise  # names the file and the field already
    except (ContextSieveError, ValueError, TypeError) as e:
        raise fail(path, where, str(e)) from e


def _from_document(
    doc: dict[str, Any],
    path: Path,
    catalog: Mapping[str, list[dict[str, Any]]] | None,
    legacy: bool = False,
    notes: Sequence[str] = (),
) -> Agent:
    """The agent of a document; ``notes``: load warnings found before (a legacy folder's front matter).
    Issues every load warning (:func:`issue_warnings`) once the agent is built."""
    rules = doc.get("rules") or []
    refs = doc.get("references") or []
    if not isinstance(rules, list) or not isinstance(refs, list):
        raise fail(path, "rules/references", "must be lists")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise fail(path, "metadata", "must be a mapping")
    prompt = doc.get("systemPrompt") or ""
    if not isinstance(prompt, str):
        raise fail(path, "systemPrompt", "must be a string")
    servers, tools, from_catalog = servers_and_tools(doc.get("mcpServers"), path, catalog)
    name = _name(doc, meta, path)
    found = tuple(
        dict.fromkeys([*notes, *document_unknown_keys(doc, path, legacy), *_unknown_servers(catalog, servers, path)])
    )
    if len(found) > MAX_LOAD_WARNINGS:
        more = len(found) - MAX_LOAD_WARNINGS + 1
        found = (*found[: MAX_LOAD_WARNINGS - 1], f"{path}: {more} more keys that nobody reads (not listed)")
    try:
        agent = Agent(
            name=name,
            system_prompt=prompt,
            settings=_settings(doc.get("settings"), path, legacy),
            rules=[_item(Rule, r, path, f"rules[{i}]", legacy) for i, r in enumerate(rules)],
            references=[_item(Reference, r, path, f"references[{i}]", legacy) for i, r in enumerate(refs)],
            servers=servers,
            tools=tools,
            metadata=dict(meta),
            autonomous=bool(read_flag(meta.get("autonomous"), path, "metadata.autonomous")),
            document=doc,
            catalog=from_catalog,
            source=_source(path),
            agent_id=_agent_id(doc, path),
            load_warnings=found,
        )
    except AgentFileError:
        raise
    except ContextSieveError as e:
        raise fail(path, "items", str(e)) from e
    issue_warnings(found)
    return agent


def _name(doc: dict[str, Any], meta: dict[str, Any], path: Path) -> str:
    """The agent's declared name: the top-level ``name:`` (as contextsieve's examples write it) or
    ``metadata.name`` (the reference format); both given must agree; neither: the file's stem."""
    top = doc.get("name")
    if top is not None and (not isinstance(top, str) or not top.strip()):
        raise fail(path, "name", f"must be a non-empty string, got {brief(top)}")
    declared = read_string(meta, "name", path, "metadata")
    if top is not None and declared and top != declared:
        raise fail(path, "name", f"{brief(top)} differs from metadata.name {brief(declared)}: give the name once")
    name = top or declared or path.stem
    try:
        check_text(name, "the name")
    except InputError as e:  # a lone surrogate: an escape that split a pair, or a file name not UTF-8
        where = "name" if top else "metadata.name" if declared else "the file name"
        raise fail(path, where, f"{e}; give the agent a name of valid text (`name:`)") from None
    return name


def _agent_id(doc: dict[str, Any], path: Path) -> str:
    """The top-level ``id:`` (a contextsieve key: the agent's identity wherever its file goes, see
    :mod:`contextsieve.agent.identity`); ``""`` without one."""
    if doc.get("id") is None:
        return ""
    try:
        return declared_id(doc["id"], "id")
    except ContextSieveError as e:
        raise fail(path, "id", str(e).partition(": ")[2]) from e


def _source(path: Path) -> str:
    """Where an agent was loaded from, resolved (part of its identity: :attr:`Agent.identity`)."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # a link loop: the path as given still tells two files apart
        return str(path.absolute())


def _read_mdt(path: Path, folder: Path, notes: list[str]) -> dict[str, Any]:
    """A legacy ``.mdt``: split on ``'---\\n'``; part 1 is the front matter, the rest is the text.
    Warnings for front-matter keys nobody reads are appended to ``notes``."""
    raw = read_folder_file(path, folder, "file")
    parts = raw.split("---\n")
    if len(parts) < 3:
        raise fail(path, "front matter", "expected '---' lines around the metadata")
    try:
        meta = load_yaml(parts[1], str(path)) or {}  # the writer used JSON, which YAML reads too
    except (yaml.YAMLError, RecursionError) as e:
        raise fail(path, "front matter", f"not YAML/JSON: {yaml_problem(e)}") from e
    if not isinstance(meta, dict):
        raise fail(path, "front matter", "must be a mapping")
    notes += unknown_keys(path, meta, "front matter", FRONT_MATTER_KEYS)
    meta = {k: v for k, v in meta.items() if k != "enabled"}  # removed from the format in f564ad9
    meta.setdefault("name", path.stem)
    if not meta.get("name"):
        meta["name"] = path.stem
    meta["text"] = "---\n".join(parts[2:]).strip()
    return meta


def _unknown_servers(catalog: Mapping[str, object] | None, servers: Mapping[str, object], path: Path) -> list[str]:
    """A load warning for each server a tools catalog lists that the agent file does not declare (their
    tools are offered by no server of the agent), with the declared server it likely means."""
    out = []
    for name in (catalog or {}).keys() - servers.keys():
        close = difflib.get_close_matches(name, list(servers), n=1)
        like = f"did you mean {close[0]!r}? " if close else ""
        names = sorted(servers)
        declared = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "") or "none"
        out.append(
            f"{path}: the tools catalog lists server {brief(name)}, which mcpServers does not declare: its tools "
            f"are not offered ({like}the agent's servers: {declared})"
        )
    return sorted(out)


def _load_legacy(folder: Path, catalog: Mapping[str, list[dict[str, Any]]] | None) -> Agent:
    cfg_path = folder / "tsagent.json"
    try:
        doc = json.loads(read_folder_file(cfg_path, folder, "file"))
    except (ValueError, RecursionError) as e:
        raise AgentFileError(f"{cfg_path}: cannot read as JSON: {str(e)[:300]}") from e
    if not isinstance(doc, dict):
        raise fail(cfg_path, "top level", "must be an object")
    prompt = folder / "prompt.md"
    doc["systemPrompt"] = read_folder_file(prompt, folder, "file") if prompt.exists() or prompt.is_symlink() else ""
    notes: list[str] = []
    doc["rules"] = [_read_mdt(p, folder, notes) for p in sorted((folder / "rules").glob("*.mdt"))]
    doc["references"] = [_read_mdt(p, folder, notes) for p in sorted((folder / "refs").glob("*.mdt"))]
    return _from_document(doc, cfg_path, catalog, legacy=True, notes=notes)
