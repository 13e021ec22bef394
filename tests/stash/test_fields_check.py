"""The fields check written into every stored row is the on-disk format: its bytes must not change,
or every existing store fails its checks on read."""

from __future__ import annotations

from contextsieve.stash.backend import SegmentFields, fields_check
from contextsieve.stash.dialect import StoredFields, checked_fields

SHA = "ab" * 32

#: A segment's fields with typical values (times: microseconds since 1970).
TYPICAL = SegmentFields(
    segment_id="s-1",
    session="chat",
    kind="turn",
    created=1_700_000_000_123_456,
    stashed=1_700_000_000_654_321,
    tokens=42,
    topic="travel",
    source="user",
    sha256=SHA,
    expires=None,
    terms="kitten vet visit",
)

#: Edge values: year 1 and year 9999 times, no topic, an empty source, a lone surrogate in the terms.
EDGES = SegmentFields(
    segment_id="s-2",
    session="chat",
    kind="note",
    created=-62_135_596_800_000_000,
    stashed=0,
    tokens=0,
    topic=None,
    source="",
    sha256="cd" * 32,
    expires=253_402_300_799_999_999,
    terms="x e697a5 caf\udce9",
)


def test_the_fields_check_of_known_fields_is_unchanged() -> None:
    # On-disk format (contextsieve-stash-4): these digests were computed with the 11-argument
    # fields_check this replaced; a change here means existing stores no longer verify.
    assert fields_check(TYPICAL).hex() == "f6b3c6aa964e119a06a0c405a0e75fec"
    assert fields_check(EDGES).hex() == "a515a2a8567d332b091b15fae693386e"


def test_checked_fields_of_stored_values_matches_the_written_check() -> None:
    t = TYPICAL
    as_read = StoredFields(
        t.segment_id, t.session, None, t.kind, t.created, t.stashed, t.tokens, t.topic, t.source, t.sha256, t.expires
    )
    assert checked_fields(as_read._replace(terms=t.terms)) == fields_check(TYPICAL)
    # terms derived from the text (index_terms, space-joined); the hex is the old code's, on-disk format too
    from_text = StoredFields("s-1", "chat", "Kittens visited the vet", "turn", 1, 2, 3, "t", "src", SHA, None)
    check = checked_fields(from_text)
    assert check is not None and check.hex() == "8127d8123705d0bd104008608ed4e704"
    assert checked_fields(as_read) is None  # no terms and no text
    assert checked_fields(as_read._replace(terms=t.terms, created=1.0)) is None  # a float time
    assert checked_fields(as_read._replace(terms=t.terms, topic=7)) is None
    assert checked_fields(as_read._replace(terms=b"kitten")) is None
