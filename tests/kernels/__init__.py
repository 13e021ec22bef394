"""Tests of contextsieve.kernels against their numpy oracles, and the CPU targets."""
