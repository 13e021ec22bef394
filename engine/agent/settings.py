"""An agent's settings: :class:`AgentSettings` (names, ranges and defaults), the selection presets
(:data:`PRESETS`), what a session or a request may override (:class:`SettingsOverrides`) and what the
tools domain may override (:data:`DOMAIN_SETTINGS`).

Sessions copy the agent's settings and may override them for themselves. The reference format's
settings for whoever calls the LLM (model, temperature, ...) are apart in :class:`LlmSettings`
(``AgentSettings.llm``): agent files load them and save them back; selection never reads them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypedDict

from contextsieve.choices import (
    ExpansionSource,
    KeywordFusion,
    KeywordRole,
    Preset,
    QueryPooling,
    QuerySplit,
    RelationPooling,
    ToolDomain,
    ToolPermission,
    allowed,
)
from contextsieve.errors import InputError, brief

__all__ = [
    "AgentSettings",
    "LlmSettings",
    "LLM_SETTINGS",
    "SettingsOverrides",
    "PRESETS",
    "DOMAIN_SETTINGS",
    "OUTCOME_WEIGHT",
    "MISS_SIMILARITY",
    "EXAMPLE_SIMILARITY",
    "NARROW_EXAMPLE_SIMILARITY",
    "WIDE_OFFER",
    "EXAMPLE_SCORE",
]

#: Similarity under which an item needs keyword evidence to be selected (``context_min_score``);
#: chosen with ``python -m benchmarks.quality.small_talk`` (docs/selection.md): the highest floor that lowers
#: recall on none of the catalogs.
CONTEXT_MIN_SCORE = 0.15

#: Default ``outcome_weight``: the most ranking score a tool loses for a request close to its
#: recorded misses (chosen with ``python -m benchmarks.quality.tool_outcomes``, docs/selection.md).
OUTCOME_WEIGHT = 0.2
#: Cosine between a request and a recorded miss from which the miss lowers the tool's score.
MISS_SIMILARITY = 0.7
#: Cosine between a request and a tool's recorded example request from which the example counts as
#: evidence for the tool (below it the example chunk is not searched for that request): history
#: speaks only for requests like the ones it saw, so it cannot pull in a near-miss tool. This is the
#: gate of a wide offer: a request's own tools domain aiming for at least :data:`WIDE_OFFER` tools (a
#: task's first request, a request outside a session's tasks, a tool search, at the default
#: ``tool_top_n``); a narrow offer has :data:`NARROW_EXAMPLE_SIMILARITY`. Chosen with ``python -m
#: benchmarks.quality.tool_selection --history-folds 2`` and ``tool_loop --history-folds 2``
#: (docs/selection.md): 0.4 gains on every set against 0.5 for one request (MetaTool 0.888 to 0.912),
#: and in the loop no set falls below its recall without history; 0.3 drops mcp_live below it. Of the
#: requests between this gate and the narrow one a search reads the closest
#: (:data:`~contextsieve.selection.recorded_requests.WEAK_REQUESTS`).
EXAMPLE_SIMILARITY = 0.4
#: The gate of :data:`EXAMPLE_SIMILARITY` for a narrow offer: a later step of a task, the task's ranking
#: of the tools its steps carry, and a search aiming for fewer than :data:`WIDE_OFFER` tools. A weak
#: example takes a place of a tool the request's words found, and a narrow offer has few: at 0.4 the
#: loop fell below its recall without history (mcp_tasks 0.963 against 0.967: an example near "Save a
#: copy locally as config.yaml." took the place of ``write_file`` in a step of five tools), and so
#: did ``tool_top_n=5`` (mcp_tasks 0.935 against 0.951).
NARROW_EXAMPLE_SIMILARITY = 0.5
#: A tools domain aiming for at least this many tools is a wide offer (:data:`EXAMPLE_SIMILARITY`):
#: the default ``tool_top_n``, the size the request gate was measured at.
WIDE_OFFER = 10
#: The ranking score of an example matched at its gate (:data:`EXAMPLE_SIMILARITY` or
#: :data:`NARROW_EXAMPLE_SIMILARITY`), rising linearly to 1 for an identical request: an example that is
#: merely near a request ranks its tool as a weak description match would, so it does not push out the
#: tools the request's own words find.
EXAMPLE_SCORE = 0.3

#: Selection presets (the seeds' "Aggressive / Normal / Conservative"): aggressive keeps the context
#: small, conservative larger (and adds one expansion pass: items closely related to the chosen ones);
#: "reference" selects as the reference system does (one shared top-5, similarity only, sentences).
#: Explicit settings given with a preset win over it.
PRESETS: dict[str, dict[str, Any]] = {
    "aggressive": {
        "context_top_k": 10,
        "context_top_n": 3,
        "tool_top_n": 5,
        "tool_base_n": 3,
        "context_min_ratio": 0.5,
        "context_include_score": 0.8,
        "expansion_depth": 0,
    },
    "normal": {
        "context_top_k": 20,
        "context_top_n": 5,
        "tool_top_n": 10,
        "context_min_ratio": 0.3,
        "context_include_score": 0.7,
        "expansion_depth": 0,
    },
    "conservative": {
        "context_top_k": 40,
        "context_top_n": 8,
        "tool_top_n": 15,
        "tool_base_n": None,
        "context_min_ratio": None,
        "context_include_score": 0.6,
        "expansion_depth": 1,
        "expansion_threshold": 0.75,
        "expansion_top_n": 3,
    },
    "reference": {
        "context_top_k": 20,
        "context_top_n": 5,
        "context_include_score": 0.7,
        "context_min_ratio": None,
        "context_min_score": None,
        "tool_domain": "shared",
        "keyword_weight": 0.0,
        "keyword_role": "rerank",
        "query_split": "sentences",
        "tool_query_split": "sentences",
        "tool_base_n": None,
        "task_tools": 0,
        "companion_tools": 0,
        "expansion_depth": 0,
    },
}


#: (name, low, high, may be None) of every numeric setting; int bounds mean the value must be an int.
_NUMERIC_SETTINGS = (
    ("context_top_k", 1, 100, False),
    ("context_top_n", 1, 50, False),
    ("tool_top_n", 1, 50, False),
    ("context_include_score", 0.0, 1.0, False),
    ("token_budget", 0, 10**9, True),
    ("min_representation_floor", -1.0, 1.0, True),
    ("min_representation_cap", 0, 100, False),
    ("expansion_depth", 0, 5, False),
    ("expansion_threshold", -1.0, 1.0, False),
    ("expansion_top_n", 0, 50, False),
    ("max_query_chunks", 1, 1000, False),
    ("expansion_chunk_cap", 1, 1000, False),
    ("keyword_weight", 0.0, 10.0, False),
    ("context_min_ratio", 0.0, 1.0, True),
    ("context_min_score", -1.0, 1.0, True),
    ("server_weight", 0.0, 10.0, False),
    ("prf_weight", 0.0, 1.0, False),
    ("prf_depth", 0, 50, False),
    ("outcome_weight", 0.0, 1.0, False),
    ("tool_base_n", 1, 50, True),
    ("tool_chunk_n", 0, 50, False),
    ("task_tools", 0, 50, False),
    ("task_servers", 1, 50, False),
    ("companion_tools", 0, 50, False),
)
#: The same for :class:`LlmSettings`.
_LLM_NUMERIC_SETTINGS = (
    ("temperature", 0.0, 1.0, False),
    ("top_p", 0.0, 1.0, False),
    ("max_chat_turns", 1, 10**6, False),
    ("max_output_tokens", 1, 10**7, False),
)
#: (name, allowed values) of every string choice setting.
_CHOICE_SETTINGS = (
    ("query_pooling", allowed(QueryPooling)),
    ("tool_permission", allowed(ToolPermission)),
    ("expansion_source", allowed(ExpansionSource)),
    ("relation_pooling", allowed(RelationPooling)),
    ("keyword_fusion", allowed(KeywordFusion)),
    ("keyword_role", allowed(KeywordRole)),
    ("query_split", allowed(QuerySplit)),
    ("tool_query_split", allowed(QuerySplit)),
    ("tool_domain", allowed(ToolDomain)),
)
#: Settings a domain (tools) may override through ``tool_settings``: everything that steers selection.
DOMAIN_SETTINGS = frozenset(
    {
        "context_top_k",
        "context_top_n",
        "context_include_score",
        "keyword_weight",
        "query_pooling",
        "min_representation_floor",
        "min_representation_cap",
        "expansion_depth",
        "expansion_threshold",
        "expansion_top_n",
        "expansion_chunk_cap",
        "expansion_source",
        "relation_pooling",
        "keyword_fusion",
        "keyword_role",
        "context_min_ratio",
        "context_min_score",
        "server_weight",
        "query_split",
        "prf_weight",
        "prf_depth",
        "outcome_weight",
    }
)


def _check_numbers(settings: object, specs: tuple[tuple[str, float, float, bool], ...]) -> None:
    """Each numeric setting of ``specs`` (see :data:`_NUMERIC_SETTINGS`) is in its range, or an InputError."""
    for name, lo, hi, optional in specs:
        v = getattr(settings, name)
        if v is None and optional:
            continue
        wrong_type = (
            isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(lo, int) and not isinstance(v, int))
        )
        if wrong_type or not lo <= v <= hi:
            kind = "an int" if isinstance(lo, int) else "a number"
            raise InputError(
                f"setting {name} must be {'None or ' if optional else ''}{kind} in {lo}..{hi}, got {brief(v)}"
            )


@dataclass(frozen=True, kw_only=True)
class LlmSettings:
    """The reference format's settings for whoever calls the LLM: kept and written back, never read by
    selection. Agent files hold them under ``settings`` (``model``, ``temperature``, ``topP``,
    ``maxOutputTokens``, ``maxChatTurns``); an agent's settings hold them as ``AgentSettings.llm``.

    Attributes:
        model: ``"provider:modelId"`` or ``None`` (default; the file's ``mostRecentModel`` when it has
            no ``model``).
        temperature: 0-1, default 0.5.
        top_p: 0-1, default 0.5.
        max_output_tokens: default 1000 (1-10,000,000).
        max_chat_turns: default 20 (1-1,000,000).
    """

    model: str | None = None
    temperature: float = 0.5
    top_p: float = 0.5
    max_output_tokens: int = 1000
    max_chat_turns: int = 20

    def __post_init__(self) -> None:
        _check_numbers(self, _LLM_NUMERIC_SETTINGS)


#: The names of :class:`LlmSettings`' fields: :meth:`AgentSettings.with_overrides` (and so sessions and
#: requests) takes them by these names and sets them in ``llm``.
LLM_SETTINGS = tuple(f.name for f in dataclasses.fields(LlmSettings))
_LLM_NAMES = frozenset(LLM_SETTINGS)


class SettingsOverrides(TypedDict, total=False):
    """The settings a session or one request may override, by name, typed as in :class:`AgentSettings`
    (whose docstring gives each one's range and default). ``Session(...)``, ``Engine.session(...)``,
    ``Engine.select(...)`` and ``Session.build_request(...)`` take them as keyword arguments; a test
    keeps this list equal to :class:`AgentSettings`' fields and :data:`LLM_SETTINGS`, the fields of
    :class:`LlmSettings` that go into ``llm`` by their own names."""

    context_top_k: int
    context_top_n: int
    tool_top_n: int
    context_include_score: float
    tool_permission: ToolPermission
    token_budget: int | None
    min_representation_floor: float | None
    min_representation_cap: int
    expansion_depth: int
    expansion_threshold: float
    expansion_top_n: int
    expansion_chunk_cap: int
    query_pooling: QueryPooling
    expansion_source: ExpansionSource
    relation_pooling: RelationPooling
    tool_settings: Mapping[str, Any] | None
    keyword_weight: float
    keyword_fusion: KeywordFusion
    max_query_chunks: int
    keyword_role: KeywordRole
    context_min_ratio: float | None
    context_min_score: float | None
    query_split: QuerySplit
    tool_query_split: QuerySplit
    server_weight: float
    tool_domain: ToolDomain
    prf_weight: float
    prf_depth: int
    outcome_weight: float
    tool_base_n: int | None
    tool_chunk_n: int
    task_tools: int
    task_servers: int
    companion_tools: int
    llm: LlmSettings
    model: str | None
    temperature: float
    top_p: float
    max_output_tokens: int
    max_chat_turns: int


@dataclass(frozen=True, kw_only=True)
class AgentSettings:
    """Settings an agent gives its sessions (names and defaults as in the reference system).

    Attributes:
        context_top_k: chunks kept from the semantic search before grouping by item (1-100, default 20).
        context_top_n: items to aim for from semantic search (1-50, default 5); with tools in a domain
            of their own (``tool_domain``, the default) the rules and references.
        tool_top_n: most tools to aim for when tools are a domain of their own (1-50, default 10; a
            ``context_top_n`` in ``tool_settings`` wins). With ``context_min_ratio`` it is a cap.
        tool_base_n: the size of a step's offer: a task's later requests (after its first, see
            :meth:`Session.new_task`) aim for this many tools when the message is one query chunk (one
            sentence, one step), ``tool_chunk_n`` more for each further chunk, at most ``tool_top_n``
            (1-50, default 5; ``None``: ``tool_top_n``, as before). A task's first request, which names
            the whole task, and a request outside a session aim for ``tool_top_n``. Chosen with
            ``python -m benchmarks.quality.tool_loop`` (docs/selection.md).
        tool_chunk_n: tools each further query chunk of a later request adds to ``tool_base_n``
            (0-50, default 1).
        task_tools: of a later request's places, this many (0-50, default 2) go to tools carried
            from the task's first message: its best-ranked tools of the ``task_servers`` servers it
            ranks highest that no request of the task selected yet (``via="task"``). What a step
            needs is often named only in the task ("Create the branch and switch to it." then
            "Branch created."). 0 turns it off.
        task_servers: how many of the servers the task's first message ranks highest (by their best
            tool) those tools come from (1-50, default 2).
        companion_tools: most tools a request gains, in places its own tools leave free, because the
            history used them right before or after one of its two best tools in at least half of the
            recorded tasks that used that tool (``via="companion"``;
            :mod:`contextsieve.session.companions`; 0-50, default 1; 0 turns it off). Nothing changes
            without history.
        context_include_score: items at or above this similarity are always kept (0-1, default 0.7).
        tool_permission: ``"always"``, ``"never"`` or ``"tool"`` (ask per tool; default).
        token_budget: most tokens the request's rules, references and tools may take (``None``: no cap).
            Agent-mode items are dropped, lowest score first, to fit; always/manual items never are.
        min_representation_floor: when set, every query sentence whose best candidate scores at least
            this much gets an item, even if the max-pooled ranking left it out, in every domain (default
            ``None``: rules and references only, a sentence's best match when its evidence is not weak,
            one per request; :func:`~contextsieve.selection.ranking.represent_sentences`).
        min_representation_cap: most items added that way per request (default 2; the default rule adds
            at most 1; 0 turns both off).
        expansion_depth: passes of context expansion after the query search (default 0: off).
        expansion_threshold: similarity an item needs to be pulled in by a selected item (default 0.75).
        expansion_top_n: most items each pass adds (default 3).
        expansion_chunk_cap: chunks of each selected item used as queries, best first (default 5).
        expansion_source: where expansion finds related items: ``"pass2"`` (default; the selected items'
            chunks search the others), ``"graph"`` (the item relationship graph, computed once per index
            and looked up) or ``"hybrid"`` (both, the higher score wins).
        relation_pooling: item-item similarity of the graph: ``"mean_embedding"`` (default),
            ``"best_pair"`` or ``"mean_pairs"``.
        query_pooling: how a chunk's scores against several query sentences combine: ``"max"``
            (default, the reference) or ``"mean"``.
        tool_settings: overrides for the tools domain (names from :data:`DOMAIN_SETTINGS`, e.g.
            ``{"context_top_n": 8, "keyword_weight": 0.5}``). When given, tools are searched as a domain
            of their own with these settings, rules + references with the others; expansion in each domain
            may still be pulled by items of either. Default ``None``: one shared search, as the reference.
        keyword_weight: weight of BM25 (normalised by the best candidate chunk's BM25 for the message)
            added to the dense score of each chunk (default 0.3; 0 = dense only, as the reference system).
            Chosen by ``python -m benchmarks.quality.tool_selection`` (docs/selection.md).
        keyword_fusion: how the keyword term joins the dense score: ``"weighted"`` (default: dense +
            weight x normalised BM25) or ``"rrf"`` (reciprocal-rank fusion, the BM25 term scaled by the weight).
        max_query_chunks: most query sentences a message is searched with (1-1000, default 32), so a
            request's cost is bounded whatever the message: a longer message is searched with its first
            half and last half of that many sentences, and the request context notes it.
        keyword_role: ``"add"`` (default: a keyword match alone can bring in an item the model scored
            at or below 0) or ``"rerank"`` (a chunk needs a dense similarity above 0, as the reference;
            the keyword term only re-ranks).
        context_min_ratio: adaptive size: the items that fill up to top-N must score at least this share
            of the best item's ranking score, so top-N is a cap (0-1, default 0.3; ``None``: always fill
            up to top-N, as the reference).
        context_min_score: absolute floor on the evidence: an item below the include score is kept
            only if one of its top chunks matches a keyword of the message, or its similarity reaches
            this (twice this when no item of the domain matches a keyword: the message names nothing
            there). Default :data:`CONTEXT_MIN_SCORE`; ``None``: no floor, as the reference. Small
            talk ("hi", "thanks!") then selects nothing beyond ``always`` items, while a request
            that names a tool's words keeps it however low MiniLM scores it.
        prf_weight: pseudo-relevance feedback: after a first search, each query vector moves by this
            weight (0-1) toward the mean of the ``prf_depth`` best chunks and the search runs again
            (default 0: off; ``benchmarks.quality.tool_selection`` measures it).
        prf_depth: chunks the feedback step averages (0-50, default 3).
        outcome_weight: learning from what the model did with an offer: a tool offered for earlier
            requests and not called (its misses, recorded by :meth:`Session.record_outcome`) loses up
            to this much ranking score (0-1; default :data:`OUTCOME_WEIGHT`) for a request as close to
            one of them as :data:`MISS_SIMILARITY` cosine or closer, linearly from 0 there to all of it
            at 1 (the same message). 0 turns it off; without recorded misses it changes nothing.
        tool_domain: ``"own"`` (default: tools are searched as a domain of their own, aiming for
            ``tool_top_n`` tools, with ``tool_settings`` applied; a long document cannot crowd the tools
            out) or ``"shared"`` (rules, references and tools compete for one ``context_top_n``, as the
            reference; ``tool_settings`` still give tools their own domain).
        server_weight: weight of the server profile score (a server's name, description and tool names,
            embedded as one vector, against the best query sentence) added to its tools' ranking scores
            (default 0: off), while the candidate tools come from two servers or more.
        query_split: what of a message the search uses: ``"sentences"`` (default, as the reference) or
            ``"steps"`` (the sentences, then the steps of the task: pieces split at line breaks, list
            markers, semicolons and CJK punctuation, and clauses joined by "and", "then", "und dann",
            "y luego", "然后"...; see :func:`contextsieve.retrieval.text.split_query`). With tools in their own
            domain this is for rules and references.
        tool_query_split: the same for the tools domain (default ``"steps"``: a task's steps often each
            need a tool; a ``query_split`` in ``tool_settings`` wins).
        llm: the reference format's settings for whoever calls the LLM (:class:`LlmSettings`), kept and
            written back, never read by selection. :meth:`with_overrides` takes them by their own names
            (``temperature=0.2``) and ``settings.temperature`` reads ``settings.llm.temperature``.
    """

    context_top_k: int = 20
    context_top_n: int = 5
    tool_top_n: int = 10
    context_include_score: float = 0.7
    tool_permission: ToolPermission = "tool"
    token_budget: int | None = None
    min_representation_floor: float | None = None
    min_representation_cap: int = 2
    expansion_depth: int = 0
    expansion_threshold: float = 0.75
    expansion_top_n: int = 3
    expansion_chunk_cap: int = 5
    query_pooling: QueryPooling = "max"
    expansion_source: ExpansionSource = "pass2"
    relation_pooling: RelationPooling = "mean_embedding"
    tool_settings: Mapping[str, Any] | None = None
    keyword_weight: float = 0.3
    keyword_fusion: KeywordFusion = "weighted"
    max_query_chunks: int = 32
    keyword_role: KeywordRole = "add"
    context_min_ratio: float | None = 0.3
    context_min_score: float | None = CONTEXT_MIN_SCORE
    query_split: QuerySplit = "sentences"
    tool_query_split: QuerySplit = "steps"
    server_weight: float = 0.0
    tool_domain: ToolDomain = "own"
    prf_weight: float = 0.0
    prf_depth: int = 3
    outcome_weight: float = OUTCOME_WEIGHT
    tool_base_n: int | None = 5
    tool_chunk_n: int = 1
    task_tools: int = 2
    task_servers: int = 2
    companion_tools: int = 1
    llm: LlmSettings = LlmSettings()

    def __new__(cls, *args: Any, **kwargs: Any) -> AgentSettings:
        """An LLM setting given to the constructor (``AgentSettings(temperature=0.2)``) is an error naming
        its place: ``AgentSettings(llm=LlmSettings(temperature=0.2))``."""
        if not _LLM_NAMES.isdisjoint(kwargs):  # a set test: replace() passes every field on each copy
            moved = [k for k in kwargs if k in _LLM_NAMES]
            raise InputError(
                f"AgentSettings({moved[0]}=...): the LLM settings {', '.join(LLM_SETTINGS)} are in llm: write "
                f"AgentSettings(llm=LlmSettings({moved[0]}=...)) or settings.with_overrides({moved[0]}=...)"
            )
        return super().__new__(cls)

    def __post_init__(self) -> None:
        _check_numbers(self, _NUMERIC_SETTINGS)
        if not isinstance(self.llm, LlmSettings):
            raise InputError(f"setting llm must be an LlmSettings, got {type(self.llm).__name__}")
        for name, values in _CHOICE_SETTINGS:
            v = getattr(self, name)
            if not isinstance(v, str) or v not in values:
                raise InputError(f"setting {name} must be one of {', '.join(values)}, got {brief(v)}")
        if self.tool_settings is not None:
            if not isinstance(self.tool_settings, Mapping):
                raise InputError(
                    f"setting tool_settings must be a mapping or None, got {type(self.tool_settings).__name__}"
                )
            wrong = set(self.tool_settings) - DOMAIN_SETTINGS
            if wrong:
                raise InputError(f"tool_settings may set only {sorted(DOMAIN_SETTINGS)}; got {sorted(wrong)}")
            object.__setattr__(self, "tool_settings", MappingProxyType(dict(self.tool_settings)))
            try:
                self.for_tools()  # validates the values
            except InputError as e:
                raise InputError(f"tool_settings: {e}") from e

    # The LLM settings read by their own names (read-only: ``llm`` holds them), as before they moved there.
    @property
    def model(self) -> str | None:
        """``llm.model``."""
        return self.llm.model

    @property
    def temperature(self) -> float:
        """``llm.temperature``."""
        return self.llm.temperature

    @property
    def top_p(self) -> float:
        """``llm.top_p``."""
        return self.llm.top_p

    @property
    def max_output_tokens(self) -> int:
        """``llm.max_output_tokens``."""
        return self.llm.max_output_tokens

    @property
    def max_chat_turns(self) -> int:
        """``llm.max_chat_turns``."""
        return self.llm.max_chat_turns

    @property
    def own_tool_domain(self) -> bool:
        """Whether tools are searched as a domain of their own (``tool_domain`` or ``tool_settings``)."""
        return self.tool_domain == "own" or bool(self.tool_settings)

    def for_tools(self) -> "AgentSettings":
        """The settings the tools domain is searched with: these, aiming for ``tool_top_n`` tools, then
        ``tool_settings`` (these settings as they are while tools share the search)."""
        if not self.own_tool_domain:
            return self
        overrides = {
            "context_top_n": self.tool_top_n,
            "query_split": self.tool_query_split,
            **(self.tool_settings or {}),
        }
        return dataclasses.replace(self, tool_settings=None, tool_domain="shared", **overrides)

    def tool_offer_size(self, n_chunks: int) -> int:
        """The tools a search with ``n_chunks`` query chunks aims for (the tools domain's settings,
        :meth:`for_tools`): ``tool_base_n`` plus ``tool_chunk_n`` per chunk after the first, at most
        ``context_top_n``; ``context_top_n`` itself when ``tool_base_n`` is ``None``."""
        if self.tool_base_n is None:
            return self.context_top_n
        return min(self.context_top_n, self.tool_base_n + self.tool_chunk_n * max(0, n_chunks - 1))

    def as_dict(self) -> dict[str, Any]:
        """Every setting by name as :meth:`with_overrides` and ``Session(...)`` take them, JSON-ready: the
        LLM settings by their own names (not ``llm``), ``tool_settings`` as a dict (as sessions save them)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "llm"}
        if self.tool_settings is not None:
            out["tool_settings"] = dict(self.tool_settings)
        return {**out, **dataclasses.asdict(self.llm)}

    def with_overrides(self, preset: Preset | str | None = None, **overrides: Any) -> "AgentSettings":
        """A copy with a preset (see :data:`PRESETS`) and then some settings applied (unknown names are an
        error). The names of :data:`LLM_SETTINGS` set those fields of ``llm`` (of an ``llm`` given too)."""
        if preset is not None:
            if not isinstance(preset, str) or preset not in PRESETS:
                raise InputError(f"unknown preset {brief(preset)}; presets: {sorted(PRESETS)}")
            overrides = {**PRESETS[preset], **overrides}
        known = {f.name for f in dataclasses.fields(self)} | set(LLM_SETTINGS)
        unknown = set(overrides) - known
        if unknown:
            raise InputError(f"unknown settings {sorted(unknown)}; known: {sorted(known)}")
        llm = {k: overrides.pop(k) for k in LLM_SETTINGS if k in overrides}
        if llm:
            base = overrides.get("llm", self.llm)
            if not isinstance(base, LlmSettings):
                raise InputError(f"setting llm must be an LlmSettings, got {type(base).__name__}")
            overrides["llm"] = dataclasses.replace(base, **llm)
        return dataclasses.replace(self, **overrides)
