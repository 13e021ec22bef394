"""What a user waits for on a first run, phase by phase, from empty caches and then warm.

    python -m benchmarks.speed.cold_start                   # this checkout
    python -m benchmarks.speed.cold_start --tree DIR        # another checkout's package (before/after)
    python -m benchmarks.speed.cold_start --runs 5

Every row runs in fresh processes (``--runs``, default 3; the median is printed). "cold" gives each
process empty caches: ``$CONTEXTSIEVE_CACHE`` (graphs, the variant choice, embeddings, since this
change also the compiled Numba kernels), ``$NUMBA_CACHE_DIR`` and ``$CONTEXTSIEVE_DATA`` (the stash
serve opens); "warm" runs again on the caches one cold run filled. ``--tree DIR`` puts ``DIR`` first on
``PYTHONPATH`` (a folder holding a ``contextsieve`` package, e.g. links to another checkout's
``engine/*``, ``kernels`` and ``models``), so one run measures two versions side by side; the
phases use only what both versions have.

Rows:
- ``select`` (the CLI, bundled example agent, one message): wall time of the process, the request time
  it printed, and the seconds before its first line on stderr (``-`` when it wrote none).
- ``phases`` (in one process, the public API): import, agent loaded, the model ready (``Embedder()``:
  variant choice and graph builds), the agent's items embedded (``Engine.index``), the first request.
- ``stash``: ``StashStore.open`` on a new file, three segments stashed, one retrieve.
- ``serve``: ``contextsieve serve AGENT`` started by the MCP SDK's stdio client until ``initialize``
  and ``tools/list`` answered, then until a first ``select_context`` answered.
- ``kernels``: the first call of each Numba kernel after ``import numba`` (compiled or loaded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import ROOT, cpu_line

MESSAGE = "Checkout returns 502 since the deploy: roll it back."

PHASES = f"""
import json, sys, time
t0 = time.perf_counter(); out = {{}}
import contextsieve
from contextsieve import Engine, example_agent_path
out['import'] = time.perf_counter() - t0
t = time.perf_counter(); engine = Engine.from_file(example_agent_path()); out['agent loaded'] = time.perf_counter() - t
from contextsieve.models.embedder import Embedder
t = time.perf_counter(); emb = Embedder(); out['model ready'] = time.perf_counter() - t
engine = Engine(engine.agent, embedder=emb)
t = time.perf_counter(); engine.index(); out['items embedded'] = time.perf_counter() - t
session = engine.session()
t = time.perf_counter(); session.build_request({MESSAGE!r}); out['first request'] = time.perf_counter() - t
out['total'] = time.perf_counter() - t0
print(json.dumps(out))
"""

STASH = """
import json, sys, time
t0 = time.perf_counter()
from contextsieve.stash.store import StashStore
t = time.perf_counter(); store = StashStore.open(sys.argv[1] + '/s.db'); out = {'open': time.perf_counter() - t}
t = time.perf_counter()
store.stash(['The checkout service was rolled back to v41 after the 502s.', 'Refunds above 500 EUR need approval.',
             'The parcel for order 1182 left the depot on Monday.'])
out['3 segments stashed'] = time.perf_counter() - t
t = time.perf_counter(); hits = store.retrieve('why was checkout rolled back?')
out['retrieve'] = time.perf_counter() - t
assert hits, 'no hit'
out['total'] = time.perf_counter() - t0
print(json.dumps(out))
"""

SERVE = f"""
import json, sys, time, anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    t0 = time.perf_counter(); out = {{}}
    params = StdioServerParameters(command=sys.executable, args=['-m', 'contextsieve', 'serve', sys.argv[1]],
                                   env=dict(__import__('os').environ))
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize(); await s.list_tools()
            out['initialize + tools/list'] = time.perf_counter() - t0
            res = await s.call_tool('select_context', {{'message': {MESSAGE!r}}})
            assert not res.is_error, res
            out['first select_context'] = time.perf_counter() - t0
    print(json.dumps(out))

anyio.run(main)
"""

KERNELS = {
    "score_pool_topk (fp32)": "K.score_pool_topk(q, c, 20)",
    "Int8Corpus.score_pool_topk": "K.Int8Corpus.from_vectors(c).score_pool_topk(q, 20)",
    "group_max": "K.group_max(rng.random(60000).astype(np.float32), rng.integers(0, 100, 60000), 100)",
}
KERNEL_CODE = (
    "import time, json, numpy as np\nrng = np.random.default_rng(0)\n"
    "import contextsieve.kernels.scoring as K\nK.NUMBA_MIN_WORK = 0\nimport numba\n"
    "c = rng.standard_normal((20000, 384), dtype=np.float32); q = rng.standard_normal((2, 384), dtype=np.float32)\n"
    "t = time.perf_counter(); {call}; print(json.dumps({{'first call': time.perf_counter() - t}}))"
)


def _env(tree: Path | None, caches: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTSIEVE_", "NUMBA_"))}
    for name, sub in (("CONTEXTSIEVE_CACHE", "cache"), ("NUMBA_CACHE_DIR", "numba"), ("CONTEXTSIEVE_DATA", "data")):
        env[name] = str(caches / sub)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _json_run(args: list[str], env: dict[str, str]) -> dict[str, float]:
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=900, cwd=tempfile.gettempdir())
    if r.returncode:
        raise RuntimeError(f"{args[:3]} failed:\n{r.stderr[-2000:]}")
    return {k: float(v) for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items()}


def _select_run(env: dict[str, str]) -> dict[str, float]:
    """``contextsieve select`` of the example agent: wall seconds, the request ms it printed, seconds to
    its first stderr line (``nan`` when none)."""
    import re
    import threading
    import time

    code = "from contextsieve import example_agent_path; print(example_agent_path())"
    agent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip()
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "contextsieve", "select", agent, MESSAGE],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    first: list[float] = []
    err: list[str] = []

    def read_err() -> None:
        assert p.stderr is not None
        for line in p.stderr:
            if not first:
                first.append(time.perf_counter() - t0)
            err.append(line)

    reader = threading.Thread(target=read_err)
    reader.start()
    assert p.stdout is not None
    out = p.stdout.read()
    p.wait(timeout=900)
    reader.join()
    wall = time.perf_counter() - t0
    if p.returncode:
        raise RuntimeError("select failed:\n" + "".join(err)[-2000:])
    m = re.search(r"\((\d+(?:\.\d+)?) ms\)\s*$", out)
    return {
        "wall": wall,
        "printed request ms": float(m.group(1)) if m else float("nan"),
        "first stderr line": first[0] if first else float("nan"),
    }


def _measure(run: Callable[[dict[str, str]], dict[str, float]], tree: Path | None, runs: int) -> dict[str, list[float]]:
    """``run`` ``runs`` times cold (each with new empty caches) and ``runs`` times warm (on the caches
    the first cold run filled); ``{'cold <key>': [...], 'warm <key>': [...]}``."""
    out: dict[str, list[float]] = {}
    keep = Path(tempfile.mkdtemp(prefix="cold-warm-"))
    try:
        for i in range(runs):
            caches = keep if i == 0 else Path(tempfile.mkdtemp(prefix="cold-"))
            try:
                for k, v in run(_env(tree, caches)).items():
                    out.setdefault(f"cold {k}", []).append(v)
            finally:
                if caches != keep:
                    shutil.rmtree(caches, ignore_errors=True)
        for _ in range(runs):
            for k, v in run(_env(tree, keep)).items():
                out.setdefault(f"warm {k}", []).append(v)
    finally:
        shutil.rmtree(keep, ignore_errors=True)
    return out


def _fmt(values: list[float]) -> str:
    good = [v for v in values if v == v]
    if not good:
        return "-"
    return f"{statistics.median(good):.3f}" + ("" if len(good) == len(values) else f" ({len(good)}/{len(values)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", type=Path, help="a folder holding the contextsieve package to measure instead")
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per row and cache state (default 3)")
    ap.add_argument("--skip", default="", help="comma-separated row groups to skip: select,phases,stash,serve,kernels")
    args = ap.parse_args()
    tree = args.tree.resolve() if args.tree else None
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    agent_code = "from contextsieve import example_agent_path; print(example_agent_path())"
    print(f"{cpu_line()}")
    print(f"package: {tree or ROOT}; median of {args.runs} fresh processes per cell (seconds unless named)\n")
    print("| group | phase | cold | warm |")
    print("| --- | --- | ---: | ---: |")

    def rows(group: str, got: dict[str, list[float]]) -> None:
        keys = [k[5:] for k in got if k.startswith("cold ")]
        for k in keys:
            print(f"| {group} | {k} | {_fmt(got['cold ' + k])} | {_fmt(got.get('warm ' + k, []))} |", flush=True)

    if "select" not in skip:
        rows("select", _measure(_select_run, tree, args.runs))
    if "phases" not in skip:
        rows("phases", _measure(lambda env: _json_run([sys.executable, "-c", PHASES], env), tree, args.runs))
    if "stash" not in skip:

        def stash(env: dict[str, str]) -> dict[str, float]:
            with tempfile.TemporaryDirectory() as folder:
                return _json_run([sys.executable, "-c", STASH, folder], env)

        rows("stash", _measure(stash, tree, args.runs))
    if "serve" not in skip:

        def serve(env: dict[str, str]) -> dict[str, float]:
            agent = subprocess.run([sys.executable, "-c", agent_code], capture_output=True, text=True, env=env)
            return _json_run([sys.executable, "-c", SERVE, agent.stdout.strip()], env)

        rows("serve", _measure(serve, tree, args.runs))
    if "kernels" not in skip:
        for name, call in KERNELS.items():
            code = KERNEL_CODE.format(call=call)
            got = _measure(lambda env: _json_run([sys.executable, "-c", code], env), tree, args.runs)
            rows(f"kernel {name}", got)


if __name__ == "__main__":
    main()
