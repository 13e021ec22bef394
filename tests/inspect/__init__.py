"""Tests of contextsieve.inspect in a real browser."""
