"""Which body runs: `linear` and the quantized weights' `matmul` route by device, dtype and M (forced onto Triton
with HINFER_TRITON=1, which on the CPU means the interpreter)."""

from __future__ import annotations

import pytest
import torch

from hinfer.ops.linear import linear
from hinfer.quant import RowSplitWeight, quantize_fp8, quantize_int4

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(y).all()
    return ((y.float() - ref.float()).norm() / ref.float().norm()).item()


@pytest.fixture
def triton_on(ops_backend):
    ops_backend("triton")


def _calls(monkeypatch, module, name):
    seen = []
    fn = getattr(module, name)

    def spy(*a, **k):
        seen.append(name)
        return fn(*a, **k)

    monkeypatch.setattr(module, name, spy)
    return seen


def test_bf16_linear_routes_small_m_to_triton(triton_on, monkeypatch):
    from hinfer.ops.triton import linear as tlin

    seen = _calls(monkeypatch, tlin, "skinny_matmul")
    g = torch.Generator(device=DEV).manual_seed(1)
    w = torch.randn(48, 96, generator=g, device=DEV).bfloat16()
    for m, triton in ((1, True), (2, True), (16, True), (17, False)):
        x = torch.randn(m, 96, generator=g, device=DEV).bfloat16()
        seen.clear()
        y = linear(x, w)
        assert bool(seen) == triton and _rel(y, x.float() @ w.float().t()) < 6e-3
    xf = torch.randn(2, 96, device=DEV)
    seen.clear()
    assert torch.allclose(linear(xf, w.float()), xf @ w.float().t()) and not seen  # fp32: torch
    x3 = torch.randn(2, 3, 96, device=DEV).bfloat16()
    assert linear(x3, w).shape == (2, 3, 48)


def _int4_prefill_ref(q, x: torch.Tensor, mode: str) -> torch.Tensor:
    """What HINFER_INT4_PREFILL=mode computes past the decode rows (its reference body)."""
    return {"w4a8": q.matmul_ref_w4a8, "fp8": q.matmul_ref_fp8}.get(mode, q.matmul_ref)(x)


@pytest.mark.parametrize("mode", ["dequant", "fp8", "w4a16", "w4a8"])
def test_int4_matmul_paths(triton_on, monkeypatch, mode):
    monkeypatch.setenv("HINFER_INT4_PREFILL", mode)
    g = torch.Generator(device=DEV).manual_seed(2)
    q = quantize_int4(torch.randn(40, 256, generator=g, device=DEV).bfloat16())
    for m in (2, 65):
        x = torch.randn(m, 256, generator=g, device=DEV).bfloat16()
        ref = _int4_prefill_ref(q, x, mode) if m > 64 else q.matmul_ref(x)
        assert _rel(q.matmul(x), ref) < 6e-3
        assert _rel(linear(x.view(1, m, 256), q).view(m, -1), ref) < 6e-3


@pytest.mark.parametrize("mode", ["fp8", "w4a16", "w4a8"])
def test_fragment_order_prefills_through_the_row_gemms(triton_on, monkeypatch, mode):
    """Int4MmaWeight (the decode layout) past the decode rows runs HINFER_INT4_PREFILL's GEMM on a transient
    row-packed copy: the row weight's result exactly, and the mode no longer forces the row layout. fp8 writes
    its own e4m3 scratch from fragment order (no row copy): the mode's reference, not the row weight's bits."""
    from hinfer.quant.int4_mma_weight import Int4MmaWeight, fragment_order_wanted

    monkeypatch.setenv("HINFER_INT4_PREFILL", mode)
    assert fragment_order_wanted()
    g = torch.Generator(device=DEV).manual_seed(5)
    q = quantize_int4(torch.randn(64, 256, generator=g, device=DEV).bfloat16())
    mw = Int4MmaWeight.from_int4(q)
    x = torch.randn(65, 256, generator=g, device=DEV).bfloat16()
    if mode != "fp8":
        assert torch.equal(mw.matmul(x), q.matmul(x))
    ref = _int4_prefill_ref(q, x, mode)
    assert _rel(mw.matmul(x), ref) < 6e-3


def test_int4_prefill_mode_is_validated(triton_on, monkeypatch):
    monkeypatch.setenv("HINFER_INT4_PREFILL", "nope")
    q = quantize_int4(torch.randn(16, 128, device=DEV).bfloat16())
    with pytest.raises(ValueError, match="HINFER_INT4_PREFILL"):
        q.matmul(torch.randn(65, 128, device=DEV).bfloat16())


@pytest.mark.parametrize("scheme", ["channel", "block"])
def test_fp8_matmul_paths(triton_on, scheme):
    g = torch.Generator(device=DEV).manual_seed(3)
    q = quantize_fp8(torch.randn(48, 256, generator=g, device=DEV), scheme)
    for m, ref_fn in ((3, q.matmul_ref), (65, q.matmul_ref_w8a8)):
        x = torch.randn(m, 256, generator=g, device=DEV).bfloat16()
        assert _rel(q.matmul(x), ref_fn(x)) < 6e-3


@pytest.mark.parametrize("m", [2, 65])
def test_row_split_weight(triton_on, m):
    g = torch.Generator(device=DEV).manual_seed(4)
    w = torch.randn(40, 128, generator=g, device=DEV).bfloat16()
    rs = RowSplitWeight(quantize_int4(w[:32]), w[32:].clone())
    assert rs.shape == (40, 128)
    x = torch.randn(m, 128, generator=g, device=DEV).bfloat16()
    y = linear(x, rs)
    ref = torch.cat([rs.head.matmul_ref(x), (x.float() @ w[32:].float().t()).bfloat16()], -1)
    assert y.shape == (m, 40) and _rel(y, ref) < 6e-3
