"""``contextsieve stash``: a stash store's counts (``stats``), expiry cleanup (``cleanup``), re-embedding
after a model change (``rebuild``), moving a stash as JSON Lines (``export``, ``import``, ``migrate``), and
its namespaces (``namespaces``, ``rename``, ``adopt``: :mod:`contextsieve.cli.agent_data`).

Only ``import`` and ``migrate`` make the store they write into when it is missing. Every other action,
and the source of ``migrate``, needs an existing store: a missing one (a mistyped path, the data folder
itself) is a one-line error and nothing is created (:class:`~contextsieve.errors.StashNotFoundError`);
``cleanup`` and ``rebuild`` write, but have nothing to do on a store that does not exist yet."""

from __future__ import annotations

import argparse
import json

__all__ = ["stash"]


def stash(args: argparse.Namespace) -> None:
    """Run ``args.action`` on the store ``args.store`` (``args.target``: the file or store written)."""
    from contextsieve.stash.store import StashStore

    if args.action in ("namespaces", "rename", "adopt"):
        from contextsieve.cli import agent_data

        {"namespaces": agent_data.namespaces, "rename": agent_data.rename, "adopt": agent_data.adopt}[args.action](args)
        return
    if args.action in ("export", "import", "migrate"):
        from contextsieve.stash.transfer import export_store, import_store, migrate

        if not args.target:
            raise SystemExit(
                f"contextsieve stash {args.action}: name the {'file' if args.action == 'export' else 'store'} to write"
            )
        if args.action == "export":
            with StashStore.open(args.store, create=False) as store:
                n = export_store(store, args.target, vectors=args.vectors, show_progress=True)
                print(f"exported {n} segments to {args.target}" + (" with their vectors" if args.vectors else ""))
            return
        if args.action == "import":
            from contextsieve.stash.transfer import read_file

            read_file(args.store)  # a bad file is refused before the store is opened (or created)
            with StashStore.open(args.target) as store:
                r = import_store(store, args.store, show_progress=True)
        else:
            with StashStore.open(args.store, create=False) as src, StashStore.open(args.target) as dst:
                r = migrate(src, dst, show_progress=True)
        reused = f" ({r.vectors_reused} with the file's vectors)" if r.vectors_reused else ""
        print(f"wrote {r.written} segments{reused}, skipped {r.skipped} already there, of {r.total}")
        return
    if args.action == "rebuild":
        with StashStore.open(args.store, rebuild=True, create=False) as store:
            n = store.rebuild(show_progress=True)
            print(f"re-embedded {n} segments with {store.model_id}")
        return
    with StashStore.open(args.store, create=False) as store:  # stats, cleanup
        if args.action == "cleanup":
            n = store.cleanup_expired()
            print(f"deleted {n} expired segments")
            if getattr(args, "max_age_days", None) is not None:
                print(f"deleted {store.cleanup_old(args.max_age_days)} segments older than {args.max_age_days:g} days")
        print(json.dumps(store.stats(), indent=2))
