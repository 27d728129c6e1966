"""Prompt logprobs: the log-probability of each prompt token given the tokens before it (the first has none).

A request that asks for them has every prompt position's logits computed by its prefill (SeqChunk.all_logits),
in chunks of at most PROMPT_LOGPROBS_CHUNK tokens: 64 rows of fp32 logits and their temporaries (64 x 248K x
~12 B = 190 MB) fit in what the memory plan reserves for the activations of a full --prefill-chunk (2048 tokens
by default), which such a short chunk leaves unused. Such a request never takes a cached prefix (those tokens
are not run, so they have no logits). Values are log_softmax of the model's raw logits: no logit_bias,
penalties or temperature, as an evaluator wants them.
"""

from __future__ import annotations

import torch

from hinfer.engine.protocol import TopLogprob
from hinfer.engine.sequence import Sequence

PROMPT_LOGPROBS_CHUNK = 64


def wants_prompt_logprobs(seq: Sequence) -> bool:
    return seq.params.prompt_logprobs is not None and seq.in_prefill


def record_prompt_logprobs(seq: Sequence, start: int, logits: torch.Tensor) -> None:
    """`logits` [n, V]: the rows of prompt positions start..start+n-1; row j scores the token at start+j+1."""
    prompt = seq.prompt_ids
    if seq.prompt_logprobs is None:
        seq.prompt_logprobs, seq.prompt_top_logprobs, seq.prompt_ranks = [None], [None], [None]
    targets = prompt[start + 1 : start + 1 + logits.shape[0]]
    if not targets:
        return
    z = logits[: len(targets)].float()
    lse = torch.logsumexp(z, dim=-1, keepdim=True)
    ids = torch.tensor(targets, dtype=torch.int64, device=z.device)
    picked = z.gather(1, ids[:, None])
    seq.prompt_logprobs += (picked - lse)[:, 0].tolist()
    seq.prompt_ranks += ((z > picked).sum(dim=-1) + 1).tolist()  # 1: the model's most likely token
    n = seq.params.prompt_logprobs or 0
    if n:
        top_v, top_i = torch.topk(z, n, dim=-1)
        tv, ti = (top_v - lse).tolist(), top_i.tolist()
        seq.prompt_top_logprobs += [[TopLogprob(i, v) for i, v in zip(ti[r], tv[r])] for r in range(len(targets))]
    else:
        seq.prompt_top_logprobs += [None] * len(targets)
