"""The most text kept of one tool as an MCP server lists it: :class:`ToolLimits` and :func:`limit_tool`.

A description over the limit is cut at a word boundary and ends with :data:`CUT_MARK`; an input schema
over the limit loses annotations, or else keeps its top-level properties that fit, and stays a valid
JSON schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contextsieve.errors import InputError, brief

__all__ = ["ToolLimits", "limit_tool", "CUT_MARK"]

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


@dataclass(frozen=True, kw_only=True)
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
