"""The retrieval core both the agent's items (selection) and the stash build on.

Being gathered here one concern at a time (see docs/internals.md): the embedding protocol and the
check of an embedder's output (:mod:`contextsieve.retrieval.embedding`), and the one HNSW factory
(:mod:`contextsieve.retrieval.hnsw`). Nothing here imports selection, sessions, the stash or MCP.
"""
