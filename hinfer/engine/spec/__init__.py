"""Speculative decoding: MTP drafts, one target pass verifies them, GDN state rolls back by slot choice.

See docs/speculative.md. `make_spec_decoder` builds the decoder the engine core uses when `--spec mtp` is set.
"""

from __future__ import annotations

import logging

import torch

from hinfer.config import EngineConfig
from hinfer.engine.runner import ModelRunner
from hinfer.engine.spec.adaptive import AdaptivePolicy, StepCosts
from hinfer.engine.spec.decoder import LaneOutput, SpecDecoder
from hinfer.engine.spec.drafter import Drafter, DraftJob, Proposal
from hinfer.engine.spec.mtp import MTPDrafter
from hinfer.engine.spec.ngram import NgramDrafter
from hinfer.errors import ConfigError
from hinfer.model.qwen3_5 import Qwen35ForCausalLM

log = logging.getLogger("hinfer.spec")

__all__ = ["AdaptivePolicy", "StepCosts", "Drafter", "DraftJob", "LaneOutput", "MTPDrafter", "NgramDrafter", "Proposal",
           "SpecDecoder", "make_spec_decoder"]


def draft_head(model: Qwen35ForCausalLM, vocab: int | None = None):
    """The drafter's lm_head copy in the model's weight format (the default recipe of that format), or None for a
    model whose projections are not quantized (it then shares the model's lm_head). `vocab`: only the first
    `vocab` rows (token ids), a view of the model's own rows when they are not quantized."""
    from hinfer.quant import Fp8Weight, Int4Weight
    from hinfer.quant.apply import quantize_weight
    from hinfer.quant.int4_mma_weight import Int4MmaWeight, use_fragment_order
    from hinfer.quant.recipes import get_recipe

    kinds = {type(m) for m in model.modules()}
    fmt = "int4" if kinds & {Int4Weight, Int4MmaWeight} else "fp8" if Fp8Weight in kinds else None
    if model.mtp is None or (fmt is None and vocab is None):
        return None
    if vocab is not None and model.tp.size > 1:
        raise ConfigError("--spec-draft-vocab with tensor parallelism: not supported (the lm_head is split by rank)")
    w = model.embed_tokens if model.lm_head is None else model.lm_head
    if not isinstance(w, torch.Tensor):  # the model's head is quantized already (--lm-head): drafts share it
        return None
    w = w.detach()[: vocab or w.shape[0]]
    if fmt is None:
        return w
    head = use_fragment_order(quantize_weight(w, get_recipe(fmt)))
    log.info("MTP drafter: own %s lm_head copy (%.2f GB)", fmt, sum(b.numel() * b.element_size()
                                                                     for b in head.buffers()) / 1e9)
    return head


def make_spec_decoder(runner: ModelRunner, ecfg: EngineConfig) -> SpecDecoder:
    """The decoder for `ecfg.spec` ("mtp": the checkpoint's MTP head drafts; "ngram": prompt lookup)."""
    vocab = ecfg.spec_draft_vocab
    if vocab is not None and vocab >= runner.model.cfg.vocab_size:
        vocab = None  # the whole vocabulary anyway
    drafter: Drafter
    if ecfg.spec == "ngram":
        drafter = NgramDrafter()
    else:
        drafter = MTPDrafter(runner.model, runner.state, runner.sampler, draft_head(runner.model, vocab),
                             argmax_sampled=ecfg.spec_draft == "argmax")  # fmt: skip
    policy = None
    if ecfg.spec_adaptive:
        c = ecfg.spec_draft_cost
        costs = StepCosts(ecfg.draft_tokens, measure=c is None, **({} if c is None else {"draft_cost": c}))
        policy = AdaptivePolicy(ecfg.draft_tokens, costs)
    dec = SpecDecoder(runner, ecfg.draft_tokens, drafter, ecfg.max_context, policy)
    if runner.graphs is not None:  # the runner has decode graphs: verify and draft steps get theirs
        dec.use_graphs(ecfg.max_concurrency, capture=runner.device.type == "cuda")
    return dec
