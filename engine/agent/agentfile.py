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

Mistakes are named. A key in a place where neither this library nor the reference format defines it
(``rulez:``, ``settings.contextTopn``) is kept but read by nobody: the load issues an
:class:`~contextsieve.errors.AgentFileWarning` with its likely meaning ("did you mean 'rules'?") and
keeps it in :attr:`Agent.load_warnings <contextsieve.Agent.load_warnings>`; keys the reference format
defines but this library does not use (``providers``, ``supervisors``, ``theme``, ...) load silently.
An empty file, an unknown MCP server ``type`` or include mode is an :class:`AgentFileError` listing
the valid values; every error names the file and the place once, YAML errors the line and column.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import stat
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from contextsieve.agent.agent import Agent, AgentSettings, McpServer
from contextsieve.agent.items import IncludeMode, ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.errors import AgentFileError, AgentFileWarning, ContextSieveError, InputError, brief
from contextsieve.fileio import atomic_write_bytes

__all__ = [
    "load_agent",
    "save_agent",
    "to_document",
    "example_agent_path",
    "server_tools",
    "ToolLimits",
    "limit_tool",
    "CUT_MARK",
    "SETTING_NAMES",
    "SERVER_TYPES",
    "INCLUDE_MODES",
]

#: agent-file setting name -> AgentSettings field
SETTING_NAMES = {
    "contextTopK": "context_top_k",
    "contextTopN": "context_top_n",
    "contextIncludeScore": "context_include_score",
    "maxChatTurns": "max_chat_turns",
    "maxOutputTokens": "max_output_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "toolPermission": "tool_permission",
    "model": "model",
}
_INTS = {"maxChatTurns", "maxOutputTokens", "contextTopK", "contextTopN"}
_FLOATS = {"temperature", "topP", "contextIncludeScore"}
_ITEM_FIELDS = {"name", "description", "priorityLevel", "text", "include", "summary"}

#: MCP server ``type`` values (the reference format's); the MCP client also takes ``transport`` for
#: ``type`` and the spellings in :data:`_SERVER_TYPE_ALIASES` for ``streamable-http``.
SERVER_TYPES = ("stdio", "streamable-http", "sse", "internal")
_SERVER_TYPE_ALIASES = ("http", "streamableHttp", "streamable_http")
#: Include modes an item, a tool or a server's ``serverToolDefaults`` may be set to.
INCLUDE_MODES = ("always", "manual", "agent")

#: Keys each place of an agent file may hold: the reference format's (``tsagent-notes.md`` §1; read
#: here or only kept, such as ``providers``, ``theme`` or ``embeddings``) and contextsieve's own
#: (``name``, ``summary``, ``settings.contextsieve``, a server's ``description`` and ``transport``, a
#: tool's ``description`` and ``inputSchema``). Any other key is kept but read by nobody: a load
#: warning (:class:`~contextsieve.errors.AgentFileWarning`) names it with its likely meaning.
_TOP_KEYS = (
    "name",
    "metadata",
    "settings",
    "systemPrompt",
    "rules",
    "references",
    "providers",
    "mcpServers",
    "supervisors",
)
_SETTING_KEYS = (*SETTING_NAMES, "theme", "systemPath", "mostRecentModel", "contextsieve")
_METADATA_KEYS = (
    "name",
    "version",
    "description",
    "iconUrl",
    "documentationUrl",
    "provider",
    "autonomous",
    "skills",
    "tools",
    "created",
    "lastAccessed",
)
_ITEM_KEYS = ("name", "description", "priorityLevel", "text", "include", "embeddings", "summary")
_FRONT_MATTER_KEYS = ("name", "description", "priorityLevel", "include", "summary", "enabled")
_SERVER_KEYS = (
    "type",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "tool",
    "serverToolDefaults",
    "tools",
    "toolInclude",
    "toolPermissionRequired",
    "toolEmbeddings",
    "description",
    "transport",
)
_DEFAULTS_KEYS = ("permissionRequired", "include")
_TOOL_KEYS = ("permissionRequired", "include", "embeddings", "hash", "description", "inputSchema", "summary")


def example_agent_path() -> Path:
    """The bundled example agent (``contextsieve/data/example_agent.yaml``): a support and engineering
    assistant with rules, references and MCP tools of several servers."""
    return Path(str(resources.files("contextsieve").joinpath("data/example_agent.yaml")))


_R = TypeVar("_R", Rule, Reference)


def _fail(path: Path, where: str, why: str) -> AgentFileError:
    return AgentFileError(f"{path}: {where}: {why}")


def _close(word: object, choices: Sequence[str]) -> str | None:
    """The choice ``word`` most likely misspells (case aside; ``difflib`` ratio >= 0.6), or ``None``."""
    lowered = {c.lower(): c for c in choices}
    got = difflib.get_close_matches(str(word).lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[got[0]] if got else None


def _one_of(value: object, what: str, valid: Sequence[str]) -> str:
    """``"'stdoi' is not a server type (did you mean 'stdio'?); valid: stdio, sse"``."""
    near = _close(value, valid) if isinstance(value, str) else None
    mean = f" (did you mean {near!r}?)" if near else ""
    return f"{brief(value)} is not {what}{mean}; valid: {', '.join(valid)}"


def _include(value: Any, path: Path, where: str) -> IncludeMode | None:
    """An include mode (``None``: not set); :class:`AgentFileError` listing the valid ones otherwise."""
    if value is None:
        return None
    if isinstance(value, str) and value in INCLUDE_MODES:
        return IncludeMode(value)
    raise _fail(path, where, _one_of(value, "an include mode", INCLUDE_MODES))


def _check_server_type(cfg: Mapping[str, Any], path: Path, where: str) -> None:
    """A server's ``type`` (or ``transport``), when given, is one the MCP client can start."""
    for key in ("type", "transport"):
        value = cfg.get(key)
        if value is not None and not (isinstance(value, str) and value in (*SERVER_TYPES, *_SERVER_TYPE_ALIASES)):
            raise _fail(path, f"{where}.{key}", _one_of(value, "an MCP server type", SERVER_TYPES))


#: What a key unknown in one place likely means, beyond a close spelling: place -> key -> hint (a key
#: of another place, a snake_case name of a reference setting, a word other formats use).
_MEANT: dict[str, dict[str, str]] = {
    "": {
        **{k: "it belongs under settings" for k in _SETTING_KEYS},
        **{k: "it belongs under metadata" for k in _METADATA_KEYS if k not in _TOP_KEYS},
        "tools": "tools belong under mcpServers.<server>.tools",
        "refs": "did you mean 'references'?",
        "instructions": "did you mean 'systemPrompt'?",
    },
    "settings": {
        **{
            f.name: "it belongs under settings.contextsieve"
            for f in dataclasses.fields(AgentSettings)
            if f.name not in SETTING_NAMES.values()
        },
        **{field_name: f"did you mean {key!r}?" for key, field_name in SETTING_NAMES.items() if field_name != key},
    },
    "server": {k: "it belongs under serverToolDefaults" for k in _DEFAULTS_KEYS},
}


def _unknown(path: Path, raw: Mapping[Any, Any], where: str, known: Sequence[str], place: str = "") -> list[str]:
    """A warning for each key of ``raw`` not in ``known``, saying what it likely means: the tail of a
    text a comma cut short in a flow mapping, what it means elsewhere (:data:`_MEANT`), the
    closest known key, or else the known keys."""
    out = []
    for key in raw:
        if key in known:
            continue
        meant = _MEANT.get(place, {}).get(key) if isinstance(key, str) else None
        near = _close(key, known)
        if raw[key] is None and isinstance(key, str) and " " in key.strip():  # `{text: a, b}` reads `b` as a key
            hint = "a key without a value: the rest of a text cut at a comma inside {...}? put the text in quotes"
        elif meant or near:
            hint = meant or f"did you mean {near!r}?"
        else:
            hint = f"known here: {', '.join(known)}"
        shown = key if isinstance(key, str) and key.isprintable() and len(key) <= 80 else brief(key)
        at = f"{where}.{shown}" if where else shown
        out.append(f"{path}: {at}: unknown key ({hint}); it is kept in the file but not read")
    return out


def _unknown_keys(doc: Mapping[Any, Any], path: Path, legacy: bool) -> list[str]:
    """Warnings for every key of the document that nobody reads (see :data:`_TOP_KEYS`); the items of a
    legacy folder are checked where they are read (their ``.mdt`` front matter)."""
    out = _unknown(path, doc, "", _TOP_KEYS)
    if isinstance(doc.get("settings"), dict):
        out += _unknown(path, doc["settings"], "settings", _SETTING_KEYS, "settings")
    if isinstance(doc.get("metadata"), dict):
        out += _unknown(path, doc["metadata"], "metadata", _METADATA_KEYS)
    for kind in ("rules", "references"):
        if not legacy and isinstance(doc.get(kind), list):
            for i, item in enumerate(doc[kind]):
                if isinstance(item, dict):
                    out += _unknown(path, item, f"{kind}[{i}]", _ITEM_KEYS)
    servers = doc.get("mcpServers")
    for name, cfg in (servers if isinstance(servers, dict) else {}).items():
        if not isinstance(cfg, dict):
            continue
        where = f"mcpServers.{name}"
        out += _unknown(path, cfg, where, _SERVER_KEYS, "server")
        if isinstance(cfg.get("serverToolDefaults"), dict):
            out += _unknown(path, cfg["serverToolDefaults"], f"{where}.serverToolDefaults", _DEFAULTS_KEYS)
        tools = cfg.get("tools")
        for tool_name, o in (tools if isinstance(tools, dict) else {}).items():
            if isinstance(o, dict):
                out += _unknown(path, o, f"{where}.tools.{tool_name}", _TOOL_KEYS)
    return out


#: Most load warnings kept and issued for one file (the last says how many more there were).
MAX_LOAD_WARNINGS = 20


def _warn(messages: Sequence[str]) -> None:
    """Issue each message once as an :class:`AgentFileWarning`, attributed to the first caller outside
    contextsieve (so Python's default filter shows each once per place in the caller's code)."""
    here = Path(__file__).parent.parent  # the package contextsieve (this file is in contextsieve/agent/)
    package = tuple({str(here) + os.sep, str(here.resolve()) + os.sep})
    level, frame = 2, sys._getframe(1)  # level 2: _warn's caller
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    for message in dict.fromkeys(messages):
        warnings.warn(message, AgentFileWarning, stacklevel=level)


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
    if path.is_dir():
        for name in ("tsagent.yaml", "tsagent.yml"):
            if (path / name).is_file():
                return _from_document(_read_yaml(path / name), path / name, tools)
        if (path / "tsagent.json").is_file():
            return _load_legacy(path, tools)
        raise AgentFileError(f"{path}: no tsagent.yaml, tsagent.yml or tsagent.json in this folder")
    if not path.is_file():
        raise AgentFileError(f"{path}: no such agent file")
    if path.suffix == ".json" and path.name == "tsagent.json":
        return _load_legacy(path.parent, tools)
    return _from_document(_read_yaml(path), path, tools)


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


def _load_yaml(text: str, name: str) -> Any:
    """YAML through :class:`_Loader` (safe types only); ``name`` (the file) is what its errors' marks name."""
    loader = _Loader(text)
    loader.name = name  # else PyYAML's marks say "<unicode string>"
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_problem(e: yaml.YAMLError | RecursionError) -> str:
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


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        doc = _load_yaml(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise AgentFileError(f"{path}: cannot read: {e}") from e
    except (yaml.YAMLError, RecursionError) as e:
        raise AgentFileError(f"{path}: not valid YAML: {_yaml_problem(e)}") from e
    if doc is None or doc == {}:
        raise AgentFileError(f"{path}: {_EMPTY}")
    if not isinstance(doc, dict):
        raise _fail(path, "top level", f"must be a mapping, got {type(doc).__name__}")
    return doc


def _settings(raw: Any, path: Path, legacy: bool = False) -> AgentSettings:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _fail(path, "settings", "must be a mapping")
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
            raise _fail(path, f"settings.{key}", f"not a number: {brief(v)}") from e
        values[field_name] = v
    own = raw.get("contextsieve")
    if own is not None:
        if not isinstance(own, dict):
            raise _fail(path, "settings.contextsieve", "must be a mapping of contextsieve setting names to values")
        clash = sorted(set(own) & set(SETTING_NAMES.values()))
        if clash:
            raise _fail(path, "settings.contextsieve", f"{clash} are reference settings: set them under settings")
        names = [f.name for f in dataclasses.fields(AgentSettings) if f.name not in SETTING_NAMES.values()]
        for key in own:
            if key not in names:
                near = _close(key, names)
                hint = f"did you mean {near!r}?" if near else "contextsieve settings: " + ", ".join(names)
                raise _fail(path, f"settings.contextsieve.{key}", f"unknown setting ({hint})")
        values.update(own)
    try:
        if own:
            return AgentSettings().with_overrides(**values)  # names unknown to AgentSettings are an error
        return AgentSettings(**values)
    except ContextSieveError as e:
        raise _fail(path, "settings", str(e)) from e


def _mapping(value: Any, path: Path, where: str) -> dict[str, Any]:
    """A mapping field (``None`` or missing: ``{}``); :class:`AgentFileError` naming it otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(path, where, f"must be a mapping, got {type(value).__name__}")
    return value


def _flag(value: Any, path: Path, where: str) -> bool | None:
    """A true/false field (``None``: not set); the string ``'false'`` is an error, not True."""
    if value is None or isinstance(value, bool):
        return value
    raise _fail(path, where, f"must be true or false, got {type(value).__name__} {brief(value)}")


def _string(raw: Mapping[str, Any], key: str, path: Path, where: str, *, required: bool = False) -> str:
    """A string field of an item (``None`` or missing: ``""``, or an error when ``required``)."""
    value = raw.get(key)
    if value is None:
        if required:
            typo = [k for k in raw if isinstance(k, str) and k not in _ITEM_KEYS and _close(k, [key])]
            raise _fail(
                path,
                f"{where}.{key}",
                "is required" + (f" (the item has {typo[0]!r}: did you mean {key!r}?)" if typo else ""),
            )
        return ""
    if not isinstance(value, str):
        raise _fail(path, f"{where}.{key}", f"must be a string, got {type(value).__name__}")
    return value


def _item(cls: type[_R], raw: Any, path: Path, where: str, legacy: bool = False) -> _R:
    if not isinstance(raw, dict):
        raise _fail(path, where, "must be a mapping")
    extra = {k: v for k, v in raw.items() if k not in _ITEM_FIELDS}
    prio = raw.get("priorityLevel", 500)
    if legacy and prio in (None, ""):
        prio = 500
    try:
        return cls(
            name=_string(raw, "name", path, where, required=True),
            text=_string(raw, "text", path, where, required=True),
            description=_string(raw, "description", path, where),
            priority=int(prio) if isinstance(prio, str) else prio,
            include=_include(raw.get("include") or None, path, f"{where}.include") or IncludeMode.MANUAL,
            summary=_string(raw, "summary", path, where),
            extra=extra,
        )
    except AgentFileError:
        raise  # names the file and the field already
    except (ContextSieveError, ValueError, TypeError) as e:
        raise _fail(path, where, str(e)) from e


def _servers_and_tools(
    raw: Any, path: Path, catalog: Mapping[str, list[dict[str, Any]]] | None
) -> tuple[dict[str, McpServer], list[Tool], dict[ItemKey, tuple[str, str]]]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _fail(path, "mcpServers", "must be a mapping")
    servers: dict[str, McpServer] = {}
    tools: list[Tool] = []
    from_catalog: dict[ItemKey, tuple[str, str]] = {}
    for name, cfg in raw.items():
        where = f"mcpServers.{name}"
        if not isinstance(cfg, dict):
            raise _fail(path, where, "must be a mapping")
        try:
            cfg = _migrate_server(cfg)
        except (AttributeError, TypeError) as e:
            raise _fail(path, where, f"legacy tool settings are malformed: {e}") from e
        _check_server_type(cfg, path, where)
        defaults = _mapping(cfg.get("serverToolDefaults"), path, f"{where}.serverToolDefaults")
        servers[name] = McpServer(
            name,
            cfg,
            _include(defaults.get("include") or None, path, f"{where}.serverToolDefaults.include"),
            _flag(defaults.get("permissionRequired"), path, f"{where}.serverToolDefaults.permissionRequired"),
            _string(cfg, "description", path, where),
        )
        got, described = server_tools(servers[name], (catalog or {}).get(name, []), path)
        tools += got
        from_catalog.update(described)
    return servers, tools, from_catalog


#: What ends a description cut to :attr:`ToolLimits.description_chars`.
CUT_MARK = " [...]"
#: Schema keywords that only annotate (JSON Schema's meta-data vocabulary and ``$comment``): a schema
#: without them validates the same arguments.
_ANNOTATIONS = frozenset({"description", "title", "examples", "$comment"})
#: Keywords whose value is a subschema, a list of subschemas, or a map of names to subschemas.
_SUBSCHEMA = frozenset(
    {
        "items",
        "additionalItems",
        "additionalProperties",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
_SUBSCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems", "items"})
_SUBSCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


@dataclass(frozen=True)
class ToolLimits:
    """The most text kept of one tool as an MCP server lists it; more is cut (:func:`limit_tool`).

    Tool descriptions and schemas come from third-party servers: a 1 MB description would be chunked,
    embedded and sent with every request that offers the tool. :func:`server_tools` applies these
    limits to every listed tool (live listings, cached listings, catalogs, the gateway's re-listings),
    never to tools the agent file itself describes (they are the user's own text, and saving the
    file must not cut them). A cut tool's :attr:`~contextsieve.agent.items.Tool.cut_note` says what was cut.

    Attributes:
        description_chars: longest description kept, in characters (default 10,000: about twice the
            longest of the 584 real tools in ``benchmarks/data/mcp_catalog``, 5,115, whose median is
            141; about 2,500 model tokens, ten chunks). A longer one is cut at a word boundary (when
            one is within its last 200 characters) and ends with :data:`CUT_MARK`, within the limit.
        schema_chars: longest input schema kept, in characters of its compact JSON (default 24,000:
            about twice the longest of those tools, 12,030, whose median is 450). A longer schema
            loses annotations (``description``, ``title``, ``examples``, ``$comment`` of the schema and
            its subschemas) from the first, in document order, that no longer fits (later, shorter ones
            are kept while they fit); when its structure alone is over the limit it becomes
            ``{"type": "object"}`` with as many top-level properties (required ones first) as fit, each
            with its ``type``, and in that order while they fit with its whole subschema without
            annotations (unless it holds a ``$ref``). Either way the schema stays a valid JSON schema
            (nothing but whole keywords and properties is dropped, and without ``additionalProperties``
            a dropped property may still be passed).
    """

    description_chars: int = 10_000
    schema_chars: int = 24_000

    def __post_init__(self) -> None:
        for name in ("description_chars", "schema_chars"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 100:
                raise InputError(f"{name} must be an int >= 100 (characters), got {brief(v)}")


def _json_len(value: Any) -> int:
    """Characters of ``value`` as compact JSON (how a schema's size is measured)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))


def _walk(schema: dict[Any, Any], keep: Callable[[str, Any], bool]) -> dict[Any, Any]:
    """A copy of ``schema`` with each annotation kept where ``keep(keyword, value)`` says so (called for
    every annotation of the schema and its subschemas, in document order); data such as ``enum``,
    ``const`` or ``default`` and unknown keywords are kept as they are."""
    out: dict[Any, Any] = {}
    for k, v in schema.items():
        if k in _ANNOTATIONS:
            if keep(k, v):
                out[k] = v
        elif k in _SUBSCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: _walk(sub, keep) if isinstance(sub, dict) else sub for name, sub in v.items()}
        elif k in _SUBSCHEMA_LISTS and isinstance(v, list):
            out[k] = [_walk(sub, keep) if isinstance(sub, dict) else sub for sub in v]
        elif k in _SUBSCHEMA and isinstance(v, dict):
            out[k] = _walk(v, keep)
        else:
            out[k] = v
    return out


def _top_level(schema: dict[Any, Any], limit: int) -> tuple[dict[str, Any], int, int, int]:
    """``{"type": "object"}`` with as many top-level properties of ``schema`` as fit ``limit`` characters:
    first each with its ``type`` only (required ones first), then, in that order while they fit, with
    their whole subschema without annotations (unless it holds a ``$ref``: the definitions it points to
    are gone). Returns it and how many properties were kept whole, kept, and there were."""
    got_props, got_required = schema.get("properties"), schema.get("required")
    props: dict[Any, Any] = got_props if isinstance(got_props, dict) else {}
    required: list[Any] = got_required if isinstance(got_required, list) else []
    needed = [r for r in dict.fromkeys(x for x in required if isinstance(x, str)) if r in props]
    kept: dict[Any, Any] = {}
    size = _json_len({"type": "object", "properties": {}, "required": []})
    for name in [*needed, *(p for p in props if p not in needed)]:
        t = props[name].get("type") if isinstance(props[name], dict) else None
        typed = isinstance(t, str) or (isinstance(t, list) and all(isinstance(x, str) for x in t))
        sub = {"type": t} if typed else {}
        cost = _json_len({str(name): sub}) - 1 + (len(json.dumps(name)) + 1 if name in needed else 0)
        if size + cost <= limit:
            kept[name] = sub
            size += cost
    whole = 0
    for name, sub in kept.items():
        full = _walk(props[name], lambda k, v: False) if isinstance(props[name], dict) else props[name]
        text = json.dumps(full, ensure_ascii=False, separators=(",", ":"), default=str)
        extra = len(text) - _json_len(sub)
        if '"$ref"' not in text and size + extra <= limit:
            kept[name], size, whole = full, size + extra, whole + 1
    out: dict[str, Any] = {"type": "object"}
    if kept:
        out["properties"] = kept
    if [r for r in needed if r in kept]:
        out["required"] = [r for r in needed if r in kept]
    if _json_len(out) > limit:
        return {"type": "object"}, 0, 0, len(props)
    return out, whole, len(kept), len(props)


def _cut_schema(schema: dict[Any, Any], limit: int) -> tuple[dict[Any, Any], str]:
    """``schema`` within ``limit`` characters of compact JSON (see :attr:`ToolLimits.schema_chars`)
    and what was cut (``""``: nothing)."""
    size = _json_len(schema)
    if size <= limit:
        return schema, ""
    costs: list[int] = []  # what each annotation adds to the JSON (its comma included)

    def measure(keyword: str, value: Any) -> bool:
        costs.append(_json_len({keyword: value}) - 1)
        return False

    skeleton = _walk(schema, measure)
    room = limit - _json_len(skeleton)
    if room >= 0:
        decisions = []
        for c in costs:
            decisions.append(c <= room)
            room -= c if decisions[-1] else 0
        it = iter(decisions)
        out = _walk(schema, lambda k, v: next(it))
        cut = len(costs) - sum(decisions)
        if _json_len(out) <= limit:
            return out, (
                f"input schema cut from {size:,} to {_json_len(out):,} characters of JSON (limit {limit:,}): "
                f"{cut:,} of {len(costs):,} descriptions, titles and examples left out"
            )
    out, whole, kept, total = _top_level(schema, limit)
    return out, (
        f"input schema cut from {size:,} to {_json_len(out):,} characters of JSON (limit {limit:,}): "
        f"{kept:,} of its {total:,} top-level properties kept ({whole:,} whole without annotations, the "
        "others with their type only)"
    )


def _cut_description(text: str, limit: int) -> tuple[str, str]:
    """``text`` within ``limit`` characters (see :attr:`ToolLimits.description_chars`) and what was cut."""
    if len(text) <= limit:
        return text, ""
    keep = limit - len(CUT_MARK)
    if not text[keep].isspace():  # back to the last space within 200 characters, if any
        keep = next((i for i in range(keep - 1, max(0, keep - 200), -1) if text[i].isspace()), keep)
    out = text[:keep].rstrip() + CUT_MARK
    return out, f"description cut from {len(text):,} to {len(out):,} characters (limit {limit:,})"


def limit_tool(
    description: str, schema: dict[Any, Any], limits: ToolLimits = ToolLimits()
) -> tuple[str, dict[Any, Any], str]:
    """A listed tool's description and input schema within ``limits`` (see :class:`ToolLimits`), and
    a note of what was cut (``""`` when nothing was; the inputs are never changed, cut ones copied).

    Raises :class:`InputError` for a schema nested too deep to measure.
    """
    try:
        schema, schema_note = _cut_schema(schema, limits.schema_chars)
    except RecursionError as e:
        raise InputError("the input schema is nested too deep to measure") from e
    description, description_note = _cut_description(description, limits.description_chars)
    return description, schema, "; ".join(x for x in (description_note, schema_note) if x)


def server_tools(
    server: McpServer,
    listed: Sequence[Any],
    path: Path = Path("<tools>"),
    limits: ToolLimits = ToolLimits(),
) -> tuple[list[Tool], dict[ItemKey, tuple[str, str]]]:
    """The tools of ``server``: the ``listed`` MCP ``tools/list`` entries (a catalog or a live listing)
    with the agent file's overrides of that server applied (``include``, ``permissionRequired``,
    ``summary``), plus the tools the file itself describes (a ``description`` in the override) that
    are not listed. Returns the tools and, for the listed ones, what the listing said of them.

    Every listed tool is held to ``limits`` (:class:`ToolLimits`: descriptions over 10,000 characters
    and schemas over 24,000 by default are cut, and the tool's ``cut_note`` says so); the tools the
    file describes are not.

    Raises :class:`AgentFileError` naming the field for malformed overrides or entries.
    """
    cfg, name = server.config, server.name
    where = f"mcpServers.{name}"
    overrides = _mapping(cfg.get("tools"), path, f"{where}.tools")
    for tool_name, o in overrides.items():  # every override, also of tools not listed now
        tw = f"{where}.tools.{tool_name}"
        _mapping(o, path, tw)  # `t1: agent` is no settings mapping
        _flag((o or {}).get("permissionRequired"), path, f"{tw}.permissionRequired")
        _include((o or {}).get("include"), path, f"{tw}.include")
    listed_by_name = {t["name"]: t for t in listed if isinstance(t, dict) and isinstance(t.get("name"), str)}
    declared: set[str] = set()
    for tool_name, o in overrides.items():
        if isinstance(o, dict) and "description" in o and tool_name not in listed_by_name:
            listed_by_name[tool_name] = {
                "name": tool_name,
                "description": o["description"],
                "inputSchema": o.get("inputSchema", {}),
            }
            declared.add(tool_name)
    tools: list[Tool] = []
    from_catalog: dict[ItemKey, tuple[str, str]] = {}
    for tool_name, t in listed_by_name.items():
        o = overrides.get(tool_name) or {}
        tw = f"{where}.tools.{tool_name}"
        try:
            description = t.get("description") or ""
            schema = _mapping(t.get("inputSchema"), path, f"{tw}.inputSchema")
            note = ""
            if tool_name not in declared and isinstance(description, str):
                description, schema, note = limit_tool(description, schema, limits)
            tool = Tool(
                name,
                tool_name,
                description,
                schema,
                _include(o.get("include"), path, f"{tw}.include"),
                _flag(o.get("permissionRequired"), path, f"{tw}.permissionRequired"),
                _string(o, "summary", path, tw),
                note,
            )
        except AgentFileError:
            raise  # names the file and the field already
        except (ContextSieveError, ValueError) as e:
            raise _fail(path, tw, str(e)) from e
        tools.append(tool)
        if tool_name not in declared:
            from_catalog[tool.key] = _describe(tool)
    return tools, from_catalog


def _migrate_server(cfg: dict[str, Any]) -> dict[str, Any]:
    """Legacy ``toolInclude`` / ``toolPermissionRequired`` / ``toolEmbeddings`` -> the current fields."""
    if not any(k in cfg for k in ("toolInclude", "toolPermissionRequired", "toolEmbeddings")):
        return cfg
    cfg = copy.deepcopy(cfg)
    defaults = dict(cfg.get("serverToolDefaults") or {})
    tools = dict(cfg.get("tools") or {})
    inc = cfg.pop("toolInclude", None) or {}
    perm = cfg.pop("toolPermissionRequired", None) or {}
    cfg.pop("toolEmbeddings", None)  # not migrated (another runtime's vectors; regenerated when needed)
    if inc.get("serverDefault"):
        defaults.setdefault("include", inc["serverDefault"])
    if "serverDefault" in perm:
        defaults.setdefault("permissionRequired", perm["serverDefault"])
    for name, mode in (inc.get("tools") or {}).items():
        tools.setdefault(name, {}).setdefault("include", mode)
    for name, req in (perm.get("tools") or {}).items():
        tools.setdefault(name, {}).setdefault("permissionRequired", req)
    if defaults:
        cfg["serverToolDefaults"] = defaults
    if tools:
        cfg["tools"] = tools
    return cfg


def _from_document(
    doc: dict[str, Any],
    path: Path,
    catalog: Mapping[str, list[dict[str, Any]]] | None,
    legacy: bool = False,
    notes: Sequence[str] = (),
) -> Agent:
    """The agent of a document; ``notes``: load warnings found before (a legacy folder's front matter).
    Issues every load warning (:func:`_warn`) once the agent is built."""
    rules = doc.get("rules") or []
    refs = doc.get("references") or []
    if not isinstance(rules, list) or not isinstance(refs, list):
        raise _fail(path, "rules/references", "must be lists")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _fail(path, "metadata", "must be a mapping")
    prompt = doc.get("systemPrompt") or ""
    if not isinstance(prompt, str):
        raise _fail(path, "systemPrompt", "must be a string")
    servers, tools, from_catalog = _servers_and_tools(doc.get("mcpServers"), path, catalog)
    name = _name(doc, meta, path)
    found = tuple(dict.fromkeys([*notes, *_unknown_keys(doc, path, legacy)]))
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
            autonomous=bool(_flag(meta.get("autonomous"), path, "metadata.autonomous")),
            document=doc,
            catalog=from_catalog,
            source=_source(path),
            load_warnings=found,
        )
    except AgentFileError:
        raise
    except ContextSieveError as e:
        raise _fail(path, "items", str(e)) from e
    _warn(found)
    return agent


def _name(doc: dict[str, Any], meta: dict[str, Any], path: Path) -> str:
    """The agent's declared name: the top-level ``name:`` (as contextsieve's examples write it) or
    ``metadata.name`` (the reference format); both given must agree; neither: the file's stem."""
    top = doc.get("name")
    if top is not None and (not isinstance(top, str) or not top.strip()):
        raise _fail(path, "name", f"must be a non-empty string, got {brief(top)}")
    declared = _string(meta, "name", path, "metadata")
    if top is not None and declared and top != declared:
        raise _fail(path, "name", f"{brief(top)} differs from metadata.name {brief(declared)}: give the name once")
    return top or declared or path.stem


def _source(path: Path) -> str:
    """Where an agent was loaded from, resolved (part of its identity: :attr:`Agent.identity`)."""
    try:
        return str(path.resolve())
    except (OSError, RuntimeError):  # a link loop: the path as given still tells two files apart
        return str(path.absolute())


def _read_text(path: Path, folder: Path, where: str) -> str:
    """A legacy agent folder's text file: a regular file inside ``folder`` (a FIFO, a device or a link
    leading outside would hang the load or read another file), decoded as UTF-8; else
    :class:`AgentFileError` naming the file."""
    try:
        real = path.resolve(strict=True)
        if not real.is_relative_to(folder.resolve(strict=True)):
            raise _fail(path, where, f"is a link to {real}, outside the agent folder")
        if not stat.S_ISREG(real.stat().st_mode):
            raise _fail(path, where, "is not a regular file")
        data = real.read_bytes()
    except OSError as e:
        raise _fail(path, where, f"cannot read: {e.strerror or e}") from e
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _fail(path, where, f"not UTF-8 text (byte {e.start}: {data[e.start : e.start + 1]!r})") from e


def _read_mdt(path: Path, folder: Path, notes: list[str]) -> dict[str, Any]:
    """A legacy ``.mdt``: split on ``'---\\n'``; part 1 is the front matter, the rest is the text.
    Warnings for front-matter keys nobody reads are appended to ``notes``."""
    raw = _read_text(path, folder, "file")
    parts = raw.split("---\n")
    if len(parts) < 3:
        raise _fail(path, "front matter", "expected '---' lines around the metadata")
    try:
        meta = _load_yaml(parts[1], str(path)) or {}  # the writer used JSON, which YAML reads too
    except (yaml.YAMLError, RecursionError) as e:
        raise _fail(path, "front matter", f"not YAML/JSON: {_yaml_problem(e)}") from e
    if not isinstance(meta, dict):
        raise _fail(path, "front matter", "must be a mapping")
    notes += _unknown(path, meta, "front matter", _FRONT_MATTER_KEYS)
    meta = {k: v for k, v in meta.items() if k != "enabled"}  # removed from the format in f564ad9
    meta.setdefault("name", path.stem)
    if not meta.get("name"):
        meta["name"] = path.stem
    meta["text"] = "---\n".join(parts[2:]).strip()
    return meta


def _load_legacy(folder: Path, catalog: Mapping[str, list[dict[str, Any]]] | None) -> Agent:
    cfg_path = folder / "tsagent.json"
    try:
        doc = json.loads(_read_text(cfg_path, folder, "file"))
    except (ValueError, RecursionError) as e:
        raise AgentFileError(f"{cfg_path}: cannot read as JSON: {str(e)[:300]}") from e
    if not isinstance(doc, dict):
        raise _fail(cfg_path, "top level", "must be an object")
    prompt = folder / "prompt.md"
    doc["systemPrompt"] = _read_text(prompt, folder, "file") if prompt.exists() or prompt.is_symlink() else ""
    notes: list[str] = []
    doc["rules"] = [_read_mdt(p, folder, notes) for p in sorted((folder / "rules").glob("*.mdt"))]
    doc["references"] = [_read_mdt(p, folder, notes) for p in sorted((folder / "refs").glob("*.mdt"))]
    return _from_document(doc, cfg_path, catalog, legacy=True, notes=notes)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


def _list(dumper: yaml.SafeDumper, xs: list) -> yaml.Node:
    flow = bool(xs) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)  # vectors on one line
    return dumper.represent_sequence("tag:yaml.org,2002:seq", xs, flow_style=flow)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(list, _list)


#: Top-level keys of the reference format this library reads; everything else is kept from the file.
_KNOWN_TOP = ("metadata", "settings", "systemPrompt", "rules", "references", "mcpServers")


def _settings_doc(agent: Agent, loaded: Mapping[str, Any]) -> dict[str, Any]:
    """``settings``: the agent's values for the reference's keys (written where the file had the key or
    the value is not the default), contextsieve's own under ``contextsieve``, unknown keys as loaded."""
    defaults = AgentSettings()
    out = {
        k: copy.deepcopy(v)
        for k, v in loaded.items()
        if k not in SETTING_NAMES and k not in ("mostRecentModel", "contextsieve")
    }
    for key, field_name in SETTING_NAMES.items():
        v = getattr(agent.settings, field_name)
        if v is not None and (
            key in loaded or (key == "model" and "mostRecentModel" in loaded) or v != getattr(defaults, field_name)
        ):
            out[key] = v
    own = {
        f.name: (dict(v) if isinstance(v, Mapping) else v)
        for f in dataclasses.fields(AgentSettings)
        if f.name not in SETTING_NAMES.values() and (v := getattr(agent.settings, f.name)) != getattr(defaults, f.name)
    }
    if own:
        out["contextsieve"] = own
    return out


def _item_doc(item: Rule, loaded: Mapping[str, Any] | None) -> dict[str, Any]:
    """A rule or reference; its unknown fields kept, except another runtime's ``embeddings`` once the
    embedded text changed (the reference system would otherwise read stale vectors)."""
    d: dict[str, Any] = {
        "name": item.name,
        "description": item.description,
        "priorityLevel": item.priority,
        "text": item.text,
        "include": item.include.value,
    }
    if item.summary:
        d["summary"] = item.summary
    extra = dict(item.extra)
    if loaded is not None and (
        loaded.get("text") != item.text or (loaded.get("description") or "") != item.description
    ):
        extra.pop("embeddings", None)
    d.update(extra)
    return d


def _server_doc(agent: Agent, server: McpServer) -> dict[str, Any]:
    """An MCP server: its connection config as loaded, its defaults and tools as the agent has them now.

    Tool entries of tools the agent never loaded (overrides for tools of a live server that was not
    listed) are kept as they were; entries of tools deleted since loading are dropped. A tool's
    ``description`` / ``inputSchema`` are written only for tools the file declares or the API added,
    never for tools that came from a catalog (the live server stays their source).
    """
    cfg = copy.deepcopy(_migrate_server(dict(server.config)))
    loaded_defaults = cfg.get("serverToolDefaults")
    for key in ("serverToolDefaults", "description", "tools"):
        cfg.pop(key, None)
    defaults: dict[str, Any] = {  # unknown default fields kept as loaded
        k: v
        for k, v in (loaded_defaults if isinstance(loaded_defaults, dict) else {}).items()
        if k not in ("include", "permissionRequired")
    }
    if server.default_permission_required is not None:
        defaults["permissionRequired"] = server.default_permission_required
    if server.default_include is not None:
        defaults["include"] = server.default_include.value
    if defaults:
        cfg["serverToolDefaults"] = defaults
    if server.description:
        cfg["description"] = server.description
    loaded_tools = _migrate_server(dict(server.config)).get("tools") or {}
    tools: dict[str, Any] = {}
    for name, entry in loaded_tools.items():
        tool_key = ItemKey(ItemKind.TOOL, name, server.name)
        if tool_key not in agent.loaded_keys and not agent.has(tool_key):
            tools[name] = copy.deepcopy(entry)  # an override for a tool this library never saw
    for tool in (t for t in agent.tools if t.server == server.name):
        was = loaded_tools.get(tool.name)
        entry = copy.deepcopy(was) if isinstance(was, dict) else {}
        for key in ("include", "permissionRequired", "summary"):
            entry.pop(key, None)
        if tool.include is not None:
            entry["include"] = tool.include.value
        if tool.permission_required is not None:
            entry["permissionRequired"] = tool.permission_required
        if agent.catalog.get(tool.key) != _describe(tool):  # declared in the file, added or edited here
            entry["description"] = tool.description
            entry.pop("inputSchema", None)
            if tool.input_schema:
                entry["inputSchema"] = copy.deepcopy(tool.input_schema)
        if tool.summary:
            entry["summary"] = tool.summary
        if entry or was is not None:
            tools[tool.name] = entry
    if tools:
        cfg["tools"] = tools
    return cfg


def _describe(tool: Tool) -> tuple[str, str]:
    """What a catalog says of a tool (to tell a catalog tool from one declared or edited here)."""
    return (tool.description, json.dumps(tool.input_schema, sort_keys=True, default=str))


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _file_order(items: Sequence[_R], loaded: Any) -> list[_R]:
    """Items in the order the file listed them (the agent keeps its own sorted order), new ones after."""
    names = [r.get("name") for r in loaded if isinstance(r, dict)] if isinstance(loaded, list) else []
    rank = {name: i for i, name in enumerate(names)}
    return sorted(items, key=lambda r: rank.get(r.name, len(rank)))  # stable: new items keep the agent's order


def to_document(agent: Agent) -> dict[str, Any]:
    """The agent as a current-format document, built from the agent's own fields.

    The document it was loaded from (``agent.document``) contributes only what this library does not
    know: unknown top-level keys (``providers``, ``supervisors``, ...), unknown settings and metadata,
    unknown item and server fields. So every edit made through the API is saved: added, changed and
    deleted items and servers, settings, the name, ``autonomous`` and the system prompt.
    """
    loaded = agent.document
    meta = copy.deepcopy(agent.metadata)
    if "name" not in loaded or "name" in meta:  # the name goes where the file had it (metadata by default)
        meta["name"] = agent.name
    if agent.autonomous:
        meta["autonomous"] = True
    elif "autonomous" in (loaded.get("metadata") or {}):
        meta["autonomous"] = False  # as the file had it
    else:
        meta.pop("autonomous", None)  # the reference drops it when false
    loaded_settings = loaded.get("settings") if isinstance(loaded.get("settings"), dict) else {}
    loaded_items = {
        (kind, r.get("name")): r
        for kind in ("rules", "references")
        for r in _as_list(loaded.get(kind))
        if isinstance(r, dict)
    }
    built: dict[str, Any] = {
        "name": agent.name,
        "metadata": meta,
        "settings": _settings_doc(agent, loaded_settings or {}),
        "systemPrompt": agent.system_prompt,
        "rules": [
            _item_doc(r, loaded_items.get(("rules", r.name))) for r in _file_order(agent.rules, loaded.get("rules"))
        ],
        "references": [
            _item_doc(r, loaded_items.get(("references", r.name)))
            for r in _file_order(agent.references, loaded.get("references"))
        ],
        "mcpServers": {name: _server_doc(agent, server) for name, server in agent.servers.items()},
    }
    doc: dict[str, Any] = {}
    for key in [*loaded, *_KNOWN_TOP]:  # the file's key order, then what it lacked
        if key in doc:
            continue
        doc[key] = built[key] if key in built else copy.deepcopy(loaded[key])
    return doc


def save_agent(agent: Agent, path: str | Path) -> Path:
    """Write ``agent`` as a current-format YAML file (temp file + rename: never half written) and return
    the file written. A folder (an agent folder, legacy or current) gets its ``tsagent.yaml``, as the
    reference system migrates; a symlink is written through (see :mod:`contextsieve.fileio`)."""
    target = Path(path)
    if target.is_dir():
        target = target / "tsagent.yaml"
    text = yaml.dump(to_document(agent), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10**9, indent=2)
    atomic_write_bytes(target, text.encode("utf-8"))
    return target
