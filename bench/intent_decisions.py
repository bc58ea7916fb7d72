"""Recall's query-intent decision on every question of the dev datasets, to see
that a change to the classifier moves no decision it should not (issue 38).

For each question of LoCoMo dev (all 999, adversarial ones too) and LongMemEval-S
dev (all 100): the IntentClassifier of a source tree (`--tree`, default this
checkout) with the local embedding model, given what Recall gives it: the
query's own vector (embedded alone, as a Recall embeds it) and whether the
query names a time (services.search.text.time_windows at the time of asking:
LoCoMo's last session, LongMemEval's question date). One JSON line per
question: dataset, id, intent, basis.

    .venv/bin/python bench/intent_decisions.py --tree DIR --out FILE.jsonl
    .venv/bin/python bench/intent_decisions.py --compare BEFORE.jsonl AFTER.jsonl

    .venv/bin/python bench/intent_decisions.py --languages

--compare counts the questions whose intent changed, and those whose basis
alone changed (the rule named, the similarity, the nearest examples' intent),
and lists each. --languages asks, per language of the examples, whether the
local model tells its intents apart: the mean cosine between examples of
different intents, how many examples have their nearest other example in the
same intent, and where the similarity fallback would put a few questions of no
intent (NO_INTENT) if it served that language.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib
import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# Questions that ask for no intent (general), none of them placed by a rule.
NO_INTENT = {
    "en": ["green tea", "my favourite film", "holiday plans", "books I read", "music I like"],
    "ru": [
        "зелёный чай",
        "мой любимый фильм",
        "Погода в Москве",
        "Планы на отпуск",
        "Книги, которые я читал",
        "Что я люблю есть на завтрак?",
        "Мои предпочтения в музыке",
        "Где я живу?",
    ],
    "ja": [
        "緑茶",
        "好きな映画",
        "東京の天気",
        "休暇の予定",
        "読んだ本",
        "朝ごはんに何を食べるのが好き？",
        "音楽の好み",
        "どこに住んでいる？",
    ],
}


def dataset(relative: str) -> Path:
    """A file under ../shared/datasets of this checkout or of its worktree's parent."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "datasets" / relative).exists():
            return base / "shared" / "datasets" / relative
    return ROOT.parent / "shared" / "datasets" / relative


def locomo_questions() -> list[tuple[str, str, datetime]]:
    """(id, question, asked at the conversation's last session), as bench/locomo.py asks."""
    samples = json.loads(dataset("locomo/locomo10-dev.json").read_text(encoding="utf-8"))
    out: list[tuple[str, str, datetime]] = []
    for sample in samples:
        conversation = sample["conversation"]
        asked = max(
            datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
            for key, value in conversation.items()
            if key.startswith("session_") and key.endswith("_date_time")
        )
        for number, qa in enumerate(sample["qa"]):
            out.append((f"{sample['sample_id']}:{number}", qa["question"], asked))
    return out


def longmemeval_questions() -> list[tuple[str, str, datetime]]:
    """(question id, question, asked at its question date), as bench/longmemeval.py asks."""
    path = dataset("longmemeval/longmemeval-s-dev.json.gz")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        items = json.load(handle)
    out: list[tuple[str, str, datetime]] = []
    for item in items:
        day, _, clock = item["question_date"].partition(" (")
        asked = datetime.strptime(f"{day} {clock.split(') ', 1)[1]}", "%Y/%m/%d %H:%M")
        out.append((item["question_id"], item["question"], asked.replace(tzinfo=UTC)))
    return out


async def decide(tree: Path) -> list[dict[str, Any]]:
    """Every dev question through `tree`'s classifier, as Recall classifies it."""
    sys.path[:0] = [str(tree), str(tree / "gen")]
    config = importlib.import_module("services.common.config").load_config(environ={})
    provider = importlib.import_module("services.common.providers.embedding").embedding_provider(
        config
    )
    intent = importlib.import_module("services.search.query_intent")
    time_windows = importlib.import_module("services.search.text").time_windows
    source = Path(intent.__file__).resolve()
    assert source.is_relative_to(tree.resolve()), f"{source} is not from {tree}"
    await provider.warm_up()
    classifier = intent.IntentClassifier(provider, config.search.intent_similarity_threshold)
    assert await classifier.wait_ready(), "the intent examples were not embedded"
    if hasattr(classifier, "cross_intent_cosines"):  # trees before issue 38 have one language
        cosines = classifier.cross_intent_cosines()
        print(
            "mean cosine between examples of different intents (the fallback serves a "
            f"language below {config.search.intent_similarity_threshold}): "
            + ", ".join(f"{lang} {c:.2f}" for lang, c in cosines.items())
        )
    rows: list[dict[str, Any]] = []
    for name, questions in (
        ("locomo", locomo_questions()),
        ("longmemeval", longmemeval_questions()),
    ):
        for qid, question, asked in questions:
            [vector] = await provider.embed([question])
            names_time = bool(time_windows(question, asked))
            decided = classifier.classify(question, vector, names_time)
            rows.append(
                {
                    "dataset": name,
                    "id": qid,
                    "question": question,
                    "intent": decided.intent.name,
                    "basis": decided.basis,
                }
            )
    texts = [row["question"] for row in rows]
    best = min(timed(intent.rule_intent, texts) for _ in range(5))
    print(f"the rules: {best / len(texts) * 1e6:.1f} us per question (best of 5 passes)")
    return rows


def timed(rules: Any, texts: list[str]) -> float:
    started = time.perf_counter()
    for text in texts:
        rules(text)
    return time.perf_counter() - started


async def languages() -> None:
    """Per language: does the local model tell its example intents apart?"""
    sys.path[:0] = [str(ROOT), str(ROOT / "gen")]
    import numpy as np

    from services.common.config import load_config
    from services.common.providers.embedding import embedding_provider
    from services.search.query_intent import EXAMPLES, rule_intent

    config = load_config(environ={})
    threshold = config.search.intent_similarity_threshold
    provider = embedding_provider(config)
    await provider.warm_up()

    async def unit(texts: list[str]) -> Any:
        matrix = np.asarray(await provider.embed(texts), dtype=np.float32)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)

    for language, by_intent in EXAMPLES.items():
        labels = [intent for intent, texts in by_intent.items() for _ in texts]
        examples = await unit([text for texts in by_intent.values() for text in texts])
        cosines = examples @ examples.T
        different = np.not_equal.outer(labels, labels)
        np.fill_diagonal(cosines, -2.0)
        nearest_same = sum(
            labels[int(np.argmax(row))] == own for row, own in zip(cosines, labels, strict=True)
        )
        questions = NO_INTENT[language]
        assert not any(rule_intent(q) for q in questions), "a rule places a NO_INTENT question"
        best = (await unit(questions)) @ examples.T
        placed = [
            f"{q} -> {labels[int(np.argmax(row))].name.lower()} {row.max():.2f}"
            for q, row in zip(questions, best, strict=True)
            if row.max() >= threshold
        ]
        print(
            f"{language}: cross-intent cosine {cosines[different].mean():.2f} "
            f"(threshold {threshold}); nearest other example of the same intent "
            f"{nearest_same}/{len(labels)}; questions of no intent past the threshold "
            f"{len(placed)}/{len(questions)}" + "".join(f"\n  {line}" for line in placed)
        )


def compare(before_path: Path, after_path: Path) -> None:
    def read(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
        lines = path.read_text(encoding="utf-8").splitlines()
        return {(r["dataset"], r["id"]): r for r in map(json.loads, lines)}

    before, after = read(before_path), read(after_path)
    assert before.keys() == after.keys(), "the two runs asked different questions"
    intents = [k for k in before if before[k]["intent"] != after[k]["intent"]]
    bases = [
        k
        for k in before
        if before[k]["intent"] == after[k]["intent"] and before[k]["basis"] != after[k]["basis"]
    ]
    for dataset_name in sorted({k[0] for k in before}):
        asked = [k for k in before if k[0] == dataset_name]
        tally = Counter(before[k]["intent"] for k in asked)
        print(
            f"{dataset_name}: {len(asked)} questions; intent changed "
            f"{sum(k[0] == dataset_name for k in intents)}, basis alone changed "
            f"{sum(k[0] == dataset_name for k in bases)}; before: {dict(sorted(tally.items()))}"
        )
    for kind, keys in (("intent", intents), ("basis", bases)):
        for key in keys:
            print(
                f"  {kind} {key[0]} {key[1]} {before[key]['question']!r}: "
                f"{before[key]['intent']} ({before[key]['basis']}) -> "
                f"{after[key]['intent']} ({after[key]['basis']})"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the source tree to classify with")
    parser.add_argument("--out", type=Path, help="write the decisions here (JSON lines)")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--languages", action="store_true", help="each language's separation")
    args = parser.parse_args()
    if args.languages:
        asyncio.run(languages())
        return
    if args.compare:
        compare(*args.compare)
        return
    if args.out is None:
        parser.error("--out, --compare or --languages")
    rows = asyncio.run(decide(args.tree))
    args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    print(f"{len(rows)} decisions -> {args.out}")


if __name__ == "__main__":
    main()
