"""Tests of contextsieve.integrations with the real frameworks."""
