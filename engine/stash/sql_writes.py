"""The write statements both stash backends share (:class:`SqlWrites`, a base of
:class:`~contextsieve.stash.sql.SqlBackend`): insert rows with their references and supersessions,
delete (what a deleted segment superseded becomes current again), protect, and replace vectors on a
rebuild. Each backend runs them inside its own write transaction, on the connection ``db`` it passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from contextsieve.errors import InputError
from contextsieve.stash.backend import SegmentFields, SegmentRow, fields_check, to_epoch, vector_digest
from contextsieve.stash.dialect import Dialect, StoredFields, checked_fields
from contextsieve.stash.ids import public_id, qualified

__all__ = ["SqlWrites"]


class SqlWrites:
    """The write statements (see the module docstring); the subclass sets ``dialect``."""

    dialect: Dialect

    # Where a backend keeps what the shared columns do not hold: SQLite keeps the vectors in the
    # segment's row (``_stored_vectors``), PostgreSQL in ``stash_chunks`` rows (``_write_chunks``).

    def _stored_vectors(self, v: np.ndarray) -> dict[str, Any]:
        """Columns of the segment's row that hold its float32 vectors ``v`` (none: see _write_chunks)."""
        return {}

    def _stored_terms(self, terms: list[str]) -> dict[str, Any]:
        """Columns of the segment's row that hold its index terms."""
        raise NotImplementedError

    def _write_chunks(self, db: Any, row: int, v: np.ndarray, replace: bool) -> None:
        """Store the vectors of the segment at ``row`` outside it, right after its row is written
        (``replace``: they replace the ones stored)."""

    def _insert_rows(
        self, db: Any, rows: Sequence[SegmentRow], dedup: bool, supersede: Sequence[tuple[str, str]] = ()
    ) -> tuple[dict[int, str], list[tuple[int, SegmentRow]], list[int]]:
        """Insert the rows and their references (see :meth:`StashBackend.insert`): returns the skipped
        ``{position: stored id}`` and ``(row, SegmentRow)`` of each row written."""
        d, m = self.dialect, self.dialect.mark
        skipped: dict[int, str] = {}
        remap: dict[str, str] = {}
        added: list[tuple[int, SegmentRow]] = []
        for pos, r in enumerate(rows):
            s = r.segment
            if dedup:
                hit = db.execute(
                    f"SELECT id FROM {d.segments} WHERE session = {m} AND sha256 = {m} ORDER BY row LIMIT 1",
                    (s.session, s.sha256),
                ).fetchone()
                if hit is not None:
                    skipped[pos] = remap[s.id] = hit[0]
                    continue
            v = np.ascontiguousarray(r.vectors, dtype=np.float32)
            created, stashed = to_epoch(s.timestamp), to_epoch(s.stashed_at)
            expires = None if s.expires_at is None else to_epoch(s.expires_at)
            columns: dict[str, Any] = {
                "id": s.id,
                "session": s.session,
                "text": s.text,
                "type": s.type.value,
                "created": created,
                "stashed": stashed,
                "tokens": s.tokens,
                "topic": s.topic,
                "source": s.source,
                "sha256": s.sha256,
                "model": s.embedding_model,
                "expires": expires,
                "protected": s.protected,
                "chunks": v.shape[0],
                "digest": vector_digest(s.id, s.embedding_model, v),
                "fields": fields_check(
                    SegmentFields(
                        s.id,
                        s.session,
                        s.type.value,
                        created,
                        stashed,
                        s.tokens,
                        s.topic,
                        s.source,
                        s.sha256,
                        expires,
                        " ".join(r.terms),
                    )
                ),
                **self._stored_vectors(v),
                **self._stored_terms(r.terms),
            }
            q = f"INSERT INTO {d.segments} ({', '.join(columns)}) VALUES ({', '.join(d.value(c) for c in columns)})"
            if d.returning:
                row = int(db.execute(q + " RETURNING row", list(columns.values())).fetchone()[0])
            else:
                row = int(db.execute(q, list(columns.values())).lastrowid or 0)
            self._write_chunks(db, row, v, False)
            added.append((row, r))
        for pos, r in enumerate(rows):  # references once every row of the batch is in
            s = r.segment
            if pos in skipped:
                continue
            for n, dst in enumerate(dict.fromkeys(remap.get(x, x) for x in s.references)):
                found = db.execute(f"SELECT session FROM {d.segments} WHERE id = {m}", (dst,)).fetchone()
                if found is None or found[0] != s.session:
                    raise InputError(f"segment {s.id!r} refers to {dst!r}, which is not in its session")
                db.execute(d.insert_ignore(d.refs, 3), (s.id, dst, n))
        return skipped, added, self._supersede(db, [(old, remap.get(new, new)) for old, new in supersede])

    def _supersede(self, db: Any, pairs: Sequence[tuple[str, str]]) -> list[int]:
        """Mark each old segment of ``pairs`` as superseded by the new one (both stored, one session;
        else InputError); returns the rows changed."""
        d, m = self.dialect, self.dialect.mark
        changed: list[int] = []
        for old, new in pairs:
            if old == new:
                continue  # a segment that duplicates one it supersedes: nothing to mark
            both = {
                i: (row, session, newer)
                for i, row, session, newer in db.execute(
                    f"SELECT id, row, session, superseded_by FROM {d.segments} WHERE id IN ({m}, {m})", (old, new)
                ).fetchall()
            }
            if old not in both or new not in both or both[old][1] != both[new][1]:
                raise InputError(f"segment {new!r} cannot supersede {old!r}: both must be stored in one session")
            if both[old][2] == new:
                continue  # already so (an import run again)
            if both[new][2] is not None:  # so no chain ever loops
                raise InputError(
                    f"segment {new!r} is itself superseded (by {both[new][2]!r}); it cannot supersede others"
                )
            db.execute(f"UPDATE {d.segments} SET superseded_by = {m} WHERE id = {m}", (new, old))
            changed.append(int(both[old][0]))
        return changed

    def _delete_rows(self, db: Any, ids: Sequence[str], returning: str) -> tuple[list[tuple[Any, ...]], list[int]]:
        """Delete these segments and their references both ways; returns the ``returning`` columns
        of each deleted segment, and the rows of the segments they superseded (current again)."""
        d = self.dialect
        gone: list[tuple[Any, ...]] = []
        freed: list[int] = []
        for batch in d.batches(ids):
            cond, args = d.any_of("id", batch)
            if d.returning:
                gone += db.execute(f"DELETE FROM {d.segments} WHERE {cond} RETURNING {returning}", args).fetchall()
            else:
                gone += db.execute(f"SELECT {returning} FROM {d.segments} WHERE {cond}", args).fetchall()
                db.execute(f"DELETE FROM {d.segments} WHERE {cond}", args)
            src, src_args = d.any_of("src", batch)
            dst, dst_args = d.any_of("dst", batch)
            db.execute(f"DELETE FROM {d.refs} WHERE {src} OR {dst}", [*src_args, *dst_args])
            newer, newer_args = d.any_of("superseded_by", batch)
            freed += [int(r[0]) for r in db.execute(f"SELECT row FROM {d.segments} WHERE {newer}", newer_args)]
            db.execute(f"UPDATE {d.segments} SET superseded_by = NULL WHERE {newer}", newer_args)  # current again
        return gone, freed

    def _rename_session(self, db: Any, old: str, new: str) -> list[int]:
        """Move the segments of session ``old`` into ``new``; returns the rows moved.

        A row's fields check covers its session and id, so it is written again for ``new``, but only where
        it holds for ``old``: a row that fails it keeps it, and fails it still (a move never makes a damaged
        row sound). An id chosen in ``old`` (stored with ``old``'s mark: :func:`~contextsieve.stash.ids.qualified`)
        is stored with ``new``'s, so it is the same name in ``new``; the references and supersessions
        naming it and its vectors' digest (which covers the id) follow. Unless ``new`` already has a
        segment of that name, or the vectors fail their digest: then it keeps its stored id (which ``new``
        shows in full)."""
        d, m = self.dialect, self.dialect.mark
        found = db.execute(
            f"SELECT row, id, model, digest, text, type, created, stashed, tokens, topic, source, sha256, expires, "
            f"fields FROM {d.segments} WHERE session = {m}{d.lock_row}",
            [old],
        ).fetchall()
        names = {
            r[1]: qualified(new, given)
            for r in found
            if isinstance(r[1], str) and (given := public_id(r[1], old)) != r[1]
        }
        taken: set[str] = set()  # the names new has already
        for batch in d.batches(list(names.values())):
            cond, args = d.any_of("id", batch)
            taken.update(r[0] for r in db.execute(f"SELECT id FROM {d.segments} WHERE {cond}", args))
        moved: list[tuple[Any, ...]] = []
        renamed: list[tuple[str, str]] = []
        for row, sid, model, digest, *rest in found:
            text, kind, created, stashed, tokens, topic, source, sha, expires, check = rest
            fields = StoredFields(sid, old, text, kind, created, stashed, tokens, topic, source, sha, expires)
            to = sid
            if check is not None and checked_fields(fields) == check:  # (None: a wrong-typed field)
                name = names.get(sid)
                if name is not None and name not in taken and isinstance(model, str):
                    v = self._stored_chunks(db, int(row))
                    if vector_digest(sid, model, v) == digest:
                        to, digest = name, vector_digest(name, model, v)
                        renamed.append((sid, to))
                check = checked_fields(fields._replace(sid=to, session=new))
            moved.append((new, to, check, digest, int(row)))
        if moved:
            update = f"UPDATE {d.segments} SET session = {m}, id = {m}, fields = {m}, digest = {m} WHERE row = {m}"
            db.cursor().executemany(update, moved)
        for was, to in renamed:
            db.execute(f"UPDATE {d.refs} SET src = {m} WHERE src = {m}", (to, was))
            db.execute(f"UPDATE {d.refs} SET dst = {m} WHERE dst = {m}", (to, was))
            db.execute(f"UPDATE {d.segments} SET superseded_by = {m} WHERE superseded_by = {m}", (to, was))
        return [int(r[-1]) for r in moved]

    def _stored_chunks(self, db: Any, row: int) -> np.ndarray:
        """The float32 chunk vectors stored for the segment at ``row``, in order (what its digest covers)."""
        raise NotImplementedError

    def _set_protected(self, db: Any, ids: Sequence[str], protected: bool) -> list[int]:
        """Set the flag of these segments; returns the rows of those stored."""
        d = self.dialect
        rows: list[int] = []
        for batch in d.batches(ids):
            cond, args = d.any_of("id", batch)
            update = f"UPDATE {d.segments} SET protected = {d.mark} WHERE {cond}"
            if d.returning:
                rows += [int(r[0]) for r in db.execute(update + " RETURNING row", [protected, *args])]
            else:
                rows += [int(r[0]) for r in db.execute(f"SELECT row FROM {d.segments} WHERE {cond}", args)]
                db.execute(update, [protected, *args])
        return rows

    def _replace_vectors(self, db: Any, rows: Sequence[SegmentRow]) -> list[int]:
        """Store new vectors and model id of the segments of ``rows`` (those deleted meanwhile are
        skipped); returns the rows changed."""
        d, m = self.dialect, self.dialect.mark
        changed: list[int] = []
        for r in rows:
            s = r.segment
            v = np.ascontiguousarray(r.vectors, dtype=np.float32)
            found = db.execute(f"SELECT row FROM {d.segments} WHERE id = {m}{d.lock_row}", (s.id,)).fetchone()
            if found is None:
                continue  # deleted meanwhile
            row = int(found[0])
            columns = {"model": s.embedding_model, "chunks": v.shape[0], **self._stored_vectors(v)}
            columns["digest"] = vector_digest(s.id, s.embedding_model, v)
            sets = ", ".join(f"{c} = {d.value(c)}" for c in columns)
            db.execute(f"UPDATE {d.segments} SET {sets} WHERE row = {m}", [*columns.values(), row])
            self._write_chunks(db, row, v, True)
            changed.append(row)
        return changed
