"""bench/fact_updates.py end to end at a tiny size: a real suite (store, search,
pipeline on a SQLite file, the local model), every write accounted for, one
question per fact now and as of a past week. No thresholds: what the code under
test scores is the benchmark's business, not this test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEPT = {"live", "superseded", "merged_identical", "merged_same_value"}
LOSSES = {
    "merged_other_value",
    "merged_other_fact",
    "deleted",
    "closed_without_link",
    "superseded_by_other_fact",
}


def test_a_tiny_run_reports_every_write_and_every_question(tmp_path: Path) -> None:
    out = tmp_path / "fact_updates.json"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "fact_updates.py"),
            "--subjects",
            "4",
            "--facts",
            "24",
            "--json-out",
            str(out),
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    report = json.loads(out.read_text())
    sizes = report["sizes"]
    assert sizes["facts"] == 24 and sizes["subjects"] == 4
    assert sizes["writes"] == sum(sizes["by_kind"].values()) == sum(sizes["by_path"].values())
    assert sizes["by_kind"]["initial"] == 24
    assert set(sizes["by_path"]) == {"remember", "import"}
    # each fact changes 1-5 times after week 0
    changes = sizes["by_kind"].get("change", 0) + sizes["by_kind"].get("paraphrase", 0)
    assert 24 <= changes <= 5 * 24
    # every write has exactly one fate, and the losses are the fates outside KEPT
    fates = report["fates"]
    assert set(fates) <= KEPT | LOSSES
    assert sum(fates.values()) == sizes["writes"]
    assert report["silent_losses"] == sum(n for name, n in fates.items() if name in LOSSES)
    assert report["wrong_merges"] == fates.get("merged_other_value", 0) + fates.get(
        "merged_other_fact", 0
    )
    assert len(report["lost_examples"]) == min(20, report["silent_losses"])
    assert sum(sum(by_path.values()) for by_path in report["fates_by_path"].values()) == sum(
        fates.values()
    )
    repeats = report["repeats"]
    assert repeats["identical"]["total"] == sum(
        repeats["by_kind"][kind]["total"] for kind in ("repeat", "repeat_normalised")
    )
    for asked in (report["now"], report["as_of"]):
        assert asked["questions"] == 24
        for share in ("current_first", "current_first_of_fact", "current_in_top10"):
            assert 0.0 <= asked[share] <= 1.0
        # rank 1 stating the value is also the fact's best-ranked memory stating it
        assert asked["current_first"] <= asked["current_first_of_fact"]
    assert report["queue"] and all(
        not key.endswith(("/JOB_STATUS_PENDING", "/JOB_STATUS_LEASED")) for key in report["queue"]
    )
    assert report["runtime"]["git_commit"]
