"""kill -9 at random moments loses no acknowledged write and corrupts no file (a short run of
``python -m benchmarks.robustness.crash``; docs/reliability.md's figures come from the long one)."""

from __future__ import annotations

import sys

import pytest

from tests.helpers.crash import run


@pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGKILL")
def test_killed_writers_lose_and_corrupt_nothing() -> None:
    stats = run(24, seed=7, names=["agent_save", "embedding_cache", "graph_save", "session_save"])
    assert sum(s["kills"] for s in stats.values()) == 24
    assert sum(s["acked"] for s in stats.values()) > 0
    for name, s in stats.items():
        assert s["lost"] == 0 and s["corrupt"] == 0 and s["writer errors"] == 0, (name, dict(s))
        assert s["temps left"] == 0, (name, dict(s))
