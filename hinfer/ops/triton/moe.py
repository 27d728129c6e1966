"""Triton twins of hinfer.ops.moe: `moe_route`, `moe_experts` and `moe_route_experts` (same signatures and
semantics).

moe_experts takes bf16 (or fp32) experts w_gate_up [E, 2I, H], w_down [E, H, I], or the same as Int4Experts
(moe_int4.py) or Fp8Experts (below). Launches:
- T == 1, bf16 (GEMV): `_gate_up_gemv_kernel` (k x I/BN programs), `_down_sum_gemv_kernel` (H/BN programs,
  sums the k slots itself). The k experts of one token are distinct, so each is read exactly once.
- T == 1, direct tensor-core path (int4, fp8; bf16 by config): `_gate_up_kernel` with block = pair, then
  `_down_sum_kernel`, or `_down_kernel` + `_sum_slots_kernel`.
- int4 at decode sizes (<= 64 pairs) on a GPU: the Gluon tensor-core kernel of moe_int4_mma.py on the row
  layout, gate_up into [P, 2I], SiLU-mul, down scaled by the routing weights, slots summed (HINFER_MOE_INT4=grouped
  keeps the kernels below).
- T > 1: `align` (1 launch for decode, a memset + 3 for large batches) groups the T*k pairs by expert; then
  `_gate_up_kernel`, `_down_kernel` over (block, n-block) grids and `_sum_slots_kernel`.
Grids depend only on (T, k, E, H, I) and nothing syncs with the host, so decode can be captured in a CUDA
graph. Scratch: act [T*k, I] and y [T*k, H] in x's dtype, plus the int32 alignment arrays.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch
import triton

import hinfer.ops.triton.moe_gemm as mg
from hinfer.ops.dispatch import launch_fusions
from hinfer.ops.triton.common import GROUP, interpreted, pdl_kwargs
from hinfer.ops.triton.linear_int4 import fast_int4_ok
from hinfer.ops.triton.moe_align import align
from hinfer.ops.triton.moe_common import _empty
from hinfer.ops.triton.moe_fp8_mma import fp8_experts_mma, fp8_mma_experts_fit
from hinfer.ops.triton.moe_int4 import Int4Experts
from hinfer.ops.triton.moe_int4_mma import GROUP_K, MAX_PAIRS, experts_mma
from hinfer.ops.triton.moe_route import moe_route
from hinfer.ops.triton.tiles.forms import MoeConfig
from hinfer.ops.triton.tiles.moe import BF16, FP8, INT4, clamp_to_shape, pick_config

__all__ = ["Fp8Experts", "Int4Experts", "moe_experts", "moe_route", "moe_route_experts"]
EXPERTS_BLOCK_M = 8  # rows of one expert per aligned block of the tensor-core experts (moe_int4_mma.py)


class Fp8Experts(NamedTuple):
    """fp8 e4m3 (W8A16) experts as the kernels read them (FMT 2): per expert exactly hinfer.quant.fp8's layout,
    stacked on a leading expert dim. w[e, n, k] = weight[e, n, k] * scale[e, n] (per channel, block False) or
    * scale[e, n // 128, k // 128] (128x128 blocks, block True). The model holds hinfer.quant.experts.
    Fp8ExpertsWeight; hinfer.ops.moe.moe_experts hands its buffers over as this tuple."""

    weight: torch.Tensor  # float8_e4m3fn [E, N, K]
    scale: torch.Tensor  # fp32 [E, N] or [E, ceil(N/128), ceil(K/128)]
    block: bool

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.weight.shape)  # type: ignore[return-value]

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """[E, N, K] in fp32 products rounded once to `dtype` (tests)."""
        w = self.weight.float()
        if not self.block:
            return (w * self.scale.float()[..., None]).to(dtype)
        rows = torch.arange(w.shape[1], device=w.device) // GROUP
        cols = torch.arange(w.shape[2], device=w.device) // GROUP
        return (w * self.scale.float()[:, rows][:, :, cols]).to(dtype)


Experts = torch.Tensor | Int4Experts | Fp8Experts
_NO_SCALE_GRID = {"SCALE_ROWS": 1, "SCALE_KSTEP": 0}  # FMT 0 / 1 ignore them


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def _prec(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"  # fp32 experts (tests) stay exact; bf16 ignores it


def _weight_args(w: Experts) -> tuple[list, dict]:
    """(pointer/stride args: w, scales, zeros, stride_we, stride_wn, stride_se, stride_sn; format constexprs)."""
    if isinstance(w, Int4Experts):
        z = w.zeros if w.zeros is not None else w.scales
        assert w.qweight.stride(-1) == 1 and w.scales.stride(-1) == 1 and z.stride() == w.scales.stride()
        args = [
            w.qweight,
            w.scales,
            z,
            w.qweight.stride(0),
            w.qweight.stride(1),
            w.scales.stride(0),
            w.scales.stride(1),
        ]
        fast = w.zeros is None and w.qweight.is_cuda and fast_int4_ok(w.qweight.device.index or 0)
        return args, {"FMT": 1, "HAS_ZERO": w.zeros is not None, "FAST_INT4": fast, "STRIPES": w.words == "stripes",
                      **_NO_SCALE_GRID}  # fmt: skip
    if isinstance(w, Fp8Experts):
        e, n, k = w.weight.shape
        want = (e, -(-n // GROUP), -(-k // GROUP)) if w.block else (e, n)
        assert tuple(w.scale.shape) == want and w.scale.dtype == torch.float32, f"fp8 scales {tuple(w.scale.shape)}"
        assert w.weight.stride(-1) == 1 and w.scale.stride(-1) == 1, "fp8 experts need a contiguous K"
        s = w.scale
        args = [w.weight, s, s, w.weight.stride(0), w.weight.stride(1), s.stride(0), s.stride(1)]
        grid = {"SCALE_ROWS": GROUP, "SCALE_KSTEP": 1} if w.block else {"SCALE_ROWS": 1, "SCALE_KSTEP": 0}
        return args, {"FMT": 2, "HAS_ZERO": False, "FAST_INT4": False, **grid}
    assert w.stride(-1) == 1, "expert weights need a contiguous K"
    return [w, w, w, w.stride(0), w.stride(1), 0, 0], {"FMT": 0, "HAS_ZERO": False, "FAST_INT4": False,
                                                       **_NO_SCALE_GRID}


def _fmt(w: Experts) -> str:
    return INT4 if isinstance(w, Int4Experts) else FP8 if isinstance(w, Fp8Experts) else BF16


def _leave_slots(slots: bool, t: int, fusion: str = "norm_slots") -> bool:
    """Whether the experts' rows go back unsummed (`slots` asked, the `norm_slots` launch fusion on at t rows;
    `norm_slots_fp8` for the fp8 experts): the next add + norm sums them in its launch instead of the down launch
    (`slot_sum`; the fp8 down's always) or a sum launch."""
    return slots and launch_fusions(fusion, t)


def _sum_slots(y: torch.Tensor, out: torch.Tensor, t: int, k: int, h: int, emu: bool, pdl: dict) -> torch.Tensor:
    """out[t] = sum of the token's k rows of y (pair = t * k + s), in fp32."""
    bn = min(1024, triton.next_power_of_2(h))
    mg._sum_slots_kernel[(t, triton.cdiv(h, bn))](
        y, out, h, out.stride(0), TOPK=k, TOPK_P=triton.next_power_of_2(k), BN=bn, EMU=emu, num_warps=4, **pdl,
    )  # fmt: skip
    return out


def mma_experts_fit(x: torch.Tensor, gu: Int4Experts, dn: Int4Experts, pairs: int) -> bool:
    """Decode sizes on a GPU (the Gluon kernel has no interpreter twin), shapes whole 64-row tiles and 128-groups,
    unless HINFER_MOE_INT4=grouped keeps the grouped Triton kernels. Up to MAX_PAIRS (token, expert) pairs, or
    HINFER_MOE_MMA_PAIRS (to compare the two paths at verification sizes)."""
    if os.environ.get("HINFER_MOE_INT4", "mma") == "grouped" or not x.is_cuda or interpreted(mg._gate_up_kernel):
        return False
    (_, n_gu, h), (_, n_dn, i) = gu.shape, dn.shape
    most = int(os.environ.get("HINFER_MOE_MMA_PAIRS", MAX_PAIRS))
    return (pairs <= most and x.dtype == torch.bfloat16 and n_gu % 64 == 0 and n_dn % 64 == 0
            and h % GROUP_K == 0 and i % GROUP_K == 0)  # fmt: skip


def direct_pairs() -> int:
    """Up to how many (token, expert) pairs the tensor-core experts take one block per pair instead of grouping
    the pairs by expert (moe_align's launch): HINFER_MOE_DIRECT_PAIRS, default 0 (one token only, whose k experts
    are distinct). Direct blocks read an expert once per token that chose it, but leave no empty programs and no
    alignment launch. Read at every call."""
    return int(os.environ.get("HINFER_MOE_DIRECT_PAIRS", "0"))


def _mma_blocks(ids: torch.Tensor, t: int, k: int, n_experts: int, direct: bool = False) -> tuple:
    """The tensor-core experts' row blocks (blocks, sorted pairs, block experts, block rows, direct): a block per
    pair at one token, when `direct` or up to direct_pairs() pairs (an expert two tokens share is read twice),
    else moe_align's blocks of EXPERTS_BLOCK_M pairs of one expert (launched under the route kernel's tail)."""
    if direct or t == 1 or t * k <= direct_pairs():
        return t * k, ids, ids, ids, True
    al = align(ids.view(t, k), n_experts, EXPERTS_BLOCK_M, pdl=True)
    return al.n_blocks, al.sorted, al.bexp, al.brows, False


def _routed(x: torch.Tensor, logits: torch.Tensor | None, ids, tw, pairs: int, k: int) -> tuple:
    """(ids, tw, the gate_up's route arguments): as given, or with `logits` the buffers a gate_up routing its tokens
    writes each pair's expert and weight into (top k - 1 and the folded shared expert)."""
    if logits is None:
        return ids, tw, {}
    ids, tw = _empty((pairs,), torch.int64, x.device), _empty((pairs,), logits.dtype, x.device)
    return ids, tw, dict(topk=k - 1, route=logits, route_w=tw)


def _experts_mma(x, gu: Int4Experts, dn: Int4Experts, tw, ids, t: int, k: int, out: torch.Tensor,
                 logits: torch.Tensor | None = None, slots: bool = False) -> torch.Tensor:  # fmt: skip
    """gate_up and down through the tensor-core kernel (moe_int4_mma.py): gate_up writes SiLU-mul's output, the
    down sums the slots (or, with `slots`, leaves them to the next add + norm: _leave_slots). With `logits` (a few tokens; slot k - 1 of each the folded shared expert) the gate_up
    launch routes the tokens itself, a block per pair, and writes the ids and weights the down reads (`tw`, `ids`
    are then None); the down routes them again (`down_route`) to read its weights before it waits for the
    gate_up. Otherwise its blocks come from launches before the gate_up, and with `down_early` it reads them and
    its first weights before that wait."""
    pairs, h, bm = t * k, x.shape[1], EXPERTS_BLOCK_M
    ids, tw, route = _routed(x, logits, ids, tw, pairs, k)
    blocks, sorted_, bexp, brows, direct = _mma_blocks(ids, t, k, gu.shape[0], logits is not None)
    hid = _empty((pairs, gu.shape[1] // 2), x.dtype, x.device)
    experts_mma(x, gu, hid, blocks, bm, ids, sorted_, bexp, brows, direct, xdiv=k, act=True, **route)
    y = _empty((pairs, h), x.dtype, x.device)
    leave = _leave_slots(slots, t)  # the next add + norm sums the slots
    fused = not leave and launch_fusions("slot_sum", t)  # else the down launch sums them (else a sum launch)
    early = {}
    if logits is not None and launch_fusions("down_route", t):  # the down routes again, its weights ahead of PDL
        early = dict(route=logits, early=True)
    elif logits is None and launch_fusions("down_early", t):  # its blocks come from before the gate_up: read early
        early = dict(early=True)
    experts_mma(hid, dn, y, blocks, bm, ids, sorted_, bexp, brows, direct, xdiv=1, tw=tw,
                sum_out=out if fused else None, topk=k, **early)  # fmt: skip
    if fused:
        return out
    return y.view(t, k, h) if leave else _sum_slots(y, out, t, k, h, False, {"PDL": False})


def _experts_mma_fp8(x, gu: Fp8Experts, dn: Fp8Experts, tw, ids, t: int, k: int, out: torch.Tensor,
                     logits: torch.Tensor | None = None, slots: bool = False) -> torch.Tensor:  # fmt: skip
    """gate_up and down through the fp8 tensor-core kernel (moe_fp8_mma.py): gate_up writes SiLU-mul's output,
    the down scales each pair by its routing weight and sums the slots into `out`. One token: a block per pair
    (its k experts are distinct); more: the pairs grouped by expert (moe_align). With `logits` (a few tokens; slot
    k - 1 of each the folded shared expert) the gate_up launch routes the tokens itself, a block per pair, and
    writes the ids and weights the down reads (`tw`, `ids` are then None). `slots` with `norm_slots_fp8` on: the
    rows [T, k, H] unsummed, for the next add + norm (_leave_slots)."""
    pairs, h, bm = t * k, x.shape[1], EXPERTS_BLOCK_M
    ids, tw, route = _routed(x, logits, ids, tw, pairs, k)
    blocks, sorted_, bexp, brows, direct = _mma_blocks(ids, t, k, gu.shape[0], logits is not None)
    hid = _empty((pairs, gu.shape[1] // 2), x.dtype, x.device)
    fp8_experts_mma(x, gu.weight, gu.scale, gu.block, hid, blocks, bm, ids, sorted_, bexp, brows, direct, xdiv=k,
                    act=True, **route)  # fmt: skip
    y = _empty((pairs, h), x.dtype, x.device)
    leave = _leave_slots(slots, t, "norm_slots_fp8")
    fp8_experts_mma(hid, dn.weight, dn.scale, dn.block, y, blocks, bm, ids, sorted_, bexp, brows, direct, xdiv=1,
                    tw=tw, sum_out=None if leave else out, topk=k)  # fmt: skip
    return y.view(t, k, h) if leave else out


def moe_route_experts(
    x: torch.Tensor, router_logits: torch.Tensor, w_gate_up: Experts, w_down: Experts, top_k: int,
    shared: bool = False, slots: bool = False,
) -> torch.Tensor:  # fmt: skip
    """moe_route then moe_experts; at a few tokens (the `route` launch fusion's rows, hinfer.ops.dispatch.FUSIONS;
    `route_fp8` for fp8 experts) with experts on tensor cores and a folded shared expert, the gate_up launch routes
    the tokens itself. `slots`: as moe_experts'."""
    t, k, fmt = x.shape[0], top_k + shared, _fmt(w_gate_up)
    fused = shared and router_logits.dtype == torch.bfloat16
    if (fused and fmt == INT4 and launch_fusions("route", t)
            and mma_experts_fit(x, w_gate_up, w_down, t * k)):  # fmt: skip
        out = _empty((t, x.shape[1]), x.dtype, x.device)
        x, logits = _unit_last(x), router_logits.contiguous()
        return _experts_mma(x, w_gate_up, w_down, None, None, t, k, out, logits=logits, slots=slots)
    if fused and fmt == FP8 and launch_fusions("route_fp8", t):
        _, i2, h = w_gate_up.shape
        if fp8_mma_experts_fit(x, i2, h, h, i2 // 2, t * k):
            out = _empty((t, x.shape[1]), x.dtype, x.device)
            return _experts_mma_fp8(_unit_last(x), w_gate_up, w_down, None, None, t, k, out,
                                    logits=router_logits.contiguous(), slots=slots)  # fmt: skip
    top_w, top_i = moe_route(router_logits, top_k, shared)
    return moe_experts(x, w_gate_up, w_down, top_w, top_i, slots=slots)


def moe_experts(
    x: torch.Tensor,  # [T, H]
    w_gate_up: Experts,  # [E, 2I, H]
    w_down: Experts,  # [E, H, I]
    top_w: torch.Tensor,  # [T, k]
    top_i: torch.Tensor,  # [T, k], each row distinct
    *,
    config: MoeConfig | None = None,
    slots: bool = False,  # the rows [T, k, H] unsummed for the next add + norm to sum (_leave_slots)
) -> torch.Tensor:
    t, h = x.shape
    e, i2, h_w = w_gate_up.shape
    i, k = i2 // 2, top_i.shape[1]
    fmt = _fmt(w_gate_up)
    assert h_w == h and tuple(w_down.shape) == (e, h, i), f"w_down {tuple(w_down.shape)} != {(e, h, i)}"
    assert _fmt(w_down) == fmt, "gate_up and down in one format"
    out = _empty((t, h), x.dtype, x.device)
    if t == 0:
        return out
    x = _unit_last(x)
    ids = top_i.reshape(-1).contiguous()
    tw = top_w.reshape(-1).contiguous()
    if fmt == INT4 and config is None and mma_experts_fit(x, w_gate_up, w_down, t * k):
        return _experts_mma(x, w_gate_up, w_down, tw, ids, t, k, out, slots=slots)
    if fmt == FP8 and config is None and fp8_mma_experts_fit(x, i2, h, h, i, t * k):
        return _experts_mma_fp8(x, w_gate_up, w_down, tw, ids, t, k, out, slots=slots)
    cfg = config or pick_config(t, k, e, h, i, fmt)
    if (cfg.direct or cfg.gemv) and t != 1:
        raise ValueError("the direct / GEMV expert paths need T == 1")
    if cfg.gemv and fmt != BF16:
        raise ValueError("the GEMV expert path is bf16 only")
    cfg = clamp_to_shape(cfg, h, i, fmt)
    gu, dn = cfg.gate_up, cfg.down
    emu = interpreted(mg._gate_up_kernel)
    pdl = pdl_kwargs(x, t)  # decode sizes only (common.DECODE_ROWS)
    act = _empty((t * k, i), x.dtype, x.device)

    if cfg.gemv:
        mg._gate_up_gemv_kernel[(k * triton.cdiv(i, gu.block_n),)](
            x, w_gate_up, act, ids, i, h, w_gate_up.stride(0), w_gate_up.stride(1),
            EVEN_K=h % gu.block_k == 0, EMU=emu, BN=gu.block_n, BK=gu.block_k, STAGES=gu.num_stages,
            num_warps=gu.num_warps, num_stages=gu.num_stages, **pdl,
        )  # fmt: skip
        mg._down_sum_gemv_kernel[(triton.cdiv(h, dn.block_n),)](
            act, w_down, tw, ids, out, h, i, w_down.stride(0), w_down.stride(1),
            TOPK=k, EVEN_K=i % dn.block_k == 0, EMU=emu, BN=dn.block_n, BK=dn.block_k, STAGES=dn.num_stages,
            num_warps=dn.num_warps, num_stages=dn.num_stages, **pdl,
        )  # fmt: skip
        return out

    if cfg.direct:  # T == 1: block b is pair b; the alignment arrays are never read
        n_blocks, sorted_, bexp, brows = k, ids, ids, ids
    else:
        al = align(ids.view(t, k), e, cfg.block_m, pdl=pdl["PDL"])
        n_blocks, sorted_, bexp, brows = al.n_blocks, al.sorted, al.bexp, al.brows
    prec = _prec(x.dtype)
    gw, gfmt = _weight_args(w_gate_up)
    dw, dfmt = _weight_args(w_down)
    mg._gate_up_kernel[(n_blocks * triton.cdiv(i, gu.block_n),)](
        x, gw[0], gw[1], gw[2], act, sorted_, bexp, brows, ids,
        i, h, x.stride(0), *gw[3:], act.stride(0),
        TOPK=k, DIRECT=cfg.direct, SWAP=gu.swap, EVEN_K=h % gu.block_k == 0, PREC=prec, EMU=emu,
        BM=gu.block_m, BN=gu.block_n, BK=gu.block_k, num_warps=gu.num_warps, num_stages=gu.num_stages, **gfmt, **pdl,
    )  # fmt: skip
    if cfg.sum_in_down:
        mg._down_sum_kernel[(triton.cdiv(h, dn.block_n),)](
            act, dw[0], dw[1], dw[2], tw, out, ids, h, i, act.stride(0), *dw[3:],
            TOPK=k, EVEN_K=i % dn.block_k == 0, PREC=prec, EMU=emu, BM=dn.block_m, BN=dn.block_n,
            BK=dn.block_k, STAGES=dn.num_stages, num_warps=dn.num_warps, num_stages=dn.num_stages, **dfmt, **pdl,
        )  # fmt: skip
        return out
    y = _empty((t * k, h), x.dtype, x.device)
    mg._down_kernel[(n_blocks * triton.cdiv(h, dn.block_n),)](
        act, dw[0], dw[1], dw[2], tw, y, sorted_, bexp, brows, ids,
        h, i, act.stride(0), *dw[3:], y.stride(0),
        DIRECT=cfg.direct, SWAP=dn.swap, EVEN_K=i % dn.block_k == 0, PREC=prec, EMU=emu,
        BM=dn.block_m, BN=dn.block_n, BK=dn.block_k, num_warps=dn.num_warps, num_stages=dn.num_stages, **dfmt, **pdl,
    )  # fmt: skip
    return y.view(t, k, h) if _leave_slots(slots, t) else _sum_slots(y, out, t, k, h, emu, pdl)
