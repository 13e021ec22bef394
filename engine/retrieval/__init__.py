"""The retrieval core both the agent's items (selection) and the stash build on.

- :mod:`~contextsieve.retrieval.embedding`: the embedding protocol and the check of an embedder's output;
- :mod:`~contextsieve.retrieval.chunks`: the one chunk index (int8 rows in groups, exact or HNSW,
  filtered before ranking) and its settings :class:`~contextsieve.retrieval.chunks.IndexConfig`;
- :mod:`~contextsieve.retrieval.hnsw`: the one HNSW factory; :mod:`~contextsieve.retrieval.graphfile`:
  the one saved-graph format;
- :mod:`~contextsieve.retrieval.bm25`: the one tokenizer and BM25 with its per-side settings;
- :mod:`~contextsieve.retrieval.fusion`: the one fusion of dense and keyword scores.

Nothing here imports selection, sessions, the stash or MCP.
"""
