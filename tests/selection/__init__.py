"""Tests of contextsieve.selection: selection quality, chunking features and large agents."""
