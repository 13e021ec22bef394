"""Tests of contextsieve.models: the graph, the embedder, its variants and its cache."""
