"""Tests of the package itself: its layers, its public surface, the wheel and the README."""
