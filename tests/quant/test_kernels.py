"""Triton linear kernels vs their reference bodies at tiny shapes (CPU: Triton's interpreter; GPU: compiled).

Shapes are deliberately awkward: N = 80 (not a multiple of any BLOCK_N), K = 320 (2.5 quantization groups),
M = 1, 3, 16 and 40. Outputs are pre-filled with NaN (`out=`) so an unwritten element fails.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from hinfer.fixtures import fixed_test_seed
from hinfer.ops.triton.linear_gemm import e4m3_rne
from hinfer.ops.triton.tiles.forms import BF16, FP8_BLOCK, FP8_ROW, INT4, GemmConfig, SkinnyConfig
from hinfer.ops.triton.tiles.linear import heuristic_config, skinny_config
from hinfer.quant.fp8 import dequantize_act_fp8_ref, quantize_act_fp8_ref, quantize_fp8
from hinfer.quant.int4 import quantize_int4

DEV = "cuda" if torch.cuda.is_available() else "cpu"
N, K = 80, 320
REL = 6e-3  # the kernels accumulate in fp32 like the references; what remains is bf16 output rounding


def _gen() -> torch.Generator:
    return torch.Generator(device=DEV).manual_seed(fixed_test_seed())


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(y).all(), "unwritten (NaN-poisoned) or non-finite output"
    return ((y.float() - ref.float()).norm() / ref.float().norm()).item()


def _weights(fmt: str, g: torch.Generator, zero_point: bool = False):
    w = torch.randn(N, K, generator=g, device=DEV).bfloat16()
    if fmt == BF16:
        return w, (w, None, None), lambda x: (x.float() @ w.float().t()).bfloat16()
    if fmt == INT4:
        q = quantize_int4(w, zero_point=zero_point)
        return q, (q.qweight, q.scales, q.zeros), q.matmul_ref
    q = quantize_fp8(w, "channel" if fmt == FP8_ROW else "block")
    return q, (q.weight, q.scale, None), q.matmul_ref


def _cfgs(fmt: str, m: int) -> list[SkinnyConfig]:
    bm = max(16, 1 << (m - 1).bit_length())
    out = [skinny_config(fmt, m, N, K), SkinnyConfig(32, 64, bm, 3, 4, 2)]  # split-K, ragged last split
    out.append(SkinnyConfig(16, 64, bm, 2, 4, 2))  # N and K multiples of the tile: unmasked loads
    if m == 1 and fmt != INT4:
        out += [SkinnyConfig(16, 128, 1, 2, 4, 2), SkinnyConfig(16, 64, 1, 1, 4, 2)]  # GEMV, ragged / even
    if m == 1 and fmt == INT4:  # int4 GEMV: ragged groups and rows, 2 groups per step, split-K, no prefetch
        out += [SkinnyConfig(16, 256, 1, 2, 4, 2), SkinnyConfig(64, 128, 1, 3, 4, 1), SkinnyConfig(16, 128, 1, 1, 4, 3)]
    return out


@pytest.mark.parametrize("m", [1, 3, 16, 40])
@pytest.mark.parametrize("fmt,zero_point", [(BF16, False), (FP8_ROW, False), (FP8_BLOCK, False),
                                            (INT4, False), (INT4, True)])
def test_skinny_kernel_matches_reference(fmt, zero_point, m):
    from hinfer.ops.triton.linear import skinny_matmul

    g = _gen()
    _, (w, s, z), ref_fn = _weights(fmt, g, zero_point)
    x = torch.randn(m, K, generator=g, device=DEV).bfloat16()
    ref = ref_fn(x)
    for cfg in _cfgs(fmt, m):
        for _ in range(2 if cfg.split_k > 1 else 1):  # a 2nd launch reuses the self-resetting counters
            out = torch.full((m, N), float("nan"), dtype=torch.bfloat16, device=DEV)
            y = skinny_matmul(x, fmt, w, N, s, z, out=out, cfg=cfg)
            assert y.data_ptr() == out.data_ptr()
            assert _rel(y, ref) < REL, (cfg, _rel(y, ref))


def _fp8_every_code(n: int, k: int, g: torch.Generator, fmt: str = FP8_ROW):
    """fp8 weights whose rows run through every finite e4m3 code (subnormals, both zeros) at shifted offsets, so
    each code sits at each byte of a 32-bit word; positive scales per row (FP8_ROW) or per 128x128 block, and the
    scale of each weight ([n, k])."""
    finite = torch.tensor([c for c in range(256) if c & 0x7F != 0x7F], dtype=torch.int64)
    idx = (torch.arange(k)[None, :] + 37 * torch.arange(n)[:, None]) % finite.numel()
    codes = finite[idx].to(torch.uint8).view(torch.float8_e4m3fn).to(DEV)
    if fmt == FP8_ROW:
        scale = (torch.rand(n, generator=g, device=DEV) + 0.5) / 448
        return codes, scale, scale[:, None].expand(n, k)
    scale = (torch.rand(-(-n // 128), -(-k // 128), generator=g, device=DEV) + 0.5) / 448
    return codes, scale, scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]


WORDS_CFGS = {FP8_ROW: [SkinnyConfig(16, 64, 1, 1, 4, 2, words=True), SkinnyConfig(32, 128, 1, 3, 4, 2, words=True),
                        SkinnyConfig(16, 256, 1, 2, 4, 3, words=True)],
              FP8_BLOCK: [SkinnyConfig(16, 64, 1, 1, 4, 2, words=True), SkinnyConfig(32, 128, 1, 3, 4, 2, words=True),
                          SkinnyConfig(64, 128, 1, 1, 8, 3, words=True)]}  # fmt: skip


@pytest.mark.parametrize("case", [0, 1, 2], ids=["even", "ragged-split", "wide"])
@pytest.mark.parametrize("fmt", [FP8_ROW, FP8_BLOCK])
def test_fp8_words_gemv_turns_every_code_exactly(fmt, case):
    """The fp8 GEMV reading 32-bit words and turning codes into fp32 by their bits: against one-hot rows of x each
    output is one code times its scale, so it equals the code's value exactly (every finite code, at every byte
    of a word); on random x it matches the reference and the conversion path."""
    from hinfer.ops.triton.linear import skinny_matmul

    cfg = WORDS_CFGS[fmt][case]
    g = _gen()
    w, scale, each = _fp8_every_code(N, K, g, fmt)
    for j in (0, 1, 2, 3, 5, 130, K - 1):
        x = torch.zeros(1, K, device=DEV, dtype=torch.bfloat16)
        x[0, j] = 1.0
        want = (w[:, j].float() * each[:, j]).bfloat16()[None, :]
        got = skinny_matmul(x, fmt, w, N, scale, cfg=cfg)
        assert torch.equal(got, want), (j, cfg)
    x = torch.randn(1, K, generator=g, device=DEV).bfloat16()
    ref = (x.double() @ (w.double() * each.double()).t()).bfloat16()
    plain = skinny_matmul(x, fmt, w, N, scale, cfg=SkinnyConfig(cfg.block_n, cfg.block_k, 1, cfg.split_k, 4, 2))
    got = skinny_matmul(x, fmt, w, N, scale, cfg=cfg)
    assert _rel(got, ref) < REL and _rel(got, plain) < REL


def test_fp8_words_gemv_refuses_what_it_cannot_read():
    from hinfer.ops.triton.linear import skinny_matmul

    g = _gen()
    w, scale, _ = _fp8_every_code(N, K, g)
    with pytest.raises(ValueError, match="words"):
        skinny_matmul(torch.ones(2, K, device=DEV).bfloat16(), FP8_ROW, w, N, scale,
                      cfg=SkinnyConfig(16, 64, 16, 1, 4, 2, words=True))  # fmt: skip
    with pytest.raises(ValueError, match="words"):
        skinny_matmul(torch.ones(1, K - 2, device=DEV).bfloat16(), FP8_ROW, w[:, : K - 2].contiguous(), N, scale,
                      cfg=SkinnyConfig(16, 64, 1, 1, 4, 2, words=True))  # fmt: skip


def test_skinny_kernel_writes_into_a_column_slice_and_strided_x():
    from hinfer.ops.triton.linear import skinny_matmul

    g = _gen()
    q, (w, s, z), ref_fn = _weights(INT4, g)
    xbig = torch.randn(3, 2 * K, generator=g, device=DEV).bfloat16()
    x = xbig[:, :K]  # row stride 2K
    buf = torch.full((3, N + 7), float("nan"), dtype=torch.bfloat16, device=DEV)
    skinny_matmul(x, INT4, w, N, s, z, out=buf[:, 5 : 5 + N])
    assert _rel(buf[:, 5 : 5 + N], ref_fn(x)) < REL
    assert torch.isnan(buf[:, :5]).all() and torch.isnan(buf[:, 5 + N :]).all()


def test_skinny_kernel_rejects_bad_configs():
    from hinfer.ops.triton.linear import skinny_matmul

    g = _gen()
    _, (w, s, z), _ = _weights(INT4, g)
    x = torch.randn(2, K, generator=g, device=DEV).bfloat16()
    with pytest.raises(ValueError, match="GEMV"):
        skinny_matmul(x, INT4, w, N, s, z, cfg=SkinnyConfig(16, 128, 1, 1, 4, 2))
    with pytest.raises(ValueError, match="block_k"):
        skinny_matmul(x, INT4, w, N, s, z, cfg=SkinnyConfig(16, 256, 16, 1, 4, 2))


def test_heuristic_uses_split_k_only_when_programs_are_few():
    assert heuristic_config(BF16, 1, 34816, 5120, 132).split_k == 1
    assert heuristic_config(BF16, 1, 5120, 17408, 132).split_k > 1
    assert heuristic_config(INT4, 1, 5120, 17408, 132).block_m == 1  # int4 GEMV on CUDA cores at M = 1
    assert heuristic_config(INT4, 2, 5120, 17408, 132).block_m == 16  # tensor cores above
    c = heuristic_config(FP8_BLOCK, 1, 5120, 6144, 132)
    assert 128 % c.block_k == 0


@pytest.mark.parametrize("group", [None, 128])
def test_activation_quant_kernel_matches_reference(group):
    from hinfer.ops.triton.linear_gemm import quantize_act_fp8

    g = _gen()
    x = torch.randn(6, K, generator=g, device=DEV).bfloat16() * 3
    x[2] = 0
    q, s = quantize_act_fp8(x, group)
    qr, sr = quantize_act_fp8_ref(x, group)
    assert torch.equal(s, sr)
    assert torch.equal(q.view(torch.uint8), qr.view(torch.uint8))


@pytest.mark.parametrize("zero_point", [False, True])
def test_int4_dequant_kernel_matches_reference(zero_point):
    from hinfer.ops.triton.linear_gemm import int4_dequantize

    g = _gen()
    q = quantize_int4(torch.randn(N, K, generator=g, device=DEV).bfloat16(), zero_point=zero_point)
    d = int4_dequantize(q.qweight, q.scales, q.zeros, K, torch.bfloat16)
    assert torch.equal(d, q.dequantize(torch.bfloat16))


_GEMM = GemmConfig(block_m=32, block_n=32, block_k=64, group_m=2, num_warps=4, num_stages=2)
M_PREFILL = 70


@pytest.mark.parametrize("case", ["w4a16", "w4a16_asym", "w4a8", "w4a8_asym", "w4a8_token", "fp8_row",
                                  "fp8_block"])
def test_prefill_gemm_matches_reference(case):
    from hinfer.ops.triton.linear_gemm import gemm, quantize_act_fp8

    g = _gen()
    w = torch.randn(N, K, generator=g, device=DEV).bfloat16()
    x = torch.randn(M_PREFILL, K, generator=g, device=DEV).bfloat16()
    if case.startswith("w4"):
        q = quantize_int4(w, zero_point=case.endswith("asym"))
        if case.startswith("w4a16"):
            y, ref = gemm(x, None, INT4, q.qweight, q.scales, N, q.zeros, cfg=_GEMM), q.matmul_ref(x)
        else:
            group = None if case == "w4a8_token" else 128
            xq, xs = quantize_act_fp8(x, group)
            y = gemm(xq, xs, INT4, q.qweight, q.scales, N, q.zeros, cfg=_GEMM)
            xd = dequantize_act_fp8_ref(*quantize_act_fp8_ref(x, group), group)
            ref = (xd @ q.dequantize(torch.float32).t()).bfloat16()
    else:
        q = quantize_fp8(w, "channel" if case == "fp8_row" else "block")
        xq, xs = quantize_act_fp8(x, None if case == "fp8_row" else 128)
        y, ref = gemm(xq, xs, case, q.weight, q.scale, N, cfg=_GEMM), q.matmul_ref_w8a8(x)
    assert y.shape == (M_PREFILL, N)
    assert _rel(y, ref) < REL


def test_gemm_rejects_bf16_activations_for_fp8_weights():
    from hinfer.ops.triton.linear_gemm import gemm

    q = quantize_fp8(torch.randn(N, K, device=DEV))
    with pytest.raises(ValueError, match="quantize them"):
        gemm(torch.zeros(4, K, dtype=torch.bfloat16, device=DEV), None, FP8_ROW, q.weight, q.scale, N)


@pytest.mark.parametrize("tma", ["1", "0"])
@pytest.mark.parametrize("zero_point", [False, True])
def test_int4_gemv_even_tiles_and_prefetch(zero_point, tma, monkeypatch):
    """The int4 GEMV's unmasked path (rows and groups divide the tiles) at every prefetch depth and split, with
    the weights through tensor-memory descriptors and through register look-ahead."""
    from hinfer.ops.triton.linear import skinny_matmul

    monkeypatch.setenv("HINFER_INT4_TMA", tma)
    g = torch.Generator(device=DEV).manual_seed(11)
    n, k = 64, 1024
    q = quantize_int4(torch.randn(n, k, generator=g, device=DEV).bfloat16(), zero_point=zero_point)
    x = torch.randn(1, k, generator=g, device=DEV).bfloat16()
    ref = q.matmul_ref(x)
    for cfg in (SkinnyConfig(32, 128, 1, 2, 4, 1), SkinnyConfig(16, 256, 1, 2, 4, 2), SkinnyConfig(64, 128, 1, 1, 4, 3)):
        out = torch.full((1, n), float("nan"), dtype=torch.bfloat16, device=DEV)
        skinny_matmul(x, INT4, q.qweight, n, q.scales, q.zeros, out=out, cfg=cfg)
        assert _rel(out, ref) < REL, cfg


@triton.jit
def _e4m3_round_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + r, e4m3_rne(tl.load(x_ptr + r, mask=r < n)), mask=r < n)


def test_e4m3_rounding_matches_torch_on_every_midpoint():
    """e4m3_rne (rounding onto the e4m3 grid in fp32 before the conversion) equals torch's RNE conversion on every
    e4m3 value, every midpoint between neighbours and the floats either side of it, and random values."""
    vals = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    vals = vals[torch.isfinite(vals)].unique()
    mids = (vals[1:] + vals[:-1]) / 2
    g = torch.Generator().manual_seed(5)
    x = torch.cat([vals, mids, torch.nextafter(mids, torch.tensor(1e9)), torch.nextafter(mids, torch.tensor(-1e9)),
                   (torch.rand(4096, generator=g) * 2 - 1) * 448, torch.randn(4096, generator=g) * 1e-3,
                   -torch.rand(64, generator=g) * 2.0**-11])  # negative values that round to -0
    x = x.clamp(-448, 448).to(DEV)
    y = torch.empty_like(x)
    _e4m3_round_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    want = x.to(torch.float8_e4m3fn).float()
    assert torch.equal(y, want) and torch.equal(torch.signbit(y), torch.signbit(want))


@pytest.mark.parametrize("fmt", [FP8_ROW, FP8_BLOCK])
@pytest.mark.parametrize("m", [3, 16, 40])
def test_fp8_w8a8_decode_matches_its_reference(fmt, m, monkeypatch, ops_backend):
    """HINFER_FP8_DECODE=w8a8: x to e4m3 per row and 128-group inside the skinny kernel, against the torch body
    (ragged K = 2.5 groups, ragged N, split-K)."""
    from hinfer.ops.triton.linear import skinny_matmul

    monkeypatch.setenv("HINFER_FP8_DECODE", "w8a8")
    g = torch.Generator(device=DEV).manual_seed(17)
    q, (w, s, _), _ = _weights(fmt, g)
    x = torch.randn(m, K, generator=g, device=DEV).bfloat16()
    ref = q.matmul_ref_w8a8_decode(x)
    bm = max(16, 1 << (m - 1).bit_length())
    for cfg in (SkinnyConfig(32, 128, bm, 1, 4, 2), SkinnyConfig(64, 128, bm, 3, 4, 2)):
        out = torch.full((m, N), float("nan"), dtype=torch.bfloat16, device=DEV)
        skinny_matmul(x, fmt, w, N, s, out=out, cfg=cfg, a8=True)
        assert _rel(out, ref) < REL, cfg
    ops_backend("triton")
    y = q.matmul(x)
    assert _rel(y, ref) < REL  # the dispatch takes the W8A8 path at M >= 2
    assert _rel(y, q.matmul_ref(x)) < 0.05  # e4m3 activations: ~3% from W8A16 (measured 2.7% here)
