"""bench/provenance.py: what produced a benchmark figure, read from this install."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import tomllib
from pathlib import Path

import numpy
import onnxruntime
import sqlean
import tokenizers
from packaging.requirements import Requirement

from services.common.providers.local_embedding import ONNX_SHA256, tokenizer_file

ROOT = Path(__file__).resolve().parents[2]


def test_the_record_names_this_install(provenance) -> None:  # type: ignore[no-untyped-def]
    record = provenance.record()
    assert set(record) == {
        "python",
        "platform",
        "machine",
        "cpu",
        "onnxruntime",
        "tokenizers",
        "numpy",
        "sqlite",
        "sqlite_vec",
        "model_sha256",
        "tokenizer_sha256",
        "git_commit",
        "git_dirty",
    }
    assert record["python"] == platform.python_version()
    assert record["machine"] == platform.machine()
    assert record["cpu"]
    assert record["onnxruntime"] == onnxruntime.__version__
    assert record["tokenizers"] == tokenizers.__version__
    assert record["numpy"] == numpy.__version__
    assert record["sqlite"] == sqlean.sqlite_version  # the store's SQLite, not the stdlib's
    assert record["model_sha256"] == ONNX_SHA256  # the file the local provider loads
    assert record["tokenizer_sha256"] == hashlib.sha256(tokenizer_file().read_bytes()).hexdigest()
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    assert record["git_commit"] == head.stdout.strip()
    assert isinstance(record["git_dirty"], bool)
    # every embedding field is a field of the record
    assert set(provenance.EMBEDDING_KEYS) <= set(record)


def test_the_installed_runtime_is_the_pinned_one(provenance) -> None:  # type: ignore[no-untyped-def]
    """pyproject.toml pins the embedding runtime the figures were measured with."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = {
        Requirement(r).name: Requirement(r).specifier
        for r in extra["optional-dependencies"]["local"]
    }
    record = provenance.record()
    for name in ("onnxruntime", "tokenizers"):
        assert str(pins[name]) == f"=={record[name]}"


def test_results_and_rankings_carry_the_record(provenance, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert provenance.stamped({"p50": 1.0}) == {"p50": 1.0, "runtime": provenance.record()}
    rankings = tmp_path / "run.jsonl"
    written = provenance.write_beside(
        rankings, settings={"search": {"fusion": "rrf"}}, data_dir=tmp_path
    )
    assert written == tmp_path / "run.jsonl.runtime.json"
    beside = json.loads(written.read_text())
    assert beside["runtime"] == provenance.record()
    assert beside["settings"] == {"search": {"fusion": "rrf"}}
    assert beside["data_dir"] == str(tmp_path)


def test_a_kept_database_keeps_what_built_it(provenance, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert provenance.kept_database(None, False) is None
    assert provenance.kept_database(tmp_path, True) is None  # built before it was recorded
    built = provenance.kept_database(tmp_path, False, settings={"a": 1})
    assert built is not None and built["runtime"] == provenance.record()
    assert provenance.kept_database(tmp_path, True) == built  # a reuse reads it back
