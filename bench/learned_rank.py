"""Would a ranker learned from Recall's own signals beat its hand-built order?

A study, not a feature (issue 19; bench/README.md "Learned ranking over Recall's
top 50"). Recall's evidence mostly lies in its top 50 but below the top 10, so a
learned judge of the first 50 is the obvious next step. `dump` asks every
question of LoCoMo dev and LongMemEval-S dev through the public gRPC API (limit
50, min_score 0) on the kept databases of bench/locomo.py and
bench/longmemeval.py (`--data-dir`) and keeps each result's signals; `fit` then
reorders those 50 with pointwise models over per-result features (Recall's
score and rank, each channel's rank and score, its boosts, the content length,
the episode's aggregates within the 50, the neighbouring turns' scores, the
query's intent and length) and scores the new order with the benchmarks' own
metrics, three ways:

- cross-validated within the two benchmarks together (LoCoMo leave-one-
  conversation-out and LongMemEval 5 folds over questions, fold k of each
  held out at once);
- cross-validated within each benchmark alone;
- transfer: trained on all of one benchmark, scored on the other, the closest
  this dev data comes to data the model never saw.

    .venv/bin/python bench/learned_rank.py dump --loco-db DIR --lme-db DIR --out DIR
    .venv/bin/python bench/learned_rank.py fit --dumps DIR

`fit` needs scikit-learn (make setup installs it with sentence-transformers).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import numpy as np

sys.path[:0] = [
    str(Path(__file__).resolve().parent),
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
]

import longmemeval as lme  # noqa: E402
import provenance  # noqa: E402
from embed_cache import DEFAULT_PATH as CACHE_PATH  # noqa: E402
from embed_cache import VectorCache, serving  # noqa: E402

import locomo as lc  # noqa: E402
from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from suite import running_suite  # noqa: E402

LIMIT = 50
SETTINGS: dict[str, Any] = {"search": {"query_embedding_timeout_ms": 20000}}
FOLDS = 5
# counts, totals, "both", "what/where ... has ...", "what <plural> does ..."
ASKS_FOR_MANY = re.compile(
    r"\bhow many\b|\bin total\b|\baltogether\b|\bboth\b"
    r"|^\s*(what|which|where|who)\b[^?]*\b(has|have)\b"
    r"|^\s*(what|which)\s+(\w+\s+){0,2}\w+s\s+(do|does|did|has|have|are)\b",
    re.I,
)
FEATURES = (
    "log rank", "score", "score - best", "keyword hit", "keyword score", "1/keyword rank",
    "vector hit", "cosine", "1/vector rank", "cosine - best", "keyword - best",
    "graph boost", "intent boost", "log length",
    "episode results", "episode best score", "episode best cosine", "episode best keyword",
    "episode keyword sum", "rank in episode", "episode rank",
    "previous turn in 50", "next turn in 50", "previous cosine", "next cosine",
    "previous keyword", "next keyword", "log turn index", "said by the user",
    "entity intent", "temporal intent", "causal intent", "general intent",
    "query words", "asks for many",
)  # fmt: skip
# what Recall itself knows about any memory: no neighbours, position, role or query
GENERIC = tuple(range(13)) + tuple(range(14, 21))


def result_row(result: search_pb2.RecallResult) -> dict[str, Any]:
    memory = result.memory
    return {
        "score": result.score,
        "kr": result.keyword.rank,
        "ks": result.keyword.score,
        "vr": result.vector.rank,
        "vs": result.vector.score,
        "gb": result.graph_boost,
        "ib": result.intent_boost,
        "who": memory.who,
        "episode": memory.event_time.ToJsonString(),
        "length": len(memory.content),
    }


def dump(loco_db: Path, lme_db: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    samples = json.loads(lc.DEFAULT_INPUT.read_text())
    with (
        running_suite(SETTINGS, data_dir=loco_db) as suite,
        (out / "locomo.jsonl").open("w") as file,
    ):
        search = search_pb2_grpc.SearchServiceStub(grpc.insecure_channel(suite.search))
        for sample in samples:
            namespace = sample["sample_id"]
            for index, qa in enumerate(sample["qa"]):
                if qa["category"] not in lc.CATEGORIES:
                    continue
                request = search_pb2.RecallRequest(
                    namespace=namespace, query=qa["question"], limit=LIMIT, min_score=0.0
                )
                request.asked_at.FromDatetime(lc.asked_time(sample["conversation"]))
                response = search.Recall(request)
                rows = [
                    {**result_row(r), "sources": [r.memory.source_id]} for r in response.results
                ]
                line = {"query_id": f"{namespace}:q{index}", "intent": response.intent}
                file.write(json.dumps({**line, "degraded": response.degraded, "results": rows}))
                file.write("\n")
    stands_for = json.loads((lme_db / "stands_for.json").read_text())
    with contextlib.ExitStack() as stack:
        cache = VectorCache(CACHE_PATH)
        settings = lc.merge(stack.enter_context(serving(cache)), SETTINGS)
        suite = stack.enter_context(running_suite(settings, data_dir=lme_db))
        file = stack.enter_context((out / "longmemeval.jsonl").open("w"))
        search = search_pb2_grpc.SearchServiceStub(grpc.insecure_channel(suite.search))
        for question in lme.scored_questions(lme.DEFAULT_INPUT):
            namespace = f"lme-{question['question_id']}"
            request = search_pb2.RecallRequest(
                namespace=namespace, query=question["question"], limit=LIMIT, min_score=0.0
            )
            request.asked_at.FromDatetime(lme.session_time(question["question_date"]))
            response = search.Recall(request)
            rows = [
                {**result_row(r), "sources": stands_for[namespace][r.memory.id]}
                for r in response.results
            ]
            line = {"query_id": question["question_id"], "intent": response.intent}
            file.write(json.dumps({**line, "degraded": response.degraded, "results": rows}) + "\n")
    provenance.write_beside(out / "longmemeval.jsonl", settings=SETTINGS)


def turn_of(source_id: str) -> tuple[str, int]:
    """(session, turn index) from either benchmark's source id."""
    if match := re.fullmatch(r"D(\d+):(\d+)", source_id):
        return match[1], int(match[2])
    session, turn = source_id.rsplit(":", 1)
    return session, int(turn)


def features(line: dict[str, Any], question: str) -> np.ndarray:
    """One row per result, columns as FEATURES."""
    results = line["results"]
    if not results:
        return np.zeros((0, len(FEATURES)))
    best = results[0]["score"]
    best_cosine = max(r["vs"] for r in results)
    best_keyword = max(r["ks"] for r in results)
    episodes: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(results):
        episodes[r["episode"]].append(i)
    episode_best = {e: max(results[i]["score"] for i in members) for e, members in episodes.items()}
    episode_rank = {
        e: n for n, e in enumerate(sorted(episode_best, key=lambda e: -episode_best[e]))
    }
    position = {turn_of(r["sources"][0]): i for i, r in enumerate(results)}
    rows = []
    for i, r in enumerate(results):
        members = episodes[r["episode"]]
        session, turn = turn_of(r["sources"][0])
        previous, following = position.get((session, turn - 1)), position.get((session, turn + 1))
        intent = line["intent"]
        # fmt: off
        rows.append(
            [
                math.log1p(i), r["score"], r["score"] - best, r["kr"] > 0, r["ks"],
                1 / r["kr"] if r["kr"] else 0, r["vr"] > 0, r["vs"],
                1 / r["vr"] if r["vr"] else 0, r["vs"] - best_cosine, r["ks"] - best_keyword,
                r["gb"], r["ib"], math.log1p(r["length"]),
                len(members), episode_best[r["episode"]],
                max(results[j]["vs"] for j in members), max(results[j]["ks"] for j in members),
                sum(results[j]["ks"] for j in members),
                sorted(members, key=lambda j: -results[j]["score"]).index(i),
                episode_rank[r["episode"]],
                previous is not None, following is not None,
                results[previous]["vs"] if previous is not None else 0,
                results[following]["vs"] if following is not None else 0,
                results[previous]["ks"] if previous is not None else 0,
                results[following]["ks"] if following is not None else 0,
                math.log1p(turn), r["who"] == "user",
                intent == search_pb2.QUERY_INTENT_ENTITY,
                intent == search_pb2.QUERY_INTENT_TEMPORAL,
                intent == search_pb2.QUERY_INTENT_CAUSAL,
                intent == search_pb2.QUERY_INTENT_GENERAL,
                len(question.split()), ASKS_FOR_MANY.search(question) is not None,
            ]
        )
        # fmt: on
    return np.array(rows, dtype=float)


class Question:
    """One asked question: its results' features, which results are evidence, and
    how the benchmark scores an order of them."""

    def __init__(
        self, benchmark: str, fold: int, line: dict[str, Any], question: str, evidence: set[str]
    ) -> None:
        self.benchmark, self.fold, self.line = benchmark, fold, line
        self.x = features(line, question)
        self.y = np.array([bool(set(r["sources"]) & evidence) for r in line["results"]], float)

    def ranked(self, order: list[int]) -> list[str]:
        return [s for i in order for s in self.line["results"][i]["sources"]]


def load(dumps: Path) -> tuple[list[Question], Callable[[dict[int, list[int]]], dict[str, float]]]:
    """The questions of both dumps, and the scorer of an order per question."""
    questions: list[Question] = []
    meta: list[tuple[str, Any]] = []
    locomo = {
        json.loads(s)["query_id"]: json.loads(s)
        for s in (dumps / "locomo.jsonl").read_text().splitlines()
    }
    for fold, sample in enumerate(json.loads(lc.DEFAULT_INPUT.read_text())):
        session_of = {t["dia_id"]: n for n, t, _ in lc.turns(sample["conversation"])}
        for index, qa in enumerate(sample["qa"]):
            if qa["category"] not in lc.CATEGORIES:
                continue
            evidence, _ = lc.evidence_ids(qa.get("evidence", []), set(session_of))
            if evidence:
                line = locomo[f"{sample['sample_id']}:q{index}"]
                questions.append(
                    Question("locomo", fold % FOLDS, line, qa["question"], set(evidence))
                )
                meta.append(("locomo", (evidence, session_of, qa["category"])))
    longmem = {
        json.loads(s)["query_id"]: json.loads(s)
        for s in (dumps / "longmemeval.jsonl").read_text().splitlines()
    }
    for question in lme.scored_questions(lme.DEFAULT_INPUT):
        answers = {s for s, turn, _ in lme.turn_items(question) if turn.get("has_answer")}
        line = longmem[question["question_id"]]
        fold = lme.fold_of(question["question_id"], FOLDS)
        questions.append(Question("longmemeval", fold, line, question["question"], answers))
        meta.append(("longmemeval", question))

    def scores(orders: dict[int, list[int]]) -> dict[str, float]:
        locomo_rows: dict[Any, list[dict[str, float]]] = defaultdict(list)
        longmem_rows: list[dict[str, float]] = []
        for n, (q, (benchmark, info)) in enumerate(zip(questions, meta, strict=True)):
            ranked = q.ranked(orders.get(n, list(range(len(q.y)))))
            if benchmark == "locomo":
                evidence, session_of, category = info
                metrics = lc.score(ranked, evidence, session_of)
                locomo_rows["all"].append(metrics)
                locomo_rows[category].append(metrics)
            else:
                longmem_rows.append(lme.score(ranked, info))
        turns = [m for m in longmem_rows if "turn R@10" in m]

        def mean(rows: list[dict[str, float]], key: str) -> float:
            return sum(m[key] for m in rows) / len(rows)

        return {
            "LoCoMo R@10": mean(locomo_rows["all"], "R@10"),
            "multi-hop": mean(locomo_rows[1], "R@10"),
            "session R@10": mean(locomo_rows["all"], "SessR@10"),
            "LME R@10": mean(turns, "turn R@10"),
            "LME R@5": mean(turns, "turn R@5"),
            "all@5": mean(longmem_rows, "all@5"),
        }

    return questions, scores


def fit(dumps: Path) -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    questions, scores = load(dumps)
    models: dict[str, Callable[[], Any]] = {
        "logistic regression": lambda: make_pipeline(
            StandardScaler(), LogisticRegression(C=0.3, max_iter=3000)
        ),
        "trees, depth 3": lambda: HistGradientBoostingClassifier(
            max_depth=3, learning_rate=0.05, max_iter=150, l2_regularization=1.0,
            early_stopping=False, random_state=0,
        ),
        "trees, depth 4": lambda: HistGradientBoostingClassifier(
            max_depth=4, learning_rate=0.05, max_iter=200, l2_regularization=1.0,
            early_stopping=False, random_state=0,
        ),
    }  # fmt: skip
    columns = {"all features": list(range(len(FEATURES))), "generic": list(GENERIC)}

    def orders(make: Callable[[], Any], cols: list[int], train: Any, test: Any) -> dict:
        fitted = [q for q in questions if train(q) and len(q.y)]
        model = make().fit(
            np.vstack([q.x[:, cols] for q in fitted]), np.concatenate([q.y for q in fitted])
        )
        return {
            n: list(np.argsort(-model.predict_proba(q.x[:, cols])[:, 1], kind="stable"))
            for n, q in enumerate(questions)
            if test(q) and len(q.y)
        }

    def show(label: str, figures: dict[str, float]) -> None:
        print(f"{label:<66}" + "".join(f"{v:>14.3f}" for v in figures.values()), flush=True)

    print(f"{'':<66}" + "".join(f"{k:>14}" for k in scores({})))
    show("Recall's order", scores({}))
    for model_name, make in models.items():
        for column_name, cols in columns.items():
            label = f"{model_name}, {column_name}"
            joint: dict[int, list[int]] = {}
            alone: dict[int, list[int]] = {}
            for k in range(FOLDS):
                joint |= orders(make, cols, lambda q, k=k: q.fold != k, lambda q, k=k: q.fold == k)
                for b in ("locomo", "longmemeval"):
                    alone |= orders(
                        make,
                        cols,
                        lambda q, k=k, b=b: q.fold != k and q.benchmark == b,
                        lambda q, k=k, b=b: q.fold == k and q.benchmark == b,
                    )
            show(f"{label}: CV, both benchmarks", scores(joint))
            show(f"{label}: CV, each benchmark alone", scores(alone))
            transfer: dict[int, list[int]] = {}
            for source, target in (("longmemeval", "locomo"), ("locomo", "longmemeval")):
                transfer |= orders(
                    make,
                    cols,
                    lambda q, s=source: q.benchmark == s,
                    lambda q, t=target: q.benchmark == t,
                )
            show(f"{label}: trained on the other benchmark", scores(transfer))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    dumping = commands.add_parser("dump", help="ask every question; keep the top 50's signals")
    dumping.add_argument("--loco-db", type=Path, required=True, help="bench/locomo.py --data-dir")
    dumping.add_argument(
        "--lme-db", type=Path, required=True, help="bench/longmemeval.py --data-dir"
    )
    dumping.add_argument("--out", type=Path, required=True)
    fitting = commands.add_parser("fit", help="cross-validate learned orders of the dumps")
    fitting.add_argument("--dumps", type=Path, required=True)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.loco_db, args.lme_db, args.out)
    else:
        fit(args.dumps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
