"""Parity of our model with transformers' Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM.

Each tiny variant is randomised, written with `save_pretrained` (safetensors), read back by HFCheckpoint and
model/loader.py, and run through our model with real paged KV and GDN slots. fp32 logits must agree with
transformers' full-sequence logits within FP32_ATOL for full prompts, prefill + one-at-a-time decode,
chunked prefill and mixed varlen batches; bf16 error must stay within BF16_RATIO of transformers' own bf16
error (docs/numerics.md has the numbers and why these tolerances).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path

import hf_helpers as H
import pytest
import torch

pytest.importorskip("transformers")

FP32_ATOL = 1e-3  # fp32 logits within 1e-3 absolute (we see ~1e-5; logits are O(1), tied O(10))
SAME_PATH_ATOL = 1e-4  # our own model, same weights, only the batching/chunking differs
BF16_RATIO = 2.0  # our bf16 error vs HF fp32 may be at most this times HF bf16's own error
BF16_GREEDY_SLACK = 0.03  # greedy agreement may trail HF bf16's by at most 3 points

_max_seen: dict[str, float] = {}


def _record(key: str, err: float) -> None:
    _max_seen[key] = max(_max_seen.get(key, 0.0), err)


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print the largest errors seen, so a run documents itself (docs/numerics.md quotes these)."""
    with H.one_thread():
        yield
    tr = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if tr is None or capture is None or not _max_seen:
        return
    with capture.global_and_fixture_disabled():  # fd capture would swallow it
        tr.write_line("")
        for k, v in sorted(_max_seen.items()):
            tr.write_line(f"[parity] {k}: {v:.3g}")


Loaded = tuple[torch.nn.Module, torch.nn.Module, Path]  # (hf model, our model, checkpoint dir)


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Loaded]:
    """variant -> (transformers model, our fp32 model, checkpoint dir), built once per module."""
    cache: dict[str, Loaded] = {}

    def get(variant: str) -> Loaded:
        if variant not in cache:
            hf = H.build_hf_model(variant, seed=0)
            path = H.save_hf(hf, tmp_path_factory.mktemp(variant))
            cache[variant] = (hf, H.load_ours(path), path)
        return cache[variant]

    return get


def _check(key: str, got: torch.Tensor, ref: torch.Tensor, atol: float = FP32_ATOL) -> None:
    assert got.shape == ref.shape, f"{key}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    err = (got - ref).abs().max().item()
    _record(key, err)
    assert err <= atol, f"{key}: max abs logits error {err:.3g} > {atol}"


# ---- layout ------------------------------------------------------------------------------------------
def test_save_pretrained_writes_per_expert_moe(loaded: Callable[[str], Loaded]) -> None:
    """transformers 5 keeps experts fused in memory but save_pretrained writes them per expert (the released
    layout); the fused-layout loader path is covered by test_fused_experts_checkpoint."""
    from hinfer.weights.hf_reader import HFCheckpoint

    names = HFCheckpoint(loaded("moe")[2]).tensor_names()
    assert "layers.0.mlp.experts.7.gate_proj.weight" in names
    assert not any(n.endswith("experts.gate_up_proj") for n in names)


def test_tied_checkpoint_has_no_lm_head(loaded: Callable[[str], Loaded]) -> None:
    from hinfer.weights.hf_reader import HFCheckpoint

    hf, ours, path = loaded("dense_tied")
    assert "lm_head.weight" not in HFCheckpoint(path).tensor_names()
    assert ours.lm_head is None and ours.cfg.tie_word_embeddings


# ---- full sequence -----------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 300])
@pytest.mark.parametrize("variant", list(H.VARIANTS))
def test_full_sequence(loaded: Callable[[str], Loaded], variant: str, n: int) -> None:
    hf, ours, _ = loaded(variant)
    ids = H.prompt(n, seed=n)
    _check(f"fp32 full {variant}", H.our_logits(ours, ids), H.hf_logits(hf, ids))


def test_fused_experts_checkpoint(loaded: Callable[[str], Loaded], tmp_path: Path) -> None:
    """A checkpoint in the fused layout (`mlp.experts.gate_up_proj` [E, 2I, H]) loads to the same weights."""
    hf, ours, _ = loaded("moe")
    path = H.save_hf_fused_experts(hf, tmp_path / "fused")
    fused = H.load_ours(path)
    for (name, a), (_, b) in zip(ours.named_parameters(), fused.named_parameters()):
        assert torch.equal(a, b), name
    ids = H.prompt(64, seed=3)
    _check("fp32 full moe (fused experts file)", H.our_logits(fused, ids), H.hf_logits(hf, ids))


# ---- cached paths: decode, chunked prefill, varlen -----------------------------------------------------
@pytest.mark.parametrize("variant", ["dense", "moe", "odd", "custom_layers", "dense_tied"])
def test_prefill_then_decode(loaded: Callable[[str], Loaded], variant: str) -> None:
    """Prefill N, then M single-token steps: every step's logits equal the full-sequence ones."""
    hf, ours, _ = loaded(variant)
    n, m = 37, 28  # 65 tokens: crosses page boundaries (page 16) while decoding
    ids = H.prompt(n + m, seed=7)
    s = H.Session(ours, max_tokens=n + m)
    sid = s.new_seq()
    out = s.step([(sid, ids[:n])])
    for t in ids[n:]:
        out += s.step([(sid, [t])])
    _check(f"fp32 prefill+decode {variant}", torch.cat(out), H.hf_logits(hf, ids))


@pytest.mark.parametrize("variant", ["dense", "moe", "odd", "custom_layers"])
def test_chunked_prefill(loaded: Callable[[str], Loaded], variant: str) -> None:
    """Prefill in uneven chunks (page-unaligned, one of a single token) equals one full pass."""
    hf, ours, _ = loaded(variant)
    ids = H.prompt(300, seed=11)
    chunked = H.our_logits(ours, ids, [37, 64, 1, 100, 98])
    _check(f"fp32 chunked prefill {variant}", chunked, H.hf_logits(hf, ids))
    _check(f"fp32 chunked vs one pass (ours) {variant}", chunked, H.our_logits(ours, ids), SAME_PATH_ATOL)


@pytest.mark.parametrize("variant", ["dense", "moe", "custom_layers"])
def test_varlen_batch(loaded: Callable[[str], Loaded], variant: str) -> None:
    """Sequences of different lengths in one batch equal each run alone: two prompts prefilled together,
    then a mixed step (decode of A, a chunk of B, a new prompt C), then a two-lane decode step."""
    hf, ours, _ = loaded(variant)
    a, b, c = H.prompt(120, seed=21), H.prompt(45, seed=22), H.prompt(30, seed=23)
    s = H.Session(ours, max_tokens=400)
    sa, sb = s.new_seq(), s.new_seq()
    la, lb = s.step([(sa, a[:119]), (sb, b[:30])])
    sc = s.new_seq()
    la2, lb2, lc = s.step([(sa, a[119:]), (sb, b[30:44]), (sc, c)])  # decode first, then chunks
    lb3, lc2 = s.step([(sb, b[44:]), (sc, [5])])
    got = {"a": torch.cat([la, la2]), "b": torch.cat([lb, lb2, lb3]), "c": torch.cat([lc, lc2])}
    alone = {"a": H.our_logits(ours, a), "b": H.our_logits(ours, b), "c": H.our_logits(ours, c + [5])}
    for k in got:
        _check(f"fp32 varlen vs alone (ours) {variant}", got[k], alone[k], SAME_PATH_ATOL)
    _check(f"fp32 varlen vs hf {variant}", got["a"], H.hf_logits(hf, a))
    _check(f"fp32 varlen vs hf {variant}", got["c"], H.hf_logits(hf, c + [5]))


# ---- bf16 ----------------------------------------------------------------------------------------------
def _bf16_stats(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float]:
    """(max abs error, relative RMS error ||got-ref|| / ||ref||, greedy (argmax) agreement)."""
    err = got - ref
    return (
        err.abs().max().item(),
        (err.norm() / ref.norm()).item(),
        (got.argmax(-1) == ref.argmax(-1)).float().mean().item(),
    )


@pytest.mark.parametrize("variant", ["dense", "moe"])
def test_bf16_error_no_worse_than_hf(loaded: Callable[[str], Loaded], variant: str) -> None:
    """Ours in bf16 vs HF fp32, against HF bf16 vs HF fp32, same weights, 300-token prompt."""
    hf, _, path = loaded(variant)
    ids = H.prompt(300, seed=0)
    ref = H.hf_logits(hf, ids)
    hf_bf16 = H.hf_logits(copy.deepcopy(hf).to(torch.bfloat16), ids)
    ours_bf16 = H.our_logits(H.load_ours(path, torch.bfloat16), ids)
    h_abs, h_rel, h_agree = _bf16_stats(hf_bf16, ref)
    o_abs, o_rel, o_agree = _bf16_stats(ours_bf16, ref)
    for name, v in [("hf max abs", h_abs), ("hf rel rms", h_rel), ("hf greedy agree", h_agree),
                    ("ours max abs", o_abs), ("ours rel rms", o_rel), ("ours greedy agree", o_agree)]:  # fmt: skip
        _max_seen[f"bf16 {variant} {name}"] = v
    assert o_abs <= BF16_RATIO * h_abs, f"bf16 max abs error {o_abs:.3g} vs HF bf16 {h_abs:.3g}"
    assert o_rel <= BF16_RATIO * h_rel, f"bf16 relative RMS error {o_rel:.3g} vs HF bf16 {h_rel:.3g}"
    assert o_agree >= h_agree - BF16_GREEDY_SLACK, f"bf16 greedy agreement {o_agree:.3f} vs HF {h_agree:.3f}"
