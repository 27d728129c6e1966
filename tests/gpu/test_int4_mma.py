"""The Gluon int4 tensor-core kernel on fragment-ordered weights (hinfer/ops/triton/linear_int4_mma.py, the CUDA
decode path of Int4MmaWeight) at the Qwen3.6-27B shapes against Int4Weight.matmul_ref; NaN-poisoned outputs.

    pytest -m gpu tests/gpu/test_int4_mma.py -q
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

H = 5120
SHAPES = {"qkv": (14336, H), "gdn_in_head": (16384, H), "gate_up": (34816, H), "o_proj": (H, 6144),
          "down": (H, 17408)}  # fmt: skip
MS = (1, 2, 4, 8, 16, 24, 32, 64)
REL = 6e-3  # fp32 accumulation; bf16 output rounding remains


def _gen(seed: int | None = None) -> torch.Generator:
    from hinfer.fixtures import fixed_test_seed

    return torch.Generator(device="cuda").manual_seed(fixed_test_seed() if seed is None else seed)


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    assert torch.isfinite(y).all(), "non-finite (or unwritten) output"
    return ((y.float() - ref.float()).norm() / ref.float().norm()).item()


def _quantized(n: int, k: int, zero_point: bool, g: torch.Generator):
    from hinfer.quant import quantize_int4
    from hinfer.quant.int4_mma_weight import Int4MmaWeight

    q = quantize_int4((torch.randn(n, k, generator=g, device="cuda") * k**-0.5).bfloat16(), zero_point=zero_point)
    return q, Int4MmaWeight.from_int4(q)


def _poisoned(m: int, n: int) -> torch.Tensor:
    return torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")


@pytest.fixture(autouse=True)
def _fp32_references():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_int4_mma_27b_shapes(name, zero_point):
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.linear import mma_config

    n, k = SHAPES[name]
    g = _gen()
    q, mw = _quantized(n, k, zero_point, g)
    for m in MS:
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_mma_matmul(x, mw, out=_poisoned(m, n))
        assert _rel(y, q.matmul_ref(x)) < REL, (m, mma_config(m, n, k))


@pytest.mark.parametrize("offset_mma", [False, True], ids=["fma-offset", "offset-mma"])
@pytest.mark.parametrize("tile", [(128, 8, 1, 4, 2), (128, 16, 4, 4, 2), (256, 8, 2, 4, 2), (64, 8, 8, 2, 2),
                                  (128, 8, 3, 4, 2), (128, 8, 4, 8, 4), (128, 8, 3, 8, 4), (128, 16, 5, 8, 4),
                                  (128, 32, 2, 8, 4), (64, 32, 3, 4, 2), (128, 64, 2, 8, 2)])  # fmt: skip
@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_int4_mma_tiles_and_variants(tile, offset_mma, zero_point):
    """Tiles (BLOCK_N, BLOCK_M, split-K, warps, depth), uneven splits and group counts that are not a multiple of
    the depth (136 groups: split 3 and 5), and the offset variant, on down_proj's K."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, block_m, split, warps, depth = tile
    cfg = SkinnyConfig(block_n, 128, block_m, split, warps, depth)
    n, k = 1024, 17408
    g = _gen()
    q, mw = _quantized(n, k, zero_point, g)
    for m in sorted({1, block_m // 2 + 1, block_m}):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_mma_matmul(x, mw, out=_poisoned(m, n), cfg=cfg, offset_mma=offset_mma)
        assert _rel(y, q.matmul_ref(x)) < REL, m


@pytest.mark.parametrize("tile", [(128, 8, 1, 4, 4), (128, 8, 3, 8, 3), (256, 8, 2, 8, 6), (128, 16, 5, 4, 8),
                                  (256, 32, 2, 8, 4), (128, 64, 2, 8, 3), (64, 8, 8, 4, 2)])  # fmt: skip
@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_int4_mma_shared_memory_ring(tile, zero_point):
    """The cp.async ring (BLOCK_N, BLOCK_M, split-K, warps, ring): uneven splits, rings longer than a split's
    groups (136 groups, split 8: 17 each; ring 8 on 27 groups), on down_proj's K."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, block_m, split, warps, ring = tile
    cfg = SkinnyConfig(block_n, 128, block_m, split, warps, 2, ring)
    n, k = 1024, 17408
    g = _gen()
    q, mw = _quantized(n, k, zero_point, g)
    for m in sorted({1, block_m // 2 + 1, block_m}):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_mma_matmul(x, mw, out=_poisoned(m, n), cfg=cfg)
        assert _rel(y, q.matmul_ref(x)) < REL, m


@pytest.mark.parametrize("tile", [(128, 8, 1, 4, 2, 0, 20), (128, 16, 4, 4, 2, 0, 32), (128, 8, 3, 8, 4, 0, 64),
                                  (128, 16, 2, 4, 2, 4, 29), (256, 32, 3, 8, 2, 0, 64), (128, 8, 5, 4, 2, 6, 17)])  # fmt: skip
@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_int4_mma_rows_of_x_in_blocks(tile, zero_point):
    """More rows of x than BLOCK_M (BLOCK_N, BLOCK_M, split-K, warps, depth, ring, M): blocks of rows along the
    grid, a partial last block, with split-K (a counter per row block and weight tile) and the ring."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, block_m, split, warps, depth, ring, m = tile
    cfg = SkinnyConfig(block_n, 128, block_m, split, warps, depth, ring)
    n, k = 1024, 17408
    g = _gen()
    q, mw = _quantized(n, k, zero_point, g)
    for _ in range(2):  # the second call reuses the counters the first reset
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_mma_matmul(x, mw, out=_poisoned(m, n), cfg=cfg)
        assert _rel(y, q.matmul_ref(x)) < REL, (m, cfg)


@pytest.mark.parametrize("tile", [(128, 16, 4, 4, 2, 32), (128, 8, 8, 4, 4, 8), (256, 32, 2, 8, 2, 32)])
def test_int4_mma_tile_fma_offset(tile):
    """A tile's fma_offset picks the per-weight offset variant (no second MMA), rows in blocks included."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    block_n, block_m, split, warps, depth, m = tile
    cfg = SkinnyConfig(block_n, 128, block_m, split, warps, depth, fma_offset=True)
    n, k = 1024, 5120
    g = _gen()
    q, mw = _quantized(n, k, True, g)
    x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
    y = int4_mma_matmul(x, mw, out=_poisoned(m, n), cfg=cfg)
    assert _rel(y, q.matmul_ref(x)) < REL
    assert torch.equal(y, int4_mma_matmul(x, mw, cfg=cfg, offset_mma=False))


def test_int4_mma_matches_its_torch_twin():
    """Same arithmetic as hinfer.quant.int4_mma_layout.emulate_kernel: only fp32 summation order differs."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.quant.int4_mma_layout import emulate_kernel

    n, k = 512, 1024
    q, mw = _quantized(n, k, True, _gen(0))
    x = torch.randn(8, k, generator=_gen(1), device="cuda").bfloat16()
    for offset_mma in (True, False):
        y = int4_mma_matmul(x, mw, out=_poisoned(8, n), offset_mma=offset_mma)
        assert _rel(y, emulate_kernel(mw.words, mw.scales, mw.zeros, x, n, offset_mma)) < 2e-3, offset_mma


def test_int4_mma_split_k_in_a_cuda_graph():
    """The in-launch split-K reduction resets its counters: replays give the same result."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.linear import mma_config

    n, k = SHAPES["down"]
    q, mw = _quantized(n, k, True, _gen(2))
    x = torch.randn(8, k, generator=_gen(3), device="cuda").bfloat16()
    assert mma_config(8, n, k).split_k > 1
    out = _poisoned(8, n)
    int4_mma_matmul(x, mw, out=out)  # compile and allocate the counters outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        int4_mma_matmul(x, mw, out=out)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert _rel(out, q.matmul_ref(x)) < REL


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_int4_mma_weight_decode_and_prefill_paths(zero_point):
    """Int4MmaWeight as the engine uses it: the kernel up to 64 rows, the Triton dequantization + cuBLAS above
    (bit-equal to Int4Weight.dequantize), into a strided output as RowSplitWeight passes one."""
    from hinfer.quant.int4_mma_weight import Int4MmaWeight, use_fragment_order

    n, k = 1024, 5120
    g = _gen()
    q, _ = _quantized(n, k, zero_point, g)
    w = use_fragment_order(q)
    assert isinstance(w, Int4MmaWeight)
    assert torch.equal(w.dequantize(), q.dequantize())
    for m in (1, 7, 33, 64, 65, 300):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        assert _rel(w.matmul(x), q.matmul_ref(x)) < REL, m
        wide = torch.full((m, n + 64), float("nan"), dtype=torch.bfloat16, device="cuda")
        w.matmul(x, out=wide[:, :n])
        assert _rel(wide[:, :n], q.matmul_ref(x)) < REL, m


@pytest.mark.parametrize("mode", ["w4a16", "w4a8"])
def test_int4_mma_weight_prefills_with_the_row_gemms(mode, monkeypatch):
    """HINFER_INT4_PREFILL=w4a16 | w4a8 on the decode layout: the mode's GEMM on a transient row copy, as the row
    weight computes it (bit for bit), into a strided output too; w4a8 on cuBLAS with 1x128 scales where the probe
    finds them: the same reference, not the Triton GEMM's bits."""
    from hinfer.quant.fp8 import scaled_mm_group_scales_ok
    from hinfer.quant.int4_mma_weight import Int4MmaWeight, use_fragment_order

    monkeypatch.setenv("HINFER_INT4_PREFILL", mode)
    n, k = 1024, 5120
    g = _gen()
    q, _ = _quantized(n, k, True, g)
    w = use_fragment_order(q)
    assert isinstance(w, Int4MmaWeight)
    assert torch.equal(w.to_int4().qweight, q.qweight)  # the Triton repacking (int4_mma_rows)
    x = torch.randn(300, k, generator=g, device="cuda").bfloat16()
    ref = q.matmul_ref_w4a8(x) if mode == "w4a8" else q.matmul_ref(x)
    assert _rel(q.matmul(x), ref) < REL
    want = w.matmul(x)
    if mode == "w4a8" and scaled_mm_group_scales_ok(0):
        assert _rel(want, ref) < REL
    else:
        assert torch.equal(want, q.matmul(x))
    wide = torch.full((300, n + 64), float("nan"), dtype=torch.bfloat16, device="cuda")
    w.matmul(x, out=wide[:, :n])
    assert torch.equal(wide[:, :n], want)


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
def test_int4_mma_weight_prefills_on_fp8(zero_point, monkeypatch):
    """HINFER_INT4_PREFILL=fp8 on the decode layout: the e4m3 scratch written from fragment order (one scale per
    row) and cuBLAS fp8 rowwise, against its reference body; the scratch against the rounding it stands for
    (at most one e4m3 step apart where the fp32 quotient ties)."""
    from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize
    from hinfer.quant.int4 import weight_to_fp8_rows
    from hinfer.quant.int4_mma_weight import Int4MmaWeight, use_fragment_order

    monkeypatch.setenv("HINFER_INT4_PREFILL", "fp8")
    n, k = 1024, 5120
    g = _gen()
    q, _ = _quantized(n, k, zero_point, g)
    w = use_fragment_order(q)
    assert isinstance(w, Int4MmaWeight)
    rs = w.fp8_row_scale()
    w8 = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k, row_scale=rs)
    ref8 = weight_to_fp8_rows(q.dequantize(torch.float32), rs)
    torch.testing.assert_close(w8.float(), ref8.float(), rtol=2**-3, atol=2**-9)
    assert (w8.float() != ref8.float()).float().mean() < 1e-3
    x = torch.randn(300, k, generator=g, device="cuda").bfloat16()
    assert _rel(w.matmul(x), w.matmul_ref_fp8(x)) < REL
    wide = torch.full((300, n + 64), float("nan"), dtype=torch.bfloat16, device="cuda")
    w.matmul(x, out=wide[:, :n])
    assert torch.equal(wide[:, :n], w.matmul(x))


@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
@pytest.mark.parametrize("name", ["qkv", "down"])
def test_int4_mma_reads_the_row_layout(name, zero_point):
    """The kernel's ROWS variant on Int4Weight itself (no re-layout): same results as on fragment order."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    n, k = SHAPES[name]
    g = _gen()
    q, mw = _quantized(n, k, zero_point, g)
    for m in (1, 8, 16, 32):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        y = int4_mma_matmul(x, q, out=_poisoned(m, n))
        assert _rel(y, q.matmul_ref(x)) < REL, m
        assert _rel(y, int4_mma_matmul(x, mw)) < 2e-3, m
    x = torch.randn(5, k, generator=g, device="cuda").bfloat16()
    y = int4_mma_matmul(x, q, out=_poisoned(5, n), cfg=SkinnyConfig(128, 128, 8, 3, 8, 4))
    assert _rel(y, q.matmul_ref(x)) < REL


@pytest.mark.parametrize("tile", [(128, 8, 4, 4, 2, 4), (128, 8, 4, 8, 2, 0), (128, 16, 2, 4, 4, 0),
                                  (128, 32, 1, 8, 2, 4)])  # fmt: skip
def test_int4_mma_bf16_tail_rows_in_the_same_launch(tile, monkeypatch):
    """Tail rows kept in bf16 (the GDN in_proj's b / a: 96 of them at the 27B, 64 at the 35B-A3B, a count that
    is not a multiple of the warps here) computed by extra programs of the int4 launch: the int4 columns are the
    launch without a tail bit for bit, the tail columns equal x @ tail^T in fp32 up to bf16 rounding; the same
    through RowSplitWeight.matmul, in a CUDA graph too."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig
    from hinfer.quant.apply import RowSplitWeight

    block_n, block_m, split, warps, depth, ring = tile
    cfg = SkinnyConfig(block_n, 128, block_m, split, warps, depth, ring)
    n, k, t = 1024, 5120, 90
    g = _gen()
    q, mw = _quantized(n, k, True, g)
    tail = (torch.randn(t, k, generator=g, device="cuda") * k**-0.5).bfloat16()
    for m in sorted({1, block_m // 2 + 1, block_m, min(2 * block_m + 3, 64)}):  # the kernel takes M <= 64
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        out = int4_mma_matmul(x, mw, out=_poisoned(m, n + t), cfg=cfg, tail=tail)
        head = int4_mma_matmul(x, mw, out=_poisoned(m, n), cfg=cfg)
        assert torch.equal(out[:, :n], head), f"int4 columns, M={m}"
        assert _rel(out[:, n:], x.float() @ tail.float().T) < REL, f"tail columns, M={m}"
    x = torch.randn(4, k, generator=g, device="cuda").bfloat16()
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "tail")  # the fused path at any rows (by default: up to 8)
    split_w = RowSplitWeight(mw, tail)
    want = torch.cat([mw.matmul(x), torch.nn.functional.linear(x, tail)], dim=-1)
    y = split_w.matmul(x)
    assert torch.equal(y[:, :n], want[:, :n]) and _rel(y[:, n:], want[:, n:]) < REL
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_g = split_w.matmul(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y_g, y), "graph replay"


def test_x_ahead_changes_nothing():
    """A tile's x_ahead (each group's x loaded with the register look-ahead's weights) moves loads only: the
    same bits at depths 2 and 4 and through the shared-memory ring, with splits, one, eight and sixteen rows."""
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    _same_bits_with("x_ahead", (
        (1, SkinnyConfig(128, 128, 8, 4, 4, 2)), (1, SkinnyConfig(128, 128, 8, 1, 4, 4)),
        (8, SkinnyConfig(128, 128, 8, 16, 4, 2)), (8, SkinnyConfig(64, 128, 8, 2, 4, 4)),
        (1, SkinnyConfig(128, 128, 8, 2, 4, 2, 4)), (16, SkinnyConfig(128, 128, 16, 1, 4, 2, 4)),
        # the ring's x-ahead loop runs two groups a turn: odd group counts (5; 14, 14, 12)
        (1, SkinnyConfig(128, 128, 8, 8, 4, 2, 4)), (8, SkinnyConfig(128, 128, 8, 3, 4, 2, 4))))  # fmt: skip


def _same_bits_with(field: str, tiles: tuple) -> tuple:
    """Each (rows, tile) at the 27B qkv shape gives the same bits with the tile's boolean `field` on as off (a
    poisoned output: every element written); returns the generator and the weight for more checks."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul

    n, k = SHAPES["qkv"]
    g = _gen()
    _, mw = _quantized(n, k, True, g)
    for m, cfg in tiles:
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        want = int4_mma_matmul(x, mw, cfg=cfg)
        on = replace(cfg, **{field: True})
        assert torch.equal(int4_mma_matmul(x, mw, out=_poisoned(m, n), cfg=on), want), f"M={m} {on}"
    return g, mw


def test_x_staged_changes_nothing(monkeypatch):
    """A tile's x_staged (a program's groups of x read once into shared memory, each group's x read from there)
    moves loads only: the same bits at depths 2 and 4 and through the ring, with splits (odd group counts: the
    staged groups rounded up to a power of two, the rest clamped re-reads), one row (staged once for the
    padding rows) and eight and sixteen (staged per row). HINFER_X_STAGED=one / all stage the table's tiles."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    g, mw = _same_bits_with("x_staged", (
        (1, SkinnyConfig(128, 128, 8, 4, 4, 2)), (1, SkinnyConfig(128, 128, 8, 3, 4, 4)),
        (8, SkinnyConfig(128, 128, 8, 16, 4, 2)), (8, SkinnyConfig(64, 128, 8, 6, 4, 4)),
        (1, SkinnyConfig(128, 128, 8, 2, 4, 2, 4)), (16, SkinnyConfig(128, 128, 16, 8, 4, 2, 4)),
        (1, SkinnyConfig(128, 128, 8, 8, 4, 2, 4)), (8, SkinnyConfig(128, 128, 8, 3, 4, 2, 4))))  # fmt: skip
    n, k = SHAPES["qkv"]
    for m in (1, 8):
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        monkeypatch.setenv("HINFER_X_STAGED", "off")
        want = int4_mma_matmul(x, mw)
        for mode in ("one", "all"):
            monkeypatch.setenv("HINFER_X_STAGED", mode)
            assert _rel(int4_mma_matmul(x, mw, out=_poisoned(m, n)), want) < REL, f"M={m} {mode}"


def test_ring_pairs_change_nothing():
    """Two groups to a ring slot (ring_pairs, each with buffers of its own) moves copies and barriers only: the
    same bits as one group a slot, even and odd group counts, one and eight rows, with and without a register
    cap, and with the bf16 tail rows in the same launch."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    n, k = SHAPES["qkv"]
    g = _gen()
    _, mw = _quantized(n, k, True, g)
    for m, cfg in ((1, SkinnyConfig(128, 128, 8, 4, 4, 2, 4, x_ahead=True)),
                   (8, SkinnyConfig(128, 128, 8, 8, 4, 2, 3, x_ahead=True)),
                   (1, SkinnyConfig(128, 128, 8, 3, 4, 2, 3, x_ahead=True, max_regs=96))):  # fmt: skip
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        want = int4_mma_matmul(x, mw, cfg=cfg)
        paired = replace(cfg, ring_pairs=True)
        assert torch.equal(int4_mma_matmul(x, mw, out=_poisoned(m, n), cfg=paired), want), f"M={m} {paired}"
    tail = torch.randn(96, k, generator=g, device="cuda").bfloat16()
    x = torch.randn(1, k, generator=g, device="cuda").bfloat16()
    cfg = SkinnyConfig(128, 128, 8, 4, 4, 2, 4, x_ahead=True)
    want = int4_mma_matmul(x, mw, out=_poisoned(1, n + 96), cfg=cfg, tail=tail)
    got = int4_mma_matmul(x, mw, out=_poisoned(1, n + 96), cfg=replace(cfg, ring_pairs=True), tail=tail)
    assert torch.equal(got, want), "tail rows"


def test_pdl_graph_matches_eager(monkeypatch):
    """Launches under PDL in a CUDA graph (each a programmatic dependent of the one before, its weights read
    ahead of the wait) give the eager launch's bits, through both loops and with splits."""
    from hinfer.ops.triton.linear_int4_mma import int4_mma_matmul
    from hinfer.ops.triton.tiles.forms import SkinnyConfig

    monkeypatch.setenv("HINFER_PDL", "1")
    n, k = SHAPES["qkv"]
    g = _gen()
    _, mw = _quantized(n, k, True, g)
    for m, cfg in ((1, SkinnyConfig(128, 128, 8, 4, 4, 4)), (8, SkinnyConfig(128, 128, 8, 2, 4, 2, 4)),
                   (1, SkinnyConfig(128, 128, 8, 1, 4, 2)),
                   (1, SkinnyConfig(128, 128, 8, 4, 4, 2, 4, x_ahead=True))):  # fmt: skip
        x = torch.randn(m, k, generator=g, device="cuda").bfloat16()
        want = int4_mma_matmul(x, mw, cfg=cfg)
        out = _poisoned(m, n)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(3):
                int4_mma_matmul(x, mw, out=out, cfg=cfg)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want), f"graph M={m} {cfg}"


@pytest.mark.parametrize("form", ["bf16", "fp8_rows", "unscaled"])
@pytest.mark.parametrize("zero_point", [True, False], ids=["asym", "sym"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_int4_prefill_scratch_writers_agree(name, zero_point, form):
    """The prefill scratch written by the kernel that reads each word once (the default) equals the gathering
    one's, bit for bit, at every 27B shape and in every form."""
    from hinfer.ops.triton.int4_mma_dequant import int4_mma_dequantize

    n, k = SHAPES[name]
    _, w = _quantized(n, k, zero_point, _gen())
    kw = {"row_scale": w.fp8_row_scale()} if form == "fp8_rows" else {"unscaled": True} if form == "unscaled" else {}
    gathered = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k, coalesced=False, **kw)
    coalesced = int4_mma_dequantize(w.words, w.scales, w.zeros, n, k, coalesced=True, **kw)
    assert coalesced.dtype == gathered.dtype
    assert torch.equal(coalesced.view(torch.uint8), gathered.view(torch.uint8)) if form != "bf16" else \
        torch.equal(coalesced.view(torch.int16), gathered.view(torch.int16))
