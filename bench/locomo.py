"""Retrieval quality on LoCoMo through the public gRPC API.

For each conversation: import its turns into a namespace of its own (content
"Speaker: text" plus " [shares image: caption]", source_id = dia_id,
event_time = the session date, session_id = "session_<n>", the conversation's
session, as an agent's turns carry theirs: the store links each turn to the
one before it), wait until every memory is embedded, then ask every question
of categories 1-4 through Recall with limit 10 and score the ranked source ids
against the question's evidence. --paths sessions flat also imports every
conversation without sessions (the path before issue 34: no link, so the
temporal route's link hop never ran) into namespaces of its own, asks the same
questions there and reports both; --conversations N takes the first N.

--negatives also asks every such question against the next conversation's
namespace, where nothing is relevant: an answer with no result is the service
saying "no relevant memory", scored as precision and recall against the
questions asked where they belong. Adversarial questions (category 5, about
something the conversation never says) are counted as well, for information.
--sweep asks with min_score 0 and replays the cut client-side for a range of
min_score values (the server keeps picks while their score is at least
min_score, so the replay gives what each setting would have answered).

Each question is asked at the time of its conversation's last session
(`asked_at`, for the relative dates a question names), and each answer's
intent (RecallResponse.intent) is tallied per category.

--loco FILE [FILE ...] runs no suite: it reads `--rankings-out` files of
several configurations (one each) and scores leave-one-conversation-out: for
each conversation, the configuration with the best R@10 on the other ones is
scored on it; the cross-validated figures per category are printed beside
each configuration's full-dev ones.

    .venv/bin/python bench/locomo.py [--input FILE] [--rankings-out FILE] [--set search.fusion=rrf]
        [--negatives] [--sweep] [--data-dir DIR] [--paths sessions turns flat] [--conversations N]
    .venv/bin/python bench/locomo.py --loco RANKINGS.jsonl [RANKINGS.jsonl ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf import timestamp_pb2

sys.path[:0] = [
    str(Path(__file__).resolve().parent.parent),
    str(Path(__file__).resolve().parent.parent / "gen"),
]

import provenance  # noqa: E402

from engram.search.v1 import search_pb2, search_pb2_grpc  # noqa: E402
from engram.store.internal.v1 import job_queue_pb2, job_queue_pb2_grpc  # noqa: E402
from engram.store.v1 import store_pb2, store_pb2_grpc  # noqa: E402
from suite import running_suite, shared_dataset  # noqa: E402

DEFAULT_INPUT = shared_dataset("locomo/locomo10-dev.json")
SWEEP = [round(0.05 * i, 2) for i in range(0, 15)]
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
METRICS = ("R@5", "R@10", "Hit@10", "MRR", "nDCG@10", "SessR@10")
_EVIDENCE = re.compile(r"D(\d+):0*(\d+)")


def session_time(text: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> an aware datetime (the file gives no zone; UTC)."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def turns(conversation: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any], datetime]]:
    sessions = sorted(int(k.split("_")[1]) for k in conversation if re.fullmatch(r"session_\d+", k))
    for number in sessions:
        when = session_time(conversation[f"session_{number}_date_time"])
        for turn in conversation[f"session_{number}"]:
            yield number, turn, when


def evidence_ids(raw: list[str], known: set[str]) -> tuple[list[str], int]:
    """Repair the file's known malformations ("D8:6; D9:17", "D:11:26", "D30:05");
    drop ids that name no turn. Returns (ids, dropped)."""
    ids: list[str] = []
    dropped = 0
    for entry in raw:
        for part in re.split(r"[;,\s]+", entry.strip()):
            if not part:
                continue
            match = _EVIDENCE.fullmatch(re.sub(r"^D:", "D", part))
            candidate = f"D{match[1]}:{match[2]}" if match else None
            if candidate in known:
                ids.append(candidate)
            else:
                dropped += 1
    return list(dict.fromkeys(ids)), dropped


def score(ranked: list[str], evidence: list[str], session_of: dict[str, int]) -> dict[str, float]:
    top = ranked[:10]
    position = {source: rank for rank, source in enumerate(top)}
    hits = sorted(position[e] for e in evidence if e in position)
    ideal = sum(1 / math.log2(r + 2) for r in range(min(len(evidence), 10)))
    wanted_sessions = {session_of[e] for e in evidence}
    found_sessions = {session_of[s] for s in top if s in session_of}
    return {
        "R@5": sum(h < 5 for h in hits) / len(evidence),
        "R@10": len(hits) / len(evidence),
        "Hit@10": float(bool(hits)),
        "MRR": 1 / (hits[0] + 1) if hits else 0.0,
        "nDCG@10": sum(1 / math.log2(h + 2) for h in hits) / ideal,
        "SessR@10": len(wanted_sessions & found_sessions) / len(wanted_sessions),
    }


# How a conversation is imported. "sessions": each of its sessions is a session
# (ImportItem.session_id "session_<n>"), as an agent's conversation is, so the
# store links each turn to the one before it (`temporal`) and "when" questions
# take the temporal route's link hop; "turns": the same sessions, each turn
# through AppendTurn as an agent's harness captures it (the first speaker as
# the user, the other as the assistant, `who` the speaker's name; short-term
# turns, expiring `sessions.turn_ttl_ms` after the run writes them); "flat": no
# session (the path before issue 34, which built no link, so no benchmark met
# that hop). Each path's namespaces: the conversation's sample id, with
# ".<path>" for every path but "sessions".
PATHS = ("sessions", "turns", "flat")


def namespace_of(sample_id: str, path: str) -> str:
    return sample_id if path == "sessions" else f"{sample_id}.{path}"


def import_items(sample: dict[str, Any], path: str) -> list[store_pb2.ImportItem]:
    """The conversation's turns as import items, in order (see PATHS)."""
    items = []
    for number, turn, when in turns(sample["conversation"]):
        content = f"{turn['speaker']}: {turn['text']}"
        if turn.get("blip_caption"):
            content += f" [shares image: {turn['blip_caption']}]"
        event_time = timestamp_pb2.Timestamp()
        event_time.FromDatetime(when)
        items.append(
            store_pb2.ImportItem(
                content=content,
                who=turn["speaker"],
                source_type="locomo",
                source_id=turn["dia_id"],
                event_time=event_time,
                session_id="" if path == "flat" else f"session_{number}",
            )
        )
    return items


def ingest(store: store_pb2_grpc.MemoryStoreServiceStub, sample: dict[str, Any], path: str) -> int:
    namespace = namespace_of(sample["sample_id"], path)
    items = import_items(sample, path)
    if path == "turns":
        return append_turns(store, namespace, sample["conversation"]["speaker_a"], items)

    def batches() -> Iterator[store_pb2.ImportMemoriesRequest]:
        for start in range(0, len(items), 500):
            yield store_pb2.ImportMemoriesRequest(
                namespace=namespace, items=items[start : start + 500]
            )

    response = store.ImportMemories(batches())
    if response.failed_count:
        errors = {r.error for r in response.results if r.error}
        raise RuntimeError(f"{namespace}: {response.failed_count} turns failed: {errors}")
    return int(response.created_count + response.deduplicated_count)


def append_turns(
    store: store_pb2_grpc.MemoryStoreServiceStub,
    namespace: str,
    user: str,
    items: list[store_pb2.ImportItem],
) -> int:
    """One AppendTurn per turn, in order; `user`'s turns as the user's."""
    for item in items:
        role = store_pb2.TURN_ROLE_USER if item.who == user else store_pb2.TURN_ROLE_ASSISTANT
        response = store.AppendTurn(
            store_pb2.AppendTurnRequest(
                namespace=namespace,
                session_id=item.session_id,
                role=role,
                content=item.content,
                who=item.who,
                event_time=item.event_time,
                source_id=item.source_id,
            )
        )
        if not response.captured:
            raise RuntimeError(f"{namespace}: {item.source_id} not captured: {response.notice}")
    return len(items)


def wait_embedded(jobs: job_queue_pb2_grpc.JobQueueServiceStub, timeout_s: float = 1800) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        stats = jobs.GetQueueStats(job_queue_pb2.GetQueueStatsRequest())
        if stats.live_memory_count and stats.indexed_memory_count >= stats.live_memory_count:
            return time.monotonic() - started
        time.sleep(0.5)
    raise TimeoutError("memories were not embedded in time")


def parse_setting(text: str) -> dict[str, Any]:
    key, _, value = text.partition("=")
    tree: dict[str, Any] = {}
    node = tree
    parts = key.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = yaml.safe_load(value)
    return tree


def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    for key, value in b.items():
        a[key] = merge(a.get(key, {}), value) if isinstance(value, dict) else value
    return a


@dataclass
class Asked:
    """One Recall: its category, the scores of its results and (for a question
    asked where it belongs) the ranked source ids and evidence."""

    category: int
    scores: list[float]
    ranked: list[str] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    session_of: dict[str, int] = field(default_factory=dict)

    def cut(self, min_score: float) -> list[str]:
        return [s for s, score in zip(self.ranked, self.scores, strict=True) if score >= min_score]

    def empty_at(self, min_score: float) -> bool:
        return not any(score >= min_score for score in self.scores)


def none_relevant(
    positives: list[Asked], negatives: list[Asked], min_score: float
) -> dict[str, float]:
    """Precision and recall of an empty answer as "no relevant memory"."""
    said_none_right = sum(n.empty_at(min_score) for n in negatives)
    said_none_wrong = sum(p.empty_at(min_score) for p in positives)
    said = said_none_right + said_none_wrong
    return {
        "precision": said_none_right / said if said else 1.0,
        "recall": said_none_right / len(negatives) if negatives else 0.0,
        "positives answered empty": said_none_wrong / len(positives) if positives else 0.0,
    }


def mean_metrics(asked: list[Asked], min_score: float) -> dict[str, float]:
    rows = [score(a.cut(min_score), a.evidence, a.session_of) for a in asked]
    return {m: sum(r[m] for r in rows) / len(rows) for m in METRICS}


def asked_time(conversation: dict[str, Any]) -> datetime:
    """When the questions are asked: at the conversation's last session."""
    return max(when for _, _, when in turns(conversation))


def per_conversation(
    samples: list[dict[str, Any]], rankings: Path
) -> dict[str, list[tuple[int, dict[str, float]]]]:
    """namespace -> [(category, metrics)] for the questions a rankings file answers."""
    ranked = {}
    with open(rankings) as lines:
        for line in lines:
            row = json.loads(line)
            ranked[row["query_id"]] = row["ranked"]
    out: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    for sample in samples:
        namespace = sample["sample_id"]
        session_of = {t["dia_id"]: n for n, t, _ in turns(sample["conversation"])}
        for index, qa in enumerate(sample["qa"]):
            if qa["category"] not in CATEGORIES:
                continue
            evidence, _ = evidence_ids(qa.get("evidence", []), set(session_of))
            key = f"{namespace}:q{index}"
            if evidence and key in ranked:
                out[namespace].append((qa["category"], score(ranked[key], evidence, session_of)))
    return out


def loco(samples: list[dict[str, Any]], files: list[Path]) -> int:
    """Leave-one-conversation-out over the configurations `files` hold."""
    runs = {f.stem: per_conversation(samples, f) for f in files}
    conversations = sorted(next(iter(runs.values())))

    def mean(rows: list[tuple[int, dict[str, float]]], category: int | None = None) -> float:
        picked = [m["R@10"] for c, m in rows if category is None or c == category]
        return sum(picked) / len(picked) if picked else 0.0

    held_out: list[tuple[int, dict[str, float]]] = []
    for conversation in conversations:
        best = max(
            runs,
            key=lambda name: mean(
                [
                    row
                    for other in conversations
                    if other != conversation
                    for row in runs[name][other]
                ]
            ),
        )
        print(f"held out {conversation}: picked {best}")
        held_out.extend(runs[best][conversation])
    names = [*runs, "leave-one-out"]
    print(f"{'R@10':<16}" + "".join(f"{n[:14]:>16}" for n in names))
    for category in [*CATEGORIES, None]:
        label = f"{category} {CATEGORIES[category]}" if category else "overall"
        cells = [mean([r for rows in runs[n].values() for r in rows], category) for n in runs]
        cells.append(mean(held_out, category))
        print(f"{label:<16}" + "".join(f"{c:>16.3f}" for c in cells))
    return 0


@dataclass
class Run:
    """What one import path's questions gave."""

    positives: list[Asked] = field(default_factory=list)
    negatives: list[Asked] = field(default_factory=list)
    adversarial: list[Asked] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    intents: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(int))
    )
    degraded: int = 0  # answers without the vector channel (query embedding failed or timed out)
    skipped: int = 0
    dropped: int = 0


def ask_all(
    search: search_pb2_grpc.SearchServiceStub,
    samples: list[dict[str, Any]],
    path: str,
    args: argparse.Namespace,
    rankings: Any,
) -> Run:
    """Every question of every conversation, in the namespaces of `path`."""
    run = Run()
    asked_at = {s["sample_id"]: asked_time(s["conversation"]) for s in samples}

    def ask(sample_id: str, question: str) -> search_pb2.RecallResponse:
        request = search_pb2.RecallRequest(
            namespace=namespace_of(sample_id, path), query=question, limit=10
        )
        request.asked_at.FromDatetime(asked_at[sample_id])
        if args.sweep:
            request.min_score = 0.0
        t0 = time.perf_counter()
        response = search.Recall(request)
        run.latencies.append((time.perf_counter() - t0) * 1000)
        run.degraded += response.degraded
        return response

    for position, sample in enumerate(samples):
        sample_id = sample["sample_id"]
        elsewhere = samples[(position + 1) % len(samples)]["sample_id"]
        session_of = {t["dia_id"]: n for n, t, _ in turns(sample["conversation"])}
        for index, qa in enumerate(sample["qa"]):
            if qa["category"] not in CATEGORIES:
                if args.negatives and qa["category"] == 5:
                    response = ask(sample_id, qa["question"])
                    run.adversarial.append(Asked(5, [r.score for r in response.results]))
                continue
            evidence, lost = evidence_ids(qa.get("evidence", []), set(session_of))
            run.dropped += lost
            response = ask(sample_id, qa["question"])
            run.intents[CATEGORIES[qa["category"]]][
                search_pb2.QueryIntent.Name(response.intent).removeprefix("QUERY_INTENT_")
            ] += 1
            ranked = [r.memory.source_id for r in response.results]
            if rankings:
                rankings.write(
                    json.dumps({"query_id": f"{sample_id}:q{index}", "ranked": ranked}) + "\n"
                )
            if args.negatives and elsewhere != sample_id:
                other = ask(elsewhere, qa["question"])
                run.negatives.append(Asked(qa["category"], [r.score for r in other.results]))
            if not evidence:
                run.skipped += 1
                continue
            run.positives.append(
                Asked(
                    qa["category"],
                    [r.score for r in response.results],
                    ranked,
                    evidence,
                    session_of,
                )
            )
    return run


def rankings_file(base: Path, path: str, paths: list[str]) -> Path:
    """`--rankings-out` for one import path: the file itself for the first, a
    sibling named after the path for each other (`runs.flat.jsonl`)."""
    return base if path == paths[0] else base.with_name(f"{base.stem}.{path}{base.suffix}")


def report(path: str, run: Run, args: argparse.Namespace) -> None:
    latencies = sorted(run.latencies)
    print(f"\n== import path: {path} (namespaces {namespace_of('<conversation>', path)})")
    print(
        f"questions scored: {len(run.positives)} (no usable evidence: {run.skipped}; "
        f"evidence ids dropped: {run.dropped})"
    )
    print(
        f"recall latency over gRPC: p50 {latencies[len(latencies) // 2]:.1f} ms  p95 {latencies[int(len(latencies) * 0.95)]:.1f} ms  "
        f"degraded answers (keywords only): {run.degraded}"
    )
    print(f"min_score: {'0 (sweep below)' if args.sweep else 'the server default'}")
    header = f"{'category':<14}{'n':>5}" + "".join(f"{m:>10}" for m in METRICS)
    print(header)
    groups: dict[str, list[Asked]] = defaultdict(list)
    for asked in run.positives:
        groups[f"{asked.category} {CATEGORIES[asked.category]}"].append(asked)
        groups["overall"].append(asked)
    for name in [*sorted(k for k in groups if k != "overall"), "overall"]:
        rows = groups[name]
        metrics = mean_metrics(rows, 0.0)
        print(f"{name:<14}{len(rows):>5}" + "".join(f"{metrics[m]:>10.3f}" for m in METRICS))
    print(
        "intents: "
        + "; ".join(f"{c}: {dict(sorted(n.items()))}" for c, n in sorted(run.intents.items()))
    )
    if args.negatives:
        summary = none_relevant(run.positives, run.negatives, 0.0)
        print(
            f"no relevant memory (empty answer): {len(run.negatives)} questions asked in another "
            f"conversation; precision {summary['precision']:.3f}  recall {summary['recall']:.3f}  "
            f"questions with evidence answered empty {summary['positives answered empty']:.3f}  "
            f"adversarial (category 5, n={len(run.adversarial)}) answered empty "
            f"{sum(a.empty_at(0.0) for a in run.adversarial) / max(len(run.adversarial), 1):.3f}"
        )
    if args.sweep:
        print(
            f"\n{'min_score':>9}{'R@10':>8}{'Hit@10':>8}{'MRR':>8}{'SessR@10':>9}"
            + (
                f"{'none: P':>9}{'none: R':>9}{'pos. empty':>11}{'adv. empty':>11}"
                if args.negatives
                else ""
            )
        )
        for cut in SWEEP:
            metrics = mean_metrics(run.positives, cut)
            line = (
                f"{cut:>9.2f}{metrics['R@10']:>8.3f}{metrics['Hit@10']:>8.3f}"
                f"{metrics['MRR']:>8.3f}{metrics['SessR@10']:>9.3f}"
            )
            if args.negatives:
                summary = none_relevant(run.positives, run.negatives, cut)
                adv = sum(a.empty_at(cut) for a in run.adversarial) / max(len(run.adversarial), 1)
                line += (
                    f"{summary['precision']:>9.3f}{summary['recall']:>9.3f}"
                    f"{summary['positives answered empty']:>11.3f}{adv:>11.3f}"
                )
            print(line)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--input", type=Path, default=DEFAULT_INPUT)
    parser.add_argument("--rankings-out", type=Path)
    parser.add_argument(
        "--set", action="append", default=[], help="engram.yaml key=value, e.g. search.fusion=rrf"
    )
    parser.add_argument(
        "--negatives", action="store_true", help="also ask each question in another conversation"
    )
    parser.add_argument(
        "--sweep", action="store_true", help="ask with min_score 0 and replay a range of cuts"
    )
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=PATHS,
        default=["sessions"],
        help="import paths, each into namespaces of its own, asked and reported in turn "
        "(sessions: ImportMemories with the conversation's sessions as session_id; turns: "
        "AppendTurn in those sessions; flat: ImportMemories without sessions)",
    )
    parser.add_argument(
        "--conversations", type=int, help="only the first N conversations of --input"
    )
    parser.add_argument(
        "--loco", type=Path, nargs="+", help="rankings files: leave-one-conversation-out, no suite"
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="keep the database here; a directory that already holds one is reused (no import)",
    )
    args = parser.parse_args()
    samples = json.loads(args.input.read_text())[: args.conversations]
    if args.loco:
        return loco(samples, args.loco)
    paths = list(dict.fromkeys(args.paths))
    settings: dict[str, Any] = {}
    for item in args.set:
        merge(settings, parse_setting(item))
    print(provenance.summary(), flush=True)

    reuse = args.data_dir is not None and (args.data_dir / "engram.db").exists()
    if args.data_dir is not None:
        args.data_dir.mkdir(parents=True, exist_ok=True)
    database = provenance.kept_database(
        args.data_dir,
        reuse,
        settings=settings,
        paths=paths,
        conversations=[s["sample_id"] for s in samples],
    )
    if reuse and database is not None and database.get("paths", ["flat"]) != paths:
        raise SystemExit(
            f"{args.data_dir} holds the paths {database.get('paths', ['flat'])}, not {paths}"
        )
    runs: dict[str, Run] = {}
    with running_suite(settings, data_dir=args.data_dir) as suite:
        store_channel = grpc.insecure_channel(suite.store)
        search_channel = grpc.insecure_channel(suite.search)
        store = store_pb2_grpc.MemoryStoreServiceStub(store_channel)
        jobs = job_queue_pb2_grpc.JobQueueServiceStub(grpc.insecure_channel(suite.store_internal))
        search = search_pb2_grpc.SearchServiceStub(search_channel)
        started = time.monotonic()
        memories = (
            0 if reuse else sum(ingest(store, sample, p) for p in paths for sample in samples)
        )
        ingest_s = time.monotonic() - started
        embed_s = wait_embedded(jobs)
        for path in paths:
            out = rankings_file(args.rankings_out, path, paths) if args.rankings_out else None
            with open(out, "w") if out else contextlib.nullcontext() as rankings:
                runs[path] = ask_all(search, samples, path, args, rankings)
            if out:
                provenance.write_beside(
                    out,
                    settings=settings,
                    data_dir=args.data_dir,
                    database=database,
                    import_path=path,
                )

    print(f"input: {args.input}  conversations: {len(samples)}  settings: {settings or 'defaults'}")
    print(
        f"memories: {memories}{' (database reused)' if reuse else ''} over the paths {paths}  "
        f"ingest {ingest_s:.1f} s  embedding wait {embed_s:.1f} s"
    )
    for path, run in runs.items():
        report(path, run, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
