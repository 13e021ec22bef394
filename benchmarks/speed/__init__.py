"""Speed benchmarks: what a call costs on this CPU (latency percentiles, throughput, cold start, memory).

Each module is a script, ``python -m benchmarks.speed.<name> --help`` says what it measures; the
``test_bench_*.py`` files are pytest-benchmark cases (``python -m pytest benchmarks/speed/test_bench_embed.py
--benchmark-only``, the ``bench`` extra). Timing and percentiles come from :mod:`benchmarks.common`.
"""
