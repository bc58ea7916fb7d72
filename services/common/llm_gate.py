"""The one gate for every LLM decision that would remove, merge, supersede or
rewrite a memory (issue 34; seed 000 "Pipeline Modes").

Two paths let a model's answer change memories that exist: the extraction
decisions UPDATE and DELETE (services/store/extraction_writes.py) and the
near-duplicate review's merge and replace (services/pipeline/near_dup.py,
applied by services/store/dedup.py). Both ask `refusal` here, with the
store's own settings, and apply the decision only when it answers "":

- shadow mode (`shadowMode`, or `mutationsFrozen`): nothing is applied;
- controlled mode (the default once `enabled`): nothing an LLM decided
  that changes an existing memory is applied, the proposal is recorded;
- full mode (`allowUpdateDelete`): applied, after each path's own guards.

A model that obeys instructions planted in a memory ("forget X") can then
change nothing in shadow and controlled mode. What the deterministic rules
decide (a repeat merged, a newer value superseding by the value rule:
services/common/fact_values.py) is not an LLM decision: shadow mode records
it, the other modes apply it (`records_only`).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.config import PipelineV2Settings

SHADOW_MODE = "shadow_mode"
MUTATIONS_FROZEN = "mutations_frozen"
CONTROLLED_MODE = "destructive_mutations_disabled"  # seed 000's reason for a blocked UPDATE/DELETE

# ResolveNearDuplicate's decided_by for the model (the only one the gate holds back
# in controlled mode)
DECIDED_BY_LLM = "llm"


@dataclass(frozen=True)
class LlmGate:
    """The `memory.pipelineV2.*` switches that decide what may change."""

    shadow: bool = False
    frozen: bool = False  # mutationsFrozen: shadow mode, whatever `shadow` says
    allow_update_delete: bool = False

    @classmethod
    def from_settings(cls, pipeline: PipelineV2Settings) -> LlmGate:
        return cls(pipeline.shadowMode, pipeline.mutationsFrozen, pipeline.allowUpdateDelete)

    @property
    def records_only(self) -> bool:
        """Shadow mode: every decision is recorded, none applied."""
        return self.shadow or self.frozen

    def records_only_reason(self) -> str:
        """Why nothing at all is applied ("" when something may be)."""
        if self.frozen:
            return MUTATIONS_FROZEN
        return SHADOW_MODE if self.shadow else ""

    def refusal(self) -> str:
        """Why an LLM decision that would remove, merge, supersede or rewrite a
        memory is not applied; "" when it may be (full mode)."""
        return self.records_only_reason() or ("" if self.allow_update_delete else CONTROLLED_MODE)

    def mode(self) -> str:
        """shadow | controlled | full, as seed 000 names them (audit and logs)."""
        if self.records_only:
            return "shadow"
        return "full" if self.allow_update_delete else "controlled"


def describe(reason: str) -> str:
    """A refusal in words, for a history event's reason."""
    return {
        SHADOW_MODE: "shadow mode",
        MUTATIONS_FROZEN: "mutations frozen",
        CONTROLLED_MODE: "controlled mode",
    }.get(reason, reason.replace("_", " "))
