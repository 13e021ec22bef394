"""Tests of the whole API under fuzzing and kills."""
