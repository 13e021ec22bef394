"""Quality benchmarks: what the selection and the stash retrieve (recall@k, nDCG@10, tools offered) on
the data sets of ``benchmarks/data`` and on public sets under ``../shared/eval``.

Each module is a script, ``python -m benchmarks.quality.<name> --help`` says what it scores. Their
tables are deterministic (apart from any latency column): the same code prints the same table.
"""
