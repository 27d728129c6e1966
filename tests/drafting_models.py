"""Models whose MTP head drafts what the target will say, for tests that need drafts accepted (shared by the CPU
and GPU speculative tests).

`repeat_head`: the lm_head keeps two opposite rows (ids 3 and 4; every other id scores 0), so the target picks one
of two tokens, and the head's fc passes the target's hidden state through (its attention layer still adds its
part over its KV), so its draft is mostly the target's last choice: a round accepts as many drafts as the text
repeats, 0 to K.

`alternating`: the same two rows, the target's layers silenced (their output projections zero) and ids 3 and 4
embedded along -w and +w, so the target alternates 3, 4, 3, ... whatever it read before; the head passes the
negated hidden state through, its layer silenced too, so each draft step flips the token: every draft is right,
and a round's drafts differ from one step to the next (a step's draft lost to a later one shows)."""

from __future__ import annotations

import torch

from hinfer.model.qwen3_5 import Qwen35ForCausalLM

SILENT = ("o_proj", "out_proj", "down_proj")  # a dense layer's writes into the residual stream


def _two_rows(model: Qwen35ForCausalLM, seed: int) -> torch.Tensor:
    w = torch.randn(model.cfg.hidden_size, generator=torch.Generator().manual_seed(seed))
    w = w.to(model.lm_head.dtype).to(model.lm_head.device)
    model.lm_head.zero_()
    model.lm_head[3], model.lm_head[4] = w, -w
    return w


def _pass_hidden(model: Qwen35ForCausalLM, sign: float) -> None:
    h = model.cfg.hidden_size
    model.mtp.fc.zero_()
    model.mtp.fc[:, h:] = sign * torch.eye(h, dtype=model.mtp.fc.dtype, device=model.mtp.fc.device)
    model.mtp.pre_fc_norm_hidden.zero_()  # (1 + weight) norms: the identity scale


@torch.no_grad()
def repeat_head(model: Qwen35ForCausalLM, seed: int = 1) -> Qwen35ForCausalLM:
    _two_rows(model, seed)
    _pass_hidden(model, 1.0)
    return model


@torch.no_grad()
def alternating(model: Qwen35ForCausalLM, seed: int = 1) -> Qwen35ForCausalLM:
    w = _two_rows(model, seed)
    _pass_hidden(model, -1.0)
    for name, p in model.named_parameters():
        if name.split(".")[-1] in SILENT:
            p.zero_()
    model.norm.zero_()  # the final norms at the identity scale: the hidden state keeps the embedding's sign
    model.mtp.norm.zero_()
    model.embed_tokens[3], model.embed_tokens[4] = -w, w
    return model
