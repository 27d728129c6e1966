"""Host time the grammar work takes, summed over the engine's life (what structured output costs the CPU).

The fill overlaps the device (the model's step is queued before the sampler runs); taking the sampled tokens
comes after the step's one host sync, so it adds to the step. Read through `EngineCore.stats().extra`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GrammarCounters:
    steps: int = 0  # sampler calls with at least one live grammar
    masks: int = 0  # bitmask rows filled (constrained lanes x steps)
    fill_s: float = 0.0  # matchers filling their bitmask rows (xgrammar)
    apply_s: float = 0.0  # host side of the masking: pinning the bitmask, launching the unpack and fill
    accept_s: float = 0.0  # matchers taking the sampled tokens
    accepted: int = 0  # tokens fed to matchers

    def as_dict(self) -> dict[str, float]:
        """Flat figures for `EngineStats.extra` (empty while no grammar ran: unconstrained engines show none)."""
        if not self.steps:
            return {}
        return {"grammar_steps": self.steps, "grammar_masks": self.masks, "grammar_fill_s": self.fill_s,
                "grammar_apply_s": self.apply_s, "grammar_accept_s": self.accept_s,
                "grammar_accepted": self.accepted}  # fmt: skip
