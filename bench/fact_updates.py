"""Sequential fact updates (issue 35): facts that change over simulated weeks, written
through the public API, then one question per fact, now and `as_of` a past week.

Generates, deterministically from `--seed` and the templates below (none taken from
a benchmark's data), `--facts` facts about `--subjects` people: flight and dinner
dates, appointment and train times, quantities, places, names and yes/no states.
Week 0 states each fact; each fact then changes value 1-5 times in later weeks
(`--weeks` in all), some changes in the template's own words ("Maria Olsen's flight
to Oslo is on 12 March" -> "... on 13 March"), some paraphrased ("Maria Olsen now
flies to Oslo on 13 March"); about a third of the facts also get a true repeat of
their current value in a later week: the identical text, the text identical once
normalised (lower case, or without its final period: the store's dedup key), or
reworded by a few words added (", as before."). Every memory's `event_time` is its simulated
instant (weeks ending before the run starts).

A private suite (bench/suite.py: store, search, pipeline) runs with the default
configuration (no LLM, local MiniLM embeddings) plus any `--set`. Even-numbered
subjects are written by Remember, odd ones by ImportMemories (one stream a week).
After each week's writes the pipeline is left to drain (GetStatus: no pending or
leased job) and the instant is kept as that week's checkpoint: Recall `as_of` a
checkpoint reads what was valid then as known then (RecallRequest.as_of is
bi-temporal: a memory stored after the instant is not a candidate, so a past
*simulated* instant, before any memory was stored, would find nothing).

Then, for every write, its fate from GetMemory, ListMemoryHistory and
ListMemoryLinks: live; superseded with a link (valid_until set and an incoming
`supersedes` link from a memory of the same fact); merged into the same value
(deduplicated at write, or a `merged` history event whose survivor, followed to
the end of the chain, states the same value; identical text or a paraphrase of
it); or lost (merged into another value or fact, deleted, closed without a link).
Silent losses are the last. And one question per fact ("When is Maria Olsen's
flight to Oslo?"), asked now and `as_of` the checkpoint of a week before the
fact's last write: whether rank 1 states the value current then.

    .venv/bin/python bench/fact_updates.py [--subjects 200] [--facts 2000]
        [--set dedup.enabled=false] [--set storage.kind=postgres]
        [--code DIR [--commit SHA]] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
    str(Path(__file__).resolve().parent.parent / "clients" / "python"),
]

import provenance  # noqa: E402

from engram.client import Engram  # noqa: E402
from engram.common.v1 import job_pb2, memory_pb2  # noqa: E402
from engram.store.v1 import store_pb2  # noqa: E402
from locomo import parse_setting  # noqa: E402
from services.common.normalize import normalize_content  # noqa: E402
from suite import ROOT, merge, running_suite  # noqa: E402

NAMESPACE = "factbench"
WHO = "assistant"  # one writer: near-duplicate merging only folds memories of one `who`
BASE = dt.datetime(2026, 3, 2, tzinfo=dt.UTC)  # a Monday: week 0 starts here
OPEN = (job_pb2.JOB_STATUS_PENDING, job_pb2.JOB_STATUS_LEASED)

FIRST = [
    "Maria",
    "Ana",
    "Jonas",
    "Priya",
    "Tomasz",
    "Ingrid",
    "Kwame",
    "Sofia",
    "Lars",
    "Mei",
    "Diego",
    "Amara",
    "Henrik",
    "Leila",
    "Oskar",
    "Yuki",
    "Fatima",
    "Mateo",
    "Elin",
    "Ravi",
    "Nadia",
    "Bruno",
    "Chloe",
    "Emeka",
    "Hanna",
    "Luca",
    "Zara",
    "Felix",
    "Ines",
    "Arjun",
    "Greta",
    "Omar",
    "Julia",
    "Tariq",
    "Freya",
    "Pablo",
    "Sanna",
    "Kenji",
    "Alma",
    "Viktor",
]
LAST = [
    "Olsen",
    "Berg",
    "Novak",
    "Haddad",
    "Costa",
    "Lindqvist",
    "Mensah",
    "Ferreira",
    "Kowalski",
    "Tanaka",
    "Moreau",
    "Okafor",
    "Schmidt",
    "Rossi",
    "Nilsson",
    "Varga",
    "Dubois",
    "Jensen",
    "Petrov",
    "Silva",
    "Weber",
    "Horvat",
    "Murphy",
    "Sato",
    "Andersen",
    "Keller",
    "Laine",
    "Navarro",
    "Brandt",
    "Vogel",
]
CITIES = [
    "Oslo",
    "Lisbon",
    "Vienna",
    "Krakow",
    "Porto",
    "Dublin",
    "Helsinki",
    "Seville",
    "Bergen",
    "Ghent",
    "Lyon",
    "Turin",
    "Tallinn",
    "Malmo",
    "Leipzig",
    "Bologna",
    "Utrecht",
    "Graz",
    "Aarhus",
    "Split",
    "Riga",
    "Nantes",
    "Basel",
    "Cork",
]
HOMES = [
    "Bristol",
    "Leeds",
    "Glasgow",
    "Cardiff",
    "York",
    "Bath",
    "Brighton",
    "Norwich",
    "Exeter",
    "Oxford",
    "Cambridge",
    "Durham",
    "Chester",
    "Inverness",
    "Belfast",
    "Plymouth",
    "Sheffield",
    "Derby",
    "Lincoln",
    "Dundee",
]
OFFICES = [
    "Harbour",
    "Riverside",
    "Northgate",
    "Eastfield",
    "Westbrook",
    "Parkside",
    "Hillcrest",
    "Lakeside",
    "Southbank",
    "Millbrook",
    "Kingsway",
    "Greenwood",
    "Stonebridge",
    "Fairview",
    "Oakley",
    "Ashford",
]
DOCTORS = [
    "Abara",
    "Lindgren",
    "Castillo",
    "Whitfield",
    "Osei",
    "Brennan",
    "Kaur",
    "Delacroix",
    "Mbeki",
    "Sorensen",
    "Takahashi",
    "Ivanova",
    "Quinn",
    "Rahman",
    "Esposito",
    "Fischer",
    "Mwangi",
    "Bauer",
    "Ortega",
    "Nakamura",
]
MANAGERS = [
    "Helen Park",
    "Samuel Reyes",
    "Grace Liu",
    "Anton Weiss",
    "Ruth Adeyemi",
    "Martin Cole",
    "Dana Frost",
    "Ivan Sokol",
    "Paula Mendes",
    "Victor Hale",
    "Nora Quist",
    "Ethan Brooks",
    "Selma Aziz",
    "Hugo Marin",
    "Clara Voss",
    "Peter Lund",
    "Amina Diallo",
    "Felipe Ruiz",
    "Irene Katz",
    "Jonah Price",
]
# a true repeat of the current value: identical, identical once normalised
# (case, final period), or the same sentence with a few words added
REPEATS = ("repeat", "repeat_normalised", "repeat_reworded")
REWORDINGS = (", as before.", ", still.", ", as planned.", ", no change there.")
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
]


def date_values(rng: random.Random) -> str:
    return f"{rng.randint(1, 28)} {rng.choice(MONTHS)}"


def time_values(rng: random.Random) -> str:
    return f"{rng.randint(6, 20)}:{rng.choice(['00', '15', '30', '45'])}"


@dataclass(frozen=True)
class Template:
    """One kind of fact: how it is first stated, how a change may be paraphrased,
    the question asked about it, and where its values come from. For yes/no facts
    `texts` and `paraphrases` are per value ("yes", "no"), else one list for all."""

    key: str
    kind: str  # date | time | quantity | place | name | yes/no
    texts: dict[str, str]
    paraphrases: dict[str, list[str]]
    question: str
    value: Callable[[random.Random], str]
    param: tuple[str, ...] = ()  # a per-fact detail ({p}: the flight's destination)


def _one(text: str, *paraphrases: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    return {"*": text}, {"*": list(paraphrases)}


TEMPLATES = [
    Template(
        "flight",
        "date",
        *_one(
            "{s}'s flight to {p} is on {v}.",
            "{s} now flies to {p} on {v}.",
            "{s} rebooked the flight to {p} for {v}.",
        ),
        "When is {s}'s flight to {p}?",
        date_values,
        tuple(CITIES),
    ),
    Template(
        "dinner",
        "date",
        *_one(
            "{s}'s birthday dinner is on {v}.",
            "{s} moved the birthday dinner to {v}.",
            "The birthday dinner for {s} is now on {v}.",
        ),
        "When is {s}'s birthday dinner?",
        date_values,
    ),
    Template(
        "dentist",
        "time",
        *_one(
            "{s}'s dentist appointment is at {v}.",
            "{s} moved the dentist appointment to {v}.",
            "The dentist will now see {s} at {v}.",
        ),
        "What time is {s}'s dentist appointment?",
        time_values,
    ),
    Template(
        "train",
        "time",
        *_one(
            "{s} takes the {v} train to work.",
            "{s} now catches the {v} train to work.",
            "These days {s} commutes on the {v} train.",
        ),
        "Which train does {s} take to work?",
        time_values,
    ),
    Template(
        "chairs",
        "quantity",
        *_one(
            "{s} needs {v} chairs for the party.",
            "{s} now needs {v} chairs for the party.",
            "The party plan changed: {s} needs {v} chairs.",
        ),
        "How many chairs does {s} need for the party?",
        lambda rng: str(rng.randint(4, 60)),
    ),
    Template(
        "budget",
        "quantity",
        *_one(
            "{s}'s budget for the new laptop is {v} euros.",
            "{s} can now spend {v} euros on the new laptop.",
            "{s} set the laptop budget to {v} euros.",
        ),
        "What is {s}'s budget for the new laptop?",
        lambda rng: str(50 * rng.randint(8, 50)),
    ),
    Template(
        "running",
        "quantity",
        *_one(
            "{s} runs {v} kilometres a week.",
            "{s} is now running {v} kilometres a week.",
            "{s}'s weekly running distance is {v} kilometres.",
        ),
        "How far does {s} run each week?",
        lambda rng: str(rng.randint(5, 80)),
    ),
    Template(
        "home",
        "place",
        *_one("{s} lives in {v}.", "{s} has moved to {v}.", "{s}'s new home is in {v}."),
        "Where does {s} live?",
        lambda rng: rng.choice(HOMES),
    ),
    Template(
        "office",
        "place",
        *_one(
            "{s} works from the {v} office.",
            "{s} has transferred to the {v} office.",
            "{s} is now based at the {v} office.",
        ),
        "Which office does {s} work from?",
        lambda rng: rng.choice(OFFICES),
    ),
    Template(
        "manager",
        "name",
        *_one("{s}'s manager is {v}.", "{s} now reports to {v}.", "{v} has become {s}'s manager."),
        "Who is {s}'s manager?",
        lambda rng: rng.choice(MANAGERS),
    ),
    Template(
        "doctor",
        "name",
        *_one(
            "{s}'s doctor is Dr. {v}.",
            "{s} has switched to Dr. {v}.",
            "{s} now sees Dr. {v} as a family doctor.",
        ),
        "Who is {s}'s doctor?",
        lambda rng: rng.choice(DOCTORS),
    ),
    Template(
        "vegetarian",
        "yes/no",
        {"yes": "{s} is vegetarian.", "no": "{s} is not vegetarian."},
        {"yes": ["{s} has given up eating meat."], "no": ["{s} eats meat again."]},
        "Is {s} vegetarian?",
        lambda rng: rng.choice(["yes", "no"]),
    ),
    Template(
        "car",
        "yes/no",
        {"yes": "{s} has a car.", "no": "{s} does not have a car."},
        {"yes": ["{s} bought a car."], "no": ["{s} sold the car and has none now."]},
        "Does {s} have a car?",
        lambda rng: rng.choice(["yes", "no"]),
    ),
    Template(
        "gym",
        "yes/no",
        {"yes": "{s} has a gym membership.", "no": "{s} does not have a gym membership."},
        {"yes": ["{s} joined a gym."], "no": ["{s} cancelled the gym membership."]},
        "Does {s} have a gym membership?",
        lambda rng: rng.choice(["yes", "no"]),
    ),
]


@dataclass
class Step:
    """One write: a fact's value stated at a simulated instant."""

    fact: int
    week: int
    at: dt.datetime
    kind: str  # initial | change | paraphrase | one of REPEATS
    text: str
    value: str
    path: str  # remember | import
    memory_id: str = ""
    deduplicated: bool = False


@dataclass
class Fact:
    index: int
    subject: str
    template: str
    kind: str
    question: str
    steps: list[Step] = field(default_factory=list)

    def value_at(self, week: int) -> str:
        """The value current at the end of `week`."""
        return [s.value for s in self.steps if s.week <= week][-1]


def subjects(count: int, rng: random.Random) -> list[str]:
    names = [f"{first} {last}" for first in FIRST for last in LAST]
    if count > len(names):
        raise SystemExit(f"--subjects at most {len(names)}")
    return rng.sample(names, count)


def generate(n_subjects: int, n_facts: int, weeks: int, seed: int) -> list[Fact]:
    """The facts and every write of each, deterministic in the arguments."""
    per_subject = -(-n_facts // n_subjects)
    if per_subject > len(TEMPLATES):
        raise SystemExit(f"--facts at most {len(TEMPLATES)} per subject")
    if weeks < 7:
        raise SystemExit("--weeks at least 7 (5 changes and a repeat after week 0)")
    rng = random.Random(seed)
    facts: list[Fact] = []
    for number, subject in enumerate(subjects(n_subjects, rng)):
        path = "remember" if number % 2 == 0 else "import"
        for template in rng.sample(TEMPLATES, per_subject):
            if len(facts) == n_facts:
                break
            param = rng.choice(template.param) if template.param else ""
            fact = Fact(
                len(facts),
                subject,
                template.key,
                template.kind,
                template.question.format(s=subject, p=param),
            )
            changes = rng.randint(1, 5)
            repeat = rng.random() < 1 / 3
            slots = sorted(rng.sample(range(1, weeks), changes + repeat))
            repeat_slot = rng.choice(slots) if repeat else -1
            day, hour, minute = rng.randint(0, 6), rng.randint(8, 20), rng.randint(0, 59)
            used: set[str] = set()

            for week in [0, *slots]:
                at = BASE + dt.timedelta(days=7 * week + day, hours=hour, minutes=minute)
                if week == repeat_slot:
                    last = fact.steps[-1]
                    kind = rng.choices(REPEATS, weights=(3, 2, 2))[0]
                    text = last.text
                    if kind == "repeat_normalised":  # the store's dedup key is the same
                        text = text.lower() if rng.random() < 0.5 else text.rstrip(".")
                    elif kind == "repeat_reworded":  # the same statement, a few words added
                        text = text.rstrip(".") + rng.choice(REWORDINGS)
                    fact.steps.append(Step(fact.index, week, at, kind, text, last.value, path))
                    continue
                if template.kind == "yes/no":
                    value = (
                        template.value(rng)
                        if not fact.steps
                        else ("no" if fact.steps[-1].value == "yes" else "yes")
                    )
                else:
                    value = template.value(rng)
                    while value in used:
                        value = template.value(rng)
                used.add(value)
                paraphrase = bool(fact.steps) and rng.random() < 0.4
                kind = "initial" if not fact.steps else ("paraphrase" if paraphrase else "change")
                fact.steps.append(
                    Step(
                        fact.index,
                        week,
                        at,
                        kind,
                        stated(template, value, paraphrase, subject, param, rng),
                        value,
                        path,
                    )
                )
            facts.append(fact)
    return facts


def stated(
    template: Template, value: str, paraphrase: bool, subject: str, param: str, rng: random.Random
) -> str:
    """The text of a write stating `value`: the template's own words or a paraphrase."""
    key = value if template.kind == "yes/no" else "*"
    pattern = rng.choice(template.paraphrases[key]) if paraphrase else template.texts[key]
    return pattern.format(s=subject, p=param, v=value)


def text_index(facts: list[Fact]) -> dict[str, tuple[int, str]]:
    """Each written text -> (fact, value); a text never states two values."""
    index: dict[str, tuple[int, str]] = {}
    for fact in facts:
        for step in fact.steps:
            known = index.setdefault(step.text, (fact.index, step.value))
            if known != (fact.index, step.value):
                raise AssertionError(f"{step.text!r} states two values")
    return index


def drain(client: Engram, timeout_s: float = 1800) -> tuple[float, dict[str, int]]:
    """Seconds until no job is pending or leased, and the queue's counts then."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        status = client.get_status()
        if not status.store_available:
            raise RuntimeError(f"the pipeline cannot reach the store: {status.store_error}")
        if not any(c.status in OPEN and c.count for c in status.queue):
            counts = {
                f"{job_pb2.JobType.Name(c.job_type)}/{job_pb2.JobStatus.Name(c.status)}": c.count
                for c in status.queue
            }
            return time.monotonic() - started, counts
        time.sleep(0.5)
    raise TimeoutError("the pipeline did not drain in time")


def write_week(client: Engram, steps: list[Step]) -> None:
    """The week's Remember writes one at a time, then its imports in one stream."""
    for step in steps:
        if step.path == "remember":
            reply = client.remember(step.text, namespace=NAMESPACE, who=WHO, event_time=step.at)
            step.memory_id, step.deduplicated = reply.memory.id, reply.deduplicated
    imported = [s for s in steps if s.path == "import"]
    results: list[store_pb2.ImportResult] = []
    if imported:
        summary = client.import_memories(
            ({"content": s.text, "who": WHO, "event_time": s.at} for s in imported),
            namespace=NAMESPACE,
            on_results=results.extend,
        )
        if summary.failed:
            raise RuntimeError(f"{summary.failed} imports failed: {summary.failures[:3]}")
        for result in results:
            step = imported[result.index]
            step.memory_id = result.memory_id
            step.deduplicated = result.status == store_pb2.IMPORT_STATUS_DEDUPLICATED


@dataclass
class Fate:
    """What became of one memory: the store's record of it."""

    memory: memory_pb2.Memory
    survivor_id: str = ""  # from its `merged` history event
    superseded_by: list[str] = field(default_factory=list)  # incoming `supersedes` links


def fate_of(client: Engram, memory_id: str, cache: dict[str, Fate]) -> Fate:
    if memory_id not in cache:
        memory = client.get_memory(memory_id, namespace=NAMESPACE)
        survivor = ""
        if memory.deleted:
            for event in client.list_memory_history(memory_id, namespace=NAMESPACE):
                if event.event_type == store_pb2.HISTORY_EVENT_TYPE_MERGED:
                    survivor = str(event.metadata["survivor_id"])
        newer = [
            link.from_memory_id
            for link in client.list_memory_links(
                memory_id,
                namespace=NAMESPACE,
                link_types=["supersedes"],
                direction=store_pb2.LINK_DIRECTION_INCOMING,
            )
        ]
        cache[memory_id] = Fate(memory, survivor, newer)
    return cache[memory_id]


def classify(
    client: Engram,
    step: Step,
    texts: dict[str, tuple[int, str]],
    cache: dict[str, Fate],
    now: dt.datetime,
) -> str:
    """live | superseded | merged_identical | merged_same_value, or a loss:
    merged_other_value | merged_other_fact | deleted | closed_without_link |
    superseded_by_other_fact."""
    fate = fate_of(client, step.memory_id, cache)
    if step.deduplicated:
        # the store's own dedup: the memory returned has this content, normalised
        # (seed 002: lower case, no final punctuation); it speaks for this write
        if normalized(fate.memory.content) != normalized(step.text):
            return "merged_other_value"
        kept = _memory_fate(client, fate, step, texts, cache, now)
        return "merged_identical" if kept in KEPT else kept
    return _memory_fate(client, fate, step, texts, cache, now)


def _memory_fate(
    client: Engram,
    fate: Fate,
    step: Step,
    texts: dict[str, tuple[int, str]],
    cache: dict[str, Fate],
    now: dt.datetime,
) -> str:
    if fate.memory.deleted:
        if not fate.survivor_id:
            return "deleted"
        survivor = fate
        seen = {fate.memory.id}
        while survivor.survivor_id and survivor.survivor_id not in seen:
            seen.add(survivor.survivor_id)
            survivor = fate_of(client, survivor.survivor_id, cache)
        fact, value = texts.get(survivor.memory.content, (-1, ""))
        if fact != step.fact:
            return "merged_other_fact"
        if value != step.value:
            return "merged_other_value"
        same = normalized(survivor.memory.content) == normalized(step.text)
        return "merged_identical" if same else "merged_same_value"
    until = fate.memory.valid_until
    if not fate.memory.HasField("valid_until") or until.ToDatetime(dt.UTC) > now:
        return "live"
    if not fate.superseded_by:
        return "closed_without_link"
    newer = fate_of(client, fate.superseded_by[0], cache).memory.content
    return (
        "superseded" if texts.get(newer, (-1, ""))[0] == step.fact else "superseded_by_other_fact"
    )


def normalized(text: str) -> str:
    """The store's dedup key text (services/common/normalize.py)."""
    return normalize_content(text).normalized


KEPT = ("live", "superseded", "merged_identical", "merged_same_value")


@dataclass
class Asked:
    fact: int
    week: int  # -1: now
    expected: str
    top: str  # the value rank 1 states ("" when rank 1 is another fact's or nothing)
    first_of_fact: str  # the value of the best-ranked memory of this fact
    in_results: bool  # a memory stating the expected value is among the results


def ask(
    client: Engram,
    fact: Fact,
    week: int,
    expected: str,
    texts: dict[str, tuple[int, str]],
    as_of: dt.datetime | None,
) -> Asked:
    results = client.recall(
        fact.question, namespace=NAMESPACE, limit=10, skip_access_tracking=True, as_of=as_of
    ).results
    stated = [texts.get(r.memory.content, (-1, "")) for r in results]
    top = stated[0][1] if stated and stated[0][0] == fact.index else ""
    own = [value for index, value in stated if index == fact.index]
    return Asked(fact.index, week, expected, top, own[0] if own else "", expected in own)


def shares(asked: list[Asked]) -> dict[str, Any]:
    n = len(asked)
    return {
        "questions": n,
        "current_first": round(sum(a.top == a.expected for a in asked) / n, 4) if n else None,
        "current_first_of_fact": (
            round(sum(a.first_of_fact == a.expected for a in asked) / n, 4) if n else None
        ),
        "current_in_top10": round(sum(a.in_results for a in asked) / n, 4) if n else None,
        "fact_absent": sum(a.first_of_fact == "" for a in asked),
    }


def by(asked: list[Asked], key: Callable[[Asked], str]) -> dict[str, Any]:
    groups: dict[str, list[Asked]] = defaultdict(list)
    for a in asked:
        groups[key(a)].append(a)
    return {name: shares(group) for name, group in sorted(groups.items())}


def run(args: argparse.Namespace) -> dict[str, Any]:
    facts = generate(args.subjects, args.facts, args.weeks, args.seed)
    texts = text_index(facts)
    steps = sorted((s for f in facts for s in f.steps), key=lambda s: s.at)
    settings: dict[str, Any] = {}
    for item in args.set:
        settings = merge(settings, parse_setting(item))
    timings: dict[str, float] = {}
    commit = args.commit or _commit(args.code)  # the code the suite runs, as the run starts
    with running_suite(settings, code=args.code) as suite:
        client = Engram(
            suite.store, search_address=suite.search, pipeline_address=suite.pipeline, timeout=60
        )
        checkpoints: list[dt.datetime] = []
        write_s = drain_s = 0.0
        queue: dict[str, int] = {}
        for week in range(args.weeks):
            started = time.monotonic()
            write_week(client, [s for s in steps if s.week == week])
            write_s += time.monotonic() - started
            waited, queue = drain(client)
            drain_s += waited
            checkpoints.append(dt.datetime.now(dt.UTC))
            print(
                f"week {week}: {sum(s.week == week for s in steps)} writes, "
                f"drained in {waited:.1f} s",
                file=sys.stderr,
                flush=True,
            )
        timings["write_s"], timings["drain_s"] = round(write_s, 1), round(drain_s, 1)

        started = time.monotonic()
        cache: dict[str, Fate] = {}
        now = dt.datetime.now(dt.UTC)
        fates = {id(s): classify(client, s, texts, cache, now) for s in steps}
        timings["classify_s"] = round(time.monotonic() - started, 1)

        started = time.monotonic()
        rng = random.Random(args.seed + 1)
        current = [ask(client, f, -1, f.steps[-1].value, texts, None) for f in facts]
        past = []
        for fact in facts:
            week = rng.randrange(fact.steps[-1].week)  # some week before its last write
            past.append(ask(client, fact, week, fact.value_at(week), texts, checkpoints[week]))
        timings["ask_s"] = round(time.monotonic() - started, 1)
        status = client.get_status()
        client.close()

    fate_counts = Counter(fates.values())
    repeats = [s for s in steps if s.kind.startswith("repeat")]
    changes = [s for s in steps if s.kind in ("change", "paraphrase")]
    by_fact = {f.index: f for f in facts}
    last_kind = {f.index: f.steps[-1].kind for f in facts}
    # the newest write that stated the current value (a repeat restates it)
    setter = {
        f.index: next(s.kind for s in reversed(f.steps) if not s.kind.startswith("repeat"))
        for f in facts
    }
    return {
        "settings": settings,
        "code": str(args.code),
        "commit": commit,
        "sizes": {
            "subjects": args.subjects,
            "facts": len(facts),
            "weeks": args.weeks,
            "seed": args.seed,
            "writes": len(steps),
            "by_kind": dict(Counter(s.kind for s in steps)),
            "by_path": dict(Counter(s.path for s in steps)),
            "deduplicated_at_write": sum(s.deduplicated for s in steps),
            "live_memories": status.live_memory_count,
            "indexed_memories": status.indexed_memory_count,
        },
        "queue": queue,
        "timings": timings,
        "fates": dict(fate_counts),
        "silent_losses": sum(n for name, n in fate_counts.items() if name not in KEPT),
        "wrong_merges": sum(fate_counts[n] for n in ("merged_other_value", "merged_other_fact")),
        # a change stated in an earlier text again (a yes/no flipped back): the store's dedup
        "changes_deduplicated_at_write": sum(s.deduplicated for s in changes),
        "changes_merged_by_pipeline": sum(
            fates[id(s)].startswith("merged_") and not s.deduplicated for s in changes
        ),
        "repeats": {
            # the "identical repeats": the same text, or the same once normalised
            "identical": _merged_share([s for s in repeats if s.kind != "repeat_reworded"], fates),
            "by_kind": {
                kind: _merged_share([s for s in repeats if s.kind == kind], fates)
                for kind in REPEATS
            },
        },
        "fates_by_path": {
            path: dict(Counter(fates[id(s)] for s in steps if s.path == path))
            for path in ("remember", "import")
        },
        "now": {
            **shares(current),
            "by_fact_kind": by(current, lambda a: by_fact[a.fact].kind),
            "by_current_value_written_as": by(current, lambda a: setter[a.fact]),
            "by_last_write": by(current, lambda a: last_kind[a.fact]),
            "by_path": by(current, lambda a: by_fact[a.fact].steps[0].path),
        },
        "as_of": {
            **shares(past),
            "value_then_differs_from_now": sum(
                a.expected != by_fact[a.fact].steps[-1].value for a in past
            ),
            "by_fact_kind": by(past, lambda a: by_fact[a.fact].kind),
        },
        "lost_examples": [
            {"step": asdict(s) | {"at": s.at.isoformat()}, "fate": fates[id(s)]}
            for s in steps
            if fates[id(s)] not in KEPT
        ][:20],
    }


def _merged_share(steps: list[Step], fates: dict[int, str]) -> dict[str, Any]:
    merged = sum(fates[id(s)].startswith("merged_") and fates[id(s)] in KEPT for s in steps)
    return {
        "total": len(steps),
        "merged": merged,
        "share": round(merged / len(steps), 4) if steps else None,
    }


def _commit(code: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--subjects", type=int, default=200)
    parser.add_argument("--facts", type=int, default=2000)
    parser.add_argument("--weeks", type=int, default=9, help="simulated weeks, week 0 included")
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout the suite runs from")
    parser.add_argument(
        "--commit",
        default="",
        help="the commit a --code export (not a git checkout) was taken from",
    )
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args(None if argv is None else list(argv))
    result = run(args)
    summary = {k: v for k, v in result.items() if k != "lost_examples"}
    print(json.dumps(summary, indent=2))
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(provenance.stamped(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
