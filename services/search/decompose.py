"""Question decomposition without an LLM (issue 19): the parts of a question
about two or more things at once, each searched on its own.

"Which did I set up first, the thermostat or the router?" has one query vector
between its two things, and BM25 mixes their terms, so a turn holding both
weakly can outrank the turns that each hold one strongly. Each part is the
question with the coordination replaced by one of its members ("Which did I
set up first, the thermostat" / "..., the router"), so it keeps the question's
own words around the one thing. The rules, first match wins:

1. two or more quoted spans ('Page Turners' or 'Marketing Professionals');
2. "between A and B";
3. alternatives after a comma: "..., A or B" / "..., A, B or C";
4. two clauses joined by before / after / instead of / compared to / rather than;
5. "A and B" / "A or B" as a run of words between boundary words (prepositions,
   auxiliaries, question words), lists "A, B and C" included.

Each member must hold a word of its own (not a stop word, services.common.text), and at most MAX_PARTS are returned; no rule matched: no parts.
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from services.common.fts import fts_terms
from services.common.text import STOP_WORDS

MAX_PARTS = 4
# rule 5 reads longer questions as requests with clauses, not lists of things
MAX_COORDINATION_WORDS = 25

_QUOTED = re.compile(r"(?:(?<=^)|(?<=[\s(:,]))['\"‘“]([^'\"‘’“”]+?)['\"’”](?=[\s,.?!;:)]|$)")
_SENTENCE_END = re.compile(r"[.!?]\s+[A-Z]")
_BETWEEN = re.compile(r"\bbetween\s+(.+)$", re.IGNORECASE)
_CLAUSE = re.compile(
    r"\s*,?\s+\b(before|after|instead of|compared to|compared with|rather than)\s+", re.IGNORECASE
)
_CONJUNCTION = re.compile(r"\s*,?\s+\b(and|or)\s+", re.IGNORECASE)
_LIST_SEPARATOR = re.compile(r"\s*,\s*(?:(?:and|or)\s+)?|\s+(?:and|or)\s+", re.IGNORECASE)
# a member of "A and B" starts with one of these when B runs to the question's end
_DETERMINERS = frozenset(
    [
        "the",
        "a",
        "an",
        "my",
        "his",
        "her",
        "their",
        "our",
        "your",
        "this",
        "that",
        "these",
        "those",
        "when",
    ]
)
_POSSESSIVES = frozenset(["my", "his", "her", "their", "our", "your"])
# words that end a coordinated member on either side (rule 5)
_BOUNDARIES = frozenset(
    [
        "of",
        "for",
        "from",
        "to",
        "in",
        "on",
        "at",
        "with",
        "about",
        "between",
        "by",
        "during",
        "into",
        "over",
        "under",
        "without",
        "did",
        "do",
        "does",
        "have",
        "has",
        "had",
        "is",
        "are",
        "was",
        "were",
        "will",
        "would",
        "can",
        "could",
        "should",
        "am",
        "be",
        "been",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "many",
        "much",
        "i",
        "me",
        "you",
        "we",
        "they",
        "he",
        "she",
        "it",
        "both",
        "all",
        "total",
        "number",
    ]
)


def parts(question: str, rules: str = "all") -> list[str]:
    """The question's parts, or [] when it asks about one thing (rules above;
    `rules` names a set of them, RULE_SETS)."""
    text = question.strip().rstrip("?.! ").strip()
    if _SENTENCE_END.search(text):  # a request with context sentences, not one question
        return []
    for rule in RULE_SETS[rules]:
        found = rule(text)
        if found:
            return found[:MAX_PARTS]
    return []


def _kept(members: list[str], build: list[str]) -> list[str]:
    """`build` (the parts), when every member holds a keyword term and the
    parts differ; else []."""
    if len(members) < 2 or any(not _content(m) for m in members):
        return []
    unique = list(dict.fromkeys(p.strip() for p in build))
    return unique if len(unique) >= 2 else []


def _quoted(text: str) -> list[str]:
    spans = list(_QUOTED.finditer(text))
    if len(spans) < 2:
        return []
    prefix, suffix = text[: spans[0].start()], text[spans[-1].end() :]
    members = [m.group(1).strip() for m in spans]
    return _kept(members, [f"{prefix}{m}{suffix}" for m in members])


def _between(text: str) -> list[str]:
    match = _BETWEEN.search(text)
    if not match:
        return []
    region = match.group(1)
    splits = [m for m in _CONJUNCTION.finditer(region) if m.group(1).lower() == "and"]
    if not splits:
        return []
    # the "and" that starts a new phrase ("the day I ... and the day I ...")
    chosen = next(
        (m for m in splits if region[m.end() :].split(" ", 1)[0].lower() in _DETERMINERS),
        splits[0],
    )
    members = [region[: chosen.start()].strip(), region[chosen.end() :].strip()]
    prefix = text[: match.start()].rstrip()
    return _kept(members, [f"{prefix} {m}" for m in members])


def _alternatives(text: str) -> list[str]:
    comma = text.rfind(", ")
    while comma > 0:
        stem, alternatives = text[:comma], text[comma + 2 :]
        if " or " in f" {alternatives.lower()} " and _content(stem):
            # "A, B or C": the list may start at an earlier comma
            while True:
                earlier = stem.rfind(", ")
                if earlier < 0 or not _list_member(stem[earlier + 2 :]):
                    break
                stem, alternatives = stem[:earlier], stem[earlier + 2 :] + ", " + alternatives
            members = [m.strip() for m in _LIST_SEPARATOR.split(alternatives) if m.strip()]
            return _kept(members, [f"{stem}, {m}" for m in members])
        comma = text.rfind(", ", 0, comma)
    return []


def _clauses(text: str) -> list[str]:
    match = _CLAUSE.search(text)
    if not match or match.start() == 0:
        return []
    left, right = text[: match.start()].strip(), text[match.end() :].strip()
    # both clauses must say something of their own ("how many days before X" does not)
    if len(_content(left)) < 2 or len(_content(right)) < 2:
        return []
    return _kept([left, right], [left, right])


def _coordination(text: str) -> list[str]:
    words = text.split()
    if len(words) > MAX_COORDINATION_WORDS:
        return []
    lowered = [w.lower().strip(",;:") for w in words]
    # the last "and" / "or" between two members (not one joining clauses: "and I ...")
    joins = [
        i
        for i, w in enumerate(lowered)
        if w in ("and", "or") and 0 < i < len(words) - 1 and lowered[i + 1] not in _BOUNDARIES
    ]
    if not joins:
        return []
    join = joins[-1]
    end = join + 1  # the last member: up to a boundary word or the end
    if _is_name(words[join - 1]) and (
        _is_name(words[end]) or lowered[end] in _POSSESSIVES
    ):  # "Jon and Gina start ...", "Melanie and her kids made": a name, or one word after
        end += 1 if _is_name(words[end]) else 2
    else:
        while end < len(words) and lowered[end] not in _BOUNDARIES:
            if words[end].endswith(","):
                end += 1
                break
            end += 1
    end = min(end, len(words))
    start = join  # the first members: back to a boundary word (commas separate a list)
    while start > 0 and lowered[start - 1] not in _BOUNDARIES:
        start -= 1
    region = " ".join(words[start:end]).rstrip(",")
    members = [m.strip() for m in _LIST_SEPARATOR.split(region) if m.strip()]
    before, after = " ".join(words[:start]), " ".join(words[end:])
    return _kept(members, [" ".join(p for p in (before, m, after) if p) for m in members])


def _is_name(word: str) -> bool:
    """A capitalised word other than "I" (a person, a place, a title's word)."""
    bare = word.strip(",;:").removesuffix("'s")
    return bare[:1].isupper() and bare != "I"


def merged_keyword(
    whole: list[tuple[int, float]],
    part_lists: list[list[tuple[int, float]]],
    weight: float,
    depth: int,
) -> list[tuple[int, float]]:
    """The keyword list with each part's best `depth` matches in it: a memory's
    BM25 moves `weight` of the way up to its best part's, scaled so a part's best
    match scores what the whole query's best does (a part has fewer terms, so its
    raw BM25 is lower). Best first."""
    scores = dict(whole)
    scale = max((s for _, s in whole), default=0.0) or 1.0
    best_part: dict[int, float] = {}
    for ranked in part_lists:
        best = max((s for _, s in ranked[:depth]), default=0.0)
        for rowid, score in ranked[:depth] if best > 0 else []:
            best_part[rowid] = max(best_part.get(rowid, 0.0), scale * score / best)
    for rowid, part in best_part.items():
        own = scores.get(rowid, 0.0)
        scores[rowid] = own + weight * max(0.0, part - own)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def merged_candidates(whole: list[int], part_lists: list[list[int]], depth: int) -> list[int]:
    """The vector channel's proposals with each part's nearest `depth` added."""
    return list(dict.fromkeys(whole + [r for ranked in part_lists for r in ranked[:depth]]))


def part_cosines(
    cosine: dict[int, float],
    rowids: list[int],
    matrix: npt.NDArray[np.float32],
    part_queries: list[npt.NDArray[np.float32]],
    weight: float,
) -> dict[int, float]:
    """rowid -> its cosine moved `weight` of the way up to its best part's
    cosine (`matrix`: the rows' vectors, in `rowids` order)."""
    if not part_queries or not rowids:
        return {}
    best = (matrix @ np.stack(part_queries).T).max(axis=1).tolist()
    return {
        rowid: cosine[rowid] + weight * max(0.0, value - cosine[rowid])
        for rowid, value in zip(rowids, best, strict=True)
    }


def _list_member(segment: str) -> bool:
    """A short phrase without boundary words: one member of a list ("the zoo")."""
    words = segment.lower().split()
    return 0 < len(words) <= 4 and not any(w.strip(",;:") in _BOUNDARIES for w in words)


def _content(text: str) -> list[str]:
    """Its words that are neither stop words nor boundary words ("many", "total")."""
    return [t for t in fts_terms(text) if t not in STOP_WORDS and t not in _BOUNDARIES]


# search.decompose_rules: every rule; the alternatives a question names (rules
# 1-3); every rule but the clauses (4)
RULE_SETS = {
    "all": (_quoted, _between, _alternatives, _clauses, _coordination),
    "alternatives": (_quoted, _between, _alternatives),
    "no_clauses": (_quoted, _between, _alternatives, _coordination),
}
