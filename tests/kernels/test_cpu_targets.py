"""The kernel and index suites as compiled for an AVX2-only CPU, on whatever CPU runs the tests.

Numba compiles for the host, so on an AVX-512 machine the AVX2 code path (other loop shapes, other
rounding where the arithmetic is not fixed) would never be tested. These tests compile the kernels for
AMD Zen 1 features in a subprocess with a fresh cache and run the kernel and index suites there; the
ordinary run covers the host's own target.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextsieve.kernels.targets import avx2_only_env, can_target_avx2

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not can_target_avx2(), reason="not an x86-64 CPU with AVX2: no AVX2 code can run")


def _env(tmp_path: Path) -> dict[str, str]:
    cache = tmp_path / "numba-cache"
    cache.mkdir()
    return {**os.environ, **avx2_only_env(cache)}


def test_the_avx2_target_emits_no_512_bit_code(tmp_path: Path) -> None:
    """The settings really change the target: the compiled kernel uses ymm registers and never zmm."""
    code = (
        "import numpy as np\n"
        "from contextsieve.kernels import _jit\n"
        "q = np.ones((3, 384), np.float32); c = np.ones((10, 384), np.int8)\n"
        "best = np.empty(10, np.float32); which = np.empty(10, np.int32)\n"
        "_jit.score_pool(q, c, np.ones(10, np.float32), np.zeros(0, np.bool_), best, which)\n"
        "asm = '\\n'.join(_jit.score_pool.inspect_asm().values())\n"
        "print('zmm' in asm, 'ymm' in asm)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_kernel_and_index_suites_pass_as_compiled_for_avx2(tmp_path: Path) -> None:
    files = ["tests/kernels/test_kernels.py", "tests/retrieval/test_chunk_index.py"]
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout
