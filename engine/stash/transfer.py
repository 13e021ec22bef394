"""Moving a stash: export to a file, import from one, and migrate between stores (SQLite and
PostgreSQL, either way).

The file (``contextsieve stash export STORE FILE``) is JSON Lines, UTF-8, format ``contextsieve.stash``
version 2 (version 1 files, without ``superseded_by``, are read too):

- line 1, the header: ``{"format": "contextsieve.stash", "version": 2, "model": <model id of the
  vectors>, "exported_at": <ISO time>}``;
- one line per segment, in the order they were stored: ``id`` (as stored: an id a caller chose carries
  its session mark), ``session``, ``text``, ``type``, ``timestamp``, ``stashed_at``, ``expires_at``
  (ISO times, UTC, to the microsecond; ``null``), ``topic``, ``source``, ``references`` (ids),
  ``protected``, ``sha256`` (of the text), ``superseded_by`` (the id of the segment that replaced it,
  which the file holds too; ``null``);
- the last line: ``{"end": true, "segments": <count>, "sha256": <hex digest of the segment lines, each
  with its newline>}``.

Vectors are optional (``export_store(..., vectors=True)``): each segment line then has ``vectors``
(base64 of its float32 chunk vectors, ``null`` where they failed their checksum) and the header
``vectors`` (model, embedding form, chunk_tokens, overlap_tokens, dim). An import writes them only
into a store of that model and those settings, after checking a sample against the model
(:func:`_usable_vectors`); otherwise, and for a file without vectors, it embeds the texts with the
importing store's model (so a file moves between models too), in parts with a progress bar
(:meth:`StashStore.add_segments`). Texts
are written as the file holds them: a store that redacts secrets does not redact an import (the
file's digests name those texts). Import checks the whole file first (header,
end line, count, digest, every field) and writes nothing if anything is wrong; it keeps ids, sessions,
times, references and protection; a segment already in the store with the same id and text is
skipped, so an interrupted import (or migration) is resumed by running it again; the same id with
another text is an error. :func:`migrate` copies one store into another the same way, part by part,
and verifies at the end that the destination holds every source segment with the same text digest.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from contextsieve.errors import InputError, StashError, brief
from contextsieve.fileio import atomic_write_bytes
from contextsieve.stash.backend import Filters
from contextsieve.stash.segment import ContextSegment, SegmentType, content_hash
from contextsieve.stash.store import StashStore

__all__ = ["FORMAT", "VERSION", "TransferResult", "export_store", "import_store", "migrate"]

FORMAT = "contextsieve.stash"
VERSION = 2  # 2: superseded_by on each segment line (a file of version 1 is read as having none)
#: Segments read from a store per query on export and migration.
PART = 256


@dataclass(frozen=True)
class TransferResult:
    """What an import or migration did: segments written, skipped (already there, same text), and
    the total the source held."""

    written: int
    skipped: int
    total: int
    vectors_reused: int = 0  # written with the file's vectors instead of embedding (see import_store)


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.astimezone(timezone.utc).isoformat()


def _all_ids(store: StashStore) -> list[str]:
    """Every segment id of the store, oldest first (creation time, then store row)."""
    return store.backend.select_ids(Filters())[::-1]


def _segments(store: StashStore, ids: Sequence[str]) -> Iterator[ContextSegment]:
    for lo in range(0, len(ids), PART):
        yield from store.backend.get(ids[lo : lo + PART])


def _line(seg: ContextSegment) -> dict[str, Any]:
    return {
        "id": seg.id,
        "session": seg.session,
        "text": seg.text,
        "type": seg.type.value,
        "timestamp": _iso(seg.timestamp),
        "stashed_at": _iso(seg.stashed_at),
        "expires_at": _iso(seg.expires_at),
        "topic": seg.topic,
        "source": seg.source,
        "references": list(seg.references),
        "protected": seg.protected,
        "sha256": seg.sha256 or content_hash(seg.text),
        "superseded_by": seg.superseded_by,
    }


def _vector_spec(store: StashStore) -> dict[str, Any]:
    """What a segment's vectors depend on besides its text: an import reuses a file's vectors only
    where all of it is the importing store's own."""
    return {
        "model": store.model_id,
        "form": "type" if store.embed_type else "plain",
        "chunk_tokens": store.config.chunk_tokens,
        "overlap_tokens": store.config.overlap_tokens,
        "dim": store.backend.meta().dim,
    }


def export_store(
    store: StashStore, path: str | os.PathLike[str], *, vectors: bool = False, show_progress: bool = False
) -> int:
    """Write every segment of ``store`` to ``path`` (see the module docstring), atomically; returns
    how many. The file is built in memory first (about the size of the texts; with ``vectors``, each
    segment's chunk vectors too, base64 float32: about 2 KB per chunk)."""
    from tqdm.auto import tqdm

    ids = _all_ids(store)
    digest = hashlib.sha256()
    head: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "model": store.model_id,
        "exported_at": _iso(datetime.now(timezone.utc)),
    }
    if vectors:
        head["vectors"] = _vector_spec(store)
    out = [json.dumps(head, ensure_ascii=False)]
    for seg in tqdm(_segments(store, ids), total=len(ids), desc="exporting", unit="segment", disable=not show_progress):
        d = _line(seg)
        if vectors:
            v = store.backend.chunk_vectors([seg.id]).get(seg.id)  # None: failed its checksum
            d["vectors"] = None if v is None else base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
        line = json.dumps(d, ensure_ascii=False)
        digest.update((line + "\n").encode("utf-8", "surrogatepass"))
        out.append(line)
    out.append(json.dumps({"end": True, "segments": len(ids), "sha256": digest.hexdigest()}))
    try:
        atomic_write_bytes(Path(path), ("\n".join(out) + "\n").encode("utf-8", "surrogatepass"))
    except OSError as e:  # the temp file beside it is an inner detail: the error names the file asked for
        raise StashError(f"cannot write the export {path}: {e.strerror or e}") from e
    return len(ids)


def _time(value: object, what: str, optional: bool = False) -> datetime | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InputError(f"{what} must be an ISO time, got {brief(value)}")
    try:
        t = datetime.fromisoformat(value)
    except ValueError as e:
        raise InputError(f"{what} is not an ISO time: {brief(value)}") from e
    if t.tzinfo is None:
        raise InputError(f"{what} has no time zone: {brief(value)}")
    return t.astimezone(timezone.utc)


def _parse(line: str, n: int, version: int = VERSION, dim: int | None = None) -> tuple[ContextSegment, Any]:
    """One segment line of a file, checked field by field (the stored fields a stash writes), and its
    vectors (``[chunks, dim]`` float32) when the file carries them (``dim``), else None."""
    what = f"line {n}"
    try:
        d = json.loads(line)
    except ValueError as e:
        raise InputError(f"{what} is not JSON ({e})") from e
    if not isinstance(d, dict):
        raise InputError(f"{what} is not a segment object")
    known = {"id", "session", "text", "type", "timestamp", "stashed_at", "expires_at", "topic", "source"}
    known |= {"references", "protected", "sha256"} | ({"superseded_by"} if version >= 2 else set())
    known |= {"vectors"} if dim is not None else set()
    if set(d) != known:
        raise InputError(f"{what}: fields {sorted(set(d) ^ known)} are missing or unknown")
    for name in ("id", "session", "text", "source", "sha256"):
        if not isinstance(d[name], str):
            raise InputError(f"{what}.{name} must be a string, got {brief(d[name])}")
    if not d["id"] or not d["session"] or not d["text"].strip():
        raise InputError(f"{what}: id, session and text must not be empty")
    if d["topic"] is not None and not isinstance(d["topic"], str):
        raise InputError(f"{what}.topic must be a string or null")
    refs = d["references"]
    if not isinstance(refs, list) or not all(isinstance(r, str) and r for r in refs):
        raise InputError(f"{what}.references must be a list of ids")
    if not isinstance(d["protected"], bool):
        raise InputError(f"{what}.protected must be true or false")
    if content_hash(d["text"]) != d["sha256"]:
        raise InputError(f"{what}: the text does not match its sha256")
    newer = d.get("superseded_by")
    if newer is not None and not (isinstance(newer, str) and newer):
        raise InputError(f"{what}.superseded_by must be an id or null, got {brief(newer)}")
    vec = None
    if dim is not None and d["vectors"] is not None:
        try:
            raw = base64.b64decode(d["vectors"], validate=True) if isinstance(d["vectors"], str) else b"?"
        except ValueError:
            raw = b"?"
        if not raw or len(raw) % (4 * dim):
            raise InputError(f"{what}.vectors is not base64 of float32 rows of {dim}")
        vec = np.frombuffer(raw, dtype="<f4").reshape(-1, dim).astype(np.float32)
        norms = np.linalg.norm(vec, axis=1)
        if not np.isfinite(vec).all() or not np.allclose(norms, 1.0, atol=1e-3):
            raise InputError(f"{what}.vectors are not finite unit vectors")
    return ContextSegment(
        id=d["id"],
        session=d["session"],
        text=d["text"],
        type=SegmentType.parse(d["type"], f"{what}.type"),
        timestamp=_time(d["timestamp"], f"{what}.timestamp"),  # type: ignore[arg-type]
        stashed_at=_time(d["stashed_at"], f"{what}.stashed_at"),  # type: ignore[arg-type]
        tokens=0,
        topic=d["topic"],
        source=d["source"],
        references=tuple(dict.fromkeys(refs)),
        referenced_by=(),
        embedding_model="",
        chunks=0,
        expires_at=_time(d["expires_at"], f"{what}.expires_at", optional=True),
        protected=d["protected"],
        sha256=d["sha256"],
        superseded_by=newer,
    ), vec


def read_file(path: str | os.PathLike[str]) -> list[ContextSegment]:
    """The segments of an export file, after checking all of it (:class:`InputError` says what is wrong)."""
    return read_export(path)[0]


def read_export(path: str | os.PathLike[str]) -> tuple[list[ContextSegment], dict[str, Any], dict[str, Any] | None]:
    """The segments of an export file, their vectors by id (where the file carries them) and what
    those vectors depend on (the header's ``vectors``; None without), after checking all of it."""
    if not Path(path).exists():
        raise InputError(f"no file at {path}")
    if not Path(path).is_file():  # a FIFO or device would block or never end
        raise InputError(f"{path} is not a regular file")
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        lines = data.decode("utf-8", "surrogatepass").split("\n")
    except UnicodeDecodeError as e:
        raise InputError(f"{path} is not UTF-8 text") from e
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise InputError(f"{path} is not a contextsieve stash export (too short)")
    try:
        head, end = json.loads(lines[0]), json.loads(lines[-1])
    except ValueError as e:
        raise InputError(f"{path}: its first or last line is not JSON") from e
    if not isinstance(head, Mapping) or head.get("format") != FORMAT:
        raise InputError(f"{path} is not a contextsieve stash export")
    version = head.get("version")
    if version not in (1, VERSION):
        raise InputError(f"{path} is of format version {brief(version)}; this version reads 1 and {VERSION}")
    if not isinstance(end, Mapping) or end.get("end") is not True:
        raise InputError(f"{path} has no end line: it was cut short")
    body = lines[1:-1]
    if end.get("segments") != len(body):
        raise InputError(f"{path} says {brief(end.get('segments'))} segments but holds {len(body)}")
    digest = hashlib.sha256("".join(line + "\n" for line in body).encode("utf-8", "surrogatepass")).hexdigest()
    if end.get("sha256") != digest:
        raise InputError(f"{path} fails its sha256 check (changed or damaged)")
    spec = head.get("vectors")
    dim = None
    if spec is not None:
        ok = isinstance(spec, Mapping) and isinstance(spec.get("dim"), int) and 0 < spec["dim"] <= 8192
        if not ok or not all(
            isinstance(spec.get(k), (str, int)) for k in ("model", "form", "chunk_tokens", "overlap_tokens")
        ):
            raise InputError(
                f"{path}: its header's vectors are not described (model, form, chunk_tokens, overlap_tokens, dim)"
            )
        dim = int(spec["dim"])
    parsed = [_parse(line, n, int(version), dim) for n, line in enumerate(body, 2)]
    segs = [p[0] for p in parsed]
    ids = [s.id for s in segs]
    if len(set(ids)) != len(ids):
        raise InputError(f"{path} holds one id twice")
    vectors = {p[0].id: p[1] for p in parsed if p[1] is not None}
    return segs, vectors, dict(spec) if spec is not None else None


#: Segments of an import whose file vectors are compared with the model's own before any is used.
SPOT_CHECKS = 8


def _usable_vectors(
    store: StashStore, segs: Sequence[ContextSegment], vectors: Mapping[str, Any], spec: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The file's vectors an import may write instead of embedding: none unless the file's model,
    embedding form, chunking and dimension are the store's own; then up to :data:`SPOT_CHECKS`
    segments spread over the file are embedded here and each chunk must be within cosine 0.99 of the
    file's (int8-stored vectors are), else StashError (nothing written)."""
    if not vectors or spec is None:
        return {}
    mine = _vector_spec(store)
    if mine["dim"] is None:
        mine["dim"] = int(spec["dim"])  # an empty store takes the file's dimension if the model gives it
    if any(spec.get(k) != mine[k] for k in mine):
        return {}
    have = [x for x in segs if x.id in vectors]
    step = max(1, len(have) // SPOT_CHECKS)
    sample = have[::step][:SPOT_CHECKS]
    fresh, _ = store.segment_vectors([x.text for x in sample], [x.type for x in sample], False)
    for x, v in zip(sample, fresh):
        theirs = vectors[x.id]
        if theirs.shape != v.shape or float(np.min(np.sum(theirs * v, axis=1))) < 0.99:
            raise StashError(
                f"the file's vectors of segment {x.id!r} are not what {store.model_id} gives its text; nothing was "
                "written (import without vectors: they are embedded then)"
            )
    return dict(vectors)


def _write(
    store: StashStore,
    segs: Sequence[ContextSegment],
    show_progress: bool,
    vectors: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> TransferResult:
    """Write ``segs`` into ``store``, skipping those already there with the same session and text;
    an id held by another segment stops everything before the first write. ``vectors`` (by id) are
    written instead of embedding where :func:`_usable_vectors` allows."""
    present = store.backend.sessions_of([x.id for x in segs])
    have = {x.id: x for x in store.backend.get(list(present))} if present else {}
    clash = [x.id for x in segs if x.id in have and (have[x.id].sha256, have[x.id].session) != (x.sha256, x.session)]
    if clash:
        raise StashError(f"the store already holds other segments under the ids {clash[:5]}; nothing was written")
    todo = [x for x in segs if x.id not in have]
    ids = {x.id for x in segs}
    dangling = [x.id for x in segs if x.superseded_by is not None and x.superseded_by not in ids]
    if dangling:
        raise InputError(f"segments {dangling[:5]} are superseded by segments the file does not hold")
    usable = _usable_vectors(store, todo, vectors or {}, spec)
    store.add_segments(todo, show_progress=show_progress, vectors=usable)
    store.add_supersessions([(x.id, x.superseded_by) for x in segs if x.superseded_by is not None])
    reused = sum(1 for x in todo if x.id in usable)
    return TransferResult(len(todo), len(segs) - len(todo), len(segs), reused)


def import_store(store: StashStore, path: str | os.PathLike[str], *, show_progress: bool = False) -> TransferResult:
    """Read an export file into ``store`` (see the module docstring); nothing is written when the file
    is not intact or an id clashes. A file exported with vectors of this store's model, embedding
    form and chunking is written with them (spot-checked against the model first); any other file is
    embedded here."""
    segs, vectors, spec = read_export(path)
    return _write(store, segs, show_progress, vectors, spec)


def migrate(
    src: StashStore,
    dst: StashStore,
    *,
    show_progress: bool = False,
    session: str | None = None,
    into: str | None = None,
) -> TransferResult:
    """Copy every segment of ``src`` into ``dst`` (re-embedded with ``dst``'s model when it differs,
    else too: vectors are never copied, so ``dst`` checks what it stores), then verify that ``dst``
    holds each with the same session and text digest. Run it again to resume an interrupted one.
    ``session``: only the segments of that session (namespace), written into session ``into`` (default:
    the same): what ``contextsieve stash adopt`` runs to bring an agent a namespace of another store."""
    from dataclasses import replace

    ids = _all_ids(src) if session is None else src.backend.select_ids(Filters(sessions=(session,)))[::-1]
    segs = list(_segments(src, ids))
    if session is not None and into is not None:
        segs = [replace(s, session=into) for s in segs]
    result = _write(dst, segs, show_progress)
    from tqdm.auto import tqdm

    checking = tqdm(
        _segments(dst, [s.id for s in segs]),
        total=len(segs),
        desc="verifying",
        unit="segment",
        disable=not show_progress,
    )
    got = {s.id: s for s in checking}
    missing = [s.id for s in segs if s.id not in got or (got[s.id].sha256, got[s.id].session) != (s.sha256, s.session)]
    if missing:
        raise StashError(f"after migrating, the destination lacks {len(missing)} segment(s), e.g. {missing[:3]}")
    return result
