"""The benchmarks' data sets, each in its own folder beside the ``build.py`` that writes (or checks) it,
and the builders of files kept elsewhere (``make_golden``: the golden vectors of the tests).

    python -m benchmarks.data.<set>.build     # mcp_catalog, mcp_tasks, conversations, md_sections, plays
    python -m benchmarks.data.make_golden     # models/data/golden_minilm.npz (the bench extra)
"""
