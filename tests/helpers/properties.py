"""Properties of the public API under hostile input, shared by ``tests/robustness/test_properties.py`` (Hypothesis,
a few hundred examples per target) and ``python -m benchmarks.robustness.fuzz`` (the same targets at length).

A target makes one call (or a short sequence of calls) from a :class:`random.Random` and checks what
came back. Outcomes: the call returned and its checks held; it raised a
:class:`~contextsieve.errors.ContextSieveError` (a typed refusal: fine); it raised anything else (an
*untyped error*); a check failed (:class:`WrongResult`, a *silent wrong result*). Hypothesis drives the
same targets through ``st.randoms()``, so it can shrink a failing case.
"""

from __future__ import annotations

import json
import math
import random
import string
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from contextsieve.agent.agent import Agent
from contextsieve.agent.agentfile import example_agent_path, load_agent, save_agent
from contextsieve.agent.file_writer import to_document
from contextsieve.agent.items import ItemKey
from contextsieve.engine import Engine
from contextsieve.errors import ContextSieveError, InputError
from contextsieve.kernels import scoring as K
from contextsieve.retrieval.chunks import ChunkIndex, IndexConfig
from contextsieve.retrieval.embedding import TextEmbedder
from contextsieve.retrieval.text import query_chunks
from contextsieve.session.session import Session
from tests.helpers.surfaces import t_mcp_http, t_mcp_stdio, t_mcp_tools, t_stash_api  # noqa: E402

__all__ = ["Target", "TARGETS", "WrongResult", "hostile_text", "hostile_value", "make_state", "State"]


class WrongResult(AssertionError):
    """A call returned, but what it returned breaks a property (a silent wrong result)."""


def check(cond: bool, what: str) -> None:
    if not cond:
        raise WrongResult(what)


# -- hostile values -------------------------------------------------------------------------------

_PIECES = [
    "refund",
    "the parcel arrived late.",
    "Please open a pull request for the cart rounding fix.",
    "退款需要多长时间？",
    "ÿ\u00e9\u0301 caf\u00e9",
    "🙂🚀",
    "\u202e\u200b\ufeff",
    "\x00",
    "\x07\x1b[31m",
    "\ud800",
    "\udfff x",
    "@ref:pricing",
    "@rule:nope",
    "# Heading\n\n## Sub\n",
    "- a\n- b\n1. c",
    "```\ncode\n```",
    "\t\r\n",
    "  ",
    "!!!???...",
    "a" * 3000,
    "x:y:z",
    "tool:fs:read_file",
    "rule:refunds",
    "{{}}[[]]&*!|>%@`",
]


def hostile_text(rng: random.Random, max_pieces: int = 12) -> str:
    """A string of mixed pieces: words, CJK, emoji, controls, NUL, lone surrogates, mentions, huge words."""
    n = rng.randrange(0, max_pieces + 1)
    parts = []
    for _ in range(n):
        r = rng.random()
        if r < 0.6:
            parts.append(rng.choice(_PIECES))
        elif r < 0.8:
            parts.append("".join(rng.choice(string.printable) for _ in range(rng.randrange(1, 40))))
        elif r < 0.97:
            parts.append("".join(chr(rng.randrange(0x20, 0x3000)) for _ in range(rng.randrange(1, 20))))
        else:
            words = ["word", "refund", "page", "file"]
            parts.append(" ".join(rng.choice(words) for _ in range(rng.randrange(500, 3000))))
    return rng.choice([" ", "", "\n", ". "]).join(parts)


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON/YAML-ish value, or a Python value no API expects."""
    r = rng.randrange(14)
    if r < 4:
        return hostile_text(rng, 4)
    if r == 4:
        return rng.choice([0, -1, 1, 2**70, -(2**63), 10**400 if rng.random() < 0.1 else 7])
    if r == 5:
        return rng.choice([0.5, -0.0, math.nan, math.inf, -math.inf, 1e308, 3.0])
    if r == 6:
        return rng.choice([True, False])
    if r == 7:
        return None
    if r == 8 and depth < 3:
        return [hostile_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if r == 9 and depth < 3:
        return {hostile_text(rng, 2): hostile_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    if r == 10:
        return b"\xff\xfe bytes"
    if r == 11:
        return rng.choice([object(), {1, 2}, (1, "a"), np.float32(0.5), np.array([1.0, 2.0])])
    if r == 12:
        return rng.choice(["always", "agent", "manual", "aggressive", "normal", "max", "mean", "auto"])
    return rng.randrange(-5, 50)


# -- shared state ---------------------------------------------------------------------------------


@dataclass
class State:
    """What targets share: a real embedder, an engine over the bundled example agent, a temp folder."""

    embedder: TextEmbedder
    engine: Engine
    folder: Path
    example_doc: dict[str, Any]
    keys: list[str]
    sessions: list[Session] = field(default_factory=list)
    model_cache: Path | None = None  # where served processes find the built model (default: theirs)
    surfaces: Any = None  # tests.helpers.surfaces.Surfaces, made by the first target that needs it

    def close(self) -> None:
        """End what the surface targets started (server processes, the MCP client, the stash)."""
        if self.surfaces is not None:
            self.surfaces.close()
            self.surfaces = None


def make_state(embedder: TextEmbedder, folder: Path, model_cache: Path | None = None) -> State:
    agent = load_agent(example_agent_path())
    engine = Engine(agent, embedder=embedder, cache_dir=folder / "cache")
    doc = yaml.safe_load(example_agent_path().read_text(encoding="utf-8"))
    keys = [str(it.key) for it in agent.all_items()]
    return State(embedder, engine, folder, doc, keys, [engine.session() for _ in range(3)], model_cache)


def _key(rng: random.Random, state: State) -> Any:
    r = rng.random()
    if r < 0.6:
        return rng.choice(state.keys)
    if r < 0.7:
        return ItemKey.parse(rng.choice(state.keys))
    return hostile_value(rng)


def _settings(rng: random.Random) -> dict[str, Any]:
    names = [
        "context_top_k",
        "context_top_n",
        "context_include_score",
        "keyword_weight",
        "token_budget",
        "min_representation",
        "expansion",
        "max_query_chunks",
        "tool_permission",
        "not_a_setting",
    ]
    out: dict[str, Any] = {}
    for _ in range(rng.randrange(0, 3)):
        name = rng.choice(names)
        out[name] = rng.choice([hostile_value(rng), rng.randrange(0, 40), rng.random()])
    return out


def _check_context(state: State, req: Any) -> None:
    ctx = req.context
    keys = [str(e.key) for e in ctx.entries]
    check(len(keys) == len(set(keys)), f"duplicate entries {keys}")
    agent = state.engine.agent
    for e in ctx.entries:
        check(agent.has(e.key), f"entry {e.key} is not an item of the agent")
        check(e.score is None or math.isfinite(e.score), f"score {e.score} of {e.key}")
    check(isinstance(req.messages, list) and all(isinstance(m, dict) for m in req.messages), "messages")


# -- targets --------------------------------------------------------------------------------------


def t_embed(state: State, rng: random.Random) -> None:
    texts: Any = [hostile_text(rng, 6) for _ in range(rng.randrange(0, 5))]
    if rng.random() < 0.15:
        texts = rng.choice([hostile_value(rng), [hostile_value(rng)], tuple(texts)])
    out = state.embedder.embed(texts)
    check(out.shape[0] == len(texts) and out.dtype == np.float32, f"shape {out.shape} for {len(texts)} texts")
    check(bool(np.isfinite(out).all()), "non-finite vector")
    if len(texts):
        check(bool(np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-3)), "not unit vectors")
        if rng.random() < 0.2:  # a text embeds the same alone as in a batch
            alone = state.embedder.embed([texts[0]])[0]
            check(float(alone @ out[0]) > 0.999, f"batch vs alone cosine {float(alone @ out[0])}")


def t_count_tokens(state: State, rng: random.Random) -> None:
    texts: Any = [hostile_text(rng, 6) for _ in range(rng.randrange(0, 5))]
    if rng.random() < 0.15:
        texts = rng.choice([hostile_value(rng), [hostile_value(rng)]])
    counts = state.embedder.count_tokens(texts)
    check(len(counts) == len(texts) and all(isinstance(c, int) and c >= 2 for c in counts), f"counts {counts}")
    if texts:
        check(state.embedder.count_tokens([texts[-1]]) == counts[-1:], "batch vs alone count")


def t_request(state: State, rng: random.Random) -> None:
    message: Any = hostile_text(rng) if rng.random() < 0.9 else hostile_value(rng)
    if rng.random() < 0.3:
        req = state.engine.select(message, **_settings(rng))
    else:
        req = rng.choice(state.sessions).build_request(message)
    _check_context(state, req)


def t_session_ops(state: State, rng: random.Random) -> None:
    s = rng.choice(state.sessions)
    op = rng.randrange(6)
    if op == 0:
        s.add(_key(rng, state))
    elif op == 1:
        s.remove(_key(rng, state))
    elif op == 2:
        key = _key(rng, state)
        ex = s.explain(hostile_text(rng, 4), key)
        check(str(ex.key) == str(ItemKey.parse(key) if isinstance(key, str) else key), "explained another key")
    elif op == 3:
        max_chunks = rng.choice([16, 1, 0, -1, 2**70, True, "3", 3.5])
        ctx = s.expand_from(hostile_text(rng), max_chunks=max_chunks)
        check(all(state.engine.agent.has(e.key) for e in ctx.entries), "expand_from proposed an unknown item")
    elif op == 4:
        s.update_settings(**_settings(rng))
    else:
        s.update_settings(preset=rng.choice(["aggressive", "normal", "conservative", hostile_value(rng)]))
    items = [k for k, _ in s.items()]
    check(len(items) == len(set(items)), "duplicate session items")


def _mutate(rng: random.Random, node: Any, depth: int = 0) -> Any:
    """The document with a few nodes replaced by hostile values, removed, or duplicated."""
    if isinstance(node, dict) and node:
        out = dict(node)
        for _ in range(rng.randrange(1, 3)):
            k = rng.choice(list(out))
            r = rng.random()
            if r < 0.3:
                out[k] = hostile_value(rng)
            elif r < 0.45:
                del out[k]
                if not out:
                    break
            elif r < 0.55:
                out[hostile_text(rng, 2)] = hostile_value(rng)
            else:
                out[k] = _mutate(rng, out[k], depth + 1)
        return out
    if isinstance(node, list) and node:
        out_list = list(node)
        i = rng.randrange(len(out_list))
        r = rng.random()
        if r < 0.3:
            out_list[i] = hostile_value(rng)
        elif r < 0.5:
            out_list.append(out_list[i])  # a duplicate name
        else:
            out_list[i] = _mutate(rng, out_list[i], depth + 1)
        return out_list
    return hostile_value(rng) if rng.random() < 0.5 else node


def _yaml_text(rng: random.Random, doc: dict[str, Any]) -> str:
    r = rng.random()
    if r < 0.75:
        try:
            return yaml.safe_dump(_mutate(rng, doc), allow_unicode=True, sort_keys=False)
        except yaml.YAMLError:
            return "rules: ["
    if r < 0.8:  # an alias bomb
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 12)]
        return "\n".join(lines) + "\nrules: *a11\n"
    if r < 0.85:  # deep nesting
        depth = rng.choice([100, 5000, 100_000])
        return "rules: " + "[" * depth + "]" * depth + "\n"
    if r < 0.9:
        return "".join(chr(rng.randrange(0, 0x2FFF)) for _ in range(rng.randrange(0, 300)))
    return hostile_text(rng)


def t_agent_file(state: State, rng: random.Random) -> None:
    with tempfile.TemporaryDirectory(dir=state.folder) as tmp:
        path = Path(tmp) / "tsagent.yaml"
        text = _yaml_text(rng, state.example_doc)
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        agent = load_agent(path)
        check(isinstance(agent, Agent), "load_agent returned no Agent")
        saved = save_agent(agent, Path(tmp) / "again.yaml")
        again = load_agent(saved)
        check(to_document(again) == to_document(agent), "save + load changed the agent file")
        if rng.random() < 0.2:
            req = Engine(agent, embedder=state.embedder, cache_dir=state.folder / "cache").select(hostile_text(rng, 4))
            check(all(agent.has(e.key) for e in req.context.entries), "selected an unknown item")


def t_session_file(state: State, rng: random.Random) -> None:
    s = rng.choice(state.sessions)
    d = s.to_dict()
    with tempfile.TemporaryDirectory(dir=state.folder) as tmp:
        path = Path(tmp) / "s.json"
        r = rng.random()
        if r < 0.7:
            doc = _mutate(rng, d)
            try:
                text = json.dumps(doc, default=str)
            except (ValueError, TypeError):
                text = "{"
        elif r < 0.8:
            text = "[" * 100_000 + "]" * 100_000
        else:
            text = hostile_text(rng)
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        loaded = state.engine.load_session(path)
        check(all(state.engine.agent.has(k) for k, _ in loaded.items()), "a loaded session holds unknown items")


def _array(rng: random.Random, rows: int, dim: int) -> Any:
    r = rng.random()
    if r < 0.7:
        a = np.asarray(np.random.default_rng(rng.randrange(2**32)).integers(-2, 3, (rows, dim)), dtype=np.float32)
        if rng.random() < 0.2 and a.size:
            a.flat[rng.randrange(a.size)] = rng.choice([np.nan, np.inf, -np.inf])
        return a
    return rng.choice(
        [
            np.zeros((rows,), np.float32),
            np.zeros((rows, dim), np.int64),
            np.zeros((rows, dim, 2), np.float32),
            np.zeros((rows, dim), np.float16),
            [[1.0] * dim] * rows,
            "not an array",
            None,
            np.zeros((rows, dim + 1), np.float32),
            np.zeros((rows, dim), object),
        ]
    )


def t_kernels(state: State, rng: random.Random) -> None:
    n, m, d = rng.choice([0, 1, 5, 300]), rng.choice([0, 1, 3]), rng.choice([1, 8])
    corpus, queries = _array(rng, n, d), _array(rng, m, d)
    k = rng.choice([0, 1, 5, 1000, -1, 2**70])
    exclude = rng.choice([None, np.zeros(n, bool), np.ones(n, bool), np.zeros(n + 1, bool), [True] * n])
    results = []
    default = K.NUMBA_MIN_WORK
    for numba in (False, True):
        K.NUMBA_MIN_WORK = 0 if numba else 10**18
        try:
            best, which = K.score_pool(queries, corpus, exclude=exclude)
            hits = K.score_pool_topk(queries, corpus, k, exclude=exclude)
            results.append((best.tolist(), which.tolist(), hits.idx.tolist(), hits.scores.tolist()))
        except ContextSieveError as e:
            results.append(type(e).__name__)
        finally:
            K.NUMBA_MIN_WORK = default
    check(results[0] == results[1], f"numpy and Numba disagree: {str(results)[:300]}")
    if isinstance(results[0], tuple):
        check(not any(math.isnan(x) for x in results[0][0]), "NaN score")


def t_index(state: State, rng: random.Random) -> None:
    d = 8
    idx = ChunkIndex(d, IndexConfig(backend="exact"))
    n = rng.randrange(0, 40)
    vec = np.random.default_rng(rng.randrange(2**32)).standard_normal((n, d)).astype(np.float32)
    vec /= np.maximum(np.linalg.norm(vec, axis=1, keepdims=True), 1e-6)
    keys: Any = list(range(n)) if rng.random() < 0.8 else [hostile_value(rng) for _ in range(n)]
    groups = [(k, vec[i : i + 1] if rng.random() < 0.9 else _array(rng, 1, d)) for i, k in enumerate(keys)]
    try:
        idx.add(groups)
        added = {int(k): np.asarray(v, np.float64).reshape(-1) for k, v in groups}  # a key given twice: the last
    except InputError:
        check(len(idx) == 0 and idx.chunks == 0, "a refused add changed the index")
        groups = [(i, vec[i : i + 1]) for i in range(n)]
        idx.add(groups)
        added = {i: vec[i].astype(np.float64) for i in range(n)}
    if rng.random() < 0.5 and n:
        idx.remove(rng.randrange(n + 3))
    q = np.random.default_rng(rng.randrange(2**32)).standard_normal((2, d)).astype(np.float32)
    ok = np.array([rng.random() < 0.7 for _ in range(idx.slots)], dtype=bool)
    k = rng.choice([1, 5, 100])
    hits = idx.search_chunks(q, k, slot_ok=ok)
    live = [r for r in range(idx.chunks) if ok[idx.chunk_slots()[r]] and idx.key(idx.chunk_slots()[r]) in idx.slot_of]
    s = np.zeros(idx.chunks)
    for r in range(idx.chunks):  # the stored int8 row, dequantised, against the plain float64 product
        v = added[idx.key(idx.chunk_slots()[r])]
        scale = max(np.abs(v).max() / 127.0, 1e-12)
        stored = np.clip(np.rint(v / np.float32(scale)), -127, 127) * np.float32(scale)
        s[r] = (stored @ q.T.astype(np.float64)).max()
    want = sorted(live, key=lambda r: (-s[r], r))[: len(hits.idx)]
    check(len(hits.idx) == min(k, len(live)) and set(hits.idx.tolist()) <= set(live), "rows that do not pass")
    check(
        all(abs(s[a] - s[b]) < 1e-5 for a, b in zip(hits.idx.tolist(), want)),
        f"index search {hits.idx.tolist()} vs exact {want}",
    )


def t_keys_and_chunks(state: State, rng: random.Random) -> None:
    text: Any = rng.choice([rng.choice(state.keys), hostile_text(rng, 3), hostile_value(rng)])
    if rng.random() < 0.5:
        key = ItemKey.parse(text)
        check(ItemKey.parse(str(key)) == key, f"parse(str(key)) != key for {key}")
    else:
        chunks = query_chunks(text)
        check(all(isinstance(c, str) and c.strip() and len(c) <= 500 for c in chunks), "query chunks")


@dataclass(frozen=True)
class Target:
    """One fuzz target: its name and the call it makes."""

    name: str
    run: Callable[[State, random.Random], None]


TARGETS = [
    Target("embed", t_embed),
    Target("count_tokens", t_count_tokens),
    Target("request", t_request),
    Target("session_ops", t_session_ops),
    Target("agent_file", t_agent_file),
    Target("session_file", t_session_file),
    Target("kernels", t_kernels),
    Target("index", t_index),
    Target("keys_and_chunks", t_keys_and_chunks),
    Target("stash_api", t_stash_api),
    Target("mcp_tools", t_mcp_tools),
    Target("mcp_stdio", t_mcp_stdio),
    Target("mcp_http", t_mcp_http),
]


def outcome(target: Target, state: State, rng: random.Random) -> tuple[str, BaseException | None]:
    """``("ok" | "typed" | "untyped" | "wrong", exception)`` of one call."""
    try:
        target.run(state, rng)
    except WrongResult as e:
        return "wrong", e
    except ContextSieveError:
        return "typed", None
    except Exception as e:  # noqa: BLE001 - what the fuzz counts
        return "untyped", e
    return "ok", None
