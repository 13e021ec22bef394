"""The same agent, settings, history and messages give the same requests in every process (issue 47).

:func:`conversation` (run as a script: ``python test_same_selection_every_run.py THREADS``) builds the
requests of a fixed conversation (tasks with steps, replies, learning from tool calls and from
misses, several presets and offers) over the bundled example agent and over a copy of it with
mirrored servers (exact and near ties between tools), and prints every request as JSON: the
Anthropic payloads, the request context with its scores, and a digest of the search trace (query and
chunk vectors, the ranked chunks' scores, full precision). The test runs it in fresh processes that
differ in everything that must not matter (hash seed, embedder threads, an empty or a warm
``CONTEXTSIEVE_CACHE`` (the model built or loaded, vectors embedded or read back), run alone or
beside another) and fails on any difference in their output.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

#: tasks of the conversation: a task's first message, then its steps (a reply recorded after each)
TASKS = [
    [
        "The checkout page has returned 500 errors since the deploy twenty minutes ago. What should I do?",
        "Roll the checkout service back and tell the team in the incidents channel.",
        "Now open a pull request that fixes the cart rounding bug.",
    ],
    [
        "A customer wants a refund of 150 USD for order 1042 because the parcel never arrived.",
        "Check where the parcel is first, then answer the customer.",
    ],
    ["thanks!"],
    ["How many orders did we ship last week? Query the database, and show me the orders table."],
    ["Bonjour, quelle est votre politique de retour pour une tente utilisée ?"],
    ["Search the web for the changelog of the payments SDK and list the open issues about refunds."],
]
#: what the model called for a message: recorded as its request's outcome in the first pass (examples
#: and misses), and with record_tool_calls after it; the second pass builds the requests again
CALLED = [
    (TASKS[0][0], ["ops:service_status", "ops:rollback_service"]),
    (TASKS[1][0], ["helpdesk:track_parcel", "payments:get_payment"]),
    (TASKS[3][0], ["postgres:run_query"]),
]
#: the servers mirrored in the second agent (same tools, same descriptions)
MIRRORED = ("github", "ops", "helpdesk")


def _digest(request: Any) -> str:
    """sha256 of everything the search computed, to the bit."""
    h = hashlib.sha256()
    trace = request.trace
    if trace is None:
        return ""
    h.update(json.dumps([str(k) for k in trace.order]).encode())
    for a in (trace.queries, trace.chunks, trace.owner):
        h.update(a.tobytes())
    for d in trace.domains:
        h.update(d.name.encode())
        h.update(d.ranked.hits.idx.tobytes())
        h.update(d.ranked.hits.scores.tobytes())
        h.update(d.ranked.sims.tobytes())
        h.update(json.dumps([dataclasses.astuple(s) for s in d.grouped + d.chosen + d.promoted]).encode())
    return h.hexdigest()


def _emit(label: str, request: Any) -> None:
    out = {
        "label": label,
        "anthropic": request.anthropic(),
        "deferred": request.anthropic("deferred"),
        "context": request.context.to_dict(),
        "trace": _digest(request),
    }
    print(json.dumps(out, sort_keys=True, ensure_ascii=False), flush=True)


def conversation(threads: int | None) -> None:
    """Print the requests of the conversation, one JSON object a line (see the module docstring)."""
    from contextsieve import Embedder, Engine
    from contextsieve.agent.agent import McpServer
    from contextsieve.agent.agentfile import example_agent_path, load_agent
    from contextsieve.agent.items import IncludeMode
    from contextsieve.selection.chunking import ChunkConfig
    from contextsieve.session.offer import OfferConfig

    embedder = Embedder(variant="int8", threads=threads)  # the model cache: $CONTEXTSIEVE_CACHE
    example = Engine.from_file(example_agent_path(), embedder=embedder)
    # a copy with mirrored servers: with the server's name left out of the embedded text, each mirrored
    # tool ties exactly with its original; with it (the default), they are near ties
    mirror = load_agent(example_agent_path())
    for server in MIRRORED:
        copy = f"{server}-mirror"
        mirror.add_server(McpServer(copy, {}, IncludeMode.AGENT))
        for tool in [t for t in mirror.tools if t.server == server]:
            mirror.upsert(dataclasses.replace(tool, server=copy))
    tied = Engine(mirror, embedder=embedder, chunking=ChunkConfig(tool_context="none"))
    near = Engine(mirror, embedder=embedder)

    sessions = [
        ("example/default", example.session()),
        (
            "example/conservative+stable",
            example.session(
                preset="conservative", offer=OfferConfig(mode="stable"), min_representation_floor=0.3, prf_weight=0.5
            ),
        ),
        ("example/reference", example.session(preset="reference")),
        ("example/budget+servers", example.session(token_budget=900, server_weight=0.2)),
        ("tied/default", tied.session()),
        ("tied/shared", tied.session(tool_domain="shared", keyword_weight=0.0)),
        ("near/aggressive", near.session(preset="aggressive")),
    ]
    for name, session in sessions:
        for learned in (False, True):
            for t, task in enumerate(TASKS):
                session.new_task()
                for s, message in enumerate(task):
                    request = session.build_request(message)
                    _emit(f"{name} learned={learned} task={t} step={s}", request)
                    session.record_reply(request, "")
                    calls = dict(CALLED).get(message)
                    if not learned and calls:  # what the model did with the offer: examples, and misses
                        offered = {str(request.tool_key(d["name"])) for d in request.tools}
                        session.record_outcome(request, [c for c in calls if f"tool:{c}" in offered])
            if not learned:
                for message, calls in CALLED:
                    session.record_tool_calls(message, calls)


# -- the test --------------------------------------------------------------------------------------------

#: (PYTHONHASHSEED, embedder threads (0: the default), cache ("a"/"b"; empty the first time), phase):
#: the runs of one phase start together (two beside each other share the 2 cores: the embedder's
#: adaptive threads see the other process), phases one after another
RUNS = [
    ("0", 1, "a", 0),
    ("1", 2, "b", 0),
    ("2", 2, "a", 1),
    ("3", 1, "b", 1),
    ("random", 0, "a", 2),
]


def test_the_same_requests_in_every_process(tmp_path: Path) -> None:
    caches = {name: tmp_path / f"cache-{name}" for name in ("a", "b")}
    # each run its own data folder: the agent registry and its learned history, which is an input of the
    # selection (the same history, here none at the start); the model and vector caches are shared or not
    data = {seed: tmp_path / f"data-{seed}" for seed, _, _, _ in RUNS}
    for folder in [*caches.values(), *data.values()]:
        folder.mkdir()
    outputs: list[tuple[str, bytes]] = []
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    try:
        for phase in sorted({r[3] for r in RUNS}):
            started = []
            _phase(phase, caches, data, started)
            for label, proc in started:
                out, err = proc.communicate(timeout=300)
                assert proc.returncode == 0, f"{label}: exit {proc.returncode}\n{err.decode()[-3000:]}"
                outputs.append((label, out))
    finally:
        for _, proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    first_label, first = outputs[0]
    lines = first.decode().splitlines()
    assert len(lines) == 7 * 2 * sum(len(t) for t in TASKS)  # every request printed
    assert len({json.loads(line)["trace"] for line in lines}) > 1
    for label, out in outputs[1:]:
        if out != first:
            raise AssertionError(f"{first_label} and {label} built different requests:\n" + _difference(first, out))


def _phase(
    phase: int, caches: dict[str, Path], data: dict[str, Path], started: list[tuple[str, subprocess.Popen[bytes]]]
) -> None:
    """Start the runs of ``phase`` (appended to ``started``); ``data``: each run's own data folder."""
    for seed, threads, cache, _ in (r for r in RUNS if r[3] == phase):
        warm = any(caches[cache].iterdir())
        env = {**os.environ, "PYTHONHASHSEED": seed}
        env |= {"CONTEXTSIEVE_CACHE": str(caches[cache]), "CONTEXTSIEVE_DATA": str(data[seed])}
        env.pop("CONTEXTSIEVE_VARIANT", None)
        proc = subprocess.Popen(
            [sys.executable, __file__, str(threads)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        label = f"PYTHONHASHSEED={seed} threads={threads or 'default'} {'warm' if warm else 'empty'} cache {cache}"
        started.append((label, proc))


def _brief(line: str) -> dict[str, Any]:
    """What a printed request chose, shortly: its tools in order, its items with their scores."""
    d = json.loads(line)
    items = [
        f"{i['type']}:{i.get('serverName', '')}:{i['name']}={i.get('similarityScore')}" for i in d["context"]["items"]
    ]
    return {"tools": [t["name"] for t in d["anthropic"]["tools"]], "items": items, "trace": d["trace"][:16]}


def _difference(a: bytes, b: bytes) -> str:
    """The first request that differs (its label, and what each process chose) and how many differ."""
    left, right = a.decode().splitlines(), b.decode().splitlines()
    for x, y in zip(left, right):
        if x != y:
            bx, by = _brief(x), _brief(y)
            where = json.loads(x)["label"]
            parts = [f"first at {where}:"] + [
                f"  {k}: {bx[k]}\n  {' ' * len(k)}  {by[k]}" for k in bx if bx[k] != by[k]
            ]
            if bx == by:
                parts.append("  (the same choice and trace; the payloads differ)")
            differing = sum(p != q for p, q in zip(left, right))
            return "\n".join(parts)[:4000] + f"\n{differing} of {len(left)} requests differ"
    return "\n".join(difflib.unified_diff(left, right, n=0, lineterm=""))[:4000]  # a different count


if __name__ == "__main__":
    conversation(int(sys.argv[1]) or None)
