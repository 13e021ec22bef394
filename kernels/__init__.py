"""Pure array kernels (scoring, pooling, top-k, grouping, BM25). Importing this never imports Numba."""
