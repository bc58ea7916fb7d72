"""Measures the unlabelled-token secret detector (services.common.pii.high_entropy_token):
how many random tokens it catches and how many look-alikes it flags, per length.

Positives: random base62 and url-safe base64 tokens of 24-64 characters (what API
keys, session tokens and passwords from generators look like). Negatives: git SHAs,
SHA-256 digests, UUIDs (no upper case, so never candidates), long identifiers in
camelCase, PascalCase, snake_case and SCREAMING_CASE with digits, file paths and
URL paths. Run: python bench/pii_entropy.py [--ratio R]; the threshold in pii.py
is the ratio that keeps the negatives at 0 with the most positives caught.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import secrets
import string
import uuid

from services.common import pii

_WORDS = [
    "user",
    "account",
    "settings",
    "tenant",
    "memory",
    "store",
    "recall",
    "search",
    "pipeline",
    "extract",
    "embed",
    "vector",
    "index",
    "cache",
    "server",
    "client",
    "request",
    "response",
    "handler",
    "factory",
    "builder",
    "proxy",
    "session",
    "token",
    "config",
    "value",
    "default",
    "namespace",
    "history",
    "version",
    "update",
    "delete",
    "manager",
    "service",
    "provider",
    "adapter",
    "controller",
    "repository",
    "model",
    "view",
    "abstract",
    "singleton",
    "bean",
    "context",
    "router",
    "worker",
    "queue",
    "lease",
    "job",
    "batch",
    "retry",
    "backoff",
]


def _identifier(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 8))]
    style = rng.randrange(4)
    number = str(rng.randint(0, 2099)) if rng.random() < 0.8 else ""
    if style == 0:
        text = words[0] + "".join(w.title() for w in words[1:])
    elif style == 1:
        text = "".join(w.title() for w in words)
    elif style == 2:
        text = "_".join(words)
    else:
        text = "_".join(w.upper() for w in words)
    position = rng.randint(0, len(text))
    return text[:position] + number + text[position:] if rng.random() < 0.5 else text + number


def _path(rng: random.Random) -> str:
    parts = [
        rng.choice(_WORDS) + (str(rng.randint(1, 99)) if rng.random() < 0.3 else "")
        for _ in range(rng.randint(4, 7))
    ]
    return "/" + "/".join(p.title() if rng.random() < 0.3 else p for p in parts)


def corpus(rng: random.Random, n: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    base62 = string.ascii_letters + string.digits
    positives = {
        f"base62 len {length}": [
            "".join(rng.choice(base62) for _ in range(length)) for _ in range(n)
        ]
        for length in (24, 32, 40, 64)
    }
    positives["token_urlsafe(24) (32 chars)"] = [secrets.token_urlsafe(24) for _ in range(n)]
    positives["token_urlsafe(32) (43 chars)"] = [secrets.token_urlsafe(32) for _ in range(n)]
    negatives = {
        "git sha": [hashlib.sha1(str(i).encode()).hexdigest() for i in range(n)],
        "sha256": [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)],
        "uuid": [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(n)],
        "identifier": [_identifier(rng) for _ in range(n)],
        "path": [_path(rng) for _ in range(n)],
    }
    return positives, negatives


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--ratios", default="0.80,0.84,0.88")
    args = parser.parse_args()
    positives, negatives = corpus(random.Random(18), args.n)
    for ratio in (float(r) for r in args.ratios.split(",")):
        pii.ENTROPY_RATIO = ratio  # the measurement's knob: this script only
        caught = {k: sum(bool(pii.scan(v)) for v in vs) / len(vs) for k, vs in positives.items()}
        flagged = {k: sum(bool(pii.scan(v)) for v in vs) / len(vs) for k, vs in negatives.items()}
        print(f"ratio {ratio:.2f}")
        for name, share in caught.items():
            print(f"  caught  {name:30s} {share:7.2%}")
        for name, share in flagged.items():
            print(f"  flagged {name:30s} {share:7.2%}")


if __name__ == "__main__":
    main()
