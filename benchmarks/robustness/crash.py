"""Kill writers with SIGKILL at random moments and check what survived.

    python -m benchmarks.robustness.crash --kills 1000 [--seed 1] [--writers agent_save,session_save]

Each writer runs in a forked child that writes in a loop and acknowledges every write after the call
returned (a line on a pipe); the parent kills it after a random delay, then opens what is on disk as
a user would. Per writer it prints: kills, acknowledged writes, writes lost (the file holds an older
version than the last acknowledged one, or nothing), corrupt files (the file does not open or fails
verification), temp files found right after a kill, and temp files left once a new writer has
written again (the next write removes a killed writer's temp files).

Writers: ``agent_save`` (:func:`save_agent`, a ~100 KB agent file), ``embedding_cache``
(:class:`EmbeddingCache.put`, 50 vectors a transaction), ``graph_save`` (:func:`save_graph`, the
HNSW graph of a 500-3,000 group chunk index; the check rebuilds the acknowledged version's index and
loads the saved graph into it, which must adopt it unchanged and without a warning),
``session_save`` (:meth:`Session.save`, a growing history), ``model_build`` (:class:`Embedder` with
``rebuild=True``: a graph build and its cache entry; fewer kills, each takes seconds), ``stash``
(:meth:`StashStore.stash` of 5-segment batches into one SQLite stash, with a retrieval between
batches; the check reads every acknowledged segment back, verifies its text and its vectors'
checksum, and runs ``PRAGMA integrity_check``), ``stash_mcp`` (the same batches through MCP:
``stash_context`` calls of the SDK's in-memory client to the server, acknowledged when the result
came back; checked the same way). Targets: 0 writes lost and 0 corrupt
files over >= 1,000 kills.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from contextsieve.models.cpu import cpu_summary
from tests.helpers.crash import WRITERS, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--writers", default=",".join(WRITERS))
    args = ap.parse_args(argv)
    names = [n for n in args.writers.split(",") if n]
    unknown = set(names) - set(WRITERS)
    if unknown:
        ap.error(f"unknown writers {sorted(unknown)}; known: {', '.join(WRITERS)}")
    t0 = time.time()
    stats = run(args.kills, args.seed, names)
    print(f"# crash: {args.kills} kills, seed {args.seed}, {time.time() - t0:.0f} s; {cpu_summary()}")
    cols = ["kills", "acked", "lost", "corrupt", "temps at kill", "temps left", "writer errors"]
    print(f"{'writer':<16}" + "".join(f"{c:>15}" for c in cols))
    total: Counter[str] = Counter()
    for name in names:
        total.update(stats[name])
        print(f"{name:<16}" + "".join(f"{stats[name][c]:>15}" for c in cols))
    print(f"{'all':<16}" + "".join(f"{total[c]:>15}" for c in cols))
    return 1 if total["lost"] or total["corrupt"] or total["writer errors"] or total["temps left"] else 0


if __name__ == "__main__":
    sys.exit(main())
