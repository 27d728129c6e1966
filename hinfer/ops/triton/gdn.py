"""Triton twins of hinfer.ops.gdn: causal_conv1d, gdn_gating, gated_delta_rule and their composition
gated_delta_net (same signatures/semantics; the composition runs one fused kernel for short sequences).

gated_delta_rule has two paths behind one call: sequences of <= RECURRENT_MAX_TOKENS new tokens (decode,
speculative verify, short tails) go to the recurrent kernel (gdn_recurrent.py); longer ones to the chunked
kernels (gdn_chunk.py). A decode-only batch launches exactly one kernel whose grid depends only on the
batch shape, so it can be captured in a CUDA graph. In a verify batch (gdn_step_slots set) the threshold is
VERIFY_MAX_TOKENS, so every verify row gets its per-token states; a longer row there is taken to be a
non-verify prefill row (its step slots all equal its own slot, as build_forward_batch makes them), and the
chunked path writes its final state to gdn_step_slots[b, n-1], i.e. that slot, as the reference does.
Tile settings are module constants so the benchmark can sweep them (bench/gdn_kernels.py); one setting serves
every model, so they stay out of the shape-keyed tile tables (hinfer/ops/triton/tiles/). The chunked
state kernel is a sequential chain per (sequence, head, V block): its programs must all be resident at once
(one wave), hence BV=32 with one pipeline stage (57 KB shared memory, 229 registers: 2 CTAs per SM).
"""

from __future__ import annotations

import os

import torch

from hinfer.batch import ForwardBatch
from hinfer.ops.triton.gdn_chunk import chunked_launch
from hinfer.ops.triton.gdn_conv import causal_conv1d_launch, gdn_gating_launch
from hinfer.ops.triton.gdn_decode import fused_decode_launch
from hinfer.ops.triton.gdn_recurrent import recurrent_launch
from hinfer.ops.triton.norm import gated_rms_norm


def tiles_from_env(name: str, default: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """Tile rows from the environment variable `name` ("most:BV:warps[:max registers],..."; most may be "inf"), to
    time other rows in the decode graph without editing this module; `default` when unset."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    rows = []
    for item in text.split(","):
        parts = item.strip().split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"{name}: {item!r} is not most:BV:warps[:max registers]")
        rows.append(tuple(1 << 30 if p == "inf" else int(p) for p in parts))
    return tuple(rows)


RECURRENT_MAX_TOKENS = 8  # sequences up to this many new tokens run the recurrent kernel
VERIFY_MAX_TOKENS = 16  # the same in a verify batch: every verify row (draft tokens + 1) must fit
# recurrent kernel tiles by sequences in the batch: rows (most sequences, V columns per program, warps), the first
# row that covers the batch wins. H200 sweep 2026-12-02 (bench/gdn_kernels.py --sweep), us per layer: 1 lane 4.53
# at (16, 1) vs 4.80 at (16, 2); 8 lanes 17.7 at (32, 2) vs 25.4; verify 8 x 4 tokens 42.4 vs 53.8
DECODE_TILES: tuple[tuple[int, int, int], ...] = ((2, 16, 1), (16, 32, 2), (1 << 30, 16, 2))
CHUNK = {
    "BT": 64,
    "PREC": "tf32",
    "prep_warps": 4,  # H200 sweep 2026-11-30: 2.19 ms vs 2.49 ms per 8K-token layer at 8 warps
    "state_BV": 32,
    "state_warps": 4,
    "state_stages": 1,
    "out_BV": 64,
    "out_warps": 4,  # H200 sweep 2026-11-30 (with prep at 4 warps): 1.96 ms vs 2.18 ms at 8 warps
}
CONV = {"small_q": 16, "BT": 16, "BC": 128, "num_warps": 4}
# conv + gates + rule + norm in one kernel when every sequence has one new token (HINFER_GDN_FUSED=0: the four
# kernels, to compare), tiles as DECODE_TILES: 9.2 us per layer at 1 lane against ~11 for the four kernels, 29.3 at
# 8 lanes (about even, fewer launches). Up to 4 tokens per sequence (a verify step at K = 3) too: since its tickets
# were reworked it made the 27B int4 MTP round at one lane 8.79 / 8.65 -> 8.34 / 8.33 ms, at eight even (16.0 ms;
# H200, 2026-12-03); before, the four kernels had won there (1 x 4: 22 us vs ~18; 8 x 4: 74 vs ~54).
# HINFER_GDN_FUSED=N: up to N new tokens per sequence (1: decode only), 0: never
FUSED_MAX_TOKENS = int(os.environ.get("HINFER_GDN_FUSED", "4"))  # new tokens per sequence, at most
# fused step tiles: (most sequences, BV, warps[, max registers: the launch's maxnreg, 0 = the compiler's choice])
FUSED_TILES: tuple[tuple[int, ...], ...] = tiles_from_env("HINFER_GDN_FUSED_TILES", ((2, 16, 1), (1 << 30, 32, 2)))
# The fused step reads its state block ahead of the PDL wait (gdn_decode.fused_decode_launch's `early`; 0: after
# it): int4 decode at one lane +3.0% on the 35B-A3B, +2.7% on the 27B, even at 8 lanes (H200, 2026-12-03)
FUSED_EARLY = os.environ.get("HINFER_GDN_EARLY", "1") == "1"


def pick_tile(tiles: tuple[tuple[int, ...], ...], seqs: int) -> tuple[int, ...]:
    """The settings (BV, num_warps[, max registers]) of the first row of `tiles` whose sequence bound covers
    `seqs`."""
    return next(row[1:] for row in tiles if seqs <= row[0])


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Output allocation (tests patch this to poison outputs with NaN)."""
    return torch.empty(shape, dtype=dtype, device=device)


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def causal_conv1d(
    x: torch.Tensor, weight: torch.Tensor, conv_state: torch.Tensor, batch: ForwardBatch
) -> torch.Tensor:
    x = _unit_last(x)
    y = _empty(tuple(x.shape), x.dtype, x.device)
    causal_conv1d_launch(
        x, _unit_last(weight), conv_state, y, batch.cu_q_lens, batch.gdn_slots, batch.gdn_step_slots,
        batch.q_lens_cpu, CONV["small_q"], CONV["BT"], CONV["BC"], CONV["num_warps"],
    )  # fmt: skip
    return y


def gdn_gating(
    a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = _unit_last(a), _unit_last(b)
    g = _empty(tuple(a.shape), torch.float32, a.device)
    beta = _empty(tuple(a.shape), torch.float32, a.device)
    gdn_gating_launch(a, b, a_log.contiguous(), dt_bias.contiguous(), g, beta)
    return g, beta


def gated_delta_rule(
    q: torch.Tensor,  # [T, HK, K]
    k: torch.Tensor,  # [T, HK, K]
    v: torch.Tensor,  # [T, HV, V]
    g: torch.Tensor,  # [T, HV] fp32
    beta: torch.Tensor,  # [T, HV] fp32
    ssm_state: torch.Tensor,  # [S, HV, K, V] fp32, one layer
    batch: ForwardBatch,
) -> torch.Tensor:
    q, k, v, g, beta = (_unit_last(x) for x in (q, k, v, g, beta))
    kd, vd = q.shape[-1], v.shape[-1]
    if kd & (kd - 1) or vd & (vd - 1) or min(kd, vd) < 16:
        raise ValueError(f"gated_delta_rule kernels need power-of-2 head dims >= 16, got K={kd} V={vd}")
    o = _empty(tuple(v.shape), v.dtype, v.device)
    lens = batch.q_lens_cpu
    max_n = _max_short(batch)
    long_seqs = [b for b, n in enumerate(lens) if n > max_n]
    if len(long_seqs) < len(lens):
        recurrent_launch(
            q, k, v, g, beta, ssm_state, o, batch.cu_q_lens, batch.gdn_slots, batch.gdn_step_slots,
            len(lens), max_n, *pick_tile(DECODE_TILES, len(lens)),
        )  # fmt: skip
    if long_seqs:
        chunked_launch(
            q, k, v, g, beta, ssm_state, o, batch.cu_q_lens, batch.gdn_slots, batch.gdn_step_slots,
            lens, long_seqs, CHUNK,
        )  # fmt: skip
    return o


def _max_short(batch: ForwardBatch) -> int:
    """The most new tokens a sequence may have and still take the recurrent (or fused) kernel."""
    return RECURRENT_MAX_TOKENS if batch.gdn_step_slots is None else max(RECURRENT_MAX_TOKENS, VERIFY_MAX_TOKENS)


def gated_delta_net(
    qkv: torch.Tensor,  # [T, 2 HK K + HV V] in_proj's q, k, v rows, before the conv
    a: torch.Tensor,  # [T, HV]
    b: torch.Tensor,  # [T, HV]
    z: torch.Tensor,  # [T, HV, V]
    a_log: torch.Tensor,
    dt_bias: torch.Tensor,
    conv_weight: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    conv_state: torch.Tensor,
    ssm_state: torch.Tensor,
    batch: ForwardBatch,
    heads: tuple[int, int, int, int],  # HK, K, HV, V
) -> torch.Tensor:
    """hinfer.ops.gdn.gated_delta_net: one fused kernel (the output norm included) when every sequence has one new
    token (decode), else the conv, the gates, the rule's and the norm's kernels."""
    hk, kd, hv, vd = heads
    t = qkv.shape[0]
    if t and max(batch.q_lens_cpu, default=0) <= min(FUSED_MAX_TOKENS, _max_short(batch)):
        qkv, a, b, z = _unit_last(qkv), _unit_last(a), _unit_last(b), _unit_last(z)
        o = _empty((t, hv, vd), qkv.dtype, qkv.device)
        y = _empty((t, hv, vd), qkv.dtype, qkv.device)
        fused_decode_launch(
            qkv, a, b, a_log.contiguous(), dt_bias.contiguous(), _unit_last(conv_weight), conv_state, ssm_state,
            o, batch.cu_q_lens, batch.gdn_slots, batch.gdn_step_slots, len(batch.q_lens_cpu), hk,
            *pick_tile(FUSED_TILES, len(batch.q_lens_cpu)), norm=(z, norm_weight.contiguous(), y, eps),
            early=FUSED_EARLY,
        )  # fmt: skip
        return y
    qkv = causal_conv1d(qkv, conv_weight, conv_state, batch)
    q, k, v = qkv.split([hk * kd, hk * kd, hv * vd], dim=-1)
    g, beta = gdn_gating(a, b, a_log, dt_bias)
    o = gated_delta_rule(q.view(t, hk, kd), k.view(t, hk, kd), v.view(t, hv, vd), g, beta, ssm_state, batch)
    return gated_rms_norm(o, z, norm_weight, eps)
