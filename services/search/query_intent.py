"""What a Recall query asks for (seed 003 "Intent classification"), so Recall
can route it: entity (who / what is X), temporal (when), causal (why),
procedural (how to), or general.

Deterministic rules decide first (the question word, a cue phrase, a time the
query names), in English, Russian and Japanese. A query no rule places is
compared with the example questions of its own language (intent_examples.toml
beside this module; the language whose letters the query has most of) by
cosine, using the query vector the vector channel computed anyway (no second
embedding): the nearest intent wins when its best example is at least
`intent_similarity_threshold` (0.45) away in cosine; else general. Only the
query's own language: an English query is never placed by a Russian example.
A language whose examples of different intents the embedding model puts, on
average, at the threshold or closer has rules alone, since any question of it
would pass the threshold: with the default local model (all-MiniLM-L6-v2,
English only) that is Russian and Japanese (bench/README.md "Intent routing in
Russian and Japanese").
The examples are embedded once, in the background, in a provider call of their
own (beside the query embedder's queue, so no query waits behind them and a
failure here opens no query circuit). A Recall that arrives while they are
being embedded waits for them, up to the query-embedding timeout, so that the
first questions after a start are classified as every later one; past that,
and for a minute after a failure, rules alone (and the basis says so).
Classifying costs a few regexes and one small matrix product (microseconds).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import tomllib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from importlib import resources

import numpy as np

from services.common.intent import normalize_for_intent
from services.common.providers.embedding import EmbeddingProvider
from services.search.embedder import describe

log = logging.getLogger("engram.search.intent")


class Intent(IntEnum):
    """Numbered as engram.search.v1.QueryIntent."""

    UNSPECIFIED = 0
    GENERAL = 1
    ENTITY = 2
    TEMPORAL = 3
    CAUSAL = 4
    PROCEDURAL = 5


@dataclass(frozen=True)
class Classified:
    intent: Intent
    basis: str  # why, for people: "rule: ...", "similarity 0.61 to ...", "request", "default"


# Russian infinitives after "как" (how to): -ать/-ять/-еть/-ить/-ыть/-уть/-оть
# after at least two letters ("сбросить", not "мать"), -йти, -чь after three
# ("помочь", not "ночь"), with -ся; numerals and "опять" that end alike are not.
_RU_INFINITIVE = (
    r"(?!(?:\w*дцать|девять|десять|опять)(?![\w-]))"
    r"(?:\w{2,}(?:ать|ять|еть|ить|ыть|уть|оть)|\w*йти|\w{3,}чь)(?:ся|сь)?(?![\w-])"
)
# What may stand before a Russian question word at the start: a conjunction
# ("а кто") or a preposition ("с кем", "о ком", "у кого").
_RU_BEFORE_QUESTION_WORD = r"(?:а|и|но|так|с|со|о|об|обо|у|для|к|ко|от|про|за|без|над|под|перед)"

# Rules in order; the first that matches decides. Question words lead (a
# query's opening says what it asks); the cue phrases follow. Each English rule
# is followed by its Russian and Japanese counterparts. They are matched on the
# NFKC-normalised, case-folded query (services.common.intent.normalize_for_intent:
# full-width letters and half-width kana count as their plain forms). A Russian
# or Japanese question word that is part of another word is not one: "кто-то",
# "почему-то", "когда-нибудь" (someone, somehow, ever), 誰か, いつも, どうしても,
# なぜか (someone, always, by all means, somehow).
_RULES: tuple[tuple[Intent, str, re.Pattern[str]], ...] = (
    (Intent.CAUSAL, "asks why", re.compile(r"\b(why|how come)\b")),
    (
        Intent.CAUSAL,
        "asks why (Russian)",
        re.compile(r"\b(?:почему|зачем|отчего|из-за чего|по какой причине|с какой целью)(?![\w-])"),
    ),
    (
        Intent.CAUSAL,
        "asks why (Japanese)",
        re.compile(r"なぜ(?!か)|何故(?!か)|どうして(?!も)|なんで(?!も)"),
    ),
    (
        Intent.CAUSAL,
        "asks for a cause",
        re.compile(
            r"\b(what|which)\s+(made|caused|led|prompted|motivated|inspired|drove)\b"
            r"|\b(reason|reasons|cause|causes)\s+(for|of|why|behind)\b|\bbecause of what\b"
        ),
    ),
    (
        Intent.CAUSAL,
        "asks for a cause (Russian)",
        re.compile(
            r"\bчто\s+(?:(?:его|её|ее|их|меня|нас|тебя|вас|ему|ей|им|мне|нам)\s+)?"
            r"(?:заставил\w*|побудил\w*|привел\w*|привёл|вызвал\w*|вызывает|подтолкнул\w*"
            r"|стало причиной|послужило причиной)"
            r"|\bпричин[аы]\s+\w"
            r"|\b(?:в ч[её]м|какова|каковы|какая|какие)\s+(?:(?:была|были|есть)\s+)?причин"
        ),
    ),
    (
        Intent.CAUSAL,
        "asks for a cause (Japanese)",
        re.compile(
            r"[のた](?:理由|原因|きっかけ)|(?:理由|原因|きっかけ)(?:は|を|が|って)|何が原因"
        ),
    ),
    (
        Intent.TEMPORAL,
        "asks when",
        re.compile(
            r"^\W*(when|since when)\b|\bwhat (time|date|day|year|month)\b"
            r"|\bhow long (ago|has|have|had|did|was|since)\b|\bwhich (year|month|day|date|week)\b"
        ),
    ),
    (
        Intent.TEMPORAL,
        "asks when (Russian)",
        re.compile(
            r"^\W*(?:(?:а|и|но|так)\s+)?(?:когда|с каких пор|до каких пор)(?![\w-])"
            r"|\b(?:в каком|в какой|какого|какое|какой)\s+"
            r"(?:году|месяце|день|дня|числа|число|дату|неделе)\b"
            r"|\bкак давно\b|\bво сколько\b|\bв котором часу\b"
            r"|\bсколько\s+(?:времени|лет|дней|недель|месяцев|часов)\s+(?:назад|прошло)\b"
        ),
    ),
    (
        Intent.TEMPORAL,
        "asks when (Japanese)",
        re.compile(
            r"いつ(?!も|か(?!ら)|でも|の間|のま|までも)|何(?:年|月|日|曜日|時)(?!も|間も)"
            r"|(?:どの|どれ)(?:くらい|ぐらい)(?:前|経|たっ|たつ)"
        ),
    ),
    (
        Intent.PROCEDURAL,
        "asks how to",
        re.compile(
            r"^\W*how (do|does|can|could|should|would|to|is .* (done|made))\b|\bhow to\b"
            r"|\b(steps|instructions|procedure|recipe) (to|for)\b"
        ),
    ),
    (
        Intent.PROCEDURAL,
        "asks how to (Russian)",
        re.compile(
            r"^\W*как\s+(?:(?:же|бы)\s+)?(?:мне|нам|можно|нужно|надо|следует|лучше|правильно)(?![\w-])"
            rf"|\bкак\s+(?:это\s+)?{_RU_INFINITIVE}"
            r"|\b(?:инструкци\w*|шаги|порядок действий)\s+(?:по|для|чтобы|как)\b"
            r"|\bчто\s+(?:мне\s+|нам\s+)?(?:нужно|надо)\s+сделать,?\s+чтобы\b"
        ),
    ),
    (
        Intent.PROCEDURAL,
        "asks how to (Japanese)",
        re.compile(
            r"どうやって|どうすれば|どうしたら|どのようにして|方法|やり方|作り方|使い方|手順"
            r"|(?:仕方|しかた)(?!が?ない)"
        ),
    ),
    (
        Intent.ENTITY,
        "asks who",
        re.compile(r"^\W*(who|whom|whose)\b|\bwho (is|was|are|were)\b"),
    ),
    (
        Intent.ENTITY,
        "asks who (Russian)",
        re.compile(
            rf"^\W*(?:{_RU_BEFORE_QUESTION_WORD}\s+)?"
            r"(?:кто|кого|кому|кем|ком|чей|чья|чь[её]|чьи|чьего|чьей|чьих|чьему|чьим)(?![\w-])"
            r"|\bкто\s+(?:такой|такая|такие|такое|это|был|была|были)(?![\w-])"
        ),
    ),
    (
        Intent.ENTITY,
        "asks who (Japanese)",
        re.compile(r"(?:誰|だれ|どなた|どちら様|どちらさま)(?!か|も|でも)"),
    ),
    (
        Intent.ENTITY,
        "asks about a named one",
        re.compile(r"^\W*(tell me about|what do (i|you|we) know about|what is known about)\b"),
    ),
    (
        Intent.ENTITY,
        "asks about a named one (Russian)",
        re.compile(
            r"^\W*(?:расскажи|расскажите)\s+(?:(?:мне|нам)\s+)?(?:о|об|обо|про)\b"
            r"|^\W*что\s+(?:я|ты|мы|вы)\s+(?:знаю|знаешь|знаем|знаете)\s+(?:о|об|обо|про)\b"
            r"|^\W*что\s+известно\s+(?:о|об|обо|про)\b"
        ),
    ),
    (
        Intent.ENTITY,
        "asks about a named one (Japanese)",
        re.compile(r"について(?:教えて|(?:何|なに)(?:を|か)?知って|知っている|知ってる)"),
    ),
)

# Seed 003's `what` intent: what / which / where asked about someone or
# something named (a capitalised word after the first), after the rules above
# and a named time; in English and in Russian (Japanese has no capitals). The
# question word is looked for in the folded query, the name in the query as
# written (NFKC only).
_WHAT_NAMED: tuple[tuple[str, re.Pattern[str], re.Pattern[str]], ...] = (
    (
        "asks what about a named one",
        re.compile(r"\b(what|which|where)\b"),
        re.compile(r"\s[A-Z][a-z]+"),
    ),
    (
        "asks what about a named one (Russian)",
        re.compile(r"\b(?:что|какой|какая|какое|какие|каком|какую|где)(?![\w-])"),
        re.compile(r"\s[А-ЯЁ][а-яё]+"),
    ),
)


def rule_intent(query: str, names_time: bool = False) -> Classified | None:
    """The first rule the query matches, or None. `names_time`: the query names
    a date or a range (services.search.text.time_windows)."""
    folded = normalize_for_intent(query)
    for intent, reason, pattern in _RULES:
        if pattern.search(folded):
            return Classified(intent, f"rule: {reason}")
    if names_time:
        return Classified(Intent.TEMPORAL, "rule: names a time")
    written = unicodedata.normalize("NFKC", query)
    for reason, what, name in _WHAT_NAMED:
        if what.search(folded) and name.search(written):
            return Classified(Intent.ENTITY, f"rule: {reason}")
    return None


# The languages of the example questions, each with the letters that mark a
# query as written in it (services/search/intent_examples.toml).
LANGUAGES = {
    "en": re.compile(r"[a-zà-ɏ]"),
    "ru": re.compile(r"[а-яё]"),
    "ja": re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]"),
}
LANGUAGE_NAMES = {"en": "English", "ru": "Russian", "ja": "Japanese"}
_ROUTED = {
    i.name.lower(): i for i in (Intent.ENTITY, Intent.TEMPORAL, Intent.CAUSAL, Intent.PROCEDURAL)
}


def query_language(query: str) -> str:
    """The examples' language whose letters the query has most of; English when none."""
    folded = normalize_for_intent(query)
    counts = {language: len(letters.findall(folded)) for language, letters in LANGUAGES.items()}
    best = max(counts, key=lambda language: counts[language])
    return best if counts[best] > 0 else "en"


def load_examples(text: str) -> dict[str, dict[Intent, tuple[str, ...]]]:
    """The example questions from intent_examples.toml's text, by language and
    intent; a ValueError naming every problem when a language or an intent is
    missing or unknown, or a question is empty, not a string, or listed twice."""
    data = tomllib.loads(text)
    problems = [f"missing language {lang!r}" for lang in LANGUAGES if lang not in data]
    problems += [f"unknown language {lang!r}" for lang in data if lang not in LANGUAGES]
    seen: set[str] = set()
    examples: dict[str, dict[Intent, tuple[str, ...]]] = {}
    for language in (lang for lang in LANGUAGES if lang in data):
        by_intent = data[language] if isinstance(data[language], dict) else {}
        problems += [f"{language}: missing intent {n!r}" for n in _ROUTED if n not in by_intent]
        problems += [f"{language}: unknown intent {n!r}" for n in by_intent if n not in _ROUTED]
        examples[language] = {}
        for name, intent in _ROUTED.items():
            texts = by_intent.get(name, [])
            if not isinstance(texts, list) or not texts:
                problems.append(f"{language}.{name}: not a non-empty list of questions")
                continue
            for question in texts:
                if not isinstance(question, str) or not question.strip():
                    problems.append(f"{language}.{name}: an empty or non-string question")
                    continue
                if question in seen:
                    problems.append(f"{language}.{name}: {question!r} is listed twice")
                seen.add(question)
            examples[language][intent] = tuple(t for t in texts if isinstance(t, str))
    if problems:
        raise ValueError("intent examples: " + "; ".join(problems))
    return examples


# Example questions per language and intent, embedded once; the similarity fallback.
EXAMPLES = load_examples(
    resources.files("services.search").joinpath("intent_examples.toml").read_text("utf-8")
)

RETRY_S = 60.0


@dataclass(frozen=True)
class _Examples:
    """One language's examples as the embedding model placed them."""

    labels: list[Intent]
    matrix: np.ndarray  # unit rows, one per example
    # mean cosine between examples of different intents: at or above the
    # threshold, the model does not tell this language's intents apart
    # (all-MiniLM-L6-v2, an English model: English 0.09, Russian 0.58, Japanese
    # 0.54; bench/README.md "Intent routing in Russian and Japanese")
    cross_intent_cosine: float


class IntentClassifier:
    def __init__(
        self, provider: EmbeddingProvider | None, threshold: float = 0.45, wait_s: float = 2.0
    ) -> None:
        self._provider = provider if provider is not None and provider.kind != "none" else None
        self._threshold = threshold
        self._wait_s = wait_s  # the longest a query waits for the examples (`settle`)
        self._examples: dict[str, _Examples] | None = None  # by language, once embedded
        self._loading: asyncio.Task[None] | None = None
        self._next_try = 0.0

    @property
    def examples_ready(self) -> bool:
        return self._examples is not None

    def cross_intent_cosines(self) -> dict[str, float]:
        """Each language's mean cosine between examples of different intents; the
        fallback serves a language below the threshold. Empty before the
        examples are embedded."""
        return {lang: e.cross_intent_cosine for lang, e in (self._examples or {}).items()}

    def start(self) -> None:
        """Embed the examples in the background (once; after a failure, rules alone
        until a retry RETRY_S later)."""
        if self._provider is None or self._examples is not None:
            return
        if self._loading is not None and not self._loading.done():
            return
        if time.monotonic() < self._next_try:
            return
        self._next_try = time.monotonic() + RETRY_S
        self._loading = asyncio.create_task(self._load())

    async def wait_ready(self) -> bool:
        """For callers that want the similarity fallback at once (tests, benches)."""
        self.start()
        if self._loading is not None:
            await asyncio.shield(self._loading)
        return self.examples_ready

    async def settle(self) -> None:
        """Wait, at most `wait_s`, for examples being embedded: a Recall that came
        first after a start is not classified by rules alone for coming first."""
        if self._provider is None or self._examples is not None:
            return
        self.start()
        if self._loading is None or self._loading.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._loading), self._wait_s)
        except TimeoutError:
            return

    async def _load(self) -> None:
        """Every language's examples in one provider call, then each language's
        matrix and how close the model puts its different intents."""
        assert self._provider is not None
        rows = [
            (language, intent, text)
            for language, by_intent in EXAMPLES.items()
            for intent, texts in by_intent.items()
            for text in texts
        ]
        try:
            vectors = await self._provider.embed([text for _, _, text in rows])
        except Exception as exc:  # a provider down: rules alone, retried later
            log.warning("intent examples not embedded; rules only", extra={"error": describe(exc)})
            return
        if len(vectors) != len(rows):
            return
        raw = np.asarray(vectors, dtype=np.float32)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        matrix = raw / np.where(norms > 0, norms, 1.0)
        examples: dict[str, _Examples] = {}
        for language in EXAMPLES:
            picked = [k for k, row in enumerate(rows) if row[0] == language]
            labels = [rows[k][1] for k in picked]
            unit = matrix[picked]
            different = np.not_equal.outer(labels, labels)
            cross = float((unit @ unit.T)[different].mean())
            examples[language] = _Examples(labels, unit, cross)
            if cross >= self._threshold:  # expected of the local model for ru and ja
                log.info(
                    "the embedding model does not tell one language's intent examples "
                    "apart; rules alone for its questions",
                    extra={"language": language, "cross_intent_cosine": round(cross, 2)},
                )
        self._examples = examples

    def classify(
        self, query: str, vector: Sequence[float] | None, names_time: bool = False
    ) -> Classified:
        """Rules first (`names_time`: the query names a date or a range, a rule
        too, after the question words); then the nearest example's intent, among
        the examples in the query's language, when close enough."""
        ruled = rule_intent(query, names_time)
        if ruled is not None:
            return ruled
        if vector is None or self._examples is None:
            if self._examples is None and self._provider is not None:
                self.start()
                return Classified(
                    Intent.GENERAL, "default: no rule matched; example questions not embedded"
                )
            return Classified(Intent.GENERAL, "default: no rule matched")
        language = query_language(query)
        examples = self._examples[language]
        if examples.cross_intent_cosine >= self._threshold:
            return Classified(
                Intent.GENERAL,
                f"default: no rule matched; the embedding model does not tell "
                f"{LANGUAGE_NAMES[language]} example questions apart",
            )
        q = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        if norm == 0.0 or q.shape[0] != examples.matrix.shape[1]:
            return Classified(Intent.GENERAL, "default: no rule matched")
        sims = examples.matrix @ (q / norm)
        best = int(np.argmax(sims))
        similarity = float(sims[best])
        intent = examples.labels[best]
        if similarity >= self._threshold:
            return Classified(
                intent, f"similarity {similarity:.2f} to {intent.name.lower()} examples"
            )
        return Classified(
            Intent.GENERAL,
            f"default: nearest examples ({intent.name.lower()}) at {similarity:.2f}",
        )
