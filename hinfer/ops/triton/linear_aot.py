"""Ahead-of-time compilation of the linear kernels for sm_90 with Triton's bundled ptxas: no GPU needed.

CI runs `python -m hinfer.ops.triton.linear_aot --check` (in a process without TRITON_INTERPRET) to catch
kernels that the CPU interpreter runs but the GPU compiler rejects, and register spills in the default
tiles (and shared-memory loads / stores / barriers in the main loop of the Gluon kernels). Without --check it
prints registers / stack / shared memory of every variant.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import astuple

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hinfer.ops.triton.int4_mma_dequant import (
    ROW_SCALED,
    SCALED,
    UNSCALED,
    _int4_mma_dequant_coalesced_kernel,
    _int4_mma_dequant_kernel,
    _int4_mma_rows_kernel,
)
from hinfer.ops.triton.linear import _FMT_CODE, _skinny_kernel
from hinfer.ops.triton.linear_fp8_mma import fp8_mma_variant
from hinfer.ops.triton.linear_gemm import _act_quant_kernel, _gemm_kernel, _int4_dequant_kernel
from hinfer.ops.triton.linear_int4_a8 import int4_a8_variant
from hinfer.ops.triton.linear_int4_gemv import int4_gemv_kernel
from hinfer.ops.triton.linear_int4_mma import (
    int4_mma_variant,
    staged_where_fits,
    x_stage_shape,
    x_staged_choice,
)
from hinfer.ops.triton.linear_int4_wgmma import int4_wgmma_kernel, int4_wgmma_variant
from hinfer.ops.triton.moe_fp8_mma import fp8_experts_variant
from hinfer.ops.triton.moe_int4_mma import experts_mma_variant
from hinfer.ops.triton.tiles.forms import BF16, FP8_BLOCK, FP8_ROW, INT4
from hinfer.ops.triton.tiles.linear import fp8_mma_config, gemm_config, heuristic_config

TARGET = GPUTarget("cuda", 90, 64)
_DIV16 = {"N", "K", "stride_xm", "stride_ym", "stride_wn", "stride_am", "stride_cm", "stride_qm", "stride_sg",
          "stride_we", "stride_se", "hid_n", "inter", "stride_gw", "stride_dw"}
_W = {BF16: "*bf16", FP8_ROW: "*fp8e4nv", FP8_BLOCK: "*fp8e4nv", INT4: "*i32"}
_S = {BF16: "*bf16", FP8_ROW: "*fp32", FP8_BLOCK: "*fp32", INT4: "*bf16"}
Variant = tuple[str, object, dict, dict, int, int]


def _signature(fn, sig: dict, constexprs: dict) -> tuple[dict, dict]:
    """The signature in the kernel's argument order and the 16-divisibility attributes the JIT would give its
    pointers and sizes, keyed by argument position."""
    full = dict(sig) | {k: "constexpr" for k in constexprs}
    names = [n for n in fn.arg_names if n in full]
    div = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in names
           if full[n].startswith("*") or n in _DIV16}  # fmt: skip
    return {n: full[n] for n in names}, div


def compile_sm90(fn, sig: dict, constexprs: dict, num_warps: int, num_stages: int):
    """Compile like the JIT does for 16-divisible pointers/sizes (which enables cp.async pipelining)."""
    sig, div = _signature(fn, sig, constexprs)
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=div)
    return triton.compile(src, target=TARGET, options={"num_warps": num_warps, "num_stages": num_stages})


# launch options a variant's constexprs may carry (int4_mma_variant's max_regs): taken out before compiling
OPTIONS = ("maxnreg",)


def compile_gluon_sm90(fn, sig: dict, constexprs: dict, num_warps: int):
    """The same for a Gluon kernel (its layouts are explicit: no pipelining options)."""
    from triton.experimental.gluon._runtime import GluonASTSource

    options = {"num_warps": num_warps} | {k: v for k, v in constexprs.items() if k in OPTIONS and v}
    constexprs = {k: v for k, v in constexprs.items() if k not in OPTIONS}
    sig, div = _signature(fn, sig, constexprs)
    src = GluonASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=div)
    return triton.compile(src, target=TARGET, options=options)


def resources(kernel) -> dict[str, int]:
    """Registers, stack (spills) and static shared memory, from cuobjdump on the cubin."""
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", out, re.S)
    regs, stack = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
    return {"regs": regs, "stack": stack, "smem": kernel.metadata.shared}


def sass_of(kernel) -> str:
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True).stdout


def _sass_ins(sass: str) -> list[tuple[int, str]]:
    """(address, instruction text) of a SASS listing, in order."""
    out = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            out.append((int(m.group(1), 16), m.group(2).strip()))
    return out


def _back_target(addr: int, text: str, where: dict[int, int]) -> int | None:
    """The listing index a branch at `addr` jumps back to (a loop's first instruction), or None."""
    m = re.search(r"BRA .*?0x([0-9a-f]+)", text)
    target = int(m.group(1), 16) if m else None
    return where[target] if target is not None and target < addr and target in where else None


def sass_loops(sass: str) -> list[Counter]:
    """Opcode counts of every backward-branch loop of a SASS listing (predicates and modifiers stripped)."""
    ins = _sass_ins(sass)
    where = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for i, (a, text) in enumerate(ins):
        top = _back_target(a, text, where)
        if top is not None:
            ops = [t.split()[1] if t.startswith("@") else t.split()[0] for _, t in ins[top : i + 1]]
            out.append(Counter(op.split(".")[0] for op in ops))
    return out


def _reg(operand: str) -> int | None:
    m = re.fullmatch(r"-?\|?R(\d+)\|?(\.[A-Z0-9_.]+)?", operand.strip())
    return int(m.group(1)) if m else None


def wgmma_hazards(sass: str) -> list[str]:
    """Asynchronous warpgroup MMAs in a SASS listing: each instruction that writes a register an HGMMA still in
    flight reads as its A operand (R, R + 1, R + 2, R + 3) or accumulates into (64 x N: N / 2 registers from its
    destination), before the WARPGROUP.DEPBAR.LE gsb0 that retires the HGMMA's group (a group ends at the HGMMA
    marked gsb0; `.LE gsb0, n` leaves the last n groups in flight). Read in address order; a loop's body (a
    backward branch) is read a second time with what is in flight at its branch, as its next iteration sees it."""
    ins = _sass_ins(sass)
    where = {a: i for i, (a, _) in enumerate(ins)}
    found: dict[int, str] = {}
    groups: list[list[tuple[int, set[int], set[int]]]] = []
    cur: list[tuple[int, set[int], set[int]]] = []
    again: set[int] = set()
    i = 0
    while i < len(ins):
        addr, text = ins[i]
        i += 1
        body = re.sub(r"^@!?U?P\w+\s+", "", text)
        op, _, rest = body.partition(" ")
        operands = [v.strip() for v in rest.split(",")] if rest else []
        top = _back_target(addr, body, where)
        if top is not None and addr not in again:
            again.add(addr)
            i = top
            continue
        if op.startswith("HGMMA"):
            d, a = _reg(operands[0]), _reg(operands[1])
            n = int(re.search(r"64x(\d+)x", op).group(1))
            cur.append((addr, set(range(a, a + 4)) if a is not None else set(), set(range(d, d + n // 2))))
            if "gsb0" in operands:
                groups, cur = groups + [cur], []
            continue
        m = re.match(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)", body)
        if m:
            keep = int(m.group(1), 16)
            groups = groups[len(groups) - keep :] if keep else []
            continue
        d = _reg(operands[0]) if operands and not op.startswith(("ST", "RED", "ATOM", "BAR", "BRA")) else None
        if d is None:
            continue
        width = 4 if ".128" in op else 2 if ".64" in op else 1
        written = set(range(d, d + width))
        for hgmma, a_regs, acc in (h for g in [*groups, cur] for h in g):
            if written & (a_regs | acc):
                found[addr] = f"{addr:#06x} {text}: writes a register of the HGMMA at {hgmma:#06x} in flight"
                break
    return list(found.values())


def _int4_gemv(n: int, k: int, zero: bool = False) -> Variant:
    c = heuristic_config(INT4, 1, n, k, 132)
    words = f"tensordesc<i32[{c.block_n}, {c.block_k // 8}]>"
    sig = {"x_ptr": "*bf16", "w_ptr": words, "s_ptr": "*bf16", "z_ptr": "*u8" if zero else "*bf16",
           "y_ptr": "*bf16", "part_ptr": "*fp32", "cnt_ptr": "*i32", "N": "i32", "K": "i32", "stride_wn": "i32",
           "stride_sn": "i32"}  # fmt: skip
    cex = dict(HAS_ZERO=zero, FAST=True, EVEN=True, BLOCK_N=c.block_n, GROUPS=c.block_k // 128,
               SPLIT_K=c.split_k, PREFETCH=1, TMA=True, STAGES=c.num_stages)  # fmt: skip
    return f"int4 gemv{' asym' if zero else ''} {n}x{k} {c}", int4_gemv_kernel, sig, cex, c.num_warps, c.num_stages


def _skinny(fmt: str, m: int, n: int, k: int, zero: bool = False, fast: bool = True, a8: bool = False,
            pdl: bool = False) -> Variant:  # fmt: skip
    c = heuristic_config(fmt, m, n, k, 132)
    sig = {"x_ptr": "*bf16", "w_ptr": _W[fmt], "s_ptr": _S[fmt], "z_ptr": "*u8" if zero else _S[fmt],
           "y_ptr": "*bf16", "part_ptr": "*fp32", "cnt_ptr": "*i32", "M": "i32", "N": "i32", "K": "i32",
           "stride_xm": "i32", "stride_ym": "i32", "stride_wn": "i32", "stride_sn": "i32"}  # fmt: skip
    cex = dict(FMT=_FMT_CODE[fmt], HAS_ZERO=zero, FAST_INT4=fast and fmt == INT4 and not zero,
               EVEN_N=n % c.block_n == 0, EVEN_K=k % c.block_k == 0, BLOCK_M=c.block_m, BLOCK_N=c.block_n,
               BLOCK_K=c.block_k, SPLIT_K=c.split_k, A8=a8, PDL=pdl)  # fmt: skip
    kind = " asym" if zero else ("" if fast or fmt != INT4 else " portable-unpack")
    kind += (" w8a8" if a8 else "") + (" pdl" if pdl else "")
    name = f"skinny {fmt}{kind} M={m} {n}x{k} {c}"
    return name, _skinny_kernel, sig, cex, c.num_warps, c.num_stages


def _gemm(fmt: str, a_mode: int, zero: bool = False) -> Variant:
    promote = fmt == FP8_BLOCK or (fmt == INT4 and a_mode != 0) or a_mode == 2
    c = gemm_config(8192, 5120, 5120, promote)
    sig = {"a_ptr": "*bf16" if a_mode == 0 else "*fp8e4nv", "as_ptr": "*fp32", "w_ptr": _W[fmt],
           "ws_ptr": _S[fmt], "wz_ptr": "*u8" if zero else _S[fmt], "c_ptr": "*bf16", "M": "i32", "N": "i32",
           "K": "i32", "stride_am": "i32", "stride_asm": "i32", "stride_asg": "i32", "stride_wn": "i32",
           "stride_wsn": "i32", "stride_cm": "i32"}  # fmt: skip
    cex = dict(FMT={FP8_ROW: 1, FP8_BLOCK: 2, INT4: 3}[fmt], A_MODE=a_mode, HAS_ZERO=zero,
               FAST_INT4=fmt == INT4 and not zero, BLOCK_M=c.block_m, BLOCK_N=c.block_n, BLOCK_K=c.block_k,
               GROUP_M=c.group_m)  # fmt: skip
    return f"gemm {fmt} a_mode={a_mode}{' asym' if zero else ''} {c}", _gemm_kernel, sig, cex, c.num_warps, c.num_stages


def variants(full: bool = False) -> Iterator[Variant]:
    shapes = [(34816, 5120), (5120, 17408)] if full else [(5120, 17408)]
    for n, k in shapes:
        for fmt in (BF16, FP8_ROW, FP8_BLOCK, INT4):
            for m in (1, 16, 64) if full else (1, 16):
                if fmt == BF16 and m > 16:
                    continue
                yield _int4_gemv(n, k) if (fmt, m) == (INT4, 1) else _skinny(fmt, m, n, k)
        yield _int4_gemv(n, k, zero=True)
        yield _skinny(FP8_ROW, 16, n, k, a8=True)
        yield _skinny(FP8_BLOCK, 16, n, k, a8=True)
        yield _skinny(INT4, 16, n, k, zero=True)
        yield _skinny(INT4, 16, n, k, fast=False)
    yield _skinny(BF16, 1, 257, 2048, pdl=True)  # a MoE router (folded shared expert's row), launched with PDL
    for fmt, a_mode, zero in ((INT4, 0, False), (INT4, 2, False), (INT4, 0, True), (FP8_ROW, 1, False),
                              (FP8_BLOCK, 2, False)):  # fmt: skip
        yield _gemm(fmt, a_mode, zero)
    # Gluon tensor-core int4 on fragment-ordered weights: (zero point, BLOCK_M, split, warps, offset MMA, depth);
    # the full list adds the other combinations and the per-weight fma offset
    mma = [(False, 8, 1, 8, True, 4), (True, 16, 8, 4, True, 2), (True, 32, 2, 8, True, 4)]
    if full:
        mma += [(True, 8, 4, 8, True, 4), (False, 16, 8, 8, True, 4), (False, 8, 1, 4, False, 2),
                (True, 16, 8, 4, False, 2), (True, 64, 2, 8, True, 2)]  # fmt: skip
    for zero, block_m, split, warps, offset_mma, depth in mma:
        name, fn, sig, cex, warps = int4_mma_variant(128, block_m, split, warps, zero, offset_mma, depth)
        yield name, fn, sig, cex, warps, 0  # stages 0: a Gluon kernel (explicit layouts, no pipeliner)
    # the shared-memory ring (BLOCK_N 128 and 256, rings 4 and 6)
    yield (*int4_mma_variant(128, 8, 2, 4, True, True, 2, ring=4), 0)
    yield (*int4_mma_variant(256, 8, 2, 8, False, True, 2, ring=6), 0)
    # the same kernel on hinfer.quant.int4's row layout, and the routed-experts kernel (direct gate_up, down)
    yield (*int4_mma_variant(128, 8, 4, 8, True, True, 2, rows=True), 0)
    # with bf16 tail rows in the same launch (the GDN in_proj's b / a), ring and register loops
    yield (*int4_mma_variant(128, 8, 4, 4, True, True, 2, ring=4, tail=1, pdl=True), 0)
    yield (*int4_mma_variant(128, 8, 4, 4, True, True, 2, ring=4, tail=2, pdl=True), 0)  # the tail at 2-8 rows
    yield (*int4_mma_variant(128, 8, 4, 8, True, True, 2, tail=1, pdl=True), 0)
    # each group's x loaded ahead of its MMA (the tile's x_ahead)
    yield (*int4_mma_variant(128, 8, 2, 4, True, True, 2, pdl=True, xa=True), 0)
    yield (*int4_mma_variant(128, 8, 1, 4, True, True, 4, pdl=True, xa=True), 0)
    yield (*int4_mma_variant(128, 8, 2, 4, True, True, 2, ring=4, pdl=True, xa=True), 0)
    yield (*int4_mma_variant(128, 16, 1, 4, True, True, 2, ring=4, pdl=True, xa=True), 0)
    # a program's groups of x staged in shared memory (the one-row default: the 35B-A3B GDN in_proj tile, a ring)
    yield (*int4_mma_variant(128, 8, 4, 4, True, True, 4, pdl=True, xg=4), 0)
    yield (*int4_mma_variant(128, 8, 4, 4, True, True, 2, ring=4, pdl=True, max_regs=96, xg=16), 0)
    # two groups to a ring slot (ring_pairs), alone and with tail rows
    yield (*int4_mma_variant(128, 8, 4, 4, True, True, 2, ring=3, pdl=True, xa=True, pair=True), 0)
    yield (*int4_mma_variant(128, 8, 4, 4, True, True, 2, ring=4, tail=1, pdl=True, xa=True, pair=True), 0)
    # the 27B's packaged ring tiles with x ahead, held to 96 registers (max_regs), one with the GDN in_proj's tail
    for split in (2, 16):
        yield (*int4_mma_variant(128, 8, split, 4, True, True, 2, ring=4, pdl=True, xa=True, max_regs=96), 0)
    yield (*int4_mma_variant(128, 8, 4, 4, True, True, 2, ring=4, tail=1, pdl=True, xa=True, max_regs=96), 0)
    # fp8 weights on tensor cores from their row-major bytes: the heuristic tiles of the 27B's down and gate_up
    # at 1 / 8 / 32 rows, per-row and block scales, and the loop four groups deep
    fp8 = {(*astuple(fp8_mma_config(m, n, k, 132))[:6], blocked)
           for (n, k), m, blocked in itertools.product(((5120, 17408), (34816, 5120)), (1, 8, 32), (False, True))}
    for block_n, _, block_m, split, warps, depth, blocked in sorted(fp8):
        yield (*fp8_mma_variant(block_n, block_m, split, warps, blocked, depth, pdl=True), 0)
    yield (*fp8_mma_variant(128, 8, 4, 8, False, 4, pdl=True), 0)
    yield (*fp8_mma_variant(128, 16, 2, 8, True, 4, pdl=True), 0)
    for tail in (1, 2):  # with the GDN in_proj's bf16 rows in the same launch (a row at a time; rows together)
        yield (*fp8_mma_variant(128, 8, 4, 8, False, 2, pdl=True, tail=tail), 0)
    # the int4 x int8 decode (x quantized in the kernel): one row or eight, 4 / 8 warps, tail rows, a register cap
    for split, warps, zero, m, k, tail, regs in ((4, 4, True, 1, 5120, False, 96), (4, 4, False, 8, 5120, False, 96),
                                                  (1, 8, True, 1, 5120, True, 0), (16, 4, True, 8, 17408, True, 0)):  # fmt: skip
        yield (*int4_a8_variant(128, split, warps, zero, 4, m, k, tail=tail, pdl=True, max_regs=regs), 0)
    # the MLP's down with the SiLU-mul in the prologue (x = silu(gate) * up quantized there), the 27B's one-row tile
    yield (*int4_a8_variant(128, 16, 4, True, 4, 1, 17408, pdl=True, max_regs=96, act=True), 0)
    for zero, tail in ((True, False), (False, True)):  # x quantized ahead (act_int8), read from global memory
        yield (*int4_a8_variant(128, 4, 4, zero, 4, 8, 5120, tail=tail, pdl=True, pre=True), 0)
    # ... at verification's rows: MMA column blocks of 16 and 32 rows of x a program
    for block_n, split, warps, block_m in ((128, 4, 4, 32), (128, 2, 8, 32), (128, 4, 4, 16), (256, 2, 8, 32)):
        yield (*int4_a8_variant(block_n, split, warps, True, 4, 32, 5120, pdl=True, pre=True, block_m=block_m), 0)
    # the warpgroup-MMA kernel: one or two warpgroups, 8 to 64 rows of x, K splits
    for block_n, block_m, split, warps, zero in ((64, 8, 1, 4, True), (64, 32, 2, 4, True), (128, 16, 1, 4, False),
                                                 (128, 8, 2, 8, True), (128, 8, 4, 8, True), (256, 8, 4, 8, True),
                                                 (128, 32, 4, 8, True), (128, 32, 1, 8, False), (256, 64, 1, 8, True)):  # fmt: skip
        yield (*int4_wgmma_variant(block_n, block_m, split, warps, zero, pdl=True), 0)
    # ... with x copied a few groups at a time (cp.async into two buffers, one barrier a chunk)
    for block_n, block_m, split, warps, xg in ((128, 32, 1, 8, 4), (128, 32, 4, 8, 1), (64, 16, 1, 4, 2),
                                               (256, 8, 4, 8, 2), (128, 64, 1, 8, 2)):  # fmt: skip
        yield (*int4_wgmma_variant(block_n, block_m, split, warps, True, pdl=True, xg=xg), 0)
    yield (*experts_mma_variant(128, 8, 8, True, True, 8, False), 0)
    yield (*experts_mma_variant(64, 8, 4, True, False, 1, True, pdl=True), 0)
    # the tuned experts tiles: few warps over 32-64 rows, the register look-ahead 3 groups deep; the gate_up
    # writes silu(gate) * up (act: its stripes pair gate and up rows), the down scales rows by the routing weights
    for v in (experts_mma_variant(32, 8, 2, True, True, 9, False, depth=4, pdl=True, act=True),
              experts_mma_variant(32, 8, 2, True, False, 9, False, depth=4, pdl=True, act=True),
              experts_mma_variant(32, 8, 1, True, True, 1, True, depth=4, pdl=True),
              experts_mma_variant(128, 8, 2, True, False, 1, True, depth=2, pdl=True),
              # K split over programs, partials summed by the last to arrive
              experts_mma_variant(64, 8, 4, True, True, 9, False, depth=4, pdl=True, split=4, act=True),
              experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=4, act=True),
              experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=2, act=True),
              experts_mma_variant(64, 8, 2, True, False, 1, True, depth=4, pdl=True, split=2),
              # the down launch summing each token's slots (direct at one token; aligned blocks at 8)
              experts_mma_variant(32, 8, 2, True, True, 1, True, depth=2, pdl=True, topk=9),
              experts_mma_variant(32, 8, 1, True, True, 1, True, depth=4, pdl=True, topk=9),
              experts_mma_variant(128, 8, 2, True, True, 1, True, depth=2, pdl=True, topk=9),
              experts_mma_variant(128, 8, 2, True, False, 1, True, depth=2, pdl=True, topk=9),
              experts_mma_variant(64, 8, 2, True, False, 1, True, depth=4, pdl=True, split=2, topk=9),
              experts_mma_variant(256, 8, 8, True, True, 1, True, depth=2, pdl=True, topk=9),
              # the words through a cp.async ring instead of the register look-ahead (eight tokens; one routed)
              experts_mma_variant(128, 8, 4, True, False, 9, False, depth=4, pdl=True, act=True, ring=4),
              experts_mma_variant(64, 8, 2, True, False, 1, True, depth=4, pdl=True, ring=3),
              # the words stripe by stripe (HINFER_EXPERTS_WORDS=stripes), through the look-ahead and the ring
              experts_mma_variant(128, 8, 8, True, False, 9, False, depth=4, pdl=True, act=True, words="stripes"),
              experts_mma_variant(32, 8, 2, True, False, 1, True, depth=2, pdl=True, words="stripes"),
              experts_mma_variant(128, 8, 4, True, False, 9, False, depth=4, pdl=True, act=True, ring=4,
                                  words="stripes"),
              # the down reading its aligned blocks and first weights before its PDL wait (`down_early`)
              experts_mma_variant(32, 8, 2, True, False, 1, True, depth=2, pdl=True, early=True),
              experts_mma_variant(64, 8, 2, True, False, 1, True, depth=4, pdl=True, early=True, ring=3),
              experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=4, act=True, route=8,
                                  ring=4),
              # one token routed in the gate_up launch (the `route` launch fusion)
              experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=4, act=True, route=8),
              experts_mma_variant(128, 8, 4, True, True, 9, False, depth=4, pdl=True, split=2, act=True, route=8),
              *MEASURED_SPILLS):
        yield (*v, 0)
    yield from packaged_experts_variants()
    # fp8 experts (moe_fp8_mma.py): the heuristic tile at one token (direct, K split) and beyond (aligned blocks),
    # per-row and 128 x 128 block scales, the gate_up writing SiLU-mul, the down summing the slots
    for blocked in (False, True):
        for direct, split in ((True, 4), (False, 1)):
            yield (*fp8_experts_variant(64, 4, blocked, direct, 9, False, pdl=True, split=split, act=True), 0)
            yield (*fp8_experts_variant(64, 4, blocked, direct, 1, True, pdl=True, split=max(split // 2, 1), topk=9),
                   0)  # fmt: skip
    yield from packaged_fp8_experts_variants()
    sig = {"x_ptr": "*bf16", "q_ptr": "*fp8e4nv", "s_ptr": "*fp32", "K": "i32", "stride_xm": "i32",
           "stride_qm": "i32", "stride_sm": "i32", "stride_sg": "i32", "GROUP": "i32"}  # fmt: skip
    yield "act_quant", _act_quant_kernel, sig, {"BLOCK": 128}, 4, 3
    sig = {"w_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*bf16", "out_ptr": "*bf16", "N": "i32", "K": "i32",
           "stride_wn": "i32", "stride_sn": "i32"}  # fmt: skip
    yield "int4_dequant", _int4_dequant_kernel, sig, dict(HAS_ZERO=False, FAST_INT4=True, BLOCK_N=64,
                                                          BLOCK_K=128), 4, 3  # fmt: skip
    # fragment order back to the prefill GEMMs' forms (Int4MmaWeight's prefill paths)
    for coalesced, kernel in ((False, _int4_mma_dequant_kernel), (True, _int4_mma_dequant_coalesced_kernel)):
        for form, out in ((SCALED, "*bf16"), (ROW_SCALED, "*fp8e4nv"), (UNSCALED, "*fp8e4nv")):
            sig = {"w_ptr": "*i32", "s_ptr": "*bf16", "z_ptr": "*u8", "rs_ptr": "*fp32", "out_ptr": out, "N": "i32",
                   "K": "i32"}  # fmt: skip
            yield (f"int4_mma_dequant{'_coalesced' if coalesced else ''}_form{form}", kernel, sig,
                   dict(HAS_ZERO=True, FORM=form, STRIPES=4), 4, 3)  # fmt: skip
    yield "int4_mma_rows", _int4_mma_rows_kernel, {"w_ptr": "*i32", "out_ptr": "*i32", "K": "i32"}, \
        dict(STRIPES=4), 4, 3


def packaged_experts_variants() -> Iterator[Variant]:
    """Every packaged int4 experts tile (tiles/tuned.py) built as the decode runs it (asymmetric weights): the one-
    token bucket direct, its gate_up routing the token, its down routing it again, with the slot sum and without
    (the launch fusions); the three-token bucket that way and on the alignment's blocks; larger buckets on the latter. A
    pair's down is the entry (H, I) beside the gate_up (2I, H)."""
    from hinfer.ops.triton.tiles.forms import MOE_INT4_MMA
    from hinfer.ops.triton.tiles.tuned import TUNED

    entries = {(n, k, m): c for (fam, n, k, m), c in TUNED.items() if fam == MOE_INT4_MMA}
    seen = set()
    for (n, k, m), c in sorted(entries.items()):
        for one in direct_forms(m):
            yield from _experts_variant(c, n, k, one, _gate_up(n, k, entries), seen)


def _gate_up(n: int, k: int, entries: dict) -> bool:
    """Whether the experts entry (n, k) is a pair's gate_up: a down (H, I) beside it (2I, H) in some bucket (a
    finer bucket may hold one of the two only)."""
    return any((k, n // 2) == (n2, k2) for n2, k2, _ in entries)


def direct_forms(bucket: int) -> tuple[bool, ...]:
    """The block forms a packaged experts bucket runs in: one block per pair at one token (16 pairs), both at up to
    three tokens (32: routed in the gate_up launch, FUSIONS' `route` rows, or grouped by the alignment), grouped
    beyond."""
    return (True,) if bucket <= 16 else (False, True) if bucket <= 32 else (False,)


def _experts_variant(c, n: int, k: int, one: bool, gate_up: bool, seen: set) -> Iterator[Variant]:
    """One packaged int4 experts tile in one block form (`one`: a block per pair, its launch routing the tokens)."""
    xg, xr = x_stage_shape(x_staged_choice(c, k, one), k, one)  # one-pair blocks stage x (HINFER_X_STAGED)
    route = 8 if one else 0
    cap = {"maxnreg": c.max_regs} if c.max_regs else {}
    # the down of direct blocks with and without the slot sum (`slot_sum`; the model's rows go to the next norm)
    for topk in (0,) if gate_up or not one else (9, 0):
        if gate_up:
            name, fn, sig, cex, warps = experts_mma_variant(c.block_n, 8, c.num_warps, True, one, 9, False,
                                                            depth=c.num_stages, pdl=True, split=c.split_k, act=True,
                                                            route=route, xg=xg, xr=xr)  # fmt: skip
        else:
            name, fn, sig, cex, warps = experts_mma_variant(c.block_n, 8, c.num_warps, True, one, 1, True,
                                                            depth=c.num_stages, pdl=True, split=c.split_k,
                                                            topk=topk, route=route, early=one, xg=xg,
                                                            xr=xr)  # fmt: skip
        name += f" maxnreg {c.max_regs}" if cap else ""
        if name not in seen:  # buckets that share a tile (tuned.py fills some from others)
            seen.add(name)
            yield name, fn, sig, cex | cap, warps, 0


def packaged_fp8_experts_variants() -> Iterator[Variant]:
    """Every packaged fp8 experts tile (tiles/tuned.py) as the decode runs it, with x staged where it fits (the form
    sweeps try) and the gate_up routing a few tokens (`route_fp8`), per-row and block scales, in the block forms of
    direct_forms; the gate_up writing SiLU-mul, the down summing the slots. A pair's down is the entry (H, I)
    beside the gate_up (2I, H)."""
    from hinfer.ops.triton.tiles.forms import MOE_FP8_MMA
    from hinfer.ops.triton.tiles.tuned import TUNED

    entries = {(n, k, m): c for (fam, n, k, m), c in TUNED.items() if fam == MOE_FP8_MMA}
    for (n, k, _m), c, one in ((e, c, one) for e, c in sorted(entries.items()) for one in direct_forms(e[2])):
        gate_up = _gate_up(n, k, entries)
        staged = staged_where_fits(c, k, one)
        routes = (0, 8) if gate_up and one else (0,)  # direct blocks' gate_up routing its tokens (`route_fp8`)
        sums = (0,) if gate_up else (9, 0)  # the down summing the slots, or leaving them to the norm (norm_slots_fp8)
        for blocked, xs, route, topk in itertools.product((False, True), (c, staged) if staged != c else (c,), routes,
                                                          sums):  # fmt: skip
            xg, xr = x_stage_shape(xs, k, one)
            yield (*fp8_experts_variant(c.block_n, c.num_warps, blocked, one, 9 if gate_up else 1, not gate_up,
                                        depth=c.num_stages, pdl=True, split=c.split_k, topk=topk, act=gate_up,
                                        max_regs=c.max_regs, xg=xg, xr=xr, route=route), 0)  # fmt: skip


# Gluon kernels whose main loop goes through shared memory by design: the warpgroup MMA reads x from there
SMEM_LOOPS = (int4_wgmma_kernel,)

# tuned tiles that spill a little (16-128 bytes of stack) and still measured fastest in their sweep
# (bench/experts_mma_tiles.py, 2026-12-02; the next best without spills: 0.7% slower at the 122B-A10B gate_up,
# 10% at its down): reported, not failed
MEASURED_SPILLS = (
    experts_mma_variant(64, 8, 1, True, False, 9, False, depth=4, pdl=True, act=True),
    experts_mma_variant(64, 8, 1, True, False, 1, True, depth=2, pdl=True),
    experts_mma_variant(128, 8, 2, True, True, 1, True, depth=4, pdl=True),
)


# packaged tiles (packaged_experts_variants) that spill and measured fastest in the decode graph or their sweep:
# the 35B-A3B's eight-token gate_up (88 bytes at 255 registers; the sweep's winner alone, 2026-12-03). Tiles without
# spills lost to it in the decode graph by 2-4% (2026-12-04, bench/RESULTS.md; bench/results/tiles/moe-t8/). The
# one-token gate_ups routing the token, held to 128 registers, spilled 56-96 bytes on 128 columns until 64 columns
# won with x staged (2026-12-06): none now. The fp8 experts' eight-token gate_up with per-row scales (8 bytes at 128
# registers; its sweep's winner, and eight lanes of 35B-A3B fp8 decode 1,229 -> 1,296 tok/s on it, 2026-12-06). Both
# MoE models' one-token gate_up held to 96 registers (32 bytes): five programs an SM put its 576 in one wave, one
# lane +1.6% / +2.3% (2026-12-07). The 35B-A3B's two-token down held to 96 registers (8 bytes; one wave of its
# 1,152 programs, two lanes +1.6%, 2026-12-07)
PACKAGED_SPILLS = (
    "int4 mma experts asym BLOCK_N=128 BLOCK_M=8 w2 xdiv 9 pdl act",
    "fp8 mma experts BLOCK_N=64 w2 depth 2 xdiv 9 pdl act",
    "int4 mma experts asym direct BLOCK_N=64 BLOCK_M=8 w4 xdiv 9 pdl split 4 act route 8 x staged 4x1 maxnreg 96",
    "int4 mma experts asym direct BLOCK_N=64 BLOCK_M=8 w4 xdiv 9 pdl split 2 act route 8 x staged 16x1 maxnreg 96",
    "int4 mma experts asym BLOCK_N=32 BLOCK_M=8 w2 xdiv 1 scaled pdl maxnreg 96",
    "int4 mma experts asym direct BLOCK_N=32 BLOCK_M=8 w2 xdiv 1 scaled pdl route 8 early x staged 4x1 maxnreg 96",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail on a compile error or a spill (default tiles)")
    a = ap.parse_args(argv)
    bad = 0
    _MEASURED = {v[0] for v in MEASURED_SPILLS} | set(PACKAGED_SPILLS)
    for name, fn, sig, cex, warps, stages in variants(full=not a.check):
        try:
            gluon = getattr(fn, "is_gluon", lambda: False)()
            k = compile_gluon_sm90(fn, sig, cex, warps) if gluon else compile_sm90(fn, sig, cex, warps, stages)
            r = resources(k)
            spill = r["stack"] > 0 and not (name in _MEASURED and r["stack"] <= 128)
            # the Gluon kernels promise a main loop without shared memory traffic or barriers (the ring's, x
            # staged, and the kernels that stage through shared memory by design, SMEM_LOOPS, excepted)
            shuffle = (gluon and not cex.get("RING") and not cex.get("XG") and fn not in SMEM_LOOPS
                       and any(c[op] for c in sass_loops(sass_of(k)) for op in ("LDS", "LDSM", "STS", "BAR")))
            bad += spill or shuffle
            tag = "SPILL" if spill else "SMEM" if shuffle else "ok*" if r["stack"] else "ok"
            print(f"{tag:5s} regs {r['regs']:3d} stack {r['stack']:4d} smem {r['smem']:6d}  {name}")
        except Exception as e:  # noqa: BLE001 - report every failing variant, then fail
            bad += 1
            print(f"FAIL  {name}: {type(e).__name__}: {str(e)[-300:]}")
    return 1 if a.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
