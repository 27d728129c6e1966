"""x in int8 for the int4 x int8 decode (hinfer/ops/triton/act_int8.py): the Triton kernel against its reference,
bit for bit (the interpreter on the CPU, compiled on a GPU), the reference against quantize_act_int8_ref, and the
SiLU-mul form against the SiLU-mul kernel followed by the plain form."""

from __future__ import annotations

import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.triton.act_int8 import quantize_x_int8
from hinfer.quant.int4 import quantize_act_int8_ref, quantize_x_int8_ref

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _x(m: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, k, generator=g) * torch.rand(m, 1, generator=g) * 4).bfloat16()
    x[0, 128:256] = 0  # a zero group: scale 1, zeros
    x[-1, :128] = x[-1, :128].round()  # integers: ties at .5 after the scale, rounded to even
    return x.to(DEV)


@pytest.mark.parametrize("m, k", [(1, 640), (3, 1024), (8, 512)])
def test_kernel_matches_the_reference_bit_for_bit(m, k):
    seed = fixed_test_seed()
    for s in (seed, seed + 1):
        x = _x(m, k, s)
        got, want = quantize_x_int8(x), quantize_x_int8_ref(x)
        assert torch.equal(got.words, want.words), s
        assert torch.equal(got.scales, want.scales) and torch.equal(got.sums, want.sums), s
        assert got.shape == (m, k)


def test_reference_words_hold_the_int8_values_in_mma_column_order():
    """Byte b of word w is K offset 4 w + (0, 2, 1, 3)[b]; sums are scale * sum q per group."""
    x = _x(2, 256, fixed_test_seed())
    ref = quantize_x_int8_ref(x)
    q, s = quantize_act_int8_ref(x.cpu(), 128)
    b = ref.words.cpu().contiguous().view(torch.int8).view(2, 64, 4)
    assert torch.equal(b[..., [0, 2, 1, 3]].reshape(2, 256), q)
    assert torch.equal(ref.scales.cpu(), s)
    assert torch.allclose(ref.sums.cpu(), q.float().view(2, 2, 128).sum(-1) * s)


def test_k_not_a_multiple_of_the_group_is_refused():
    with pytest.raises(ValueError, match="K % 128"):
        quantize_x_int8(torch.zeros(1, 200, dtype=torch.bfloat16, device=DEV))


@pytest.mark.parametrize("m, k", [(1, 256), (4, 640)])
def test_silu_mul_form_is_the_activation_kernel_then_the_plain_form(m, k):
    """quantize_x_int8(gate_up, silu_mul=True) quantizes silu(gate) * up with the SiLU-mul kernel's roundings:
    bit for bit what that kernel's output quantizes to (the same exp on either side)."""
    from hinfer.ops.triton.activation import silu_mul

    seed = fixed_test_seed()
    for s in (seed, seed + 1):
        gu = torch.cat([_x(m, k, s), _x(m, k, s + 100)], dim=1)
        gu[0, 128:256] = 0  # a zero gate group: silu(0) = 0, scale 1
        got, want = quantize_x_int8(gu, silu_mul=True), quantize_x_int8(silu_mul(gu))
        assert torch.equal(got.words, want.words), s
        assert torch.equal(got.scales, want.scales) and torch.equal(got.sums, want.sums), s
        assert got.shape == (m, k)
        assert torch.equal(got.scales[0, 1].cpu(), torch.tensor(1.0))


def test_silu_mul_form_needs_gate_and_up_halves_of_whole_groups():
    with pytest.raises(ValueError, match="gate \\| up"):
        quantize_x_int8(torch.zeros(1, 384, dtype=torch.bfloat16, device=DEV), silu_mul=True)


@pytest.mark.parametrize("m, k", [(1, 640), (4, 1024)])
def test_norm_form_is_the_add_norm_kernel_then_the_plain_form(m, k):
    """quantize_x_int8(x, norm=...) quantizes rms_norm(x + residual) with the add + RMSNorm kernel's roundings and
    writes the new residual: bit for bit that kernel's outputs and the plain form of its normed rows."""
    from hinfer.ops.triton.act_int8 import NormIn
    from hinfer.ops.triton.norm import add_rms_norm

    seed = fixed_test_seed()
    for s in (seed, seed + 1):
        x, res = _x(m, k, s), _x(m, k, s + 100)
        w = (torch.randn(k, generator=torch.Generator().manual_seed(s)) * 0.1).bfloat16().to(DEV)
        r_out = torch.empty_like(x)
        got = quantize_x_int8(x, norm=NormIn(res, w, 1e-6, r_out))
        y, r = add_rms_norm(x, res, w, 1e-6)
        want = quantize_x_int8(y)
        assert torch.equal(r_out, r), s
        assert torch.equal(got.words, want.words), s
        assert torch.equal(got.scales, want.scales) and torch.equal(got.sums, want.sums), s


def test_norm_form_refuses_mismatched_rows():
    from hinfer.ops.triton.act_int8 import NormIn

    x = torch.zeros(2, 256, dtype=torch.bfloat16, device=DEV)
    w = torch.zeros(256, dtype=torch.bfloat16, device=DEV)
    with pytest.raises(ValueError, match="norm"):
        quantize_x_int8(x, norm=NormIn(torch.zeros(1, 256, dtype=x.dtype, device=DEV), w, 1e-6, torch.empty_like(x)))


def test_kernel_compiles_for_sm90(compiled_child):
    """The three forms through Triton's whole sm_90 pipeline, as the launcher specialises them (no fma contraction)."""
    res = compiled_child.call(__file__, "_compile_both")
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stdout.count("compiled") == 3, res.stdout


def _compile_both() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from hinfer.ops.triton.act_int8 import _quantize_kernel

    fn = _quantize_kernel
    for act, norm in ((False, False), (True, False), (False, True)):
        consts = dict(G_BLOCK=4, PDL=True, ACT=act, NORM=norm, K_P=8192 if norm else 1, EMU=False)
        types = dict(x_ptr="*bf16", w_ptr="*i32", s_ptr="*fp32", q_ptr="*fp32", r_ptr="*bf16", nw_ptr="*bf16",
                     r_out_ptr="*bf16", eps="fp32")
        sig = {a: "constexpr" if a in consts else types.get(a, "i32") for a in fn.arg_names}
        div = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if sig[a][0] == "*"}
        kernel = compile(ASTSource(fn, sig, constexprs=consts, attrs=div), target=GPUTarget("cuda", 90, 32),
                         options={"num_warps": 4, "enable_fp_fusion": False})  # fmt: skip
        assert kernel.asm.get("cubin")
        print("compiled", fn.__name__, act, norm)
