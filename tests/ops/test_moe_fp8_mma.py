"""The fp8 experts on tensor cores (hinfer/ops/triton/moe_fp8_mma.py) on the CPU: when the dispatcher takes them
(on a GPU at decode sizes unless turned off), the heuristic tile's K split, and the checks a call makes before launching. The
kernel itself runs on the GPU only (tests/gpu/test_moe_kernels.py -k fp8_mma); linear_aot --check compiles it for
sm_90 in CI."""

from __future__ import annotations

import pytest
import torch

from hinfer.ops.triton.moe_fp8_mma import MAX_PAIRS, fp8_experts_mma, fp8_mma_experts_fit
from hinfer.ops.triton.tiles.forms import SkinnyConfig
from hinfer.ops.triton.tiles.moe import MOE_FP8_MMA_TILES


@pytest.mark.parametrize(
    "blocks, n, k, split",
    [
        (9, 1024, 2048, 4),  # 35B-A3B gate_up at one token (8 experts + the shared one): 144 tiles -> 576 programs
        (9, 2048, 512, 2),  # its down: four groups, at least two a split
        (9, 2048, 3072, 2),  # 122B-A10B gate_up
        (60, 1024, 2048, 1),  # eight tokens' aligned blocks fill the GPU without a split
    ],
)
def test_tile_splits_k_until_the_launch_fills_the_gpu(blocks, n, k, split):
    cfg = MOE_FP8_MMA_TILES.heuristic(blocks, n, k, blocks=blocks, sms=132)  # the 35B-A3B's shapes are swept
    assert cfg.split_k == split
    assert n % cfg.block_n == 0 and cfg.block_n % (16 * cfg.num_warps) == 0 and cfg.num_stages == 4
    assert (k // 128) // cfg.split_k >= 2 or cfg.split_k == 1


def test_fit_is_gpu_only_and_can_be_turned_off(monkeypatch):
    x = torch.zeros(1, 2048, dtype=torch.bfloat16)
    monkeypatch.delenv("HINFER_MOE_FP8", raising=False)
    assert not fp8_mma_experts_fit(x, 1024, 2048, 2048, 512, 9), "a CPU tensor never takes the Gluon kernel"
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    assert fp8_mma_experts_fit(x, 1024, 2048, 2048, 512, 9), "on by default on a GPU"
    monkeypatch.setenv("HINFER_MOE_FP8", "grouped")
    assert not fp8_mma_experts_fit(x, 1024, 2048, 2048, 512, 9)
    assert MAX_PAIRS >= 8 * 4 * 9  # eight lanes' verification at K = 3, shared expert folded


def test_call_checks_shapes_before_launching():
    x = torch.zeros(1, 256, dtype=torch.bfloat16)
    w = torch.zeros(2, 64, 256).to(torch.float8_e4m3fn)
    ids = torch.zeros(1, dtype=torch.int64)
    y = torch.empty(1, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="scales"):
        fp8_experts_mma(x, w, torch.ones(2, 32), False, y, 1, 8, ids, ids, ids, ids, True, 1)
    with pytest.raises(ValueError, match="silu"):
        fp8_experts_mma(x, w, torch.ones(2, 64), False, y, 1, 8, ids, ids, ids, ids, True, 1, act=True)
    with pytest.raises(ValueError, match="K %"):
        fp8_experts_mma(x[:, :200], w[..., :200], torch.ones(2, 64), False, y, 1, 8, ids, ids, ids, ids, True, 1)


def test_a_staged_tile_must_fit_its_shared_memory():
    """x staged (a tile's x_staged): a program's groups of x for its rows; eight rows of K = 4096 (64 KB) are over
    the budget and refused before launching, one row (8 KB) is not."""
    from hinfer.ops.triton.linear_int4_mma import X_STAGE_BYTES, x_stage_shape

    staged = SkinnyConfig(64, 128, 8, 1, 4, 2, x_staged=True)
    assert x_stage_shape(staged, 4096, one_row=True) == (32, 1)
    assert x_stage_shape(staged, 2048, one_row=False) == (16, 8) and 16 * 8 * 256 <= X_STAGE_BYTES
    x = torch.zeros(8, 4096, dtype=torch.bfloat16)
    w = torch.zeros(2, 64, 4096).to(torch.float8_e4m3fn)
    ids = torch.zeros(8, dtype=torch.int64)
    y = torch.empty(8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="x staged"):
        fp8_experts_mma(x, w, torch.ones(2, 64), False, y, 1, 8, ids, ids, ids, ids, False, 1, cfg=staged)


def test_a_routing_gate_up_is_checked_before_launching():
    """The gate_up routing its tokens (`route_fp8`) takes a block per pair, top k + 1 slots a token, bf16 logits
    and a weights buffer; anything else is refused before a launch."""
    x = torch.zeros(1, 256, dtype=torch.bfloat16)
    w = torch.zeros(2, 64, 256).to(torch.float8_e4m3fn)
    ids = torch.zeros(3, dtype=torch.int64)
    y = torch.empty(3, 32, dtype=torch.bfloat16)
    logits = torch.zeros(1, 3, dtype=torch.bfloat16)  # two experts + the shared expert's gate
    tw = torch.empty(3, dtype=torch.bfloat16)
    s = torch.ones(2, 64)
    for kw in (dict(route_w=None), dict(route_w=tw, topk=1), dict(route_w=tw, direct=False)):
        args = dict(route=logits, topk=2, act=True) | kw
        direct = args.pop("direct", True)
        with pytest.raises(ValueError, match="routing"):
            fp8_experts_mma(x, w, s, False, y, 3, 8, ids, ids, ids, ids, direct, 3, **args)
