"""Robustness benchmarks: hostile input, killed writers, flipped bytes and oversized input, each counting
what escapes (untyped errors, hangs, lost or corrupt writes, silent wrong results, unbounded work).

Each module is a script, ``python -m benchmarks.robustness.<name> --help`` says what it runs. The fuzz
targets and the crash harness are shared with the tests, so they live in ``tests/helpers/``.
"""
