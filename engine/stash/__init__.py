"""The stash store (seed 004): stash pruned context segments, retrieve them by meaning, merge them back.

Entry point: :meth:`StashStore.open <contextsieve.stash.store.StashStore.open>` (a SQLite file, or a
``postgresql://`` URI with the ``postgres`` extra); ``from contextsieve import StashStore``. The store
is a facade over its jobs: :mod:`~contextsieve.stash.write` (stash, duplicates, supersession),
:mod:`~contextsieve.stash.retrieve` (ranking and its trace), :mod:`~contextsieve.stash.records` (get,
merge, list, delete), :mod:`~contextsieve.stash.maintenance` (cleanup, rebuild), on the backends of
:mod:`~contextsieve.stash.sqlite` and :mod:`~contextsieve.stash.postgres` over one SQL layer.
"""
