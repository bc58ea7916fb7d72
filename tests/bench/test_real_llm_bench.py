"""bench/real_llm.py end to end at a tiny size, against its scripted baseline only (the
real model's run is the benchmark's, not the suite's): a real suite, the recording proxy,
every answer re-read by the pipeline's parsers. No thresholds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_scripted_run_counts_every_job_and_call(tmp_path: Path) -> None:
    out = tmp_path / "real_llm.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "real_llm.py"),
            "--only",
            "scripted",
            "--memories",
            "12",
            "--json-out",
            str(out),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    [run] = json.loads(out.read_text())["runs"]
    assert run["name"] == "scripted" and run["memories"] == 12
    assert run["completed"] + run["dead"] == run["extract_jobs"] == 12
    # the baseline answers two facts per memory and one decision per fact it is asked
    assert run["stages"]["extraction"]["calls"] == 12
    assert run["stages"]["extraction"]["parse_share"] == 1.0
    assert run["facts_per_memory"] == 2.0
    assert sum(run["outcomes"].values()) == 24
