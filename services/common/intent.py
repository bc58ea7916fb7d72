"""The explicit long-term intent gate (seed 001 `hasExplicitLongTermMemoryIntent`):
does a user's message ask for something to be kept for later?

Seed 001's phrases: English "remember", "don't forget", "note", "commit to
memory", "for future conversations", "for future reference"; Japanese
"覚えておいて", "忘れないで" and their conjugation variants. Matching is on the
NFKC-normalised, case-folded text (full-width letters, ｶﾀｶﾅ and curly quotes
count like their plain forms).

What counts is a request, not a mention (the near misses are in
tests/common/test_intent.py):
- "remember" and "note" count as a request: at the start of a sentence or
  clause ("Remember that...", "ok, note: ..."), or after a word that makes a
  request of them ("please", "can you", "I want you to", "make sure to", ...).
  "I remember that day", "do you remember?", "remembered last week",
  "notebook", "notes", "the note says" do not count.
- "note" also counts in its fixed request phrases: "make a note", "take
  note", "note this/that/down", "note to self".
- "don't forget" (do not, dont, never), "commit ... to memory" (up to three
  words between), "for future conversations/conversation/reference" count
  wherever they stand, as whole words.
- Japanese has no spaces, so its phrases are matched as written, in kanji or
  kana: 覚えておいて / 覚えといて / 覚えておけ / 覚えておきなさい / 覚えておく
  ように / 覚えてください / 覚えて下さい / 覚えてほしい / 覚えてね, 忘れないで /
  忘れんといて / 忘れるな (but not 忘れるなら), 記憶しておいて / 記憶して /
  メモしておいて / メモして / メモっておいて. "覚えてる?", "覚えている",
  "覚えた", "忘れた", "忘れないように" do not count.
"""

from __future__ import annotations

import re
import unicodedata

# Words after which "remember" / "note" is a request made of the assistant.
_LEADS = (
    r"please|pls|plz|kindly|just|also|and|so|now|always|"
    r"can you|could you|will you|would you|won't you|can u|could u|"
    r"i want you to|i need you to|i'd like you to|i would like you to|"
    r"make sure to|make sure you|be sure to|try to|you should|you must|you need to|"
    r"don't ever forget to|i'm asking you to"
)
# The start of the text, or of a sentence or clause (after punctuation, or a
# greeting word followed by a comma: "hey, remember ...").
_CLAUSE_START = r"(?:^|[.!?;:,\n(\"'\-]\s*)"
# "Do remember ..." is a request at the start of a clause; "I do remember" is not.
_REQUEST = rf"(?:{_CLAUSE_START}(?:do\s+)?|\b(?:{_LEADS})\s+)"

_ENGLISH = re.compile(
    "|".join(
        (
            rf"{_REQUEST}(?:remember|note)\b",
            r"\b(?:make|take|making|taking)\s+(?:a\s+)?note\b",
            r"\bnote\s+(?:this|that|it|down)\b",
            r"\bnote\s+to\s+self\b",
            r"\b(?:don't|do\s+not|dont|never)\s+forget\b",
            r"\bcommit\s+(?:\S+\s+){0,3}?to\s+memory\b",
            r"\bfor\s+future\s+(?:conversations?|reference)\b",
        )
    )
)

_JAPANESE = re.compile(
    "|".join(
        (
            r"(?:覚|おぼ)え(?:ておいて|といて|ておけ|ておきなさい|ておくように)",
            r"(?:覚|おぼ)えて(?:ください|下さい|ほしい|欲しい|ね)",
            r"(?:忘|わす)れないで",
            r"(?:忘|わす)れんといて",
            r"(?:忘|わす)れるな(?!ら)",
            r"記憶して",
            r"メモ(?:して|しておいて|っておいて|っといて)",
        )
    )
)

# Typographic apostrophes, which NFKC leaves as they are.
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\uff07": "'"})


def normalize_for_intent(text: str) -> str:
    """NFKC, case-folded, apostrophes made plain and whitespace collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_APOSTROPHES)
    return " ".join(folded.split())


def has_long_term_intent(text: str) -> bool:
    """True when the message asks for something to be remembered long-term."""
    normalized = normalize_for_intent(text)
    return bool(_ENGLISH.search(normalized) or _JAPANESE.search(normalized))
