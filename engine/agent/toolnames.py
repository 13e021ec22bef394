"""The one name a model sees for each of an agent's tools, and the way back from it.

Every surface that hands tools to a model (the request payloads and their ``tool_reference`` /
``tool_search_output`` items, the gateway's tool list, the framework integrations) and every surface that
reads a name back (``Session.record_outcome``, the gateway's ``tools/call``, ``ToolSelector``) uses
:meth:`Agent.tool_names() <contextsieve.agent.agent.Agent.tool_names>`, built by :func:`tool_names`.

**A name once given never changes meaning.** The names an agent's tools were given are kept in its
:class:`NameBook` (in memory for an agent made in code; with the agent's data, in its registry
(:mod:`contextsieve.agent.registry`), for an agent loaded from a file, so they hold across restarts and every
process of the agent). A tool keeps its name for as long as the agent has it; a tool that appears later
never takes a name given before (also not the name of a tool that is gone: a call by that name is a clear
error, never another tool), whatever its server calls it.

The naming rule for a tool not named yet (deterministic: the same tools and book give the same names in
every session, process and restart):

1. Its name is ``<server>_<tool>`` when that is a name every provider accepts (:data:`TOOL_NAME_PATTERN`:
   ASCII letters, digits, ``_`` and ``-``, 1-64 characters), is none of contextsieve's own tool names
   (:data:`RESERVED_TOOL_NAMES`), does not end as a name of rule 2 does (``_`` and 8 or more lowercase hex
   digits: so no server can claim a hashed name by the name it gives its tool), is not in the book, and no
   other tool being named has the same ``<server>_<tool>`` (servers ``a_b`` with tool ``c`` and ``a`` with
   tool ``b_c`` do).
2. Otherwise it is a readable part, ``<server>_<tool>`` folded to ASCII (accents dropped) with every
   run of other characters made one ``_`` and cut to 55 characters, then ``_`` and the first 8 hex
   digits of the SHA-256 of ``server + "\\0" + tool`` (UTF-8): ``com.example.weather`` /
   ``get forecast`` becomes ``com_example_weather_get_forecast_1c0a9e3b``. A name whose readable part
   is empty (a Chinese server and tool name) starts with ``tool``. Both tools of a collision being named
   together take this form, so neither points at the other.
3. Should a name of rule 2 be taken (in the book or by a tool named before it), it takes 12, then 16, ...
   hex digits, the tools taken in the order of their keys.

With an empty book (a new agent) a name depends only on its own key, except in a collision of rule 1.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence

from contextsieve.agent.items import ItemKey, ItemKind
from contextsieve.errors import InputError, UnknownItemError, brief

__all__ = [
    "TOOL_NAME_PATTERN",
    "RESERVED_TOOL_NAMES",
    "NameBook",
    "ToolNames",
    "new_names",
    "tool_names",
    "valid_tool_name",
]

#: What Anthropic's and OpenAI's APIs accept as a tool name (anything else fails the whole request).
TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
#: Names of contextsieve's own tools that share a tools array with an agent's tools (the deferred
#: offer's search tool, the gateway's tools): never given to an agent's tool.
RESERVED_TOOL_NAMES = frozenset(
    {
        # serve's context tools and the gateway's own (contextsieve.session.agent_tools)
        "search_tools",
        "set_task",
        "select_context",
        "add_to_session",
        "remove_from_session",
        "explain",
        "record_tool_calls",
        # serve's and the frameworks' stash tools
        "stash_context",
        "retrieve_stashed_context",
        "merge_stashed_context",
        "list_stashed_context",
        "delete_stashed_context",
        "protect_stashed_context",
    }
)
#: The end of a name of rule 2: a plain name ending so is hashed too, so no tool can claim such a name.
_HASHED = re.compile(r"_[0-9a-f]{8,}$")
_MAX = 64
_OTHER = re.compile(r"[^A-Za-z0-9_-]+")
_DIGITS = (8, 12, 16, 24, 32, 48, 63)


def valid_tool_name(name: object) -> bool:
    """Whether ``name`` is a str every provider accepts as a tool name (:data:`TOOL_NAME_PATTERN`)."""
    return isinstance(name, str) and TOOL_NAME_PATTERN.fullmatch(name) is not None


def _readable(server: str, tool: str) -> str:
    folded = unicodedata.normalize("NFKD", f"{server}_{tool}").encode("ascii", "ignore").decode("ascii")
    return _OTHER.sub("_", folded).strip("_")


def _hashed(server: str, tool: str, digits: int) -> str:
    h = hashlib.sha256(f"{server}\0{tool}".encode("utf-8", "surrogatepass")).hexdigest()
    stem = _readable(server, tool)[: _MAX - 1 - digits].rstrip("_") or "tool"
    return f"{stem}_{h[: min(digits, _MAX - 1 - len(stem))]}"


class ToolNames(Mapping[str, ItemKey]):
    """The names of an agent's tools: a mapping name -> tool key, and :meth:`name` for key -> name.

    Built by :func:`tool_names`; read it through :meth:`Agent.tool_names()
    <contextsieve.agent.agent.Agent.tool_names>`, which keeps it up to date as tools change. Names the
    agent's book gave to tools it no longer has are not in the mapping: :meth:`gone` tells whose they were,
    and :meth:`key` says so in its error.
    """

    __slots__ = ("_by_key", "_by_name", "_gone")

    def __init__(self, by_key: Mapping[ItemKey, str], gone: Mapping[str, ItemKey] | None = None) -> None:
        self._by_key = dict(by_key)
        self._by_name = {n: k for k, n in self._by_key.items()}
        self._gone = {n: k for n, k in (gone or {}).items() if n not in self._by_name}

    def name(self, key: ItemKey) -> str:
        """The name a model sees for the tool ``key``; :class:`UnknownItemError` for a tool not here."""
        try:
            return self._by_key[key]
        except (KeyError, TypeError):
            raise UnknownItemError(f"the agent has no {brief(str(key))}") from None

    def key(self, name: str) -> ItemKey:
        """The tool a model's ``name`` means; :class:`UnknownItemError` for a name no tool has (saying
        whose it was when it named a tool the agent no longer has)."""
        found = self._by_name.get(name) if isinstance(name, str) else None
        if found is None:
            raise UnknownItemError(self.unknown(name))
        return found

    def gone(self, name: object) -> ItemKey | None:
        """The tool that ``name`` was given to, when the agent no longer has it (else ``None``)."""
        return self._gone.get(name) if isinstance(name, str) else None

    def unknown(self, name: object) -> str:
        """Why ``name`` names no tool: the tool it was given to is gone, or no tool ever had it."""
        was = self.gone(name)
        if was is not None:
            return (
                f"tool {brief(name)} was {brief(was.name)} of server {brief(was.server)}, which the agent no longer "
                "has; the name is never given to another tool"
            )
        return f"no tool of the agent is named {brief(name)}"

    def __getitem__(self, name: str) -> ItemKey:
        return self._by_name[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def __len__(self) -> int:
        return len(self._by_name)

    def __repr__(self) -> str:
        return f"ToolNames({len(self)} tools)"


def _check_keys(keys: Iterable[ItemKey]) -> list[ItemKey]:
    tools = list(dict.fromkeys(keys))
    for k in tools:
        if not isinstance(k, ItemKey) or k.kind is not ItemKind.TOOL:
            raise InputError(f"tool_names takes tool keys, got {brief(k)}")
    return tools


def new_names(keys: Iterable[ItemKey], given: Mapping[ItemKey, str]) -> dict[ItemKey, str]:
    """Names by the module's rule for the tools of ``keys`` that ``given`` (the book: every name given
    before, to tools present or gone) has none for; no name of ``given`` is given again.

    Raises:
        InputError: a key that is not a tool's.
    """
    todo = [k for k in _check_keys(keys) if k not in given]
    taken = set(given.values()) | RESERVED_TOOL_NAMES
    plain = {k: f"{k.server}_{k.name}" for k in todo}
    count = Counter(plain.values())
    names: dict[ItemKey, str] = {}
    rest: list[ItemKey] = []
    for k in todo:
        p = plain[k]
        if count[p] == 1 and p not in taken and valid_tool_name(p) and not _HASHED.search(p):
            names[k] = p
        else:
            rest.append(k)
    taken |= set(names.values())
    for k in sorted(rest, key=lambda k: (k.server, k.name)):
        for digits in _DIGITS:
            candidate = _hashed(k.server, k.name, digits)
            if candidate not in taken:
                break
        else:  # pragma: no cover - 63 hex digits of SHA-256 equal for two keys
            raise InputError(f"no unique name for {k}")
        names[k] = candidate
        taken.add(candidate)
    return names


def tool_names(keys: Iterable[ItemKey], given: Mapping[ItemKey, str] | None = None) -> ToolNames:
    """The names of the tools ``keys`` (order does not matter): those ``given`` (a book's names) keep
    theirs, the others are named by the module's rule; names of ``given`` whose tool is not in ``keys``
    are :meth:`ToolNames.gone`.

    Raises:
        InputError: a key that is not a tool's.
    """
    tools = _check_keys(keys)
    book = dict(given or {})
    book.update(new_names(tools, book))
    present = set(tools)
    return ToolNames({k: book[k] for k in tools}, {n: k for k, n in book.items() if k not in present})


class NameBook:
    """The names an agent's tools were given (tool key -> name), kept so that a name never changes
    meaning: :meth:`assign` names the tools not named yet (the module's rule, never a name given
    before) and returns every name given. This one keeps them in memory (an agent made in code, or
    one whose registry cannot be written); :class:`contextsieve.agent.registry.RegistryNameBook` keeps them
    with the agent's data. Thread-safe."""

    def __init__(self, given: Mapping[ItemKey, str] | None = None) -> None:
        self._given: dict[ItemKey, str] = dict(given or {})
        self._lock = threading.Lock()

    def assign(self, keys: Sequence[ItemKey]) -> dict[ItemKey, str]:
        """Name the tools of ``keys`` not named yet; every name given so far (present tools or not)."""
        with self._lock:
            self._given.update(new_names(keys, self._given))
            return dict(self._given)

    def adopt(self, given: Mapping[ItemKey, str]) -> None:
        """Keep names given elsewhere (another book of the same agent) where they take no name or tool
        this book has already given."""
        with self._lock:
            names = set(self._given.values())
            for k, n in given.items():
                if k not in self._given and n not in names:
                    self._given[k] = n
                    names.add(n)
