"""The one gate for LLM decisions that change memories (services/common/llm_gate.py):
seed 000's modes from the `memory.pipelineV2.*` switches."""

from __future__ import annotations

import pytest

from services.common.config import PipelineV2Settings
from services.common.llm_gate import (
    CONTROLLED_MODE,
    MUTATIONS_FROZEN,
    SHADOW_MODE,
    LlmGate,
    describe,
)


@pytest.mark.parametrize(
    ("switches", "mode", "refusal", "records_only"),
    [
        ({"enabled": True}, "controlled", CONTROLLED_MODE, False),
        ({"enabled": True, "allowUpdateDelete": True}, "full", "", False),
        (
            {"enabled": True, "shadowMode": True, "allowUpdateDelete": True},
            "shadow",
            SHADOW_MODE,
            True,
        ),
        (
            {"enabled": True, "mutationsFrozen": True, "allowUpdateDelete": True},
            "shadow",
            MUTATIONS_FROZEN,
            True,
        ),
    ],
)
def test_only_full_mode_applies_an_llm_change(
    switches: dict[str, bool], mode: str, refusal: str, records_only: bool
) -> None:
    gate = LlmGate.from_settings(PipelineV2Settings(**switches))
    assert (gate.mode(), gate.refusal(), gate.records_only) == (mode, refusal, records_only)


def test_the_default_settings_apply_no_llm_change() -> None:
    assert LlmGate.from_settings(PipelineV2Settings()).refusal() == CONTROLLED_MODE


def test_a_refusal_reads_as_the_mode() -> None:
    assert describe(CONTROLLED_MODE) == "controlled mode"
    assert describe("values_differ") == "values differ"
