"""The ``contextsieve`` command line.

    contextsieve build [--variant fp32|int8|all]      build and cache the model graphs, print timings
    contextsieve embed TEXT [TEXT ...] [--variant V]  print one vector per text (JSON lines)
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from contextsieve.errors import ContextSieveError

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="contextsieve", description="CPU-first context selection for LLM agents.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build and cache the model graphs (once per machine), print timings")
    b.add_argument("--variant", choices=["fp32", "int8", "all"], default="all")
    b.add_argument("--rebuild", action="store_true", help="rebuild even if cached")
    e = sub.add_parser("embed", help="embed texts, print one JSON vector per line")
    e.add_argument("texts", nargs="+")
    e.add_argument("--variant", choices=["fp32", "int8"], default=None, help="default: the model's default (int8)")
    e.add_argument("--digits", type=int, default=6, help="decimals printed per value (default 6)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 a contextsieve error, 2 usage)."""
    args = _parser().parse_args(argv)
    from contextsieve.models.embedder import Embedder

    try:
        if args.command == "build":
            for variant in (["fp32", "int8"] if args.variant == "all" else [args.variant]):
                t = time.perf_counter()
                emb = Embedder(variant=variant, rebuild=args.rebuild)
                how = "built" if emb.info.built else "loaded from cache"
                print(f"{variant}: {how} in {time.perf_counter() - t:.2f} s -> {emb.info.onnx_path}")
        elif args.command == "embed":
            emb = Embedder(variant=args.variant)
            for text, vec in zip(args.texts, emb.embed(args.texts)):
                print(json.dumps({"text": text, "model": emb.info.model_id, "vector": [round(float(v), args.digits) for v in vec]}))
    except ContextSieveError as e:
        print(f"contextsieve: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
