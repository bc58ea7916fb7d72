"""bench/real_llm.py end to end at a tiny size, against its scripted baseline only (the
real model's run is the benchmark's, not the suite's): a real suite, the recording proxy,
every answer re-read by the pipeline's parsers. No thresholds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "real_llm.py"), *args],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )


def test_a_tiny_scripted_run_counts_every_job_and_call(tmp_path: Path) -> None:
    out = tmp_path / "real_llm.json"
    _bench("--only", "scripted", "--memories", "12", "--json-out", str(out))
    [run] = json.loads(out.read_text())["runs"]
    assert run["name"] == "scripted" and run["memories"] == 12
    assert run["completed"] + run["dead"] == run["extract_jobs"] == 12
    # the baseline answers two facts per memory and one decision per fact it is asked
    assert run["stages"]["extraction"]["calls"] == 12
    assert run["stages"]["extraction"]["parse_share"] == 1.0
    assert run["facts_per_memory"] == 2.0
    assert sum(run["outcomes"].values()) == 24


def test_parts_add_up_to_the_whole(tmp_path: Path) -> None:
    """Two parts (--offset) combined count every memory, job and call of both."""
    first, second, whole = (tmp_path / f"{n}.json" for n in ("first", "second", "whole"))
    _bench("--only", "scripted", "--memories", "5", "--json-out", str(first))
    _bench("--only", "scripted", "--memories", "7", "--offset", "5", "--json-out", str(second))
    _bench("--combine", str(first), str(second), "--json-out", str(whole))
    parts = [json.loads(p.read_text())["runs"][0] for p in (first, second)]
    [run] = json.loads(whole.read_text())["runs"]
    assert run["memories"] == run["extract_jobs"] == 12
    assert run["completed"] + run["dead"] == 12
    assert run["llm_calls"] == sum(p["llm_calls"] for p in parts)
    assert run["stages"]["extraction"]["calls"] == 12
    assert sum(run["outcomes"].values()) == 24
