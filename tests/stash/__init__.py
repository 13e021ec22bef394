"""Tests of contextsieve.stash: the store, its backends, its graph file, transfer and redaction."""
