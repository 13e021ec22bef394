"""What the tests share with the benchmarks: the fuzz targets of the public API and the MCP surfaces
(``properties``, ``surfaces``; ``python -m benchmarks.robustness.fuzz`` runs them at length), the crash
harness (``crash``; ``python -m benchmarks.robustness.crash``) and the plays set's parser (``plays``;
the stash quality benchmarks read its turns). The benchmarks import them from here, never the other way.
"""
