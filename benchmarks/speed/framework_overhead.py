"""contextsieve's LangChain middleware beside the framework's own tool selectors: overhead per turn,
extra LLM calls, tools sent and recall, on the project's MCP catalog.

    python -m benchmarks.speed.framework_overhead [--queries 120] [--variant int8]

Every turn is one user message of ``benchmarks/data/mcp_catalog`` (its 584 tools as LangChain
``StructuredTool`` objects; the queries' needed tools as labelled there) sent through a middleware's
``wrap_model_call`` to a handler that returns at once (no model: what is timed is the middleware's
own work per turn, on this CPU; medians). Per selector:

- ``contextsieve``: :class:`contextsieve.integrations.langchain.ContextSieveMiddleware` with default
  settings, built from the LangChain tools (server descriptions as the catalog gives them); also
  with ``max_tools=4`` (the same number the dynamic-tools middleware sends by default).
- ``LLMToolSelectorMiddleware`` (langchain's own): its work per turn is one extra LLM call with the
  whole tool list; a fake chat model answers it at once, so the time is the middleware's own
  preparation, and the call's prompt is counted with langchain's own counter
  (``count_tokens_approximately``, messages plus the selection schema as a tool). Its recall needs a
  real LLM and is not measured here (no network).
- ``langchain-dynamic-tools-middleware`` 0.2.2 (``DynamicToolSelectorMiddleware``, top_k 4 and 10) on
  zvec with the same local MiniLM as its dense embedder (contextsieve's runner, so the model is the
  same); its default sparse embedder is SPLADE, whose weights cannot be had offline, so its sparse
  side gets a hashed bag-of-words (log term frequency), documented as a substitution. Its index is
  built once before timing (the build time is printed).

``recall`` = share of a query's needed tools (groups: any member counts) among the tools sent,
averaged over queries; ``tools`` = tools sent per turn (median); ``extra calls`` = LLM calls per
turn besides the agent's own. Needs the ``langchain`` extra, and for the third row the ``bench``
extra's ``langchain-dynamic-tools-middleware`` and ``zvec``.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import DATA, group_recall, percentile, timed
from benchmarks.quality.tool_selection import groups, load, load_servers
from contextsieve.models.cpu import cpu_summary

CATALOG = DATA / "mcp_catalog"
_WORD = re.compile(r"[a-z0-9]+")


def _name(server: str, tool: str) -> str:
    """A LangChain-safe tool name (``[A-Za-z0-9_-]``, at most 64)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}__{tool}")[:64]


class _Dense:
    """contextsieve's MiniLM as the dynamic-tools middleware's dense embedder (its protocol)."""

    def __init__(self, embedder: Any) -> None:
        self.embedder = embedder

    @property
    def dimension(self) -> int:
        return 384

    def embed(self, text: str) -> list[float]:
        return [float(x) for x in self.embedder.embed([text])[0]]


class _HashedSparse:
    """A hashed bag of words (weight 1 + log tf) in place of SPLADE, which needs a model download."""

    def _vec(self, text: str) -> dict[int, float]:
        counts: dict[int, int] = {}
        for w in _WORD.findall(text.lower()):
            h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little") % 30000
            counts[h] = counts.get(h, 0) + 1
        return {k: 1.0 + math.log(v) for k, v in counts.items()}

    def embed_document(self, text: str) -> dict[int, float]:
        return self._vec(text)

    def embed_query(self, text: str) -> dict[int, float]:
        return self._vec(text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=120, help="catalog queries to send (default all 120)")
    ap.add_argument("--variant", default=None, help="embedder variant (default: auto)")
    args = ap.parse_args(argv)

    from langchain.agents.middleware import LLMToolSelectorMiddleware
    from langchain.agents.middleware.types import ModelRequest, ModelResponse
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.messages.utils import count_tokens_approximately
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import StructuredTool

    from contextsieve import Embedder
    from contextsieve.integrations.langchain import ContextSieveMiddleware, tool_specs
    from contextsieve.integrations.selector import ToolSelector

    rows, queries = load(CATALOG)
    queries = queries[: args.queries]
    about = load_servers(CATALOG)
    emb = Embedder(variant=args.variant)
    name_of = {}
    tools = []
    for r in rows:
        n = _name(r["server"], r["name"])
        name_of[n] = f"{r['server']}/{r['name']}"
        schema = r.get("inputSchema") or {"type": "object", "properties": {}}
        tools.append(
            StructuredTool(
                name=n, description=r.get("description") or r["name"], args_schema=schema, func=lambda **kw: "ok"
            )
        )
    servers = {n: r["server"] for n, r in zip(name_of, rows)}

    class _Selecting(GenericFakeChatModel):
        """Answers LLMToolSelectorMiddleware's selection call at once and keeps its prompt's size."""

        prompts: list[int] = []

        def with_structured_output(self, schema: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            def answer(messages: Any) -> dict[str, Any]:
                self.prompts.append(count_tokens_approximately(messages, tools=[schema]))
                return {"tools": [t.name for t in tools[:4]]}

            return RunnableLambda(answer)

    model = _Selecting(messages=iter([]))
    sent: list[list[str]] = []

    def handler(req: Any) -> ModelResponse[Any]:
        sent.append([t.name for t in req.tools if not isinstance(t, dict)])
        return ModelResponse(result=[AIMessage(content="ok")])

    def run(middleware: Any) -> dict[str, float]:
        sent.clear()
        times = []
        for q in queries:
            req = ModelRequest(model=model, messages=[HumanMessage(q["query"])], tools=list(tools))
            times.append(timed(lambda req=req: middleware.wrap_model_call(req, handler)) * 1000)
        recall = statistics.fmean(
            group_recall({name_of[n] for n in names}, groups(q)) for q, names in zip(queries, sent)
        )
        return {
            "ms": statistics.median(times),
            "p90": percentile(times, 90, method="lower"),
            "tools": statistics.median(len(s) for s in sent),
            "recall": recall,
        }

    table: list[tuple[str, str, dict[str, float] | None, str]] = []

    def specs_by_server() -> list[Any]:
        return [s.__class__(s.name, s.description, s.input_schema, servers[s.name]) for s in tool_specs(tools)]

    t = time.perf_counter()
    built = ToolSelector.from_tools(specs_by_server(), embedder=emb, cache_dir=False, server_descriptions=about)
    built.session.store.sync(list(built.session.agent.all_items()))
    index_s = time.perf_counter() - t
    for label, max_tools in (("default", None), ("max_tools=4", 4)):
        sel = ToolSelector(built.session, max_tools=max_tools)
        mw = ContextSieveMiddleware(sel)
        run(mw)  # warm: query-side caches, Numba
        table.append(("contextsieve", label, run(mw), f"0 (index {index_s:.1f} s)"))

    lts = LLMToolSelectorMiddleware(model=model)
    model.prompts.clear()
    stats = run(lts)
    prompt = statistics.median(model.prompts)
    stats["recall"] = float("nan")
    table.append(("LLMToolSelectorMiddleware", "its own model", stats, f"1 ({prompt:,.0f} prompt tokens)"))

    try:
        from langchain_dynamic_tools import DynamicToolSelectorMiddleware
    except ImportError:
        table.append(("langchain-dynamic-tools-middleware", "not installed", None, "(pip install the bench extra)"))
    else:
        for k in (4, 10):
            with tempfile.TemporaryDirectory() as d:
                t = time.perf_counter()
                dyn = DynamicToolSelectorMiddleware(
                    tools,
                    top_k=k,
                    path=str(Path(d) / "zvec"),
                    dense_embedder=_Dense(emb),
                    sparse_embedder=_HashedSparse(),
                )
                first = run(dyn)  # the first call builds its index
                build_s = time.perf_counter() - t - first["ms"] * len(queries) / 1000
                table.append(
                    ("langchain-dynamic-tools-middleware", f"top_k={k}", run(dyn), f"0 (index {build_s:.1f} s)")
                )

    print(cpu_summary())
    print(f"{len(queries)} turns, {len(tools)} tools (benchmarks/data/mcp_catalog); times per turn, this CPU")
    print()
    print("| selector | setting | overhead ms p50 | p90 | tools sent | recall | extra LLM calls per turn |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, setting, s, extra in table:
        if s is None:
            print(f"| {name} | {setting} | - | - | - | - | {extra} |")
            continue
        recall = "needs an LLM" if math.isnan(s["recall"]) else f"{s['recall']:.3f}"
        print(f"| {name} | {setting} | {s['ms']:.2f} | {s['p90']:.2f} | {s['tools']:.0f} | {recall} | {extra} |")


if __name__ == "__main__":
    main()
