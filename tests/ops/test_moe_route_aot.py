"""The router kernel (int64 keys: one max per pick) goes through Triton's whole sm_90 pipeline at the 35B-A3B
and 122B-A10B shapes (256 experts, top 8), at decode (one token per single-warp program) and prefill sizes, with
and without a folded shared expert (in a child process: the `compiled_child` fixture)."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

CASES = [(1, 1, shared) for shared in (False, True)] + [(4, 4, shared) for shared in (False, True)]


def test_route_kernel_compiles_for_sm90(compiled_child):
    res = compiled_child.call(__file__, "_compile_all", timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stdout.count("compiled") == len(CASES), res.stdout


def _compile_all() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from hinfer.ops.triton.linear_aot import resources
    from hinfer.ops.triton.moe_route import _route_kernel

    for block_t, warps, shared in CASES:
        consts = dict(TOPK=8, TOPK_P=8, BLOCK_T=block_t, BLOCK_E=256, EMU=False, PDL=True, SHARED=shared)
        sig = {a: "constexpr" if a in consts else "i32" for a in _route_kernel.arg_names}
        sig |= {"logits_ptr": "*bf16", "w_ptr": "*bf16", "ids_ptr": "*i64"}
        src = ASTSource(_route_kernel, sig, constexprs=consts)
        res = resources(compile(src, target=GPUTarget("cuda", 90, 64), options={"num_warps": warps}))
        print("compiled", block_t, warps, shared, res)
