"""Fuzz the public API with hostile input for a while and count what escapes.

    python -m benchmarks.robustness.fuzz --minutes 20 [--seed 1] [--targets request,agent_file]

Runs the targets of :mod:`tests.helpers.properties` round-robin (each call from its own seed, so a case
can be replayed with ``--replay TARGET:SEED``) against the real int8 MiniLM embedder and the bundled
example agent, and prints per target: calls, typed refusals, untyped errors, hangs (a call over
``--hang`` seconds, default 10) and silent wrong results, with the first example of each failure.
Targets: 0 untyped errors and 0 hangs over >= 100,000 calls.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import random
import sys
import tempfile
import time
import traceback
import warnings
from collections import Counter
from pathlib import Path

from contextsieve.models.cpu import cpu_summary
from tests.helpers.properties import TARGETS, Target, make_state, outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0, help="how long to run (default 5)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hang", type=float, default=10.0, help="seconds from which a call counts as a hang")
    ap.add_argument("--targets", default="", help="comma-separated target names (default: all)")
    ap.add_argument("--replay", default="", help="TARGET:SEED: run one case and show its traceback")
    args = ap.parse_args(argv)
    from contextsieve import Embedder

    warnings.simplefilter("ignore")
    logging.getLogger("mcp").setLevel(logging.ERROR)  # the SDK logs each argument it rejects
    targets = [t for t in TARGETS if not args.targets or t.name in args.targets.split(",")]
    with tempfile.TemporaryDirectory(prefix="contextsieve-fuzz-") as tmp:
        state = make_state(Embedder(), Path(tmp))
        try:
            if args.replay:
                name, seed = args.replay.split(":")
                target = next(t for t in TARGETS if t.name == name)
                target.run(state, random.Random(int(seed)))
                print("no error")
                return 0
            return _run(targets, state, args)
        finally:
            state.close()


def _run(targets: list[Target], state, args) -> int:  # noqa: ANN001
    counts: dict[str, Counter[str]] = {t.name: Counter() for t in targets}
    first: dict[tuple[str, str], str] = {}
    seconds: Counter[str] = Counter()
    deadline = time.monotonic() + args.minutes * 60
    master = random.Random(args.seed)
    faulthandler.dump_traceback_later(max(60.0, args.hang * 6), exit=True)  # a real hang: dump and stop
    calls = 0
    while time.monotonic() < deadline:
        for target in targets:
            seed = master.randrange(2**63)
            t0 = time.perf_counter()
            kind, err = outcome(target, state, random.Random(seed))
            took = time.perf_counter() - t0
            faulthandler.dump_traceback_later(max(60.0, args.hang * 6), exit=True)
            seconds[target.name] += took
            counts[target.name][kind] += 1
            if took > args.hang:
                counts[target.name]["hang"] += 1
                first.setdefault((target.name, "hang"), f"{target.name}:{seed} took {took:.1f} s")
            if err is not None and (target.name, kind) not in first:
                tb = "".join(traceback.format_exception(err)[-3:]).strip()
                first[(target.name, kind)] = f"--replay {target.name}:{seed}\n    {tb[-600:]}"
            calls += 1
    faulthandler.cancel_dump_traceback_later()
    print(f"# fuzz: {args.minutes} min, seed {args.seed}; {cpu_summary()}")
    print(f"{'target':<16} {'calls':>8} {'typed':>8} {'untyped':>8} {'hangs':>6} {'wrong':>6} {'ms/call':>8}")
    total = Counter()
    for t in targets:
        c = counts[t.name]
        n = sum(c[k] for k in ("ok", "typed", "untyped", "wrong"))
        total.update({"calls": n, **{k: c[k] for k in ("typed", "untyped", "hang", "wrong")}})
        ms = 1000 * seconds[t.name] / max(n, 1)
        print(f"{t.name:<16} {n:>8} {c['typed']:>8} {c['untyped']:>8} {c['hang']:>6} {c['wrong']:>6} {ms:>8.2f}")
    print(
        f"{'all':<16} {total['calls']:>8} {total['typed']:>8} {total['untyped']:>8} {total['hang']:>6} "
        f"{total['wrong']:>6}"
    )
    for (name, kind), example in sorted(first.items()):
        print(f"\nfirst {kind} in {name}: {example}")
    bad = total["untyped"] + total["hang"] + total["wrong"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
