"""What a fresh process pays before its first answer: imports, first small request, first Numba calls.

    python -m benchmarks.speed.cold_start

Each figure is the median of 3 fresh processes. "cold cache" runs with an empty ``NUMBA_CACHE_DIR``
(every kernel compiles), "warm cache" reuses the one the cold runs filled.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks.common import cpu_line

PRELUDE = "import time, numpy as np\nrng = np.random.default_rng(0)\n"

CASES = {
    "import contextsieve (numpy included)": "import time\nt = time.perf_counter(); import contextsieve; "
    "print(time.perf_counter() - t)",
    "import contextsieve.kernels.scoring (numpy included)": "import time\nt = time.perf_counter(); import "
    "contextsieve.kernels.scoring; print(time.perf_counter() - t)",
    "first request, 1k chunks x 2 queries (numpy path, no Numba)": (
        PRELUDE + "import contextsieve.kernels.scoring as K, sys\n"
        "c = rng.standard_normal((1000, 384), dtype=np.float32); q = rng.standard_normal((2, 384), dtype=np.float32)\n"
        "t = time.perf_counter(); K.score_pool_topk(q, c, 20); dt = time.perf_counter() - t\n"
        "assert 'numba' not in sys.modules; print(dt)"
    ),
    "import numba": "import time\nt = time.perf_counter(); import numba; print(time.perf_counter() - t)",
}
KERNELS = {
    "score_pool_topk (fp32)": "K.score_pool_topk(q, c, 20)",
    "score_pool": "K.score_pool(q, c)",
    "Int8Corpus.score_pool_topk": "K.Int8Corpus.from_vectors(c).score_pool_topk(q, 20)",
    "group_max": "K.group_max(rng.random(60000).astype(np.float32), rng.integers(0, 100, 60000), 100)",
}


def run(code: str, env: dict[str, str], fresh_cache: bool = False) -> float:
    """Median of 3 fresh processes; ``fresh_cache`` gives each its own empty Numba cache."""
    out = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as empty:
            e = {**env, "NUMBA_CACHE_DIR": empty} if fresh_cache else env
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=600)
            if r.returncode:
                raise RuntimeError(r.stderr[-1500:])
            out.append(float(r.stdout.strip().splitlines()[-1]))
    return float(np.median(out))


def main() -> None:
    print(f"{cpu_line()}\n")
    print("| step | cold Numba cache s | warm Numba cache s |")
    print("| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for name, code in CASES.items():
            print(f"| {name} | {run(code, env):.3f} | - |", flush=True)
        for name, call in KERNELS.items():
            code = PRELUDE + (
                "import contextsieve.kernels.scoring as K\nK.NUMBA_MIN_WORK = 0\nimport numba\n"
                "c = rng.standard_normal((20000, 384), dtype=np.float32); q = rng.standard_normal((2, 384), "
                "dtype=np.float32)\n"
                f"t = time.perf_counter(); {call}; print(time.perf_counter() - t)"
            )
            cold = run(code, env, fresh_cache=True)
            run(code, env)  # fill the shared cache
            warm = run(code, env)
            print(f"| first {name} (after import numba) | {cold:.3f} | {warm:.3f} |", flush=True)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
