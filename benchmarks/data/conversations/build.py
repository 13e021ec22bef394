"""Build the long multi-session conversation set for ``python -m benchmarks.quality.stash_quality``.

Written for this project (no public data copied): six two-person conversations of 10 sessions each,
weeks apart, about everyday life. Each session carries a few *events* (a new job, a trip, a pet, an
injury, a recipe...): an opener turn, the other speaker's reaction, and a detail turn, with chit-chat
and look-alike distractor turns (the same topics without the facts) between them. Questions ask for
an event's facts in other words than the turns use (who, what, where, when, which); their evidence
is the turns that hold the answer (one or two). Every turn is ``"<Speaker>: <text>"`` with its session
date, as a conversation would be stashed.

    python benchmarks/data/conversations/build.py   # writes turns.jsonl and questions.jsonl here

Deterministic (seeded); the files are committed so the benchmark needs no generation step.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent

PAIRS = [
    ("Maya", "Jonas"),
    ("Priya", "Tom"),
    ("Lena", "Carlos"),
    ("Aiko", "Ben"),
    ("Sofia", "Ahmed"),
    ("Grace", "Lukas"),
]
SESSIONS = 10
EVENTS_PER_SESSION = 2


@dataclass(frozen=True)
class Event:
    """An event: opener, reaction, detail turns; questions as (text, evidence: 'open'|'detail'|'both')."""

    slots: dict[str, list[str]]
    opener: list[str]
    reaction: list[str]
    detail: list[str]
    questions: list[tuple[str, str]]
    distractors: list[str]


EVENTS: list[Event] = [
    Event(
        {
            "pet": ["puppy", "kitten", "rabbit"],
            "name": ["Luna", "Biscuit", "Pepper", "Miso"],
            "breed": ["beagle mix", "tabby", "lop-eared one", "terrier mix"],
        },
        [
            "We finally adopted a {pet} from the shelter this weekend!",
            "Big news, there's a {pet} living with us now, we got it from the rescue center.",
        ],
        ["No way, that's adorable! What did you call it?", "Aww, congratulations! Send pictures please."],
        [
            "We named it {name}, it's a little {breed} and already chews everything.",
            "The {pet} is called {name}, a {breed}, and it sleeps on my feet.",
        ],
        [
            ("What is the name of {S}'s new pet?", "detail"),
            ("Where did {S} get the {pet}?", "open"),
            ("When did {S} adopt an animal?", "open"),
        ],
        ["My neighbour's dog barked all night again.", "I watched a video of a cat playing piano, so silly."],
    ),
    Event(
        {
            "job": ["data analyst", "nurse", "sous chef", "high school teacher"],
            "org": ["a hospital in the city", "a small bakery downtown", "a logistics company", "the public library"],
        },
        ["I got the offer! I'm starting as a {job} next Monday.", "Guess what, I accepted a position as a {job}."],
        ["That's huge, congrats! You worked so hard for it.", "Amazing news! How do you feel about it?"],
        ["It's at {org}, and the commute is only twenty minutes.", "The place is {org}; my manager seems really kind."],
        [
            ("What new job did {S} take?", "open"),
            ("Where is {S}'s new workplace?", "detail"),
            ("When did {S} accept the new position?", "open"),
        ],
        ["Work has been exhausting this month, so many meetings.", "My boss finally approved the budget for our team."],
    ),
    Event(
        {
            "city": ["Lisbon", "Kyoto", "Vancouver", "Marrakesh"],
            "sight": ["the old castle", "a bamboo forest", "the harbour at sunset", "the spice market"],
        },
        ["Just got back from {city}, what a trip.", "I spent the last week in {city} with my sister."],
        ["Jealous! What was the best part?", "Oh I've always wanted to go there. How was the food?"],
        ["Honestly {sight} blew me away, we went there twice.", "We walked to {sight} every evening, it was magical."],
        [
            ("Which city did {S} travel to?", "open"),
            ("What sight impressed {S} most on the trip?", "detail"),
            ("Who did {S} go on vacation with?", "open"),
        ],
        ["I'd love to travel somewhere warm this winter.", "Airports stress me out so much, the queues are endless."],
    ),
    Event(
        {
            "injury": ["sprained my ankle", "broke my wrist", "pulled a muscle in my back"],
            "activity": ["playing basketball", "bouldering", "moving a couch"],
            "weeks": ["two", "three", "six"],
        },
        ["Ugh, I {injury} yesterday while {activity}.", "Bad luck this week: I {injury}, {activity} of all things."],
        ["Oh no! Are you okay? Did you see a doctor?", "Ouch, that sounds painful. Take it easy."],
        [
            "The doctor said {weeks} weeks of rest before I can do anything again.",
            "I need {weeks} weeks of recovery, so no sports for a while.",
        ],
        [
            ("How did {S} get hurt?", "open"),
            ("How long does {S} have to recover from the injury?", "detail"),
            ("What injury did {S} have?", "open"),
        ],
        ["I should stretch more, my shoulders are always tight.", "My gym is closed for renovations next week."],
    ),
    Event(
        {
            "dish": ["lasagna", "ramen from scratch", "a lemon tart", "vegetable curry"],
            "secret": [
                "a pinch of smoked paprika",
                "brown butter",
                "homemade broth simmered for hours",
                "fresh curry leaves",
            ],
        },
        ["I tried making {dish} for the first time tonight.", "Cooking experiment of the weekend: {dish}."],
        ["How did it turn out? I'm terrible in the kitchen.", "Yum! Was it hard?"],
        ["It was great, the trick is {secret}.", "Surprisingly good, I think {secret} made the difference."],
        [
            ("What did {S} cook for the first time?", "open"),
            ("What was {S}'s secret ingredient or trick in the recipe?", "detail"),
        ],
        [
            "I ordered takeout three times this week, no energy to cook.",
            "The grocery store was out of everything today.",
        ],
    ),
    Event(
        {
            "instrument": ["the cello", "the ukulele", "jazz piano", "the drums"],
            "teacher": ["a retired orchestra player", "a college student", "an old friend of my dad"],
        },
        ["I signed up for {instrument} lessons, finally doing it.", "New hobby alert: I'm learning {instrument}."],
        ["That's so cool, you always loved music.", "Nice! Is it hard to start as an adult?"],
        ["My teacher is {teacher}, very patient with me.", "Lessons are with {teacher} every Thursday evening."],
        [
            ("What instrument is {S} learning?", "open"),
            ("Who teaches {S} music?", "detail"),
            ("When are {S}'s music lessons?", "detail"),
        ],
        [
            "I listened to the new album everyone is talking about, not my style.",
            "The concert tickets sold out in minutes.",
        ],
    ),
    Event(
        {
            "race": ["a half marathon", "a 10k charity run", "a sprint triathlon"],
            "time": ["1 hour 52", "48 minutes", "1 hour 25"],
            "cause": ["the children's hospital", "an animal shelter", "cancer research"],
        },
        ["I finished {race} this morning!", "Crossed the finish line of {race} today, legs are jelly."],
        ["You're a machine! What was your time?", "Wow, well done! Was it hot out there?"],
        [
            "My time was {time}, and we raised money for {cause}.",
            "Finished in {time}; the whole thing was for {cause}.",
        ],
        [
            ("What race did {S} complete?", "open"),
            ("What was {S}'s finishing time?", "detail"),
            ("Which cause did {S}'s race raise money for?", "detail"),
        ],
        ["I keep meaning to start running again but it rains every day.", "My running shoes are falling apart."],
    ),
    Event(
        {
            "place": ["a flat near the river", "a small house with a garden", "an apartment above a cafe"],
            "problem": ["the heating barely works", "the kitchen is tiny", "the neighbours practice trumpet"],
        },
        ["We're moving! We signed the lease on {place}.", "Moving day is set, we got {place}."],
        ["Exciting! Do you need help carrying boxes?", "Oh nice, a fresh start. Is it bigger?"],
        ["Only downside: {problem}, but we love it anyway.", "It's lovely, although {problem}."],
        [("Where is {S} moving to?", "open"), ("What is the drawback of {S}'s new home?", "detail")],
        ["Rent prices in this city are getting ridiculous.", "I rearranged the furniture in my living room again."],
    ),
    Event(
        {
            "book": [
                "a novel about a lighthouse keeper",
                "a biography of a chess champion",
                "a book on the history of salt",
            ],
            "author": ["my favourite author", "a journalist I follow", "a local writer"],
        },
        ["I couldn't put down {book} this week.", "Just finished {book}, stayed up until 2am."],
        ["Ooh, would you recommend it?", "I need a new book, tell me more."],
        ["It's by {author}; the ending made me cry.", "Written by {author}, and I'm lending it to you next time."],
        [("What book did {S} read recently?", "open"), ("Who wrote the book {S} was reading?", "detail")],
        ["I started three books this month and finished none.", "The library fines are piling up, oops."],
    ),
    Event(
        {
            "exam": ["the driving test", "the bar exam", "my Spanish B2 exam", "the pilot licence theory test"],
            "try": ["second", "first", "third"],
        },
        ["I passed {exam}!!", "Results came in: I passed {exam}."],
        ["Yesss, I knew you'd do it!", "Congratulations, that's a big milestone."],
        ["It was my {try} attempt, so I'm extra relieved.", "On the {try} try, so it feels even better."],
        [("Which exam did {S} pass?", "open"), ("On which attempt did {S} pass the exam?", "detail")],
        ["Studying for anything after work is so hard.", "My cousin is stressing about her exams."],
    ),
    Event(
        {
            "plant": ["tomatoes", "sunflowers", "chili peppers", "strawberries"],
            "spot": ["the balcony", "a community garden plot", "the backyard"],
        },
        ["My {plant} finally sprouted, I'm so proud.", "Gardening update: the {plant} are growing like crazy."],
        ["Green thumb! Where do you grow them?", "Nice, I kill every plant I touch."],
        ["They're on {spot}, in big pots I got second hand.", "All of it is in {spot}, it gets sun all day."],
        [("What is {S} growing?", "open"), ("Where does {S} keep the garden?", "detail")],
        ["I bought a cactus and somehow it died.", "Spring allergies are killing me this year."],
    ),
    Event(
        {
            "relative": ["my grandmother", "my brother", "my aunt"],
            "age": ["90", "40", "65"],
            "party": ["a surprise dinner", "a picnic by the lake", "karaoke night"],
        },
        ["We celebrated {relative}'s {age}th birthday on Saturday.", "Big family weekend: {relative} turned {age}."],
        ["How lovely! How did you celebrate?", "Happy birthday to them! Was it fun?"],
        ["We threw {party}, everyone came.", "We organised {party} and it was perfect."],
        [
            ("Whose birthday did {S} celebrate?", "open"),
            ("How did {S}'s family celebrate the birthday?", "detail"),
            ("How old did {S}'s relative turn?", "open"),
        ],
        ["I always forget birthdays, thank god for reminders.", "Family group chats are so chaotic."],
    ),
]

#: Questions whose answer gathers what one speaker told in several sessions (multi-hop, as in public
#: long-conversation sets: "What activities does she do?"): the question, and the events whose
#: opener turns (by that speaker) are its evidence; asked when at least two of them were told.
AGGREGATES: list[tuple[str, tuple[int, ...]]] = [
    ("What hobbies has {S} taken up?", (4, 5, 10)),  # cooking, an instrument, gardening
    ("What achievements has {S} shared?", (1, 6, 9)),  # a job offer, a race, an exam
    ("What changes has {S} made at home?", (0, 7)),  # a pet, a move
]

FILLER = [
    "How was your week?",
    "Haha, that's so you.",
    "I've been so busy lately, sorry for the slow replies.",
    "The weather has been awful, rain every single day.",
    "Did you watch the game last night?",
    "I need a vacation, seriously.",
    "Coffee is the only thing keeping me alive today.",
    "Same here, honestly.",
    "That reminds me, I owe you lunch.",
    "Let's catch up properly soon.",
    "I'm trying to sleep earlier but it never works.",
    "Traffic was a nightmare this morning.",
    "Have you tried that new cafe on the corner?",
    "I finally cleaned my whole apartment.",
    "My phone screen cracked again, classic.",
    "Sounds like a plan!",
    "Oh, I hadn't thought of that.",
    "I binge-watched a whole series this weekend.",
    "Mondays are the worst.",
    "Talk soon, take care!",
    "I'm thinking of learning to meditate.",
    "Ha, I remember that.",
    "That's wild.",
    "Fair enough.",
]


def build(seed: int = 7) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    rng = random.Random(seed)
    turns: list[dict[str, object]] = []
    questions: list[dict[str, object]] = []
    told: list[tuple[int, int, str, str]] = []  # (conversation, event, speaker, tag) of every event told
    for c, (a, b) in enumerate(PAIRS):
        day = date(2023, 1 + 2 * c, 3 + c)
        used: set[tuple[int, str]] = set()  # (event, speaker) told once per conversation
        for sess in range(SESSIONS):
            day += timedelta(days=rng.randint(6, 20))
            lines: list[tuple[str, str, str | None]] = []  # (speaker, text, tag)
            evs = []
            for _ in range(EVENTS_PER_SESSION):
                while True:
                    e = rng.randrange(len(EVENTS))
                    s = rng.choice((a, b))
                    if (e, s) not in used:
                        used.add((e, s))
                        break
                evs.append((e, s))
            order = list(range(len(evs)))
            lines.append((a, rng.choice(["Hey! How are you?", "Hi!! Long time no talk.", "Morning!"]), None))
            lines.append((b, rng.choice(FILLER), None))
            for k in order:
                e, s = evs[k]
                ev = EVENTS[e]
                other = b if s == a else a
                fill = {name: rng.choice(vals) for name, vals in ev.slots.items()}
                tag = f"c{c}s{sess}e{k}"
                told.append((c, e, s, tag))
                for _ in range(rng.randint(3, 9)):
                    lines.append((rng.choice((a, b)), rng.choice(FILLER), None))
                lines.append((s, rng.choice(ev.opener).format(**fill), tag + ":open"))
                lines.append((other, rng.choice(ev.reaction).format(**fill), None))
                if rng.random() < 0.5:
                    lines.append((other, rng.choice(FILLER), None))
                lines.append((s, rng.choice(ev.detail).format(**fill), tag + ":detail"))
                lines.append((other, rng.choice(FILLER), None))
                lines.append((rng.choice((a, b)), rng.choice(ev.distractors), None))
                for q, need in rng.sample(ev.questions, k=min(2, len(ev.questions))):
                    questions.append({"conversation": c, "question": q.format(S=s, **fill), "evidence": [tag, need]})
            lines.append((a, rng.choice(FILLER), None))
            lines.append((b, rng.choice(["Bye!", "Talk soon!", "Good night!"]), None))
            for i, (spk, text, t) in enumerate(lines):
                turns.append(
                    {
                        "id": f"c{c}-s{sess}-t{i}",
                        "conversation": c,
                        "session": sess,
                        "date": day.isoformat(),
                        "speaker": spk,
                        "text": text,
                        "tag": t,
                    }
                )
    by_tag: dict[str, str] = {str(t["tag"]): str(t["id"]) for t in turns if t["tag"]}
    for q in questions:
        tag, need = q.pop("evidence")  # type: ignore[misc]
        parts = ["open", "detail"] if need == "both" else [need]
        q["evidence"] = [by_tag[f"{tag}:{p}"] for p in parts]
        q["kind"] = "single-hop"
    for c, pair in enumerate(PAIRS):  # after the single-hop questions, drawing nothing from rng
        for s in pair:
            for text, events in AGGREGATES:
                tags = [tag for cc, e, who, tag in told if cc == c and who == s and e in events]
                if len(tags) >= 2:
                    evidence = [by_tag[f"{tag}:open"] for tag in tags]
                    questions.append(
                        {"conversation": c, "question": text.format(S=s), "evidence": evidence, "kind": "multi-hop"}
                    )
    for t in turns:
        t.pop("tag")
    return turns, questions


def main() -> None:
    turns, questions = build()
    with open(HERE / "turns.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(t, ensure_ascii=False) + "\n" for t in turns)
    with open(HERE / "questions.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(q, ensure_ascii=False) + "\n" for q in questions)
    print(f"{len(turns)} turns, {len(questions)} questions")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
