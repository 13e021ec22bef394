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
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from contextsieve.agent import Agent, AgentSettings, McpServer
from contextsieve.errors import AgentFileError, ContextSieveError
from contextsieve.fileio import atomic_write_bytes
from contextsieve.items import IncludeMode, Reference, Rule, Tool

__all__ = ["load_agent", "save_agent", "SETTING_NAMES"]

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


def _fail(path: Path, where: str, why: str) -> AgentFileError:
    return AgentFileError(f"{path}: {where}: {why}")


def load_agent(path: str | Path, *, tools: Mapping[str, list[dict[str, Any]]] | None = None) -> Agent:
    """Load an agent file or folder (see the module docstring); :class:`AgentFileError` names what is wrong."""
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


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise AgentFileError(f"{path}: cannot read: {e}") from e
    except yaml.YAMLError as e:
        raise AgentFileError(f"{path}: not valid YAML: {e}") from e
    if doc is None:
        doc = {}
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
        except (TypeError, ValueError) as e:
            raise _fail(path, f"settings.{key}", f"not a number: {v!r}") from e
        values[field_name] = v
    own = raw.get("contextsieve")
    if own is not None:
        if not isinstance(own, dict):
            raise _fail(path, "settings.contextsieve", "must be a mapping of contextsieve setting names to values")
        clash = sorted(set(own) & set(SETTING_NAMES.values()))
        if clash:
            raise _fail(path, "settings.contextsieve", f"{clash} are reference settings: set them under settings")
        values.update(own)
    try:
        if own:
            return AgentSettings().with_overrides(**values)  # names unknown to AgentSettings are an error
        return AgentSettings(**values)
    except ContextSieveError as e:
        raise _fail(path, "settings", str(e)) from e


def _item(cls: type, raw: Any, path: Path, where: str, legacy: bool = False) -> Rule:
    if not isinstance(raw, dict):
        raise _fail(path, where, "must be a mapping")
    extra = {k: v for k, v in raw.items() if k not in _ITEM_FIELDS}
    prio = raw.get("priorityLevel", 500)
    if legacy and prio in (None, ""):
        prio = 500
    try:
        return cls(
            name=raw.get("name"),
            text=raw.get("text"),
            description=raw.get("description") or "",
            priority=int(prio) if isinstance(prio, str) else prio,
            include=IncludeMode(raw.get("include") or "manual"),
            summary=raw.get("summary") or "",
            extra=extra,
        )
    except (ContextSieveError, ValueError, TypeError) as e:
        raise _fail(path, where, str(e)) from e


def _servers_and_tools(raw: Any, path: Path, catalog: Mapping[str, list[dict[str, Any]]] | None) -> tuple[dict[str, McpServer], list[Tool]]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _fail(path, "mcpServers", "must be a mapping")
    servers: dict[str, McpServer] = {}
    tools: list[Tool] = []
    for name, cfg in raw.items():
        where = f"mcpServers.{name}"
        if not isinstance(cfg, dict):
            raise _fail(path, where, "must be a mapping")
        cfg = _migrate_server(cfg)
        defaults = cfg.get("serverToolDefaults") or {}
        try:
            servers[name] = McpServer(
                name, cfg, IncludeMode(defaults["include"]) if defaults.get("include") else None, defaults.get("permissionRequired"), str(cfg.get("description") or "")
            )
        except ValueError as e:
            raise _fail(path, f"{where}.serverToolDefaults.include", str(e)) from e
        overrides = cfg.get("tools") or {}
        if not isinstance(overrides, dict):
            raise _fail(path, f"{where}.tools", "must be a mapping of tool name to settings")
        listed = {t["name"]: t for t in (catalog or {}).get(name, []) if isinstance(t, dict) and "name" in t}
        for tool_name, o in overrides.items():
            if isinstance(o, dict) and "description" in o and tool_name not in listed:
                listed[tool_name] = {"name": tool_name, "description": o["description"], "inputSchema": o.get("inputSchema", {})}
        for tool_name, t in listed.items():
            o = overrides.get(tool_name) or {}
            try:
                tools.append(Tool(name, tool_name, t.get("description") or "", t.get("inputSchema") or {}, IncludeMode(o["include"]) if o.get("include") else None, o.get("permissionRequired"), str(o.get("summary") or "")))
            except (ContextSieveError, ValueError) as e:
                raise _fail(path, f"{where}.tools.{tool_name}", str(e)) from e
    return servers, tools


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


def _from_document(doc: dict[str, Any], path: Path, catalog: Mapping[str, list[dict[str, Any]]] | None, legacy: bool = False) -> Agent:
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
    servers, tools = _servers_and_tools(doc.get("mcpServers"), path, catalog)
    try:
        return Agent(
            name=str(meta.get("name") or path.stem),
            system_prompt=prompt,
            settings=_settings(doc.get("settings"), path, legacy),
            rules=[_item(Rule, r, path, f"rules[{i}]", legacy) for i, r in enumerate(rules)],
            references=[_item(Reference, r, path, f"references[{i}]", legacy) for i, r in enumerate(refs)],
            servers=servers,
            tools=tools,
            metadata=dict(meta),
            autonomous=bool(meta.get("autonomous", False)),
            document=doc,
        )
    except AgentFileError:
        raise
    except ContextSieveError as e:
        raise _fail(path, "items", str(e)) from e


def _read_mdt(path: Path) -> dict[str, Any]:
    """A legacy ``.mdt``: split on ``'---\\n'``; part 1 is the front matter, the rest is the text."""
    raw = path.read_text(encoding="utf-8")
    parts = raw.split("---\n")
    if len(parts) < 3:
        raise _fail(path, "front matter", "expected '---' lines around the metadata")
    try:
        meta = yaml.safe_load(parts[1]) or {}  # the writer used JSON, which YAML reads too
    except yaml.YAMLError as e:
        raise _fail(path, "front matter", f"not YAML/JSON: {e}") from e
    if not isinstance(meta, dict):
        raise _fail(path, "front matter", "must be a mapping")
    meta = {k: v for k, v in meta.items() if k != "enabled"}  # removed from the format in f564ad9
    meta.setdefault("name", path.stem)
    if not meta.get("name"):
        meta["name"] = path.stem
    meta["text"] = "---\n".join(parts[2:]).strip()
    return meta


def _load_legacy(folder: Path, catalog: Mapping[str, list[dict[str, Any]]] | None) -> Agent:
    cfg_path = folder / "tsagent.json"
    try:
        doc = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise AgentFileError(f"{cfg_path}: cannot read as JSON: {e}") from e
    if not isinstance(doc, dict):
        raise _fail(cfg_path, "top level", "must be an object")
    prompt = folder / "prompt.md"
    doc["systemPrompt"] = prompt.read_text(encoding="utf-8") if prompt.is_file() else ""
    doc["rules"] = [_read_mdt(p) for p in sorted((folder / "rules").glob("*.mdt"))]
    doc["references"] = [_read_mdt(p) for p in sorted((folder / "refs").glob("*.mdt"))]
    return _from_document(doc, cfg_path, catalog, legacy=True)


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None)


def _list(dumper: yaml.SafeDumper, xs: list) -> yaml.Node:
    flow = bool(xs) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs)  # vectors on one line
    return dumper.represent_sequence("tag:yaml.org,2002:seq", xs, flow_style=flow)


_Dumper.add_representer(str, _str)
_Dumper.add_representer(list, _list)


def _item_doc(item: Rule) -> dict[str, Any]:
    d = {"name": item.name, "description": item.description, "priorityLevel": item.priority, "text": item.text, "include": item.include.value}
    if item.summary:
        d["summary"] = item.summary
    d.update(item.extra)
    return d


def to_document(agent: Agent) -> dict[str, Any]:
    """The agent as a current-format document, on top of the document it was loaded from."""
    doc = copy.deepcopy(agent.document)
    settings = dict(doc.get("settings") or {})
    settings.pop("mostRecentModel", None)
    for key, field_name in SETTING_NAMES.items():
        v = getattr(agent.settings, field_name)
        if v is not None:
            settings[key] = v
    defaults = AgentSettings()
    own = {
        f.name: (dict(getattr(agent.settings, f.name)) if f.name == "tool_settings" and getattr(agent.settings, f.name) else getattr(agent.settings, f.name))
        for f in dataclasses.fields(AgentSettings)
        if f.name not in SETTING_NAMES.values() and getattr(agent.settings, f.name) != getattr(defaults, f.name)
    }
    settings.pop("contextsieve", None)
    if own:
        settings["contextsieve"] = own
    meta = dict(doc.get("metadata") or agent.metadata)
    meta.setdefault("name", agent.name)
    doc["metadata"] = meta
    doc["settings"] = settings
    doc["systemPrompt"] = agent.system_prompt
    doc["rules"] = [_item_doc(r) for r in agent.rules]
    doc["references"] = [_item_doc(r) for r in agent.references]
    servers = dict(doc.get("mcpServers") or {})
    for name, server in agent.servers.items():
        cfg = dict(servers.get(name) or server.config)
        cfg = _migrate_server(cfg)
        tool_cfg = dict(cfg.get("tools") or {})
        for tool in (t for t in agent.tools if t.server == name):
            entry = dict(tool_cfg.get(tool.name) or {})
            if tool.include is not None:
                entry["include"] = tool.include.value
            if tool.permission_required is not None:
                entry["permissionRequired"] = tool.permission_required
            tool_cfg[tool.name] = entry
        if tool_cfg:
            cfg["tools"] = tool_cfg
        servers[name] = cfg
    doc["mcpServers"] = servers
    return doc


def save_agent(agent: Agent, path: str | Path) -> None:
    """Write ``agent`` as a current-format YAML file (temp file + rename: never half written)."""
    text = yaml.dump(to_document(agent), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=10**9, indent=2)
    atomic_write_bytes(Path(path), text.encode("utf-8"))
