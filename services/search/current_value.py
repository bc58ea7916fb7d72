"""The current value of a fact first (issue 35): among a Recall's top picks, two
live memories stating different values of one fact in different words
("Maria's flight to Oslo is on 12 March" / "Maria now flies to Oslo on 13 March",
services.common.fact_values.same_fact_values) rank newest valid time first.

Recall's scores have no recency term, so without this the text closest to the
question wins, whichever value it holds. Superseded memories are already out of a
current read, and an `as_of` read's candidates all became valid by then, so the
newest valid time among the candidates is the value current at the read's
instant; a value stated again later (services/common/restatement.py) counts from
its latest statement known at that instant. The newer memory takes the older one's place (and score); everything
else keeps its place. Only the first `HEAD` picks are compared, pairwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from services.common import restatement
from services.common.fact_values import one_question_two_values, same_fact_values, values_of
from services.common.memory_record import MemoryRecord
from services.common.text import words
from services.search.scoring import Candidate

HEAD = 20


def value_groups(
    picked: list[Candidate], records: Mapping[int, MemoryRecord], query: str
) -> list[list[int]]:
    """The places among the first `HEAD` picks of each group of two or more memories
    stating values of one fact (pairwise, joined transitively)."""
    head = picked[:HEAD]
    if len(head) < 2:
        return []
    read = [values_of(records[c.rowid].content) for c in head]
    asked = frozenset(words(query))
    question = values_of(query)
    group = list(range(len(head)))  # union-find over the pairs about one fact

    def root(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    for i in range(len(head)):
        for j in range(i + 1, len(head)):
            if root(i) != root(j) and (
                same_fact_values(read[i], read[j], asked)
                or one_question_two_values(read[i], read[j], question)
            ):
                group[root(j)] = root(i)
    members: dict[int, list[int]] = {}
    for i in range(len(head)):
        members.setdefault(root(i), []).append(i)
    return [places for places in members.values() if len(places) > 1]


def newest_value_first(
    picked: list[Candidate],
    records: Mapping[int, MemoryRecord],
    groups: list[list[int]],
    restated: Mapping[str, Sequence[tuple[str, str]]],
    at: str | None = None,
) -> list[Candidate]:
    """`picked` with each group (value_groups) reordered within the places it holds,
    the latest statement first: a memory's valid time, or a restatement of it
    (`restated`: memory id -> (metadata, recorded at)) known and valid at `at`."""
    ordered = list(picked)
    for places in groups:
        scores = [picked[i].score for i in places]

        def stated(i: int) -> tuple[int, int]:
            record = records[picked[i].rowid]
            own = record.valid_from or record.event_time
            return restatement.latest_statement(own, restated.get(record.id, ()), at)

        newest = sorted(places, key=stated, reverse=True)
        for place, index, score in zip(places, newest, scores, strict=True):
            ordered[place] = picked[index]
            ordered[place].score = score
    return ordered
