"""Multi-axis rotary positions: our per-frequency axes equal transformers' interleaved recomposition, and the
batch carries image positions, placeholder rows and the text shift after images."""

from __future__ import annotations

import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.ops.rope import mrope_freq_axes, rope_cos_sin, rope_inv_freq


def test_axes_match_transformers_recomposition() -> None:
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5TextRotaryEmbedding

    for head_dim, section in [(256, [11, 11, 10]), (16, [2, 1, 1]), (32, [2, 3, 3])]:
        cfg = Qwen3_5TextConfig(head_dim=head_dim, rope_parameters={
            "rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.25, "mrope_section": section,
            "mrope_interleaved": True})  # fmt: skip
        rot = Qwen3_5TextRotaryEmbedding(cfg)
        pos = torch.randint(0, 500, (3, 1, 40), generator=torch.Generator().manual_seed(head_dim))
        cos_ref, sin_ref = rot(torch.zeros(1, dtype=torch.float32), pos)
        axes = mrope_freq_axes(head_dim // 8, tuple(section))
        cos, sin = rope_cos_sin(pos[:, 0], rope_inv_freq(head_dim // 4, 1e4), torch.float32, freq_axes=axes)
        assert torch.allclose(cos, cos_ref[0], atol=1e-6) and torch.allclose(sin, sin_ref[0], atol=1e-6)


def test_equal_axes_are_plain_rope() -> None:
    pos = torch.arange(100)
    inv = rope_inv_freq(64, 1e7)
    axes = mrope_freq_axes(32, (11, 11, 10))
    multi = rope_cos_sin(pos.expand(3, -1), inv, torch.float32, freq_axes=axes)
    plain = rope_cos_sin(pos, inv, torch.float32)
    assert all(torch.equal(a, b) for a, b in zip(multi, plain))


def test_batch_carries_image_inputs() -> None:
    text = SeqChunk([5, 6], cached_len=3, page_ids=[1], gdn_slot=1, rope_delta=-2)
    image = SeqChunk([7, 8, 9], cached_len=0, page_ids=[2], gdn_slot=2,
                     axis_positions=[[0, 1, 1], [0, 1, 2], [0, 1, 1]], image_rows=[1, 2],
                     image_embeds=torch.ones(2, 4))  # fmt: skip
    b = build_forward_batch([text, image], page_size=16, device="cpu")
    assert b.positions.tolist() == [1, 2, 0, 1, 2]  # shifted text, then the image chunk's plain positions
    assert b.slot_mapping.tolist() == [19, 20, 32, 33, 34]  # the KV slots do not shift
    assert b.axis_positions.tolist() == [[1, 2, 0, 1, 1], [1, 2, 0, 1, 2], [1, 2, 0, 1, 1]]
    assert b.image_rows.tolist() == [3, 4] and b.image_embeds.shape == (2, 4)
    plain = build_forward_batch([SeqChunk([5], 0, [1], 1)], 16, "cpu")
    assert plain.axis_positions is None and plain.image_rows is None and plain.image_embeds is None
