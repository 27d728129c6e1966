"""Parity of our vision tower with transformers' Qwen3_5VisionModel on tiny random configs, same weights.

fp32: within ENCODER_FP32_ATOL of transformers' output (outputs are O(1); we see ~1e-6). bf16: the error
against transformers fp32 stays within BF16_RATIO times transformers' own bf16 error.
"""

from __future__ import annotations

import copy

import pytest
import torch
import vision_helpers as V

from hinfer.fixtures import fixed_test_seed
from hinfer.model.vision_grid import frame_cu_seqlens, merged_tokens, patch_rows_cols, pos_embed_taps

pytest.importorskip("transformers")

ENCODER_FP32_ATOL = 1e-4
BF16_RATIO = 2.0

# one image; several of different shapes (square, wide, tall, the smallest); a two-frame clip
GRID_SETS = {
    "one": [(1, 4, 6)],
    "several": [(1, 6, 6), (1, 2, 8), (1, 10, 4), (1, 2, 2)],
    "two_frames": [(2, 4, 4)],
}


@pytest.fixture(scope="module")
def models() -> tuple[torch.nn.Module, torch.nn.Module]:
    hf = V.build_hf_vision(seed=fixed_test_seed())
    return hf, V.ours_from_hf(hf)


@torch.no_grad()
def _hf_out(hf: torch.nn.Module, pixels: torch.Tensor, grids: list[tuple[int, int, int]]) -> torch.Tensor:
    return hf(pixels, grid_thw=torch.tensor(grids)).pooler_output


@pytest.mark.parametrize("name", list(GRID_SETS))
@torch.no_grad()
def test_encoder_matches_transformers_fp32(models, name: str) -> None:
    hf, ours = models
    grids = GRID_SETS[name]
    pixels = V.random_pixels(grids, ours.cfg.patch_dim, seed=fixed_test_seed() + 1)
    got, ref = ours(pixels, grids), _hf_out(hf, pixels, grids)
    assert (
        got.shape == ref.shape == (sum(merged_tokens(g, 2) for g in grids), V.TINY_VISION["out_hidden_size"])
    )
    assert ref.abs().mean() > 0.1, "outputs near zero would hide errors"
    err = (got - ref).abs().max().item()
    assert err <= ENCODER_FP32_ATOL, f"{name}: max abs error {err:.3g}"


@torch.no_grad()
def test_images_are_independent(models) -> None:
    """An image's tokens do not depend on the other images in the call (attention stays within an image)."""
    _, ours = models
    grids = GRID_SETS["several"]
    pixels = V.random_pixels(grids, ours.cfg.patch_dim, seed=3)
    together = ours(pixels, grids)
    rows = [t * h * w for t, h, w in grids]
    alone = torch.cat([ours(p, [g]) for p, g in zip(pixels.split(rows), grids)])
    assert (together - alone).abs().max().item() <= 1e-5


@torch.no_grad()
def test_bf16_error_no_worse_than_transformers(models) -> None:
    hf, _ = models
    grids = GRID_SETS["several"]
    pixels = V.random_pixels(grids, V.our_vision_config().patch_dim, seed=5)
    ref = _hf_out(hf, pixels, grids)
    hf_bf16 = _hf_out(copy.deepcopy(hf).to(torch.bfloat16), pixels, grids).float()
    ours_bf16 = V.ours_from_hf(hf, torch.bfloat16)(pixels, grids).float()
    hf_err, our_err = (hf_bf16 - ref).abs().max().item(), (ours_bf16 - ref).abs().max().item()
    assert our_err <= BF16_RATIO * hf_err, (
        f"bf16 max abs error {our_err:.3g} vs transformers bf16 {hf_err:.3g}"
    )


def test_grid_helpers_match_transformers() -> None:
    """Patch positions, attention segments and position-embedding taps equal transformers' own helpers."""
    from transformers import vision_utils as vu

    grids = GRID_SETS["several"] + GRID_SETS["two_frames"] + [(1, 12, 2)]
    g = torch.tensor(grids)
    assert torch.equal(patch_rows_cols(grids, 2), vu.get_vision_position_ids(g, 2))
    assert frame_cu_seqlens(grids) == vu.get_vision_cu_seqlens(g).tolist()
    idx, wts = pos_embed_taps(grids, side=6, merge=2)
    ref_idx, ref_wts = vu.get_vision_interpolation_indices_and_weights(
        g, num_grid_per_side=6, mode="bilinear", align_corners=True, spatial_merge_size=2
    )
    # a tap of weight 0 may point anywhere; compare the resampling each defines
    table = torch.randn(36, 5)
    ours = (table[idx] * wts[:, :, None]).sum(1)
    ref = (table[ref_idx] * ref_wts[:, :, None]).sum(1)
    assert torch.allclose(ours, ref, atol=1e-6)
