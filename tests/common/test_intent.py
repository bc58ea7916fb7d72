"""The explicit long-term intent gate (seed 001): every phrase the seed lists,
in English and Japanese, with its conjugation variants, NFKC and case
insensitive; and the near misses that must not trigger (services/common/intent.py
documents what counts)."""

from __future__ import annotations

import pytest

from services.common.intent import has_long_term_intent

ENGLISH = [
    # "remember"
    "Remember that I'm allergic to peanuts.",
    "remember: my sister's name is Ana",
    "Please remember my flight is on Friday",
    "Can you remember that the wifi password changed?",
    "I want you to remember this",
    "ok, remember I prefer tea",
    "Make sure to remember my birthday is in May",
    "Do remember to use metric units",
    "REMEMBER THIS: staging is eu-west",
    "hey - remember the deadline moved",
    # "don't forget"
    "Don't forget that I'm vegetarian",
    "don\u2019t forget my meeting at 3",
    "Do not forget the API key rotates monthly",
    "dont forget I use vim",
    "never forget: prod deploys need approval",
    # "note"
    "Note that I work remotely on Mondays",
    "note: the repo moved to GitLab",
    "Please note my new address",
    "Make a note: the invoice is due on the 5th",
    "take note, I hate meetings before 10",
    "note this down: blue is my favourite colour",
    "note to self: renew the passport",
    # "commit to memory"
    "Commit to memory that Bob leads the infra team",
    "commit this to memory: our SLA is 99.9%",
    "please commit it all to memory",
    # "for future conversations" / "for future reference"
    "I use Arch Linux, for future conversations.",
    "For future reference, my timezone is JST",
    "just so you know for future conversation: I'm left-handed",
    # NFKC: full-width letters and case
    "ＲＥＭＥＭＢＥＲ that I like jazz",
    "Ｆｏｒ ｆｕｔｕｒｅ ｒｅｆｅｒｅｎｃｅ: I'm on call this week",
]

JAPANESE = [
    "私の誕生日は5月10日です。覚えておいて",
    "覚えておいてください、私はコーヒーが苦手です",
    "これ覚えておいてね",
    "覚えといて、来週は休みです",
    "おぼえておいて",
    "おぼえといて",
    "覚えておけ",
    "覚えておきなさい",
    "覚えておくように",
    "覚えてください",
    "覚えて下さい",
    "覚えてほしいんだけど、猫を飼っています",
    "私の名前、覚えてね",
    "忘れないで",
    "忘れないでください、会議は3時です",
    "忘れないでね",
    "わすれないで",
    "このこと、忘れんといて",
    "絶対に忘れるな",
    "記憶しておいて",
    "メモしておいて：パスワードは毎月変わる",
    "メモして",
    "メモっておいて",
    # NFKC: half-width katakana
    "ﾒﾓしておいて",
]

NEAR_MISSES = [
    "I remember that day at the beach",
    "Do you remember the trip to Paris?",
    "I remembered it last week",
    "remembering things is hard",
    "She remembers everything",
    "I don't remember",
    "my notebook is full",
    "I left some notes on your desk",
    "the note says hi",
    "He noted the change",
    "I forgot my keys",
    "forgetful people",
    "we committed the memory leak fix",
    "the future of conversations with AI",
    "a reference for the future",
    "Can you recall what I said?",
    "覚えてる？",
    "それは覚えている",
    "もう覚えた",
    "忘れた",
    "傘を忘れないように",
    "忘れるなら書いておけばいい",
    "",
]


@pytest.mark.parametrize("message", ENGLISH)
def test_every_english_phrase_and_variant_triggers(message: str) -> None:
    assert has_long_term_intent(message)


@pytest.mark.parametrize("message", JAPANESE)
def test_every_japanese_phrase_and_variant_triggers(message: str) -> None:
    assert has_long_term_intent(message)


@pytest.mark.parametrize("message", NEAR_MISSES)
def test_near_misses_do_not_trigger(message: str) -> None:
    assert not has_long_term_intent(message)
