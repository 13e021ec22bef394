"""The stash as LangGraph's long-term memory (extra ``langchain``): :class:`StashMemoryStore`, a
``langgraph.store.base.BaseStore`` over a :class:`~contextsieve.StashStore`.

``create_agent(..., store=StashMemoryStore(StashStore.open(path)))`` or ``graph.compile(store=...)``:
tools and nodes then ``put`` memories under a namespace and ``search`` them by meaning with
contextsieve's ranking (dense and keyword), on SQLite or PostgreSQL, surviving restarts.

How LangGraph's model maps onto the stash:

- a namespace is a stash session (``"langgraph/" + "/".join(labels)``, each label's ``%`` and ``/``
  escaped), so ``search`` ranks within one namespace;
- an item is a segment whose text is the JSON of ``{"key": key, "value": value}`` (the key is part of
  what is embedded; keys in words help search, random keys add a little noise) and whose
  ``source`` is the key; ``created_at`` is the segment's timestamp, ``updated_at`` its stash time;
- ``put`` of an existing key stores the new value as a segment that supersedes the old one (atomic)
  and then deletes the old one; ``put`` of the same value again changes nothing.

Not expressible over the stash (a :class:`~contextsieve.errors.InputError` says so): a search over a
namespace *prefix* holding several namespaces, ``list_namespaces``, and per-item ``ttl`` (the stash
expires by days: open the store with its own expiry). ``index`` (which fields to embed) is ignored:
the whole item is embedded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable, Mapping
from typing import Any

from contextsieve.errors import InputError, MissingExtraError, brief
from contextsieve.stash.store import StashStore

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise MissingExtraError("the LangGraph store needs langgraph: pip install 'contextsieve[langchain]'") from e

__all__ = ["StashMemoryStore"]

_PREFIX = "langgraph"


def _session(namespace: tuple[str, ...]) -> str:
    if not isinstance(namespace, tuple) or not namespace or not all(isinstance(x, str) and x for x in namespace):
        raise InputError(f"a namespace must be a non-empty tuple of non-empty strings, got {brief(namespace)}")
    return _PREFIX + "/" + "/".join(x.replace("%", "%25").replace("/", "%2F") for x in namespace)


def _text(key: str, value: Mapping[str, Any]) -> str:
    try:
        return json.dumps({"key": key, "value": value}, ensure_ascii=False, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InputError(f"the value of {key!r} is not JSON: {e}") from e


class StashMemoryStore(BaseStore):
    """A LangGraph store whose items are stash segments (see the module docstring for the mapping).

    Args:
        store: the stash (:meth:`StashStore.open`; SQLite or PostgreSQL). Not closed by this object.
        scan: how many of a namespace's best segments a search with a ``filter`` reads before
            filtering (default 200).
    """

    supports_ttl = False

    def __init__(self, store: StashStore, *, scan: int = 200) -> None:
        if not isinstance(store, StashStore):
            raise InputError(f"store must be a StashStore, got {brief(store)}")
        if isinstance(scan, bool) or not isinstance(scan, int) or not 1 <= scan <= 10_000:
            raise InputError(f"scan must be an int from 1 to 10000, got {brief(scan)}")
        self.store = store
        self.scan = scan

    # -- one operation each -------------------------------------------------------------------------

    def _segments(self, session: str, key: str) -> list[Any]:
        if not isinstance(key, str) or not key:
            raise InputError(f"a key must be a non-empty str, got {brief(key)}")
        return self.store.list(session=session, filters={"source": key}, limit=100)

    def _item(self, namespace: tuple[str, ...], seg: Any, score: float | None = None) -> Item:
        doc = json.loads(seg.text)
        kw = dict(
            namespace=namespace, key=doc["key"], value=doc["value"], created_at=seg.timestamp, updated_at=seg.stashed_at
        )
        return SearchItem(score=score, **kw) if score is not None else Item(**kw)

    def _get(self, op: GetOp) -> Item | None:
        found = self._segments(_session(op.namespace), op.key)
        return self._item(op.namespace, found[0]) if found else None

    def _put(self, op: PutOp) -> None:
        session = _session(op.namespace)
        old = self._segments(session, op.key)
        if op.value is None:
            if old:
                self.store.delete([s.id for s in old], session=session)
            return
        if not isinstance(op.value, Mapping):
            raise InputError(f"a value must be a dict, got {brief(op.value)}")
        text = _text(op.key, op.value)
        if len(old) == 1 and old[0].text == text:
            return
        self.store.stash(
            [{"text": text, "source": op.key, "supersedes": [s.id for s in old]}],
            session=session,
        )
        if old:
            self.store.delete([s.id for s in old], session=session)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        namespace = op.namespace_prefix
        session = _session(namespace)
        if op.filter is not None and not isinstance(op.filter, Mapping):
            raise InputError(f"a filter must be a dict, got {brief(op.filter)}")
        want = op.limit + op.offset
        take = self.scan if op.filter else want
        hits: list[tuple[Any, float | None]]
        if op.query:
            hits = [(r.segment, r.score) for r in self.store.retrieve(op.query, session=session, top_k=min(take, 100))]
        else:
            hits = [(s, None) for s in self.store.list(session=session, limit=min(max(take, 1), 10_000))]
        out: list[SearchItem] = []
        for seg, score in hits:
            item = self._item(namespace, seg, score if score is not None else 0.0)
            if op.filter and any(item.value.get(k) != v for k, v in op.filter.items()):
                continue
            assert isinstance(item, SearchItem)
            out.append(item)
        if not op.query:
            for item in out:
                item.score = None
        return out[op.offset : op.offset + op.limit]

    # -- BaseStore ------------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order (each put is atomic on its own)."""
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op))
            elif isinstance(op, PutOp):
                if op.ttl is not None:
                    raise InputError("the stash store has no per-item ttl (open the StashStore with its expiry)")
                self._put(op)
                results.append(None)
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                raise InputError("the stash store cannot list namespaces (a namespace is a stash session)")
            else:
                raise InputError(f"unknown store operation {brief(op)}")
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """:meth:`batch` in a worker thread (the stash embeds on the CPU and writes to its database)."""
        return await asyncio.to_thread(self.batch, list(ops))
