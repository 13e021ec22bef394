"""Measuring tool selection on a user's own tasks: recall, all found, tools per request and precision,
cold and with k-fold history (``contextsieve eval``; the repository's loop and one-request benchmarks
score with it too).

:mod:`~contextsieve.evaluation.tasks` reads tasks (a JSON Lines file of messages or steps with the tools
each needs); :mod:`~contextsieve.evaluation.runner` runs them through an engine as a host does and scores
what each request offered.
"""
