"""Speculative decoding: MTP drafts, one target pass verifies them, GDN state rolls back by slot choice.

See docs/speculative.md. `make_spec_decoder` builds the decoder the engine core uses when `--spec mtp` is set.
"""

from __future__ import annotations

from hinfer.config import EngineConfig
from hinfer.engine.runner import ModelRunner
from hinfer.engine.spec.decoder import LaneOutput, SpecDecoder
from hinfer.engine.spec.drafter import Drafter, DraftJob, Proposal
from hinfer.engine.spec.mtp import MTPDrafter

__all__ = ["Drafter", "DraftJob", "LaneOutput", "MTPDrafter", "Proposal", "SpecDecoder", "make_spec_decoder"]


def make_spec_decoder(runner: ModelRunner, ecfg: EngineConfig) -> SpecDecoder:
    """The decoder for `ecfg.spec` ("mtp": the checkpoint's MTP head drafts)."""
    drafter = MTPDrafter(runner.model, runner.state, runner.sampler)
    dec = SpecDecoder(runner, ecfg.draft_tokens, drafter, ecfg.max_context)
    if runner.graphs is not None:  # the runner has decode graphs: verify and draft steps get theirs
        dec.use_graphs(ecfg.max_concurrency, capture=runner.device.type == "cuda")
    return dec
