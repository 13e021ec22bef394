"""Tests of contextsieve.retrieval: the embedding cache, the chunk index, text splitting and bounded work."""
