"""INT4 format: packing layout, exact round trips, quantization error bounds, compressed-tensors mapping."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hinfer.fixtures import fixed_test_seed
from hinfer.quant.int4 import GROUP, POS, Int4Weight, pack_int4, quantize_int4, unpack_int4


def _gen(seed: int | None = None) -> torch.Generator:
    return torch.Generator().manual_seed(seed if seed is not None else fixed_test_seed())


@pytest.mark.parametrize("shape", [(1, 8), (5, 24), (33, 320), (64, 1024)])
def test_pack_unpack_round_trip(shape):
    g = _gen()
    u = torch.randint(0, 16, shape, generator=g, dtype=torch.uint8)
    words = pack_int4(u)
    assert words.dtype == torch.int32 and words.shape == (shape[0], shape[1] // 8)
    assert torch.equal(unpack_int4(words), u)
    # and the other way: every int32 bit pattern (signs included) survives unpack -> pack
    w = torch.randint(-(2**31), 2**31 - 1, (shape[0], shape[1] // 8), generator=g, dtype=torch.int32)
    assert torch.equal(pack_int4(unpack_int4(w)), w)


def test_pack_layout_puts_element_e_at_nibble_pos_e():
    g = _gen()
    u = torch.randint(0, 16, (3, 64), generator=g, dtype=torch.int64)
    want = torch.zeros(3, 8, dtype=torch.int64)
    for e, pos in enumerate(POS):
        want |= u[:, e::8] << (4 * pos)  # element 8c + e at bits 4*POS[e] of word c
    want = torch.where(want >= 2**31, want - 2**32, want).to(torch.int32)
    assert torch.equal(pack_int4(u), want)
    assert POS == (0, 4, 1, 5, 2, 6, 3, 7)  # even elements in the low half-word: the kernels rely on it


def test_pack_rejects_k_not_multiple_of_8():
    with pytest.raises(ValueError, match="K % 8"):
        pack_int4(torch.zeros(2, 12, dtype=torch.uint8))


def _representable(n: int, k: int, zero_point: bool, g: torch.Generator):
    """A weight exactly (u - z) * s with power-of-two scales, whose groups span the full code range."""
    groups = -(-k // GROUP)
    s = 2.0 ** torch.randint(-10, -2, (n, groups), generator=g).float()
    if zero_point:
        z = torch.randint(0, 16, (n, groups), generator=g)
        u = torch.randint(0, 16, (n, groups * GROUP), generator=g)
        u[:, ::GROUP], u[:, 1::GROUP] = 0, 15  # min and max codes present in every group
    else:
        z = torch.full((n, groups), 8)
        u = torch.randint(0, 16, (n, groups * GROUP), generator=g)
        u[:, ::GROUP] = 0  # -8: amax = 8 s
    w = ((u.view(n, groups, GROUP) - z[..., None]).float() * s[..., None]).view(n, -1)[:, :k]
    return w, u[:, :k], s, z


@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize("k", [128, 320, 64])
def test_quantize_dequantize_round_trip_exact(zero_point, k):
    g = _gen()
    w, u, s, z = _representable(17, k, zero_point, g)
    q = quantize_int4(w, zero_point=zero_point, scale_dtype=torch.float32)
    assert torch.equal(q.dequantize(torch.float32), w)
    assert torch.equal(unpack_int4(q.qweight, k), u.to(torch.uint8))
    assert torch.equal(q.scales, s)
    if zero_point:
        assert torch.equal(q.zeros, z.to(torch.uint8))
    else:
        assert q.zeros is None
    # bf16 scales: powers of two are exact, so the same holds at the model dtype
    qb = quantize_int4(w.bfloat16(), zero_point=zero_point)
    assert qb.scales.dtype == torch.bfloat16 and torch.equal(qb.dequantize(torch.float32), w)


@pytest.mark.parametrize("zero_point,bound", [(True, 0.105), (False, 0.112)])
def test_round_trip_error_on_gaussian_weights(zero_point, bound):
    """Documented in docs/quantization.md: relative Frobenius error ~0.100 (asym), ~0.106 (sym)."""
    g = _gen()
    w = torch.randn(256, 1024, generator=g)
    q = quantize_int4(w, zero_point=zero_point, scale_dtype=torch.float32)
    d = q.dequantize(torch.float32)
    rel = ((d - w).norm() / w.norm()).item()
    assert 0.05 < rel < bound
    # every element within half a step (asym) or one step (sym: the positive extreme may clip to 7/8 amax)
    step = q.scales.repeat_interleave(GROUP, dim=1)[:, : w.shape[1]]
    assert ((d - w).abs() <= step * (0.5 if zero_point else 1.0) + 1e-6).all()


def test_asymmetric_beats_symmetric_on_heavy_tails():
    w = torch.distributions.StudentT(3.0).sample((256, 1024))
    err = {}
    for zp in (True, False):
        d = quantize_int4(w, zero_point=zp, scale_dtype=torch.float32).dequantize(torch.float32)
        err[zp] = ((d - w).norm() / w.norm()).item()
    assert err[True] < 0.9 * err[False], err


def test_all_zero_group_dequantizes_to_zero():
    w = torch.zeros(4, 256)
    w[1, 130] = 3.0
    for zp in (True, False):
        d = quantize_int4(w, zero_point=zp).dequantize(torch.float32)
        assert torch.isfinite(d).all() and (d[0] == 0).all() and (d[1, :128] == 0).all()
        assert d[1, 130].item() == pytest.approx(3.0, rel=0.15)


def test_matmul_ref_is_fp32_math_on_the_dequantized_weight():
    g = _gen()
    w = torch.randn(40, 192, generator=g)
    q = quantize_int4(w.bfloat16())
    x = torch.randn(5, 192, generator=g).bfloat16()
    want = (x.float() @ q.dequantize(torch.float32).t()).bfloat16()
    assert torch.equal(q.matmul_ref(x), want)
    assert torch.equal(q.matmul(x), want)  # CPU dispatch is the reference
    assert q.shape == (40, 192) and q.nbytes() == 40 * 24 * 4 + 40 * 2 * 2 + 40 * 2


def test_int4_weight_validates_shapes():
    q = torch.zeros(4, 16, dtype=torch.int32)
    with pytest.raises(ValueError, match="qweight"):
        Int4Weight(q, torch.ones(4, 1), None, 100)
    with pytest.raises(ValueError, match="scales"):
        Int4Weight(q, torch.ones(4, 2), None, 128)


def _ct_pack(value: np.ndarray, packed_dim: int) -> np.ndarray:
    """compressed-tensors pack_to_int32 for 4 bits, rewritten from its documented behaviour: +8 offset, eight
    values per int32, value i of each run of eight at bits 4i, along `packed_dim`."""
    v = (value.astype(np.int64) + 8).astype(np.uint32)
    if packed_dim == 0:
        v = v.T
    packed = np.zeros((v.shape[0], v.shape[1] // 8), dtype=np.uint32)
    for i in range(8):
        packed |= v[:, i::8] << (4 * i)
    packed = packed.view(np.int32)
    return packed.T if packed_dim == 0 else packed


@pytest.mark.parametrize("asym", [False, True])
def test_compressed_tensors_pack_quantized_maps_onto_ours(asym):
    g = _gen()
    n, k = 16, 256
    q = torch.randint(-8, 8, (n, k), generator=g)
    scale = torch.rand(n, k // GROUP, generator=g) + 0.1
    zp = torch.randint(-8, 8, (n, k // GROUP), generator=g) if asym else None
    w = Int4Weight.from_compressed_tensors(
        torch.from_numpy(_ct_pack(q.numpy(), 1)), scale, (n, k),
        None if zp is None else torch.from_numpy(np.ascontiguousarray(_ct_pack(zp.numpy(), 0))),
    )  # fmt: skip
    zero = zp.repeat_interleave(GROUP, 1) if asym else 0
    want = (q - zero).float() * scale.repeat_interleave(GROUP, 1)
    assert torch.equal(w.dequantize(torch.float32), want)


def test_int8_activation_reference_round_trip_and_matmul():
    """x per token and 128-group in int8 (scale amax / 127): each value within half a step of x, a zero group
    exact; the int4 x int8 reference matmul close to the bf16-activation one (int8 steps are ~1/254 of a group's
    largest value: far under the int4 weight's own error)."""
    from hinfer.quant.int4 import dequantize_act_int8_ref, quantize_act_int8_ref

    g = torch.Generator().manual_seed(fixed_test_seed())
    x = torch.randn(5, 4 * GROUP, generator=g).bfloat16()
    x[1, :GROUP] = 0
    q, s = quantize_act_int8_ref(x, GROUP)
    assert q.dtype == torch.int8 and s.shape == (5, 4) and q.abs().max() <= 127
    xd = dequantize_act_int8_ref(q, s, GROUP)
    step = s.repeat_interleave(GROUP, dim=1)
    assert ((xd - x.float()).abs() <= step / 2 + 1e-6).all()
    assert torch.equal(xd[1, :GROUP], torch.zeros(GROUP))
    w = quantize_int4((torch.randn(64, 4 * GROUP, generator=g) * 0.05).bfloat16(), zero_point=True)
    ref, a8 = w.matmul_ref(x).float(), w.matmul_ref_a8(x).float()
    assert ((a8 - ref).norm() / ref.norm()).item() < 2e-2
