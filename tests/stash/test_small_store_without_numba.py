"""A small stash stashes and retrieves without importing or compiling Numba (its
int8 vectors were always scored by the Numba kernel: the first retrieve of a three-segment store
compiled for 4-5 s on an empty cache)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CODE = """
import sys
from contextsieve.stash.store import StashStore
from tests.helpers.fake_embedder import FakeEmbedder
emb = FakeEmbedder()
emb.model_id = "fake/1"
store = StashStore.open(sys.argv[1], emb)
store.stash(["The checkout service was rolled back to v41.", "Refunds above 500 EUR need approval.",
             "The parcel for order 1182 left the depot on Monday."])
hits = store.retrieve("why was checkout rolled back?", top_k=2)
assert hits, "no hit"
print(hits[0].segment.text)
print("numba" in sys.modules)
"""


def test_a_small_stash_never_imports_numba(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", CODE, str(tmp_path / "s.db")], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.strip().splitlines()
    assert lines[-1] == "False", r.stdout
