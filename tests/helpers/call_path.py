"""The path a message takes through the package: every function of ``contextsieve`` a request calls,
from ``Session.build_request(message)`` to ``Request.anthropic()``, and how often that path crosses
from one package to another.

How it counts: the example agent (``contextsieve example-agent``) with a stash, one warm-up request,
then one traced request (a message that is new to the embedding cache). :func:`sys.setprofile` follows
the message as data: a call into a module of ``contextsieve`` (``engine/``, ``kernels/``, ``models/``)
is on the path when one of its arguments (or its ``self``) is the message or a value an earlier call
on the path returned, directly or one level inside (an element of a list, tuple or dict, an attribute
of an object); what a call on the path returns joins them. Calls that never see the message (reading
the agent's tables, counting a tool's name) are not on its path. Each call's package is the module's
first part below ``contextsieve`` (``contextsieve.session``, ``contextsieve.selection``, ...;
``engine.py`` and ``errors.py`` are ``contextsieve``). A *crossing* is a call on the path whose package
differs from the previous one's; a *return* is a crossing into a package the path already left.

``python -m tests.helpers.call_path`` prints the counts and the path (one line per crossing);
``--json`` prints them as JSON. It loads the model: run it in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

#: The traced request's message (two sentences, so the search and the stash both split it).
MESSAGE = "Refund order 4521 for the customer, it arrived broken. Then tell them when the new one ships."


def package_of(module: str) -> str | None:
    """The package a call into ``module`` belongs to, or ``None`` for a module outside contextsieve."""
    parts = module.split(".")
    if parts[0] != "contextsieve":
        return None
    if len(parts) <= 2:
        return "contextsieve"
    return ".".join(parts[:2])


def trace_request(message: str = MESSAGE) -> list[tuple[str, str]]:
    """``(module, function)`` of every contextsieve call made by one request for ``message``, in order."""
    from contextsieve import Engine, StashStore
    from contextsieve.agent.agentfile import example_agent_path

    with tempfile.TemporaryDirectory() as tmp:
        stash = StashStore.open(str(Path(tmp) / "stash.db"))
        session = Engine.from_file(example_agent_path()).session(stash=stash)
        session.stash(["The replacement for order 4521 ships on Monday from the Leeds warehouse."])
        session.build_request("warm up the model and the index")
        calls: list[tuple[str, str]] = []
        follow = _Follow(message, calls)
        sys.setprofile(follow.profile)
        try:
            session.build_request(message).anthropic()
        finally:
            sys.setprofile(None)
        stash.close()
    return calls


class _Follow:
    """The profile function that follows ``message`` (see the module docstring) into ``calls``."""

    def __init__(self, message: str, calls: list[tuple[str, str]]) -> None:
        self.message = message
        self.vectors: dict[int, object] = {}  # arrays calls on the path returned (kept alive: ids stay theirs)
        self.on_path: set[int] = set()  # frames on the path, by id
        self.calls = calls

    def _is_message(self, value: object) -> bool:
        """The message, a piece of it (8 characters or more) or the vectors of its pieces."""
        if isinstance(value, str):
            return len(value) >= 8 and value in self.message
        return id(value) in self.vectors

    def _carries(self, value: object) -> bool:
        if self._is_message(value):
            return True
        inner: list[object] = []
        if isinstance(value, (list, tuple)):
            inner = list(value[:64])
        elif isinstance(value, dict):
            inner = list(value.values())[:64]
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            inner = list(vars(value).values())[:64]
        elif hasattr(value, "__slots__"):
            inner = [getattr(value, s, None) for s in getattr(value, "__slots__", ())][:64]
        return any(
            self._is_message(v) or (isinstance(v, (list, tuple)) and any(map(self._is_message, v[:64]))) for v in inner
        )

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("contextsieve"):
            return
        if event == "call":
            code = frame.f_code
            n = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
            args = [frame.f_locals.get(name) for name in code.co_varnames[:n]]
            if any(self._carries(a) for a in args):
                self.on_path.add(id(frame))
                self.calls.append((module, code.co_name))
        elif event == "return" and id(frame) in self.on_path:
            self.on_path.discard(id(frame))
            for v in arg if isinstance(arg, tuple) else (arg,):
                if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                    self.vectors[id(v)] = v


def crossings(calls: list[tuple[str, str]]) -> dict[str, Any]:
    """The path's modules, its package crossings and its returns (see the module docstring)."""
    path: list[dict[str, str]] = []
    left: set[str] = set()
    last: str | None = None
    returns = 0
    for module, function in calls:
        pkg = package_of(module)
        if pkg is None or pkg == last:
            continue
        if last is not None:
            left.add(last)
            if pkg in left:
                returns += 1
            path.append({"from": last, "to": pkg, "call": f"{module}.{function}"})
        last = pkg
    modules = list(dict.fromkeys(m for m, _ in calls))
    return {"modules": len(modules), "crossings": len(path), "returns": returns, "path": path, "module_list": modules}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--json", action="store_true", help="print the counts and the path as JSON")
    args = ap.parse_args(argv)
    out = crossings(trace_request())
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"modules {out['modules']}, package crossings {out['crossings']}, returns {out['returns']}")
    for step in out["path"]:
        print(f"  {step['from']:<28} -> {step['to']:<28} {step['call']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
