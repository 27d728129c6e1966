"""Triton MoE kernels (router, alignment, expert GEMMs) vs the reference bodies, in Triton's CPU interpreter.

Tiny shapes (E=8 experts, top 2, H=32, I=16; plus H=48, I=24 where no tile divides K or N), T in {1, 3, 17},
every path of moe_experts forced in turn (T == 1 GEMV; grouped with the decode SWAP tile and with the prefill
tile; the single-program and the multi-kernel alignment); int4 (FMT 1) and fp8 (FMT 2, per-channel and
128x128 block scales) experts at H=256 on the default, direct and forced tiles. Fresh random inputs every run
(the seed is printed on failure); outputs and scratch are poisoned (NaN floats, junk ints) so anything never written shows up.

Tolerances, against the reference evaluated in fp32 on the same routing:
- fp32: 2e-5 (the kernels sum in a different order; act and y are not rounded).
- bf16: relative L2 <= 1e-2 and max |err| <= 3e-2 * max |ref|; the kernels round act = silu(g)*u and each
  slot's y to bf16 once (the reference rounds g, u, silu(g), the product, y and each partial sum), measured
  ~3e-3 relative L2.
Router: ids equal when no two logits of a row tie; weights to 1e-6 (fp32) or one bf16 rounding step.
"""

from __future__ import annotations

import importlib
import random

import pytest
import torch

from hinfer.ops import moe as ref
from hinfer.quant.experts import quantize_experts_int4

triton = pytest.importorskip("triton")
from hinfer.ops.triton.common import interpreted  # noqa: E402


def _mod(name: str):
    return importlib.import_module(f"hinfer.ops.triton.{name}")


def _poison(shape, dtype, device):
    t = torch.empty(shape, dtype=dtype, device=device)
    return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(-(2**30) + 7)


@pytest.fixture
def tm(interpreter, monkeypatch):
    """The Triton MoE module, interpreted, with the outputs and scratch it allocates poisoned."""
    assert interpreted(_mod("moe_gemm")._gate_up_kernel)
    for name in ("moe", "moe_route", "moe_align"):
        monkeypatch.setattr(_mod(name), "_empty", _poison)
    return _mod("moe")


def _distinct_logits(t: int, e: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows of distinct values, exact in bf16 (multiples of 1/8 below 32 in magnitude), random scale."""
    rows = torch.stack([torch.randperm(e) for _ in range(t)]).float() - e / 2
    return (rows / 8 * 2.0 ** random.randint(-2, 1)).to(dtype)


def _routing(t: int, e: int, k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    w, i = ref.moe_route_ref(torch.randn(t, e), k)
    return w.to(dtype), i


def _weights(e: int, h: int, i: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.randn(e, 2 * i, h) / h**0.5).to(dtype), (torch.randn(e, h, i) / i**0.5).to(dtype)


def _check_experts(out: torch.Tensor, x, wgu, wd, top_w, top_i, seed: int) -> None:
    want = ref.moe_experts_ref(x.float(), wgu.float(), wd.float(), top_w.float(), top_i)
    assert out.shape == want.shape and out.dtype == x.dtype
    assert not torch.isnan(out).any(), f"unwritten (NaN) output, seed {seed}"
    err = (out.float() - want).abs()
    scale = want.abs().max().item()
    if x.dtype == torch.float32:
        assert err.max().item() <= 2e-5 * max(1.0, scale), f"max err {err.max().item():.3g}, seed {seed}"
    else:
        rel_l2 = (err.norm() / want.norm()).item()
        assert rel_l2 <= 1e-2 and err.max().item() <= 3e-2 * scale, f"rel L2 {rel_l2:.3g}, seed {seed}"


# ----------------------------------------------------------------------------------------------- router


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("t", "e", "k"), [(1, 8, 2), (3, 256, 8), (17, 8, 2), (300, 8, 3)])
def test_route_matches_reference(tm, seed, dtype, t, e, k):
    logits = _distinct_logits(t, e, dtype)
    w, ids = tm.moe_route(logits, k)
    w_ref, ids_ref = ref.moe_route_ref(logits, k)
    assert ids.dtype == torch.int64 and w.dtype == dtype
    assert torch.equal(ids, ids_ref), f"seed {seed}"
    if dtype == torch.float32:
        torch.testing.assert_close(w, w_ref, atol=1e-6, rtol=1e-5, msg=f"seed {seed}")
    else:  # fp32 weights may sit on either side of a bf16 rounding boundary
        torch.testing.assert_close(w.float(), w_ref.float(), atol=0, rtol=2**-8, msg=f"seed {seed}")


def test_route_negative_zero_and_infinite_logits(tm, seed):
    """All-negative rows (the softmax max is the top pick's logit, not a padded slot's 0), -0.0 equal to +0.0
    (lowest id first), and -inf logits still picked as distinct experts when fewer finite ones remain."""
    logits = torch.tensor([[-3.0, -1.0, -2.0, -5.0, -4.0, -7.0, -6.0, -8.0],
                           [0.0, -0.0, 0.0, -1.0, -0.0, -2.0, -3.0, -4.0],
                           [-1.0, -float("inf"), -2.0, -float("inf"), -float("inf"), -float("inf"), -float("inf"),
                            -float("inf")]])  # fmt: skip
    w, ids = tm.moe_route(logits, 3)
    assert ids.tolist() == [[1, 2, 0], [0, 1, 2], [0, 2, 1]]
    w_ref, _ = ref.moe_route_ref(logits, 3)
    torch.testing.assert_close(w, w_ref, atol=1e-6, rtol=1e-5)


def test_route_ties_lowest_index_first(tm, seed):
    """Many equal logits: the kernel's choice is the lowest ids among equals, in descending order; the chosen
    probabilities (hence the weights) equal the reference's whichever equal expert torch picked."""
    t, e, k = 9, 16, 4
    logits = torch.randint(0, 3, (t, e)).float()
    w, ids = tm.moe_route(logits, k)
    w_ref, _ = ref.moe_route_ref(logits, k)
    torch.testing.assert_close(w, w_ref, atol=1e-6, rtol=1e-5, msg=f"seed {seed}")
    order = sorted(range(e), key=lambda j: -logits[0, j].item())  # stable: lowest index first among equals
    want = torch.stack(
        [torch.tensor(sorted(range(e), key=lambda j, r=r: -logits[r, j].item())[:k]) for r in range(t)]
    )
    assert order[:k] == want[0].tolist()
    assert torch.equal(ids, want), f"seed {seed}"


def test_route_dispatch(tm, seed, monkeypatch, ops_backend):
    """hinfer.ops.moe.moe_route runs the Triton router when HINFER_TRITON=1."""
    ops_backend("triton")
    calls = []
    monkeypatch.setattr(tm, "moe_route", lambda lg, k, shared: calls.append((k, shared)) or ref.moe_route_ref(lg, k, shared))
    ref.moe_route(torch.randn(2, 8), 2)
    ref.moe_route(torch.randn(2, 9), 2, shared=True)
    assert calls == [(2, False), (2, True)]


def test_route_experts_is_route_then_experts(tm, seed, monkeypatch, ops_backend):
    """hinfer.ops.moe.moe_route_experts is moe_route then moe_experts: off the GPU (and without the route
    launch fusion) the Triton twin runs exactly those two ops; the reference backend the reference bodies."""
    ops_backend("triton")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 16, generator=g)
    wgu, wd = torch.randn(9, 8, 16, generator=g) * 0.2, torch.randn(9, 16, 4, generator=g) * 0.3
    logits = torch.randn(1, 9, generator=g)
    got = ref.moe_route_experts(x, logits, wgu, wd, 2, shared=True)
    w, i = tm.moe_route(logits, 2, shared=True)
    assert torch.equal(got, tm.moe_experts(x, wgu, wd, w, i)), f"seed {seed}"
    ops_backend("reference")
    want = ref.moe_experts_ref(x, wgu, wd, *ref.moe_route_ref(logits, 2, shared=True))
    assert torch.equal(ref.moe_route_experts(x, logits, wgu, wd, 2, shared=True), want)


# -------------------------------------------------------------------------------------------- alignment


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize(("t", "bm"), [(1, 16), (17, 16), (40, 64)])
def test_align_groups_every_pair_once(tm, seed, monkeypatch, large, t, bm):
    al_mod = _mod("moe_align")
    if large:
        monkeypatch.setattr(al_mod, "SMALL_MAX_PAIRS", 0)
        monkeypatch.setattr(al_mod, "_BP", 16)  # several histogram / scatter programs
    e, k = 8, 3
    _, ids = _routing(t, e, k, torch.float32)
    al = al_mod.align(ids, e, bm)
    assert al.n_blocks == al_mod.max_blocks(t * k, e, bm)
    flat = ids.reshape(-1)
    seen = []
    for b in range(al.n_blocks):
        ex, rows = al.bexp[b].item(), al.brows[b].item()
        if ex < 0:
            continue
        assert 1 <= rows <= bm, f"seed {seed}"
        pairs = al.sorted[b * bm : b * bm + rows].tolist()
        assert all(flat[p].item() == ex for p in pairs), f"seed {seed}"
        seen += pairs
    assert sorted(seen) == list(range(t * k)), f"seed {seed}"
    used = [b for b in range(al.n_blocks) if al.bexp[b] >= 0]
    assert used == list(range(len(used))), "used blocks come first"


# ---------------------------------------------------------------------------------------------- experts


def _config(tm, kind: str):
    cfg = _mod("tiles.forms")
    if kind == "gemv":
        tile = cfg.Tile(cfg.GEMV, 16, 32, 4, 2)
    elif kind == "swap16":
        tile = cfg.Tile(16, 64, 128, 4, 2, swap=True)
    else:  # the prefill tile: 64 rows of one expert per block
        tile = cfg.Tile(64, 64, 64, 4, 2)
    return cfg.MoeConfig(tile, tile)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("t", "kind"),
    [(1, "gemv"), (1, "swap16"), (3, "swap16"), (17, "swap16"), (3, "plain64"), (17, "plain64")],
)
def test_experts_match_reference(tm, seed, dtype, t, kind):
    e, k, h, i = 8, 2, 32, 16
    x = torch.randn(t, h).to(dtype)
    wgu, wd = _weights(e, h, i, dtype)
    top_w, top_i = _routing(t, e, k, dtype)
    out = tm.moe_experts(x, wgu, wd, top_w, top_i, config=_config(tm, kind))
    _check_experts(out, x, wgu, wd, top_w, top_i, seed)


@pytest.mark.parametrize(("t", "kind"), [(1, "gemv"), (3, "swap16"), (17, "plain64")])
def test_experts_ragged_shapes(tm, seed, t, kind):
    """H=48, I=24: K is not a multiple of the K tile (masked loads) nor N of the N tile (wrapped rows)."""
    e, k, h, i = 8, 2, 48, 24
    x = torch.randn(t, h).bfloat16()
    wgu, wd = _weights(e, h, i, torch.bfloat16)
    top_w, top_i = _routing(t, e, k, torch.bfloat16)
    out = tm.moe_experts(x, wgu, wd, top_w, top_i, config=_config(tm, kind))
    _check_experts(out, x, wgu, wd, top_w, top_i, seed)


@pytest.mark.parametrize("large_align", [False, True])
def test_experts_all_tokens_on_one_expert(tm, seed, monkeypatch, large_align):
    """Every token picks experts 5 and 2 (in random order): 17 rows on each, so two 16-row blocks per expert
    and six experts without a token."""
    if large_align:
        monkeypatch.setattr(_mod("moe_align"), "SMALL_MAX_PAIRS", 0)
    e, k, h, i, t = 8, 2, 32, 16, 17
    x = torch.randn(t, h).bfloat16()
    wgu, wd = _weights(e, h, i, torch.bfloat16)
    flip = torch.rand(t) < 0.5
    top_i = torch.stack([torch.where(flip, 5, 2), torch.where(flip, 2, 5)], dim=1)
    top_w = torch.softmax(torch.randn(t, k), -1).bfloat16()
    out = tm.moe_experts(x, wgu, wd, top_w, top_i, config=_config(tm, "swap16"))
    _check_experts(out, x, wgu, wd, top_w, top_i, seed)


@pytest.mark.parametrize("fused", ["0", "64"])
def test_experts_leave_their_rows_to_the_norm(tm, seed, monkeypatch, fused):
    """With `slots` and the `norm_slots` launch fusion on, moe_experts hands back each token's k weighted expert
    rows [T, k, H] instead of launching their sum: the rows' sum (sum_slots_ref) is the summed output bit for bit;
    off or without `slots`, the output is summed."""
    from hinfer.ops.norm import sum_slots_ref

    e, k, h, i, t = 8, 2, 32, 16, 17
    x = torch.randn(t, h).bfloat16()
    wgu, wd = _weights(e, h, i, torch.bfloat16)
    top_w, top_i = tm.moe_route(torch.randn(t, e).bfloat16(), k)
    summed = tm.moe_experts(x, wgu, wd, top_w, top_i)
    monkeypatch.setenv("HINFER_FUSION_ROWS", f"norm_slots={fused}")
    out = tm.moe_experts(x, wgu, wd, top_w, top_i, slots=True)
    assert tm.moe_experts(x, wgu, wd, top_w, top_i).shape == (t, h)
    if fused == "0":
        assert out.shape == (t, h) and torch.equal(out, summed)
        return
    assert out.shape == (t, k, h), out.shape
    assert torch.equal(sum_slots_ref(out), summed), f"seed {seed}"
    _check_experts(sum_slots_ref(out), x, wgu, wd, top_w, top_i, seed)


def test_experts_default_config(tm, seed):
    """moe_experts without a config: the pick for T=17, k=2, E=8 (avg 4.25 pairs per expert) plus the route."""
    e, k, h, i, t = 8, 2, 32, 16, 17
    x = torch.randn(t, h).bfloat16()
    wgu, wd = _weights(e, h, i, torch.bfloat16)
    top_w, top_i = tm.moe_route(torch.randn(t, e).bfloat16(), k)
    out = tm.moe_experts(x, wgu, wd, top_w, top_i)
    _check_experts(out, x, wgu, wd, top_w, top_i, seed)


@pytest.mark.parametrize("zero_point", [True, False])
@pytest.mark.parametrize(("t", "kind"), [(1, "default"), (1, "direct_sum"), (3, "swap16"), (17, "plain64")])
def test_experts_int4(tm, seed, zero_point, t, kind):
    """W4A16 experts (hinfer.quant.int4 layout per expert), H=256 so gate_up spans two 128-groups."""
    q = _mod("moe_int4")
    cfg_mod = _mod("tiles.forms")
    e, k, h, i = 8, 2, 256, 32
    x = torch.randn(t, h).bfloat16()
    wgu, wd = _weights(e, h, i, torch.float32)
    wqgu, wqdn = quantize_experts_int4(wgu, zero_point=zero_point), quantize_experts_int4(wd, zero_point=zero_point)
    qgu, qdn = (q.Int4Experts(w.qweight, w.scales, w.zeros, w.in_features) for w in (wqgu, wqdn))
    top_w, top_i = _routing(t, e, k, torch.bfloat16)
    if kind == "direct_sum":
        tile = cfg_mod.Tile(16, 64, 128, 4, 2, swap=True)
        config = cfg_mod.MoeConfig(tile, tile, direct=True, sum_in_down=True)
    else:
        config = None if kind == "default" else _config(tm, kind)
    out = tm.moe_experts(x, qgu, qdn, top_w, top_i, config=config)
    want = ref.moe_experts_ref(x.float(), wqgu.dequantize(torch.float32), wqdn.dequantize(torch.float32),
                               top_w.float(), top_i)
    assert not torch.isnan(out).any(), f"seed {seed}"
    err = (out.float() - want).abs()
    rel_l2 = (err.norm() / want.norm()).item()
    assert rel_l2 <= 1e-2 and err.max().item() <= 3e-2 * want.abs().max().item(), (
        f"rel L2 {rel_l2:.3g}, seed {seed}"
    )
    torch.testing.assert_close(
        ref.moe_experts_ref(x, wqgu, wqdn, top_w, top_i).float(),
        want,
        atol=1e-2 * want.abs().max().item(),
        rtol=0,
    )


@pytest.mark.parametrize(("t", "kind"), [(1, "direct_sum"), (3, "swap16"), (17, "plain64")])
def test_experts_int4_stripes(tm, seed, t, kind):
    """The grouped int4 kernels read experts stored stripe by stripe (int4_mma_layout.stripe_experts, gate_up's
    gate and up rows paired) to the row layout's outputs bit for bit: only where each word is found differs.
    K = 256 and 128 so the K-steps walk whole 128-groups and halves of them."""
    from hinfer.quant.int4_mma_layout import stored_as

    q = _mod("moe_int4")
    cfg_mod = _mod("tiles.forms")
    e, k, h, i = 8, 2, 256, 128
    x = torch.randn(t, h).bfloat16()
    wgu, wd = _weights(e, h, i, torch.float32)
    wqgu, wqdn = quantize_experts_int4(wgu), quantize_experts_int4(wd)
    rows = [q.Int4Experts(w.qweight, w.scales, w.zeros, w.in_features) for w in (wqgu, wqdn)]
    striped = [stored_as(w, "stripes", gate_up) for w, gate_up in zip(rows, (True, False))]
    top_w, top_i = _routing(t, e, k, torch.bfloat16)
    if kind == "direct_sum":
        tile = cfg_mod.Tile(16, 64, 128, 4, 2, swap=True)
        config = cfg_mod.MoeConfig(tile, tile, direct=True, sum_in_down=True)
    else:
        config = _config(tm, kind)
    want = tm.moe_experts(x, *rows, top_w, top_i, config=config)
    got = tm.moe_experts(x, *striped, top_w, top_i, config=config)
    assert not torch.isnan(want).any() and torch.equal(got, want), (
        f"differs by {(got.float() - want.float()).abs().max().item()}, seed {seed}"
    )
    with pytest.raises(ValueError, match="`rows` or `stripes`"):
        stored_as(rows[0], "fragment", True)  # no other order


@pytest.mark.parametrize("block", [False, True])
@pytest.mark.parametrize(("t", "kind"), [(1, "default"), (1, "direct_sum"), (3, "swap16"), (17, "plain64")])
def test_experts_fp8(tm, seed, block, t, kind):
    """W8A16 experts (FMT 2: e4m3 + fp32 scales per channel or per 128x128 block, hinfer.quant.fp8's layout per
    expert); H=256 so the K loop crosses a scale block, I=80 so gate_up's block row 0 holds gate and up rows."""
    from hinfer.quant.experts import quantize_experts_fp8

    cfg_mod = _mod("tiles.forms")
    e, k, h, i = 8, 2, 256, 80
    x = torch.randn(t, h).bfloat16()
    wgu, wd = _weights(e, h, i, torch.float32)
    scheme = "block" if block else "channel"
    qgu, qdn = quantize_experts_fp8(wgu, scheme), quantize_experts_fp8(wd, scheme)
    fgu, fdn = tm.Fp8Experts(qgu.weight, qgu.scale, block), tm.Fp8Experts(qdn.weight, qdn.scale, block)
    top_w, top_i = _routing(t, e, k, torch.bfloat16)
    if kind == "direct_sum":
        tile = cfg_mod.Tile(16, 64, 128, 4, 2, swap=True)
        config = cfg_mod.MoeConfig(tile, tile, direct=True, sum_in_down=True)
    else:
        config = None if kind == "default" else _config(tm, kind)
    out = tm.moe_experts(x, fgu, fdn, top_w, top_i, config=config)
    assert torch.equal(fgu.dequantize(), qgu.dequantize(torch.float32))  # the tuple's values are the module's
    want = ref.moe_experts_ref(x.float(), fgu.dequantize(), fdn.dequantize(), top_w.float(), top_i)
    assert not torch.isnan(out).any(), f"seed {seed}"
    err = (out.float() - want).abs()
    rel_l2 = (err.norm() / want.norm()).item()
    assert rel_l2 <= 1e-2 and err.max().item() <= 3e-2 * want.abs().max().item(), (
        f"rel L2 {rel_l2:.3g}, seed {seed}"
    )
    if kind == "default":
        with pytest.raises(ValueError, match="bf16 only"):
            gemv = cfg_mod.Tile(cfg_mod.GEMV, 16, 32, 4, 2)
            tm.moe_experts(x[:1], fgu, fdn, top_w[:1], top_i[:1], config=cfg_mod.MoeConfig(gemv, gemv))


def test_experts_no_tokens(tm):
    x = torch.randn(0, 32)
    wgu, wd = _weights(8, 32, 16, torch.float32)
    out = tm.moe_experts(x, wgu, wd, torch.zeros(0, 2), torch.zeros(0, 2, dtype=torch.int64))
    assert out.shape == (0, 32)


def test_kernels_compile_for_sm90(compiled_child):
    """The default tiles of every path (35B-A3B shapes, bf16, int4 and fp8) go through Triton's whole sm_90 pipeline
    (no GPU needed): catches what the interpreter accepts but the compiler does not."""
    r = compiled_child.call(__file__, "_compile_all")
    assert r.returncode == 0, r.stderr[-4000:]


def _compile_all() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from hinfer.ops.triton import moe_align as ma
    from hinfer.ops.triton import moe_gemm as mg
    from hinfer.ops.triton import moe_route as mr
    from hinfer.ops.triton.tiles import forms
    from hinfer.ops.triton.tiles import moe as mc

    bf = "*bf16"
    types = dict(
        x_ptr=bf, act_ptr=bf, tw_ptr=bf, y_ptr=bf, out_ptr=bf, s_ptr=bf, logits_ptr=bf, ids_ptr="*i64"
    )
    types |= {n: "*i32" for n in ("sorted_ptr", "bexp_ptr", "brows_ptr", "cursor_ptr", "counts_ptr")}
    flags = dict(PREC="tf32", EMU=False, FAST_INT4=False)
    cases = []
    fp8_ch, fp8_blk = dict(SCALE_ROWS=1, SCALE_KSTEP=0), dict(SCALE_ROWS=128, SCALE_KSTEP=1)
    fp8_wt = dict(w_ptr="*fp8e4nv", s_ptr="*fp32", z_ptr="*fp32")
    for fmt, t, grid in ((mc.BF16, 1, {}), (mc.INT4, 1, {}), (mc.BF16, 8, {}), (mc.BF16, 8192, {}),
                         (mc.INT4, 8192, {}), (mc.FP8, 1, fp8_blk), (mc.FP8, 8, fp8_ch), (mc.FP8, 8, fp8_blk),
                         (mc.FP8, 8192, fp8_ch), (mc.FP8, 8192, fp8_blk)):  # fmt: skip
        cfg = mc.pick_config(t, 8, 256, 2048, 512, fmt)
        q = dict(FMT={mc.BF16: 0, mc.INT4: 1, mc.FP8: 2}[fmt], HAS_ZERO=fmt == mc.INT4, **grid)
        wt = {mc.INT4: dict(w_ptr="*i32", z_ptr="*u8"), mc.FP8: fp8_wt}.get(fmt, dict(w_ptr=bf, z_ptr=bf))
        for kern, tile, extra in (
            (mg._gate_up_kernel, cfg.gate_up, {"TOPK": 8}),
            (mg._down_kernel, cfg.down, {}),
        ):
            if cfg.gemv:
                continue
            c = dict(flags, **q, **extra, DIRECT=cfg.direct, SWAP=tile.swap, EVEN_K=True, BM=tile.block_m,
                     BN=tile.block_n, BK=tile.block_k)  # fmt: skip
            cases.append((kern, c, wt, tile))
    sw = forms.Tile(16, 32, 128, 4, 4, swap=True)
    c = dict(flags, FAST_INT4=True, FMT=1, HAS_ZERO=False, TOPK=8, DIRECT=False, SWAP=True, EVEN_K=True)
    cases.append((mg._gate_up_kernel, dict(c, BM=16, BN=64, BK=128), dict(w_ptr="*i32", z_ptr=bf), sw))
    for q, wt in (
        (dict(FMT=0, HAS_ZERO=False), dict(w_ptr=bf, z_ptr=bf)),
        (dict(FMT=1, HAS_ZERO=True), dict(w_ptr="*i32", z_ptr="*u8")),
        (dict(FMT=2, HAS_ZERO=False, **fp8_blk), fp8_wt),
    ):
        c = dict(flags, **q, TOPK=8, EVEN_K=True, BM=16, BN=32, BK=128, STAGES=4)
        cases.append((mg._down_sum_kernel, c, wt, sw))
    gemv = mc.pick_config(1, 8, 256, 2048, 512).gate_up
    g = dict(EVEN_K=True, EMU=False, BN=gemv.block_n, BK=gemv.block_k, STAGES=gemv.num_stages)
    cases += [
        (mg._gate_up_gemv_kernel, g, {"w_ptr": bf}, gemv),
        (mg._down_sum_gemv_kernel, dict(g, TOPK=8), {"w_ptr": bf}, gemv),
    ]
    cases.append((mg._sum_slots_kernel, dict(TOPK=8, TOPK_P=8, BN=1024, EMU=False), {}, None))
    cases.append((ma._align_small_kernel, dict(BM=16, E_P=256, BP=64, BJ=1, BF=64), {}, None))
    cases.append((ma._hist_kernel, dict(E_P=256, BP=1024), {}, None))
    cases.append((ma._offsets_kernel, dict(BM=128, E_P=256, BJ=8, BF=1024), {}, None))
    cases.append((ma._scatter_kernel, dict(BP=1024), {}, None))
    cases.append(
        (mr._route_kernel, dict(TOPK=8, TOPK_P=8, BLOCK_T=4, BLOCK_E=256, EMU=False), {"w_ptr": bf}, None)
    )
    t8 = mc.pick_config(8, 8, 256, 2048, 512).gate_up  # programmatic dependent launch on a decode kernel
    c = dict(flags, FMT=0, HAS_ZERO=False, TOPK=8, DIRECT=False, SWAP=True, EVEN_K=True, PDL=True)
    cases.append(
        (mg._gate_up_kernel, dict(c, BM=16, BN=t8.block_n, BK=t8.block_k), dict(w_ptr=bf, z_ptr=bf), t8)
    )
    # int4 experts stored by stripes (HINFER_EXPERTS_WORDS=stripes): the prefill tiles and the decode SWAP tile
    for fn, tile in ((mg._gate_up_kernel, mc.pick_config(8192, 8, 256, 2048, 512, mc.INT4).gate_up),
                     (mg._down_kernel, mc.pick_config(8192, 8, 256, 2048, 512, mc.INT4).down), (mg._gate_up_kernel, sw)):  # fmt: skip
        c = dict(flags, FMT=1, HAS_ZERO=True, DIRECT=False, SWAP=tile.swap, EVEN_K=True, STRIPES=True,
                 BM=tile.block_m, BN=tile.block_n, BK=tile.block_k, **({"TOPK": 8} if fn is mg._gate_up_kernel else {}))  # fmt: skip
        cases.append((fn, c, dict(w_ptr="*i32", z_ptr="*u8"), tile))
    for fn, consts, extra_types, tile in cases:
        if "PDL" in fn.arg_names:
            consts = {"PDL": False, **consts}
        if "STRIPES" in fn.arg_names:
            consts = {"STRIPES": False, **consts}
        if "SCALE_ROWS" in fn.arg_names:  # fp8 scale grid (FMT 2 only; the others ignore it)
            consts = {"SCALE_ROWS": 1, "SCALE_KSTEP": 0, **consts}
        ty = dict(types, **extra_types)
        sig = {a: "constexpr" if a in consts else ty.get(a, "i32") for a in fn.arg_names}
        # pointers and strides are 16-divisible at run time, as Triton's launcher would specialise them
        div = {(i,): [["tt.divisibility", 16]] for i, a in enumerate(fn.arg_names) if sig[a][0] == "*"}
        opts = {"num_warps": tile.num_warps, "num_stages": tile.num_stages} if tile else {"num_warps": 4}
        kernel = compile(ASTSource(fn, sig, constexprs=consts, attrs=div), target=GPUTarget("cuda", 90, 32),
                         options=opts)  # fmt: skip
        assert kernel.asm.get("cubin"), fn.__name__
