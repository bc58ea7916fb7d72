"""bench/embed_cache.py records which embedding runtime wrote its vectors and warns
when vectors of two runtimes would be mixed (real SQLite files, the real model)."""

from __future__ import annotations

import json
import sqlite3

import httpx


def test_a_new_cache_records_its_runtime_and_does_not_warn(embed_cache, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    cache = embed_cache.VectorCache(tmp_path / "vectors.sqlite")
    assert cache.recorded_runtimes() == []
    assert cache.runtime_warning() is None  # nothing written yet
    cache.vectors(["the first text"])
    assert cache.recorded_runtimes() == [cache.runtime]
    assert cache.runtime_warning() is None
    assert capsys.readouterr().err == ""


def test_another_runtime_is_named_when_filling_or_serving(embed_cache, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "vectors.sqlite"
    embed_cache.VectorCache(path).vectors(["written by this install"])
    current = embed_cache.VectorCache(path).runtime
    older = {**current, "onnxruntime": "1.20.0", "tokenizers": "0.20.0"}
    # the file as another install (onnxruntime 1.20) left it: its row, then ours
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM runtimes")
        db.execute("INSERT INTO runtimes VALUES ('2026-01-01T00:00:00Z', ?)", (json.dumps(older),))
    capsys.readouterr()

    cache = embed_cache.VectorCache(path)
    warning = cache.runtime_warning()
    assert warning is not None and "mixes vectors of two runtimes" in warning
    assert f"onnxruntime 1.20.0 -> {current['onnxruntime']}" in warning
    assert f"tokenizers 0.20.0 -> {current['tokenizers']}" in warning
    with embed_cache.serving(cache) as settings:  # serving warns before the first answer
        assert capsys.readouterr().err.strip() == warning
        answer = httpx.post(
            settings["providers"]["embedding"]["base_url"] + "/api/embed",
            json={"model": "m", "input": ["a text the cache lacks"]},
        )
        assert len(answer.json()["embeddings"][0]) == 384
    err = capsys.readouterr().err  # the first write under this runtime says so too
    assert "WARNING" in err and "onnxruntime 1.20.0 ->" in err
    assert cache.recorded_runtimes() == [older, current]


def test_a_cache_from_before_runtimes_were_recorded_gets_the_current_one(
    embed_cache, tmp_path, capsys
) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "vectors.sqlite"
    with sqlite3.connect(path) as db:  # what the cache wrote before it had a runtimes table
        db.execute("CREATE TABLE vectors (key BLOB PRIMARY KEY, vector BLOB)")
        db.execute("INSERT INTO vectors VALUES (?, ?)", (embed_cache.key("old"), b"\0" * 1536))
    cache = embed_cache.VectorCache(path)
    warning = cache.runtime_warning()
    assert warning is not None and "before the cache recorded its runtime" in warning
    cache.fill(["a new text"], budget_s=600)
    assert "recorded the current runtime" in capsys.readouterr().err
    assert cache.recorded_runtimes() == [cache.runtime]
    assert cache.runtime_warning() is None
