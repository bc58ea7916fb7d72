"""The value rule (services/common/fact_values.py): what a near-duplicate check
compares besides the cosine. Each case is a pair that all-MiniLM-L6-v2 scores
close; the rule alone tells a repeat from a newer value from another fact."""

from __future__ import annotations

import pytest

from services.common.fact_values import (
    DIFFERENT,
    REPEAT,
    UPDATE,
    compare,
    negated,
    one_question_two_values,
    values_of,
    word_root,
)

REPEATS = [
    # the same date, written three ways
    ("Maria's flight to Oslo is on 12 March", "Maria's flight to Oslo is on March 12"),
    ("Maria's flight to Oslo is on 12 March", "Maria's flight to Oslo is on the 12th of March"),
    ("Ship v2.3 on 2026-03-12", "Ship v2.3 on 12 March 2026"),
    # the same time and amount, written two ways
    ("Meeting at 5pm", "Meeting at 17:00"),
    ("The standup is at 9:30 on Mondays", "Standup is at 9:30am on Monday."),
    ("The budget is $500", "The budget is 500 USD"),
    ("The budget is $1.5k", "The budget is 1500 dollars"),
    ("The office opens at nine", "The office opens at 9"),
    # case, punctuation and wording, no value
    ("User prefers dark mode", "The user prefers dark mode."),
    ("Ticket ENG-2231 is blocked", "ticket eng-2231 is blocked!"),
    ("It isn't ready", "It is not ready"),
    ("Client likes morning calls", "Client likes morning meetings"),
]

UPDATES = [
    ("Maria's flight to Oslo is on 12 March", "Maria's flight to Oslo is on 13 March", "date"),
    ("The standup is at 9:30 on Mondays", "The standup is at 10:30 on Mondays", "time"),
    ("The standup is at 9:30 on Mondays", "The standup is at 9:30 on Tuesdays", "date"),
    ("The budget is $500", "The budget is $600", "amount"),
    ("Growth was 20%", "Growth was 25 percent", "amount"),
    ("The server has 16 GB of RAM", "The server has 32 GB of RAM", "number"),
]

DIFFERENT_FACTS = [
    # another identifier is another thing, not a newer value
    ("Ticket ENG-2231 is blocked", "Ticket ENG-2232 is blocked", "identifier"),
    ("Room 101 is free", "Room 102 is free", "identifier"),
    ("Ticket #41 is open", "Ticket #42 is open", "identifier"),
    ("Email bob@example.com about it", "Email bob@example.org about it", "identifier"),
    # another named entity
    ("Alice likes coffee", "Bob likes coffee", "entity"),
    ("Maria's flight to Oslo is on 12 March", "Maria's flight to Bergen is on 12 March", "entity"),
    # polarity
    ("Alice likes coffee", "Alice does not like coffee", "negation"),
    ("The API is deprecated", "The API isn't deprecated", "negation"),
    # a changed value with other words around it: not sure, so another fact
    ("Release is on Friday", "Release is on Friday at 5pm after QA sign-off", "time"),
    ("The flight is on 12 March", "The return flight is on 14 March", "date"),
]


@pytest.mark.parametrize(("older", "newer"), REPEATS)
def test_the_same_values_said_again_are_a_repeat(older: str, newer: str) -> None:
    assert compare(older, newer).verdict == REPEAT
    assert compare(newer, older).verdict == REPEAT


@pytest.mark.parametrize(("older", "newer", "kind"), UPDATES)
def test_the_same_sentence_with_another_value_is_an_update(
    older: str, newer: str, kind: str
) -> None:
    found = compare(older, newer)
    assert found.verdict == UPDATE
    assert [d.split(":")[0] for d in found.differences] == [kind]


@pytest.mark.parametrize(("older", "newer", "kind"), DIFFERENT_FACTS)
def test_another_identifier_entity_or_polarity_is_another_fact(
    older: str, newer: str, kind: str
) -> None:
    found = compare(older, newer)
    assert found.verdict == DIFFERENT
    assert kind in [d.split(":")[0] for d in found.differences]


def test_the_differences_name_both_values() -> None:
    found = compare(
        "Maria's flight to Oslo is on 12 March", "Maria's flight to Oslo is on 13 March"
    )
    assert found.describe() == "date: -03-12 -> -03-13"


def test_a_template_keeps_the_words_and_masks_the_values() -> None:
    values = values_of("Maria's flight to Oslo is on 12 March at 9:30pm for $120")
    assert values.template == "maria s flight to oslo is on <date> at <time> for <amount>"
    assert values.values == {"date": ("-03-12",), "time": ("21:30",), "amount": ("usd 120",)}


def test_words_that_spell_a_month_or_weekday_are_words() -> None:
    assert values_of("we may march on").values == {}
    assert values_of("We meet in May").values == {"date": ("month 05",)}


def test_negation_counts_contractions() -> None:
    assert negated("She doesn't eat meat") and negated("never again")
    assert not negated("She eats meat")


def test_a_unit_is_part_of_the_value() -> None:
    assert compare("The server has 16 GB of RAM", "The server has 16 MB of RAM").verdict == UPDATE
    assert compare("The drive takes 2 hrs", "The drive takes 2 hours").verdict == REPEAT
    assert values_of("a 5 km run").values == {"number": ("5 km",)}


def test_another_value_on_its_own_day_is_another_fact() -> None:
    found = compare("I ran 5 km today", "I ran 10 km today")
    assert found.verdict == DIFFERENT and found.differences == ("number: 5 km -> 10 km",)


def test_a_word_root_sees_one_word_in_its_forms() -> None:
    assert {word_root(w) for w in ("run", "runs", "running")} == {"run"}
    assert word_root("weekly") == word_root("week") == "week"
    assert word_root("lives") == "live" and word_root("class") == "class"


def two_values(question: str, one: str, two: str) -> bool:
    return one_question_two_values(values_of(one), values_of(two), values_of(question))


@pytest.mark.parametrize(
    ("question", "one", "two"),
    [
        (
            "Which train does Ravi take to work?",
            "Ravi takes the 9:00 train to work.",
            "These days Ravi commutes on the 11:00 train.",
        ),
        (
            "How many chairs does Ravi need for the party?",
            "Ravi needs 12 chairs for the party.",
            "The party plan changed: Ravi needs 30 chairs.",
        ),
        ("Who is Ravi's manager?", "Ravi's manager is Anna.", "Bruno has become Ravi's manager."),
        ("Does Ravi have a car?", "Ravi has a car.", "Ravi sold the car and has none now."),
    ],
)
def test_one_question_answered_with_another_value_in_other_words(
    question: str, one: str, two: str
) -> None:
    assert two_values(question, one, two)


@pytest.mark.parametrize(
    ("question", "one", "two"),
    [
        # the past asks about one event
        (
            "Which train did Ravi take to work?",
            "Ravi takes the 9:00 train to work.",
            "These days Ravi commutes on the 11:00 train.",
        ),
        (
            "Can you tell me which train Ravi booked?",
            "Ravi takes the 9:00 train to work.",
            "These days Ravi commutes on the 11:00 train.",
        ),
        # a word of the question in both, but one states a place, the other a time
        (
            "Which office does Ravi work from?",
            "Ravi works from the Kingsway office.",
            "Ravi takes the 11:00 train to work.",
        ),
        # another person
        (
            "Who is Ravi's manager?",
            "Ravi's manager is Anna.",
            "Bruno has become Maria's manager.",
        ),
        # no word of the question in common
        ("Is Ravi vegetarian?", "Ravi is vegetarian.", "Ravi has given up eating meat."),
        # the same value
        (
            "When is Maria's flight to Oslo?",
            "Maria's flight to Oslo is on 12 March.",
            "Maria rebooked the flight to Oslo for 12 March.",
        ),
        # about its own day
        ("How far does Ravi run?", "Ravi ran 5 km today.", "Ravi ran 10 km today."),
    ],
)
def test_not_one_question_with_two_values(question: str, one: str, two: str) -> None:
    assert not two_values(question, one, two)
