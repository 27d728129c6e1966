"""A token's routed int4 experts in one launch (Gluon): route, gate_up + SiLU-mul, down, slot sum.

At one token the two-launch path (moe_int4_mma: gate_up routing the token, then the down routing it again) spends
most of a layer's experts time on latency, not bytes: each launch waits for the one before it to finish and flush,
then climbs its own DRAM latency. Here every program holds one job of each phase:

    gate_up job (N tile, pair, K split) -> act rows of its pair      (as moe_int4_mma's gate_up with ACT)
    down job (N tile, pair)             -> y row of its pair, scaled (as its down with ROW_SCALE), slots summed

A program first routes the token for both of its pairs (route_slots), issues its down job's weights into shared
memory (all of the pair's I // 128 groups: nothing writes them), runs its gate_up job, then waits until every
gate_up tile of its down pair has written its act rows (an arrival counter per pair, released by each tile's
writer) and multiplies them from shared memory. The last program to finish an N tile's slots sums them (the
down launch's sum); the last to finish at all clears the pairs' counters for the next call.

A program waits on others of its own grid, so the whole grid must be resident at once: `one_launch_fits` checks
the compiled kernel's registers and shared memory against the SMs before the first launch, and the caller keeps
the two launches where it does not fit. The arithmetic is the two-launch path's (act and each slot's row rounded
to bf16, the routing weight rounded to the logits' dtype): on the same gate_up tile (its K splits set the fp32
sum order) the output is the same bit for bit. The experts' words as rows or stripe by stripe (WORDS, as the two
launches read them). Measured on an H100 (row words): +2.2% one-lane 35B-A3B decode, the down's
dependent chain costing about what the second launch did; off by default (`one_launch` in
hinfer.ops.dispatch.FUSIONS, docs/moe.md). Reference: hinfer.ops.triton.moe_int4.moe_experts_int4_ref.
"""

from __future__ import annotations

import functools

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

from hinfer.ops.triton.common import num_sms, pdl_kwargs
from hinfer.ops.triton.linear_int4_mma import (
    GROUP,
    GROUP_K,
    XW,
    group_partial,
    k_loop,
    loop_terms,
    words_layout,
    x_word_ptrs,
    x_words_layout,
)
from hinfer.ops.triton.linear_splitk import COUNTERS, counter_buffer
from hinfer.ops.triton.mma_common import flat_smem, mma_layout, pdl_start
from hinfer.ops.triton.moe_int4 import Int4Experts
from hinfer.ops.triton.moe_int4_mma import (
    SUM_COUNTERS,
    WORD_ORDERS,
    _row_scales,
    _sum_slots,
    expert_words,
    group_words,
    route_slots,
    store_split,
)
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.moe import experts_mma_tile

BLOCK_M = gl.constexpr(8)  # one token: the MMA's N, padded
# the counters' top: each pair's gate_up tiles written, the down jobs done (the split-K counters sit at the bottom,
# the slot sums' at COUNTERS // 2)
READY = gl.constexpr(COUNTERS - 64)
DONE = gl.constexpr(COUNTERS - 1)
MAX_SPINS = gl.constexpr(1 << 24)  # polls of a down job's wait (seconds) before it traps
SMEM_PER_SM = 228 * 1024  # sm_90, with 1 KiB reserved per resident program
REGS_PER_SM = 65536


@gluon.jit
def int4_experts_one_launch_kernel(
    x_ptr, logits_ptr, gw_ptr, gs_ptr, gz_ptr, dw_ptr, ds_ptr, dz_ptr, hid_ptr, y_ptr, out_ptr, part_ptr, cnt_ptr,
    n_experts, hid_n, inter, stride_gw, stride_dw,
    HAS_ZERO: gl.constexpr, TOPK: gl.constexpr, TOPK_P: gl.constexpr, BLOCK_E: gl.constexpr,
    BN1: gl.constexpr, SPLIT1: gl.constexpr, DEPTH1: gl.constexpr, BN2: gl.constexpr, G2: gl.constexpr,
    PDL: gl.constexpr = False, WAIT: gl.constexpr = True, WORDS: gl.constexpr = 0,
):  # fmt: skip
    """WAIT: False only to time the wait (bench/moe_one_launch.py): the down jobs then read act rows that may not
    be written yet (wrong outputs). WORDS: the experts' words as rows (0) or stripes (2; WORD_ORDERS), unpacked
    alike, a group's words a row's 16 or a stripe's 256 on."""
    W: gl.constexpr = gl.num_warps()
    MMA: gl.constexpr = mma_layout(W)
    LW: gl.constexpr = words_layout(W)
    LX: gl.constexpr = x_words_layout(W)
    DOT_A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    DOT_B: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    SLOTS: gl.constexpr = TOPK + 1
    n1 = 2 * inter  # gate_up rows; its K is hid_n, the down's rows hid_n and K inter (G2 groups)
    tiles1 = n1 // BN1
    jobs1 = tiles1 * SLOTS * SPLIT1
    tiles2 = hid_n // BN2
    jobs2 = tiles2 * SLOTS
    pid = gl.program_id(0)
    a_tile = pid % tiles1
    a_pair = gl.minimum(pid // tiles1 % SLOTS, SLOTS - 1)
    a_split = pid // (tiles1 * SLOTS)
    b_tile = pid % tiles2
    b_pair = gl.minimum(pid // tiles2, SLOTS - 1)
    xr = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, gl.SliceLayout(2, LX)))
    ym = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, MMA))
    n_groups1 = hid_n // GROUP

    pdl_start(PDL)  # the logits and x are the previous kernel's
    ea, wa, eb, wb = route_slots(logits_ptr, n_experts, a_pair, b_pair, TOPK, BLOCK_E)

    # the down job's weights, every group, into shared memory while the gate_up job runs
    w2_smem = gl.allocate_shared_memory(gl.int32, [G2, BN2 // 16, 2, 32, 4], flat_smem(4))
    if pid < jobs2:
        w2_ptrs = expert_words(dw_ptr, eb, stride_dw, b_tile, inter, BN2, False, hid_n, WORDS)
        for g in gl.static_range(G2):
            async_copy.async_copy_global_to_shared(w2_smem.index(g), w2_ptrs + g * group_words(WORDS))
        async_copy.commit_group()

    if pid < jobs1:  # gate_up: act rows of pair a_pair, N tile a_tile, 1/SPLIT1 of the groups
        w_ptrs = expert_words(gw_ptr, ea, stride_gw, a_tile, hid_n, BN1, True, n1, WORDS)
        rows = a_tile * BN1 + gl.arange(0, BN1, layout=gl.SliceLayout(1, MMA))
        cols = a_tile * (BN1 // 2) + (rows % BN1) // 16 * 8 + rows % 8
        rows = cols + (rows // 8 % 2) * inter
        s_ptrs = gs_ptr + ea.to(gl.int64) * (n1 * n_groups1) + rows * n_groups1
        z_rows = gz_ptr + ea.to(gl.int64) * (n1 * n_groups1) + rows * n_groups1
        per_split = gl.cdiv(n_groups1, SPLIT1)
        g_lo = a_split * per_split
        g_hi = gl.minimum(g_lo + per_split, n_groups1)
        x_ptrs = x_word_ptrs(x_ptr, xr * 0, hid_n, BLOCK_M)
        acc = k_loop(w_ptrs, s_ptrs, z_rows, z_rows, 1, x_ptrs, g_lo, g_hi, BN1, BLOCK_M, HAS_ZERO, True, DEPTH1,
                     True, group_words(WORDS), False)  # fmt: skip
        py = ym * 0 + a_pair
        out_mask = (ym < 1)[None, :] & (rows < n1)[:, None]
        y_off = py[None, :].to(gl.int64) * inter + cols[:, None]
        # partials [SPLIT1, SLOTS, n1] fp32, the split counters the two-launch gate_up's
        wrote = store_split(acc, hid_ptr, y_off, hid_ptr, py, out_mask, part_ptr, py[None, :].to(gl.int64) * n1
                            + rows[:, None], a_split, SLOTS * n1, cnt_ptr + a_pair * tiles1 + a_tile, SPLIT1, False,
                            True)  # fmt: skip
        if wrote:  # this tile's act columns of the pair are written: count them in
            gl.thread_barrier()
            gl.atomic_add(cnt_ptr + READY + a_pair, 1, sem="release")

    if pid < jobs2:  # down: y row of pair b_pair, N tile b_tile, once every gate_up tile of the pair is in
        # polled by volatile loads (an atomic a poll queues behind the others' at the counter's L2 slice: 5.5%
        # slower decode), then an acquire fence, which orders the act loads below after the writers' releases (an
        # atomic whose result goes unused is dropped by the compiler, so it cannot serve as the acquire)
        ready = cnt_ptr + READY + b_pair
        if WAIT:
            seen = gl.load(ready, volatile=True)
            spins = 0
            while seen < tiles1:
                seen = gl.load(ready, volatile=True)
                spins += 1
                if spins > MAX_SPINS:  # a grid that is not resident at once: fail the launch, not hang the GPU
                    gl.inline_asm_elementwise("trap; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)
        gl.inline_asm_elementwise("fence.acq_rel.gpu; // $0", "=r", [], dtype=gl.int32, is_pure=False, pack=1)
        rows2 = b_tile * BN2 + gl.arange(0, BN2, layout=gl.SliceLayout(1, MMA))
        s2_ptrs = ds_ptr + eb.to(gl.int64) * (hid_n * G2) + rows2 * G2
        z2_rows = dz_ptr + eb.to(gl.int64) * (hid_n * G2) + rows2 * G2
        x2_ptrs = x_word_ptrs(hid_ptr, xr * 0 + b_pair, inter, BLOCK_M)
        acc2, zero, ones = loop_terms(BN2, BLOCK_M, True)
        async_copy.wait_group(0)
        gl.thread_barrier()
        for g in gl.static_range(G2):
            words = w2_smem.index(g).load(LW)
            s, c = _row_scales(s2_ptrs, z2_rows, g, 1, HAS_ZERO)  # the row layout: a group 1 apart
            xw = gl.load(x2_ptrs + g * XW, cache_modifier=".cg")  # act rows other programs wrote
            acc2 = group_partial(acc2, words, s, c, c, xw, g, zero, ones, BN2, BLOCK_M, DOT_A, DOT_B, True, True,
                                 True)  # fmt: skip
        acc2 = acc2 * wb.to(gl.bfloat16).to(gl.float32)  # the weight as the two-launch path stores it
        py2 = ym * 0 + b_pair
        gl.store(y_ptr + py2[None, :].to(gl.int64) * hid_n + rows2[:, None], acc2.to(gl.bfloat16),
                 mask=(ym < 1)[None, :] & (rows2 < hid_n)[:, None])  # fmt: skip
        gl.thread_barrier()
        sums = cnt_ptr + SUM_COUNTERS + b_tile
        if gl.atomic_add(sums, 1, sem="acq_rel") == SLOTS - 1:  # the tile's last slot: sum them
            _sum_slots(y_ptr, out_ptr, b_tile * BN2, hid_n, 1, hid_n, hid_n, SLOTS, TOPK_P, BN2)
            gl.atomic_xchg(sums, 0)
        # every program has passed its wait once all have counted in: the last clears the pairs' counters
        if gl.atomic_add(cnt_ptr + DONE, 1, sem="acq_rel") == jobs2 - 1:  # (stores: nothing in this launch reads
            # them again, and the next launch reads them after this one's end)
            p = gl.arange(0, TOPK_P, layout=gl.BlockedLayout([1], [32], [W], [0]))
            gl.store(cnt_ptr + READY + p, gl.zeros_like(p), mask=p < SLOTS)
            gl.store(cnt_ptr + DONE, 0)


# (H, I) -> (the gate_up tile, the down job's rows) where the two-launch gate_up tile does not serve the one launch.
# The two-launch one-token tiles went to 64 columns (2026-12-06): 576 jobs, more than stay resident on an H100's 132
# SMs at four a SM, and the one launch's down jobs wait in the same grid; so it keeps the 128-column tiles it was
# tested and measured on (432 and 288 jobs). On an H100 (2026-12-05) the 35B-A3B's 64-row tile without K splits took 20.7 us
# a layer alone against 22.8 on the two-launch tile, but neither its GPU test nor a decode ran on it
# (bench/RESULTS.md)
TILES: dict[tuple[int, int], tuple[SkinnyConfig, int]] = {
    (2048, 512): (SkinnyConfig(128, 128, 8, 4, 4, 4, max_regs=128), 64),
    (3072, 1024): (SkinnyConfig(128, 128, 8, 2, 4, 4, max_regs=128), 64),
}


def one_launch_tiles(h: int, i: int, slots: int) -> tuple[SkinnyConfig, int]:
    """(the gate_up tile, the down job's rows): TILES' entry, else the one-token gate_up tile of the two-launch
    path and down rows of one 16-row stripe a warp."""
    if (h, i) in TILES:
        return TILES[(h, i)]
    cfg = experts_mma_tile(slots, 2 * i, h, slots)
    return cfg, 16 * cfg.num_warps


def one_launch_variant(h: int, i: int, topk: int, zero: bool = True, pdl: bool = False, n_experts: int = 256,
                       words: str = "rows"):  # fmt: skip
    """(name, kernel, signature, constexprs, num_warps) for ahead-of-time compilation (linear_aot)."""
    cfg, bn2 = one_launch_tiles(h, i, topk + 1)
    sig = {"x_ptr": "*bf16", "logits_ptr": "*bf16", "gw_ptr": "*i32", "gs_ptr": "*bf16",
           "gz_ptr": "*u8" if zero else "*bf16", "dw_ptr": "*i32", "ds_ptr": "*bf16", "dz_ptr": "*u8" if zero else "*bf16",
           "hid_ptr": "*bf16", "y_ptr": "*bf16", "out_ptr": "*bf16", "part_ptr": "*fp32", "cnt_ptr": "*i32",
           "n_experts": "i32", "hid_n": "i32", "inter": "i32", "stride_gw": "i32", "stride_dw": "i32"}  # fmt: skip
    cex = _constexprs(cfg, bn2, i, topk, zero, n_experts, words) | {"PDL": pdl, "WAIT": True, "maxnreg": cfg.max_regs}
    name = f"int4 experts one launch H={h} I={i} top {topk}{' asym' if zero else ''}{' pdl' if pdl else ''} {words}"
    return name, int4_experts_one_launch_kernel, sig, cex, cfg.num_warps


def _constexprs(cfg: SkinnyConfig, bn2: int, i: int, topk: int, zero: bool, n_experts: int, words: str) -> dict:
    return dict(HAS_ZERO=zero, TOPK=topk, TOPK_P=triton.next_power_of_2(topk + 1),
                BLOCK_E=triton.next_power_of_2(n_experts), BN1=cfg.block_n, SPLIT1=cfg.split_k,
                DEPTH1=cfg.num_stages, BN2=bn2, G2=i // GROUP_K, WORDS=WORD_ORDERS[words])  # fmt: skip


def programs(h: int, i: int, slots: int, tiles: tuple[SkinnyConfig, int] | None = None) -> int:
    """The grid: the larger of the two phases' job counts."""
    cfg, bn2 = tiles or one_launch_tiles(h, i, slots)
    return max((2 * i // cfg.block_n) * slots * cfg.split_k, (h // bn2) * slots)


@functools.cache
def _resident(key: tuple, device_index: int) -> int:
    """Programs of the compiled variant `key` that one SM holds at once (registers, shared memory, warps)."""
    cfg, bn2, h, i, topk, zero, pdl, n_experts, words = key
    dev = torch.device("cuda", device_index)
    args = _args_like(h, i, topk, zero, n_experts, dev)
    opts = {"maxnreg": cfg.max_regs} if cfg.max_regs else {}
    k = int4_experts_one_launch_kernel.warmup(
        *args, **_constexprs(cfg, bn2, i, topk, zero, n_experts, words), PDL=pdl, grid=(1,), num_warps=cfg.num_warps,
        **opts,
    )  # fmt: skip
    k._init_handles()  # loads the module: its register count
    warps = cfg.num_warps
    regs = -(-max(k.n_regs, 1) // 8) * 8 * 32 * warps
    return min(REGS_PER_SM // regs, SMEM_PER_SM // (k.metadata.shared + 1024), 64 // warps, 32)


def _args_like(h: int, i: int, topk: int, zero: bool, n_experts: int, dev: torch.device) -> list:
    """Placeholder arguments of the kernel's types (compilation only reads dtypes and divisibility)."""
    z = torch.uint8 if zero else torch.bfloat16
    bf = torch.empty(64, dtype=torch.bfloat16, device=dev)
    i32 = torch.empty(64, dtype=torch.int32, device=dev)
    return [bf, bf, i32, bf, torch.empty(64, dtype=z, device=dev), i32, bf, torch.empty(64, dtype=z, device=dev),
            bf, bf, bf, torch.empty(64, dtype=torch.float32, device=dev), i32, n_experts, h, i, 2 * i * h // 8,
            h * i // 8]  # fmt: skip


def one_launch_fits(x: torch.Tensor, gu: Int4Experts, dn: Int4Experts, slots: int,
                    tiles: tuple[SkinnyConfig, int] | None = None) -> bool:  # fmt: skip
    """One token on a GPU, shapes of whole tiles, both projections' words as rows or both as stripes, and the grid
    resident at once (the down jobs wait for the gate_up jobs of the same grid)."""
    (_, n1, h), (_, h2, i) = gu.shape, dn.shape
    if not x.is_cuda or x.shape[0] != 1 or h2 != h or n1 != 2 * i or i % GROUP_K or h % GROUP_K:
        return False
    if (gu.zeros is None) != (dn.zeros is None) or slots > 64 or gu.words != dn.words or gu.words == "fragment" or not all(
            t.is_contiguous() for w in (gu, dn) for t in w[:3] if t is not None):  # fmt: skip
        return False
    cfg, bn2 = tiles or one_launch_tiles(h, i, slots)
    if bn2 % (16 * cfg.num_warps) or n1 % cfg.block_n or h % bn2 or cfg.block_n % (16 * cfg.num_warps) or cfg.num_stages not in (2, 4):
        return False
    key = (cfg, bn2, h, i, slots - 1, gu.zeros is not None, bool(pdl_kwargs(x).get("PDL")), dn.shape[0] - 1, gu.words)
    return programs(h, i, slots, (cfg, bn2)) <= num_sms() * _resident(key, x.device.index or 0)


def experts_one_launch(x: torch.Tensor, logits: torch.Tensor, gu: Int4Experts, dn: Int4Experts, topk: int,
                       out: torch.Tensor, tiles: tuple[SkinnyConfig, int] | None = None,
                       **parts) -> torch.Tensor:  # fmt: skip
    """out [1, H] = the token's top `topk` experts plus the folded shared expert (logits [1, E + 1], the last its
    gate; experts E + 1 deep, the last the shared one) through gate_up, SiLU-mul and down, weighted and summed:
    moe_int4_mma's two launches (gate_up routing the token, down routing it again and summing) in one. `tiles`
    (the gate_up tile, the down job's rows) overrides one_launch_tiles (sweeps; one_launch_fits first)."""
    (e, n1, h), i = gu.shape, dn.shape[2]
    slots = topk + 1
    if logits.shape != (1, e) or logits.dtype != torch.bfloat16 or not logits.is_contiguous():
        raise ValueError(f"int4 experts in one launch: one token's {e} bf16 logits, got {tuple(logits.shape)}")
    cfg, bn2 = tiles or one_launch_tiles(h, i, slots)
    hid = torch.empty((slots, i), dtype=x.dtype, device=x.device)
    y = torch.empty((slots, h), dtype=x.dtype, device=x.device)
    part = torch.empty((cfg.split_k, slots, n1), dtype=torch.float32, device=x.device)
    cnt = counter_buffer(x.device)
    pdl = pdl_kwargs(x, 1)
    int4_experts_one_launch_kernel[(programs(h, i, slots, (cfg, bn2)),)](
        x, logits, gu.qweight, gu.scales, gu.zeros if gu.zeros is not None else gu.scales,
        dn.qweight, dn.scales, dn.zeros if dn.zeros is not None else dn.scales, hid, y, out, part, cnt,
        e - 1, h, i, gu.qweight.stride(0), dn.qweight.stride(0),
        **_constexprs(cfg, bn2, i, topk, gu.zeros is not None, e - 1, gu.words), **pdl, **parts,
        num_warps=cfg.num_warps, **({"maxnreg": cfg.max_regs} if cfg.max_regs else {}),
    )  # fmt: skip
    return out
