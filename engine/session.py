"""Sessions: their own context items and settings, and the request built for every user message."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from contextsieve.agent import Agent, AgentSettings
from contextsieve.chunking import query_chunks
from contextsieve.context import ContextEntry, Dropped, RequestContext
from contextsieve.errors import InputError
from contextsieve.explain import Explanation
from contextsieve.fileio import atomic_write_bytes
from contextsieve.items import IncludeMode, Item, ItemKey, ItemKind, Reference, Rule, Tool
from contextsieve.kernels.scoring import score_pool
from contextsieve.selection import (
    expand,
    expansion_scores,
    fuse,
    graph_expand,
    item_query_scores,
    min_representation,
    select_items,
)
from contextsieve.store import ChunkStore

__all__ = ["Session", "Message", "Request"]

_MENTION = re.compile(r"@(ref|rule):([\w-]+)")


@dataclass(frozen=True)
class Message:
    """A chat message; assistant replies carry the request context they were produced with."""

    role: str
    content: str
    context: RequestContext | None = None
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content, "created": self.created}
        if self.context is not None:
            d["context"] = self.context.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Message":
        ctx = RequestContext.from_dict(d["context"]) if "context" in d else None
        return cls(d["role"], d["content"], ctx, d.get("created", 0.0))


@dataclass(frozen=True)
class Request:
    """What to send to an LLM for one user message.

    Attributes:
        context: the items used and why.
        message: the user's message with ``@ref:`` / ``@rule:`` mentions removed.
        messages: system prompt, history, one ``"Reference: ..."`` and one ``"Rule: ..."`` user message per
            item (references first), then the user message: OpenAI chat shape.
        tools: the tools offered, as ``{"name": "<server>_<tool>", "description", "input_schema"}``.
    """

    context: RequestContext
    message: str
    messages: list[dict[str, str]]
    tools: list[dict[str, Any]]

    def openai(self) -> dict[str, Any]:
        """``{"messages": [...], "tools": [...]}`` for the OpenAI chat completions API."""
        tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]}} for t in self.tools]
        return {"messages": self.messages, "tools": tools}

    def anthropic(self) -> dict[str, Any]:
        """``{"system": ..., "messages": [...], "tools": [...]}`` for the Anthropic messages API."""
        system = self.messages[0]["content"] if self.messages and self.messages[0]["role"] == "system" else ""
        rest = [m for m in self.messages if m["role"] != "system"]
        return {"system": system, "messages": rest, "tools": [dict(t) for t in self.tools]}


class Session:
    """A chat session over an agent.

    At creation it holds the agent's ``always`` items: references, then rules (each by priority, then
    name), then tools (server, then tool order). The user may add or remove any item; an ``always``
    item removed stays removed for this session, and adding it back makes it ``manual``.

    Args:
        agent: the agent (the source of truth for items).
        store: chunk vectors of the agent's items (shared by the agent's sessions).
        preset: ``"aggressive"``, ``"normal"`` or ``"conservative"`` (see :data:`contextsieve.agent.PRESETS`).
        token_counter: counts the tokens of texts for ``token_budget`` (default: the embedding model's
            tokenizer, a proxy for the LLM's; pass the provider's counter for exact budgets).
        settings: overrides of the agent's settings for this session only (they win over the preset).
    """

    def __init__(self, agent: Agent, store: ChunkStore, *, preset: str | None = None, token_counter: Callable[[Sequence[str]], list[int]] | None = None, **settings: Any) -> None:
        self.agent = agent
        self.store = store
        self.settings: AgentSettings = agent.settings.with_overrides(preset, **settings)
        self._token_counter = token_counter
        self._token_memo: dict[ItemKey, tuple[object, int]] = {}
        self.history: list[Message] = []
        self._items: dict[ItemKey, IncludeMode] = {}
        for item in [*agent.references, *agent.rules, *agent.tools]:
            if agent.include_mode(item) is IncludeMode.ALWAYS:
                self._items[item.key] = IncludeMode.ALWAYS

    # -- session items ----------------------------------------------------------------------------

    def items(self) -> list[tuple[ItemKey, IncludeMode]]:
        """Session items in order (always items as created, then manual items in the order added)."""
        return list(self._items.items())

    def add(self, key: ItemKey | str) -> None:
        """Add an item as ``manual`` (unknown keys raise :class:`~contextsieve.agent.UnknownItemError`)."""
        item = self.agent.get(key)
        self._items.setdefault(item.key, IncludeMode.MANUAL)

    def remove(self, key: ItemKey | str) -> None:
        """Remove an item from this session (it stays removed, even if ``always``)."""
        item = self.agent.get(key)
        self._items.pop(item.key, None)

    def update_settings(self, preset: str | None = None, **settings: Any) -> None:
        """Override settings (or apply a preset) for this session from now on."""
        self.settings = self.settings.with_overrides(preset, **settings)

    # -- requests ---------------------------------------------------------------------------------

    def _mentions(self, message: str) -> str:
        """Add ``@ref:name`` / ``@rule:name`` items as manual; return the message without them."""
        for kind, name in _MENTION.findall(message):
            self.add(ItemKey(ItemKind.REFERENCE if kind == "ref" else ItemKind.RULE, name))
        return " ".join(_MENTION.sub(" ", message).split())

    def _searchable(self, item: Item) -> bool:
        """Whether search may choose ``item`` now: agent mode, not in the session, and (a tool) usable."""
        return item.key not in self._items and self.agent.include_mode(item) is IncludeMode.AGENT and (not isinstance(item, Tool) or self._tool_available(item))

    def _tool_available(self, tool: Tool) -> bool:
        if not self.agent.autonomous:
            return True
        mode = self.settings.tool_permission
        return mode == "never" or (mode == "tool" and not self.agent.permission_required(tool))

    def build_request(self, message: str) -> Request:
        """The request for ``message``: session items, plus agent-mode items chosen for this message only."""
        if not isinstance(message, str):
            raise InputError(f"message must be a str, got {type(message).__name__}")
        query = self._mentions(message)
        entries = [ContextEntry(k, m, priority=getattr(self.agent.get(k), "priority", None)) for k, m in self._items.items()]
        candidates = [
            it for it in self.agent.all_items()
            if self._searchable(it)
        ]
        qchunks = query_chunks(query)
        if candidates and qchunks:
            entries += self._search(qchunks, candidates)
        s = self.settings
        settings = {"top_k": s.context_top_k, "top_n": s.context_top_n, "include_score": s.context_include_score}
        tokens, dropped, notes = None, [], []
        if s.token_budget is not None:
            settings["token_budget"] = s.token_budget
            entries, tokens, dropped, notes = self._fit_budget(entries, s.token_budget)
        ctx = RequestContext(tuple(entries), query, tuple(qchunks), settings, tokens, tuple(dropped), tuple(notes))
        return self.request_for(ctx, query)

    def _item_tokens(self, key: ItemKey) -> int:
        """Tokens the item adds to the request (its message, or its tool definition), memoised per item."""
        item = self.agent.get(key)
        memo = self._token_memo.get(key)
        if memo is not None and memo[0] is item:
            return memo[1]
        if isinstance(item, Tool):
            text = json.dumps({"name": f"{item.server}_{item.name}", "description": item.description, "input_schema": item.input_schema})
        else:
            text = ("Reference: " if isinstance(item, Reference) else "Rule: ") + item.text
        counter = self._token_counter or self.store.embedder.count_tokens
        n = int(counter([text])[0])
        self._token_memo[key] = (item, n)
        return n

    def _fit_budget(self, entries: list[ContextEntry], budget: int) -> tuple[list[ContextEntry], int, list[Dropped], list[str]]:
        """Drop agent and expansion items, lowest score first, until the items fit ``budget`` tokens."""
        cost = {e.key: self._item_tokens(e.key) for e in entries}
        total = sum(cost.values())
        searched = (IncludeMode.AGENT, IncludeMode.EXPANSION)
        fixed = sum(cost[e.key] for e in entries if e.mode not in searched)
        notes = []
        if fixed > budget:
            notes.append(f"always and manual items alone take {fixed} tokens, over the budget of {budget}; they are never cut")
        dropped: list[Dropped] = []
        agent_items = [e for e in entries if e.mode in searched]
        for e in sorted(agent_items, key=lambda e: (e.score or 0.0, -agent_items.index(e))):
            if total <= budget:
                break
            total -= cost[e.key]
            dropped.append(Dropped(e, cost[e.key], f"token budget: the request was over {budget} tokens"))
        gone = {d.entry.key for d in dropped}
        return [e for e in entries if e.key not in gone], total, dropped, notes

    def _search(self, qchunks: Sequence[str], candidates: list[Item]) -> list[ContextEntry]:
        """Semantic search over every indexed item, limited to ``candidates`` (all items are indexed,
        so a later request with other candidates embeds nothing new): the reference ranking, then
        minimum representation and expansion when the settings turn them on. With ``tool_settings``,
        rules + references and tools are two domains, each searched with its own settings."""
        all_items = list(self.agent.all_items())
        self.store.sync(all_items, server_descriptions=self.agent.server_descriptions())
        order = [it.key for it in all_items]
        chunks, owner = self.store.matrix(order)
        position = {it.key: i for i, it in enumerate(all_items)}
        allowed = np.zeros(len(all_items), dtype=bool)
        allowed[[position[it.key] for it in candidates]] = True
        qvec = self.store.embed_query(qchunks)
        s = self.settings
        if s.tool_settings:
            is_tool = np.array([isinstance(it, Tool) for it in all_items])
            domains = [(allowed & ~is_tool, s), (allowed & is_tool, s.for_tools())]
        else:
            domains = [(allowed, s)]
        raw_keyword = None
        if any(ds.keyword_weight > 0 for _, ds in domains):
            raw_keyword = self.store.keyword_index(order).scores(" ".join(qchunks))

        def entry(item: int, score: float, row: int, qc: int | None, mode: IncludeMode, via: str, pulled: int | None = None) -> ContextEntry:
            it = all_items[item]
            first = int(np.searchsorted(owner, item))
            return ContextEntry(it.key, mode, round(score, 6), row - first, qc, getattr(it, "priority", None), via, all_items[pulled].key if pulled is not None else None)

        chosen, extra = [], []
        for mask, ds in domains:
            keyword = None
            if raw_keyword is not None and ds.keyword_weight > 0:
                top = raw_keyword[mask[owner]].max(initial=0.0)  # normalised by the domain's best candidate chunk
                keyword = raw_keyword / top if top > 0 else raw_keyword
            found = select_items(
                qvec, chunks, owner, mask, top_k=ds.context_top_k, top_n=ds.context_top_n, include_score=ds.context_include_score,
                pooling=ds.query_pooling, keyword=keyword, keyword_weight=ds.keyword_weight, fusion=ds.keyword_fusion,
            )
            chosen += found
            if ds.min_representation_floor is not None and qvec.shape[0] > 1 and ds.min_representation_cap > 0:
                per, arg = item_query_scores(qvec, chunks, owner, mask)
                extra += min_representation(found, per, arg, floor=ds.min_representation_floor, cap=ds.min_representation_cap)
        if len(domains) > 1:
            chosen.sort(key=lambda c: -c.score)  # ranking score across domains; entries report similarity
        entries = [entry(c.item, c.sim, c.chunk, c.query_chunk, IncludeMode.AGENT, "query") for c in chosen]
        entries += [entry(c.item, c.score, c.chunk, c.query_chunk, IncludeMode.AGENT, "min-representation") for c in extra]
        picked = [c.item for c in chosen] + [c.item for c in extra]
        if picked and any(ds.expansion_depth > 0 and ds.expansion_top_n > 0 for _, ds in domains):
            priority, _ = score_pool(qvec, chunks)  # which chunks of a selected item query first
            for mask, ds in domains:
                entries += self._expand(ds, mask, picked, priority, chunks, owner, order, entry)
        return entries

    def _expand(self, ds: AgentSettings, mask: np.ndarray, picked: list[int], priority: np.ndarray, chunks: np.ndarray, owner: np.ndarray, order: list[ItemKey], entry: Callable[..., ContextEntry]) -> list[ContextEntry]:
        """Expansion passes in one domain: items of ``mask`` related to the picked items (of any domain)."""
        if ds.expansion_depth <= 0 or not picked or ds.expansion_top_n <= 0:
            return []
        pool = mask.copy()
        pool[picked] = False
        graph = self.store.relation_graph(order, ds.relation_pooling, min(ds.expansion_threshold, 0.5)) if ds.expansion_source != "pass2" else None
        first = np.searchsorted(owner, np.arange(len(order)))
        out: list[ContextEntry] = []
        seeds = picked
        for _ in range(ds.expansion_depth):
            if ds.expansion_source == "pass2":
                new = expand(chunks, owner, seeds, pool, threshold=ds.expansion_threshold, top_n=ds.expansion_top_n, chunk_cap=ds.expansion_chunk_cap, priority=priority)
            else:
                assert graph is not None
                also = expansion_scores(chunks, owner, seeds, pool, chunk_cap=ds.expansion_chunk_cap, priority=priority) if ds.expansion_source == "hybrid" else None
                new = graph_expand(graph, first, seeds, pool, threshold=ds.expansion_threshold, top_n=ds.expansion_top_n, also=also)
            out += [entry(x.item, x.score, x.chunk, None, IncludeMode.EXPANSION, "expansion", x.source_item) for x in new]
            seeds = [x.item for x in new]
            pool[seeds] = False
            if not seeds:
                break
        return out

    def expand_from(self, text: str, *, max_chunks: int = 16) -> RequestContext:
        """Items a tool result points to: ``text`` is split into sentences, as a message is, and they
        search the agent-mode items not in the session by the same pipeline (max over sentences, so
        each thing the result mentions can pull its own item).

        Sentences rather than document chunks: on the hand-written cases in
        ``benchmarks/data/mcp_tasks/results.jsonl`` the next tools' recall was 0.53 with sentences and
        0.43 with paragraph chunks (``python -m benchmarks.tool_selection --data benchmarks/data/mcp_tasks``).

        Returns a :class:`RequestContext` of proposals (``via="tool-result"``); nothing is added to the
        session. At most ``max_chunks`` sentences are used (the first ones), each cut at 500 characters.
        """
        if not isinstance(text, str):
            raise InputError(f"text must be a str, got {type(text).__name__}")
        if isinstance(max_chunks, bool) or not isinstance(max_chunks, int) or max_chunks < 1:
            raise InputError(f"max_chunks must be a positive int, got {max_chunks!r}")
        chunks = query_chunks(text)[:max_chunks]
        candidates = [
            it for it in self.agent.all_items()
            if self._searchable(it)
        ]
        entries = self._search(chunks, candidates) if chunks and candidates else []
        proposals = tuple(ContextEntry(e.key, e.mode, e.score, e.chunk, e.query_chunk, e.priority, "tool-result" if e.via == "query" else e.via, e.pulled_by) for e in entries)
        s = self.settings
        return RequestContext(proposals, text[:200], tuple(chunks), {"top_k": s.context_top_k, "top_n": s.context_top_n, "include_score": s.context_include_score, "source": "tool-result"})

    def explain(self, message: str, key: ItemKey | str) -> Explanation:
        """Why ``key`` is or is not in the request for ``message`` (the session is left unchanged).

        The selection is deterministic, so this replays it and reads off the item's scores per query
        sentence, the rank of its best chunk against the top-K chunk cut, its rank among the grouped
        items against the include score and top-N, and any token-budget drop.
        """
        item = self.agent.get(key)
        k = item.key
        saved = dict(self._items)
        try:
            req = self.build_request(message)
            in_session = self._items.get(k)
        finally:
            self._items = saved
        ctx = req.context
        entry = next((e for e in ctx.entries if e.key == k), None)
        dropped = next((d for d in ctx.dropped if d.entry.key == k), None)
        reasons: list[str] = []
        if in_session is not None:
            reasons.append(f"it is in the session as {in_session.value}: session items go into every request")
            return Explanation(str(k), True, in_session.value, None, reasons=tuple(reasons))
        mode = self.agent.include_mode(item)
        if mode is not IncludeMode.AGENT:
            reasons.append(f"its include mode is {mode.value}: only agent-mode items are chosen by search" + (" (removed from this session)" if mode is IncludeMode.ALWAYS else ""))
            return Explanation(str(k), False, reasons=tuple(reasons))
        if isinstance(item, Tool) and not self._tool_available(item):
            reasons.append("the session is autonomous and this tool needs approval under the tool permission setting")
            return Explanation(str(k), False, reasons=tuple(reasons))
        if not ctx.query_chunks:
            reasons.append("the message has no text to search with")
            return Explanation(str(k), False, reasons=tuple(reasons))
        facts = self._search_facts(ctx, k)
        s = self._domain_settings(item)
        if facts["similarity"] <= 0:
            reasons.append(f"its best similarity {facts['similarity']:.3f} is not above 0")
        elif facts["chunk_rank"] > s.context_top_k:
            reasons.append(f"its best chunk ranks {facts['chunk_rank']} among candidate chunks, past the top-K cut of {s.context_top_k} chunks")
        elif facts["item_rank"] is not None:
            reasons.append(f"its best chunk ranks {facts['chunk_rank']} (within top-K {s.context_top_k}); it is item {facts['item_rank']} after grouping")
        if facts["keyword"]:
            reasons.append(f"keyword match (BM25, weight {s.keyword_weight}) adds {facts['keyword']:.3f} to its best chunk's score")
        elif s.keyword_fusion == "rrf" and s.keyword_weight > 0:
            reasons.append(f"chunks are ranked by reciprocal-rank fusion of dense and keyword (weight {s.keyword_weight}) ranks")
        if entry is not None:
            if entry.via == "min-representation":
                reasons.append(f"promoted so that query sentence {entry.query_chunk + 1} is represented (floor {s.min_representation_floor})")
            elif entry.via == "expansion":
                reasons.append(f"pulled in by {entry.pulled_by} at {entry.score:.3f} (expansion threshold {s.expansion_threshold})")
            elif entry.score is not None and entry.score >= s.context_include_score:
                reasons.append(f"its similarity {entry.score:.3f} is at or above the include score {s.context_include_score}")
            else:
                reasons.append(f"below the include score {s.context_include_score}, but within top-N {s.context_top_n}")
        elif dropped is not None:
            reasons.append(f"selected at {dropped.entry.score:.3f} but dropped: {dropped.reason} ({dropped.tokens} tokens)")
        elif facts["item_rank"] is not None and facts["similarity"] > 0:
            reasons.append(f"its similarity {facts['similarity']:.3f} is below the include score {s.context_include_score} and top-N {s.context_top_n} was already filled")
        return Explanation(
            str(k), entry is not None, entry.mode.value if entry else None, entry.via if entry else None,
            tuple(facts["scores"]), facts["similarity"], facts["chunk_rank"], facts["item_rank"], tuple(reasons),
        )

    def _domain_settings(self, item: Item) -> AgentSettings:
        """The settings ``item`` is searched with (its domain's)."""
        return self.settings.for_tools() if isinstance(item, Tool) else self.settings

    def _search_facts(self, ctx: RequestContext, key: ItemKey) -> dict[str, Any]:
        """Scores and ranks of ``key`` in the search behind ``ctx`` (same candidates, same vectors, its domain's settings)."""
        all_items = list(self.agent.all_items())
        order = [it.key for it in all_items]
        chunks, owner = self.store.matrix(order)
        position = {it.key: i for i, it in enumerate(all_items)}
        is_tool = isinstance(self.agent.get(key), Tool)
        ds = self._domain_settings(self.agent.get(key))
        candidates = np.array([
            self._searchable(it)
            and (not self.settings.tool_settings or isinstance(it, Tool) == is_tool)
            for it in all_items
        ])
        qvec = self.store.embed_query(ctx.query_chunks)
        dense = chunks @ qvec.T
        pooled = (dense.mean(axis=1) if ds.query_pooling == "mean" else dense.max(axis=1)).astype(np.float32)
        keyword = None
        if ds.keyword_weight > 0:
            raw = self.store.keyword_index(order).scores(" ".join(ctx.query_chunks))
            top = raw[candidates[owner]].max(initial=0.0)
            keyword = raw / top if top > 0 else raw
        dense_pooled = pooled
        pooled = fuse(pooled, keyword, ds.keyword_weight, ds.keyword_fusion, ~candidates[owner])
        i = position[key]
        rows = np.flatnonzero(owner == i)
        per_q = dense[rows].max(axis=0)
        best_row = int(rows[np.argmax(pooled[rows])])
        best = float(pooled[best_row])
        chunk_rank = int(np.sum(pooled > best) + np.sum(pooled[:best_row] == best)) + 1
        top_rows = np.lexsort((np.arange(pooled.size), -pooled))[: ds.context_top_k]
        grouped: list[int] = []
        for r in top_rows:
            if dense_pooled[r] > 0 and int(owner[r]) not in grouped:
                grouped.append(int(owner[r]))
        item_rank = None
        if i in grouped:
            scores = {g: float(pooled[owner == g].max()) for g in grouped}
            ranked = sorted(grouped, key=lambda g: -scores[g])
            item_rank = ranked.index(i) + 1
        kw = float(pooled[best_row] - dense_pooled[best_row]) if keyword is not None and ds.keyword_fusion == "weighted" else 0.0
        sim = float(dense[best_row].mean() if ds.query_pooling == "mean" else dense[best_row].max())
        return {"scores": [float(x) for x in per_q], "best": best, "similarity": sim, "chunk_rank": chunk_rank, "item_rank": item_rank, "keyword": kw}

    def request_for(self, ctx: RequestContext, message: str) -> Request:
        """Rebuild the exact LLM request for a stored context (items are looked up now, by key)."""
        msgs: list[dict[str, str]] = [{"role": "system", "content": self.agent.system_prompt}]
        msgs += [{"role": m.role, "content": m.content} for m in self.history if m.role != "system"]
        refs = [self.agent.get(e.key) for e in ctx.entries if e.key.kind is ItemKind.REFERENCE]
        rules = [self.agent.get(e.key) for e in ctx.entries if e.key.kind is ItemKind.RULE]
        msgs += [{"role": "user", "content": "Reference: " + r.text} for r in refs if isinstance(r, Reference)]
        msgs += [{"role": "user", "content": "Rule: " + r.text} for r in rules if isinstance(r, Rule)]
        msgs.append({"role": "user", "content": message})
        tools = []
        for e in ctx.entries:
            if e.key.kind is ItemKind.TOOL:
                t = self.agent.get(e.key)
                if isinstance(t, Tool) and self._tool_available(t):
                    tools.append({"name": f"{t.server}_{t.name}", "description": t.description, "input_schema": t.input_schema})
        return Request(ctx, message, msgs, tools)

    def record_reply(self, request: Request, reply: str) -> Message:
        """Append the user message and the assistant reply (carrying its request context) to the history."""
        self.history.append(Message("user", request.message))
        msg = Message("assistant", reply, request.context)
        self.history.append(msg)
        return msg

    # -- persistence ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": {k: dict(v) if k == "tool_settings" and v is not None else v for k, v in self.settings.__dict__.items()},
            "items": [{"key": str(k), "mode": m.value} for k, m in self._items.items()],
            "history": [m.to_dict() for m in self.history],
        }

    def save(self, path: str | Path) -> None:
        """Write history, items and settings as JSON (temp file + rename)."""
        atomic_write_bytes(Path(path), json.dumps(self.to_dict(), indent=1).encode("utf-8"))

    @classmethod
    def load(cls, path: str | Path, agent: Agent, store: ChunkStore) -> "Session":
        """Read a session saved by :meth:`save` for ``agent``."""
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
            s = cls(agent, store, **d["settings"])
            s._items = {ItemKey.parse(i["key"]): IncludeMode(i["mode"]) for i in d["items"]}
            s.history = [Message.from_dict(m) for m in d["history"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise InputError(f"cannot load session {path}: {e}") from e
        return s
