"""Pre-quantized Hugging Face checkpoints load as they are: official block-fp8 into `Fp8Weight`s,
compressed-tensors W4A16 `pack-quantized` into `Int4Weight`s, structured exactly as `quantize_model` leaves a model.

Checkpoints are tiny random models (dense and MoE; hidden 192, so K is not a multiple of 128: partial blocks and
groups), written by `write_synthetic_checkpoint` (bf16, and its official-layout fp8) and, for compressed-tensors,
by the packer below, written from the format's documented layout (element 8c + e at bits 4e of int32 word c, values
q + 8; asymmetric zero points + 8 packed the same way along N; cross-checked once against compressed-tensors'
own `pack_to_int32`, which these tests do not import). For each checkpoint:
(a) the loaded model has the module types, state_dict names, shapes and dtypes of `quantize_model(bf16 model,
    recipe)`;
(b) every quantized weight dequantizes exactly to the stored tensors dequantized here (independently of hinfer),
    and every other parameter equals the stored value (dequantized where the recipe keeps it unquantized);
(c) its logits equal exactly those of the model read as bf16 (the reader dequantizing) with the same quantized
    objects swapped in, and match the forward of that model holding the dequantized weights to 1e-4 relative
    (fp32 on the CPU: only the matmul routine differs);
(d) configs the kernels cannot run (group 64, 8 bits, g_idx actorder, ...) are one-line CheckpointErrors;
(e) the memory plan's weight bytes equal the model's parameter and buffer bytes (less the RoPE inv_freq buffers).
"""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hinfer.config import EngineConfig, load_model_config
from hinfer.engine.factory import load_model
from hinfer.errors import CheckpointError
from hinfer.fixtures import config_dir
from hinfer.model.loader import checkpoint_targets
from hinfer.model.prompt_logits import prompt_logits
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.quant import Fp8Weight, Int4Weight, RowSplitWeight, quantize_model
from hinfer.quant.apply import quantized_nbytes
from hinfer.quant.experts import Fp8ExpertsWeight, Int4ExpertsWeight
from hinfer.quant.fp8_block import quantize_fp8_block
from hinfer.quant.int4 import quantize_int4
from hinfer.weights.hf_layout import hf_tensor_specs, strip_prefix
from hinfer.weights.hf_reader import HFCheckpoint
from hinfer.weights.synth import write_synthetic_checkpoint

TINY = {"hidden_size": 192, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64,
        "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
        "linear_value_head_dim": 32, "vocab_size": 256, "intermediate_size": 256,
        "max_position_embeddings": 4096}  # fmt: skip
TINY_MOE = {**TINY, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
            "shared_expert_intermediate_size": 128}
LM = "model.language_model."
QUANTIZED = (Fp8Weight, Int4Weight, RowSplitWeight, Int4ExpertsWeight, Fp8ExpertsWeight)


# ---- checkpoints -------------------------------------------------------------------------------------------
def _synth(out: Path, moe: bool, over: dict | None = None, **kw) -> Path:
    src = config_dir("qwen3.6-35b-a3b" if moe else "qwen3.6-27b")
    overrides = {**(TINY_MOE if moe else TINY), **(over or {})}
    return write_synthetic_checkpoint(src, out, layers=2, progress=False, overrides=overrides, **kw)


def _stored(ck: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(ck.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as h:
            out.update({k: h.get_tensor(k) for k in h.keys()})  # noqa: SIM118
    return out


def _rewrite(src: Path, dst: Path, tensors: dict[str, torch.Tensor], quantization: dict) -> Path:
    """A copy of checkpoint `src` holding `tensors` (one model.safetensors) and this quantization_config."""
    shutil.copytree(src, dst)
    for f in [*dst.glob("model-*.safetensors"), dst / "model.safetensors.index.json"]:
        f.unlink()
    save_file(tensors, str(dst / "model.safetensors"))
    cfg = json.loads((dst / "config.json").read_text())
    cfg["quantization_config"] = quantization
    (dst / "config.json").write_text(json.dumps(cfg, indent=2))
    return dst


def _fp8_expected(stored: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Stripped name -> fp32 value: an fp8 weight times the scale of its 128x128 block, anything else as stored."""
    out = {}
    for name, t in stored.items():
        if name.endswith("_scale_inv"):
            continue
        if t.dtype == torch.float8_e4m3fn:
            s = stored[name + "_scale_inv"]
            rows = torch.arange(t.shape[-2]) // 128
            cols = torch.arange(t.shape[-1]) // 128
            t = t.float() * s[..., rows, :][..., cols]
        out[strip_prefix(name)] = t.float()
    return out


# compressed-tensors, test side ----------------------------------------------------------------------------
def ct_pack(u: torch.Tensor) -> torch.Tensor:
    """Unsigned nibbles [R, C] -> int32 [R, ceil(C/8)], element 8c + e at bits 4e of word c (zero padded)."""
    r, c = u.shape
    w = -(-c // 8)
    padded = torch.zeros(r, w * 8, dtype=torch.int64)
    padded[:, :c] = u.long()
    words = (padded.view(r, w, 8) << (4 * torch.arange(8))).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def ct_quantize(w: torch.Tensor, symmetric: bool, group: int = 128):
    """Min-max round to nearest as compressed-tensors does it: q int in [-8, 7], bf16 scales [N, G], zero points
    (asymmetric) in [-8, 7]; value (q - zp) * scale."""
    n, k = w.shape
    g = math.ceil(k / group)
    x = torch.zeros(n, g * group)
    x[:, :k] = w.float()
    x = x.view(n, g, group)
    if symmetric:
        s = (x.abs().amax(-1) * 2 / 15).clamp(min=1e-8).to(torch.bfloat16)
        q, zp = (x / s.float()[..., None]).round().clamp(-8, 7), None
    else:
        lo, hi = x.amin(-1).clamp(max=0), x.amax(-1).clamp(min=0)
        s = ((hi - lo) / 15).clamp(min=1e-8).to(torch.bfloat16)
        zp = (-8 - lo / s.float()).round().clamp(-8, 7)
        q = ((x / s.float()[..., None]).round() + zp[..., None]).clamp(-8, 7)
    return q.view(n, -1)[:, :k].to(torch.int8), s, None if zp is None else zp.to(torch.int8)


def ct_dequantize(q: torch.Tensor, s: torch.Tensor, zp: torch.Tensor | None, group: int = 128) -> torch.Tensor:
    col = torch.arange(q.shape[1]) // group
    z = 0.0 if zp is None else zp.float()[:, col]
    return (q.float() - z) * s.float()[:, col]


def _ignored(module: str, ignore: list[str]) -> bool:
    return any(re.match(p[3:], module) if p.startswith("re:") else p == module for p in ignore)


def ct_config(symmetric: bool, ignore: list[str], **weights) -> dict:
    w = {"num_bits": 4, "type": "int", "symmetric": symmetric, "strategy": "group", "group_size": 128,
         "actorder": None, "dynamic": False, "observer": "minmax", **weights}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": w, "input_activations": None,
                                          "output_activations": None, "format": "pack-quantized"}},
            "ignore": ignore, "kv_cache_scheme": None, "sparsity_config": {}}  # fmt: skip


def write_ct(src: Path, dst: Path, symmetric: bool, ignore: list[str]) -> tuple[Path, dict[str, torch.Tensor]]:
    """A compressed-tensors W4A16 checkpoint of bf16 checkpoint `src` (every Linear not ignored), and the fp32
    value of every tensor as the format defines it (stripped names)."""
    specs = hf_tensor_specs(load_model_config(src))
    out, expected = {}, {}
    for name, t in _stored(src).items():
        module = name.removesuffix(".weight")
        if specs[name].is_linear and name.endswith(".weight") and not _ignored(module, ignore):
            q, s, zp = ct_quantize(t, symmetric)
            out[f"{module}.weight_packed"] = ct_pack(q.to(torch.int16) + 8)
            out[f"{module}.weight_scale"] = s
            out[f"{module}.weight_shape"] = torch.tensor(list(t.shape))
            if zp is not None:
                out[f"{module}.weight_zero_point"] = ct_pack((zp.to(torch.int16) + 8).t()).t().contiguous()
            expected[strip_prefix(name)] = ct_dequantize(q, s, zp)
        else:
            out[name] = t
            expected[strip_prefix(name)] = t.float()
    return _rewrite(src, dst, out, ct_config(symmetric, ignore)), expected


# ---- models ------------------------------------------------------------------------------------------------
def _load(path: Path, weights: str = "auto", spec: str | None = None):
    return load_model(str(path), EngineConfig(device="cpu", max_concurrency=1, max_context=256, weights=weights,
                                              spec=spec))


def _logits(model, ids: list[int]) -> torch.Tensor:
    return prompt_logits(model, ids)


def _quantized(model) -> dict[str, torch.nn.Module]:
    """Path -> quantized object (RowSplitWeight, or Fp8Weight/Int4Weight not inside one)."""
    mods = dict(model.named_modules())
    return {n: m for n, m in mods.items() if isinstance(m, QUANTIZED)
            and not isinstance(mods.get(n.rsplit(".", 1)[0]), RowSplitWeight)}


def _dequantized(obj) -> torch.Tensor:
    if isinstance(obj, RowSplitWeight):
        return torch.cat([obj.head.dequantize(torch.float32), obj.tail.float()])
    return obj.dequantize(torch.float32)


def check_loaded(path: Path, expected: dict[str, torch.Tensor], fmt: str, spec: str | None = None,
                 requantized: dict[str, tuple[int | None, int, int]] | None = None) -> dict:
    """(a)-(c) and (e) for one checkpoint; returns {"recipe": ..., "model": ...}. `requantized`: path -> (expert,
    first row, end row) stored unquantized although the recipe quantizes them (quantized on load)."""
    loaded = _load(path, spec=spec)
    ref = _load(path, weights="bf16", spec=spec)  # the reader dequantizes: a plain fp32 model
    model, recipe = loaded.model, loaded.plan.recipe
    assert recipe.fmt == fmt and loaded.plan.weights == recipe.name
    assert ref.plan.weights == "bf16" and not _quantized(ref.model)

    # (a) structured exactly as quantize_model leaves the bf16 model
    want = Qwen35ForCausalLM(model.cfg, torch.float32, "meta", with_mtp=spec == "mtp")
    quantize_model(want, recipe)  # on meta: structure, shapes and dtypes only
    assert {n: type(m) for n, m in model.named_modules()} == {n: type(m) for n, m in want.named_modules()}
    sd, sw = model.state_dict(), want.state_dict()
    assert sd.keys() == sw.keys()
    assert all(sd[k].shape == sw[k].shape and sd[k].dtype == sw[k].dtype for k in sd)
    quantized = _quantized(model)
    assert quantized and all(isinstance(q, Fp8Weight if fmt == "fp8" else Int4Weight)
                             for q in model.modules() if isinstance(q, (Fp8Weight, Int4Weight)))

    # (b) the reader's dequantization is the format's own (computed here), row slice by row slice ...
    ref_params = dict(ref.model.named_parameters())
    for name, t in checkpoint_targets(ref.model).items():
        if name in expected:
            assert torch.equal(t.view(), expected[name].view(t.view().shape)), name  # conv1d: [C, 1, W] stored
    for name, p in ref.model.named_parameters():
        moe = name.rsplit(".", 1)[0]
        if ".experts_" in name and f"{moe}.experts.0.down_proj.weight" in expected:  # per-expert: stacked
            for e in range(p.shape[0]):
                parts = ("gate_proj", "up_proj") if name.endswith("gate_up") else ("down_proj",)
                stack = torch.cat([expected[f"{moe}.experts.{e}.{w}.weight"] for w in parts])
                assert torch.equal(p[e], stack), (name, e)
    # ... the quantized objects hold exactly those values, and every other parameter equals the reference
    for path_, obj in quantized.items():
        deq, full = _dequantized(obj), ref_params[path_]
        if path_ in (requantized or {}):  # stored unquantized, quantized on load as quantize_model does
            e, r0, r1 = requantized[path_]
            full = full.clone()
            w = full[r0:r1] if e is None else full[e, r0:r1]
            zp = any(q.zeros is not None for q in model.modules() if isinstance(q, Int4Weight))
            w.copy_((quantize_int4(w, 128, zp, torch.float32) if fmt == "int4"
                     else Fp8Weight(*quantize_fp8_block(w), (128, 128))).dequantize(torch.float32))
        assert torch.equal(deq, full), path_
    for name, p in model.named_parameters():
        if not name.endswith(".tail"):
            assert torch.equal(p, ref_params[name]), name

    # (c) logits: exactly the reference with the same quantized objects, and close to the dequantized forward
    swapped, dequantized = copy.deepcopy(ref.model), copy.deepcopy(ref.model)
    for path_, obj in quantized.items():
        owner, attr = path_.rsplit(".", 1)
        mod = swapped.get_submodule(owner)
        del mod._parameters[attr]
        setattr(mod, attr, copy.deepcopy(obj))
        with torch.no_grad():
            dequantized.get_parameter(path_).copy_(_dequantized(obj))
    ids = torch.randint(1, model.cfg.vocab_size, (13,), generator=torch.Generator().manual_seed(7)).tolist()
    got = _logits(model, ids)
    assert torch.isfinite(got).all() and got.abs().max() > 0
    assert torch.equal(got, _logits(swapped, ids))
    plain = _logits(dequantized, ids)
    assert ((got - plain).norm() / plain.norm()).item() < 1e-4

    # (e) the plan counted the bytes the model holds
    planned = next(r.bytes for r in loaded.plan.rows if r.name == "weights")
    rope = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if n.endswith("inv_freq"))
    assert planned == quantized_nbytes(model) - rope
    return {"recipe": recipe, "model": model}


# ---- official fp8 ------------------------------------------------------------------------------------------
def test_official_fp8_dense_loads_as_fp8_block(tmp_path):
    ck = _synth(tmp_path / "fp8", moe=False, fp8=True)
    stored = _stored(ck)
    # one target part kept bf16 by the checkpoint (modules_to_not_convert): quantized on load like quantize_model
    victim = f"{LM}layers.0.mlp.down_proj"
    bf16 = _stored(_synth(tmp_path / "bf16", moe=False))
    stored[f"{victim}.weight"] = bf16[f"{victim}.weight"]
    del stored[f"{victim}.weight_scale_inv"]
    quant = json.loads((ck / "config.json").read_text())["quantization_config"]
    quant["modules_to_not_convert"].append(victim)
    ck = _rewrite(ck, tmp_path / "fp8-mixed", stored, quant)
    out = check_loaded(ck, _fp8_expected(stored), "fp8", spec="mtp",
                       requantized={"layers.0.mlp.down_proj": (None, 0, 192)})
    assert out["recipe"].name == "fp8-block"
    m = out["model"]
    gdn = m.layers[0].linear_attn.in_proj.weight
    assert isinstance(gdn, RowSplitWeight) and isinstance(gdn.head, Fp8Weight) and gdn.head.block == (128, 128)
    assert gdn.tail.shape[0] == 2 * m.cfg.linear_num_value_heads and gdn.tail.dtype == torch.float32
    qkv = m.layers[1].self_attn.qkv_proj.weight
    assert isinstance(qkv, Fp8Weight) and qkv.weight.shape == (512, 192) and qkv.scale.shape == (4, 2)
    # the MTP head (stored fp8 apart from fc) is outside the recipe: dequantized plain parameters
    assert isinstance(m.mtp.layers[0].self_attn.qkv_proj.weight, torch.nn.Parameter)


@pytest.mark.parametrize("fused", [True, False])
def test_official_fp8_moe_loads_routed_experts_as_stored(tmp_path, fused):
    """The routed experts (I = 128: gate_proj's rows end on a block row) load into block-scaled Fp8ExpertsWeights
    holding exactly the stored e4m3 bits and scales: fused `experts.gate_up_proj` [E, 2I, H] tensors as they are,
    per-expert gate/up/down stacked (gate and up fused along N)."""
    ck = _synth(tmp_path / "fp8", moe=True, over={"moe_intermediate_size": 128}, fp8=True, fused_experts=fused)
    stored = _stored(ck)
    out = check_loaded(ck, _fp8_expected(stored), "fp8", spec="mtp" if fused else None)
    assert out["recipe"].name == "fp8-block" and out["recipe"].experts
    m = out["model"]
    assert isinstance(m.layers[0].mlp.shared_expert.gate_up.weight, Fp8Weight)
    p = f"{LM}layers.1.mlp.experts"
    for attr, parts in (("experts_gate_up", ("gate_proj", "up_proj")), ("experts_down", ("down_proj",))):
        w = getattr(m.layers[1].mlp, attr)
        assert isinstance(w, Fp8ExpertsWeight) and w.block == (128, 128) and w.weight.dtype == torch.float8_e4m3fn
        if fused:
            name = f"{p}.{'gate_up_proj' if attr == 'experts_gate_up' else 'down_proj'}"
            q, sc = stored[name], stored[name + "_scale_inv"]
        else:
            q = torch.stack([torch.cat([stored[f"{p}.{e}.{x}.weight"] for x in parts]) for e in range(4)])
            sc = torch.stack([torch.cat([stored[f"{p}.{e}.{x}.weight_scale_inv"] for x in parts]) for e in range(4)])
        assert torch.equal(w.weight.view(torch.uint8), q.view(torch.uint8)), attr
        assert torch.equal(w.scale, sc), attr
    if fused:  # the MTP head (its MoE layer's experts included) is outside the recipe: dequantized parameters
        assert isinstance(m.mtp.layers[0].mlp.experts_gate_up, torch.nn.Parameter)


def test_official_fp8_moe_experts_off_block_rows_dequantize(tmp_path):
    """I = 64: an expert's gate_proj and up_proj would share 128-row blocks, so the routed experts alone drop out
    of the recipe and load dequantized; the other layers stay fp8 as stored."""
    ck = _synth(tmp_path / "fp8", moe=True, fp8=True, fused_experts=True)
    stored = _stored(ck)
    assert stored[f"{LM}layers.0.mlp.experts.gate_up_proj"].dtype == torch.float8_e4m3fn
    out = check_loaded(ck, _fp8_expected(stored), "fp8")
    assert out["recipe"].name == "fp8-block (as stored)" and not out["recipe"].experts
    m = out["model"]
    assert isinstance(m.layers[0].mlp.shared_expert.gate_up.weight, Fp8Weight)
    assert m.layers[0].mlp.experts_gate_up.dtype == torch.float32  # routed experts: dequantized
    want = _fp8_expected(stored)["layers.0.mlp.experts.gate_up_proj"]
    assert torch.equal(m.layers[0].mlp.experts_gate_up, want)


def test_fp8_parts_off_block_rows(tmp_path, caplog):
    """k_proj of 64 rows: q/k/v cannot share 128x128 blocks. auto dequantizes (with a warning), fp8 refuses."""
    ck = write_synthetic_checkpoint(config_dir("qwen3.6-27b"), tmp_path / "fp8", layers=2, fp8=True, progress=False,
                                    overrides={**TINY, "num_key_value_heads": 1})
    with caplog.at_level("WARNING", logger="hinfer"):
        auto = _load(ck)
    assert auto.plan.weights == "bf16" and not _quantized(auto.model)
    assert any("k_proj has 64 rows" in r.getMessage() for r in caplog.records)
    with pytest.raises(CheckpointError) as err:
        _load(ck, weights="fp8")
    assert "\n" not in str(err.value) and "k_proj has 64 rows, not a multiple of 128" in str(err.value)
    assert _load(ck, weights="int4").plan.weights == "int4-default"  # dequantize, then quantize


# ---- compressed-tensors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("moe", [False, True])
def test_compressed_tensors_symmetric(tmp_path, moe):
    """Symmetric; in_proj_a/b, routers, lm_head and the MTP head ignored (bf16); every o_proj ignored too, so the
    recipe drops attn_o and o_proj stays a plain parameter."""
    ignore = ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$", "re:.*linear_attn.in_proj_[ab]$",
              "re:^mtp.*", "re:.*self_attn.o_proj$"]
    ck, expected = write_ct(_synth(tmp_path / "bf16", moe), tmp_path / "ct", True, ignore)
    assert HFCheckpoint(ck).is_int4
    out = check_loaded(ck, expected, "int4", spec="mtp" if not moe else None)
    r, m = out["recipe"], out["model"]
    assert r.name == "int4-sym (as stored)" and "attn_o" not in r.targets and not r.int4_zero_point
    assert isinstance(m.layers[1].self_attn.o_proj, torch.nn.Parameter)
    assert isinstance(m.layers[1].self_attn.qkv_proj.weight, Int4Weight)
    assert m.layers[1].self_attn.qkv_proj.weight.zeros is None


@pytest.mark.parametrize("moe", [False, True])
def test_compressed_tensors_asymmetric(tmp_path, moe):
    """Asymmetric; in_proj_a/b (4 rows: zero points padded along N) and the MTP head quantized in the checkpoint
    but outside the recipe (dequantized); one down_proj (and, MoE, one expert's up_proj) ignored: quantized on
    load. MoE routed experts (per-expert tensors) load as Int4ExpertsWeight."""
    victim = "layers.1.mlp.shared_expert.down_proj" if moe else "layers.1.mlp.down_proj"
    ignore = ["lm_head", "re:.*mlp.gate$", LM + victim]
    requantized = {victim: (None, 0, 192)}
    if moe:
        ignore.append(f"{LM}layers.0.mlp.experts.3.up_proj")
        requantized["layers.0.mlp.experts_gate_up"] = (3, 64, 128)
    ck, expected = write_ct(_synth(tmp_path / "bf16", moe), tmp_path / "ct", False, ignore)
    names = HFCheckpoint(ck).tensor_names()
    assert "layers.0.linear_attn.in_proj_b.weight" in names and "mtp.fc.weight" in names
    spec = None if moe else "mtp"
    out = check_loaded(ck, expected, "int4", spec=spec, requantized=requantized)
    r, m = out["recipe"], out["model"]
    assert r.name == "int4-default" and r.int4_zero_point
    assert m.get_submodule(victim).zeros is not None
    if moe:
        experts = m.layers[0].mlp.experts_gate_up
        assert isinstance(experts, Int4ExpertsWeight) and experts.shape == (4, 128, 192)
        assert experts.zeros is not None
    else:
        assert isinstance(m.mtp.fc, torch.nn.Parameter)



TP_ALIGNED = {"head_dim": 128, "linear_key_head_dim": 128, "linear_value_head_dim": 64, "vocab_size": 1000}


def _two_ranks_answer_as_one(ck: Path, monkeypatch, want: type) -> None:
    """Greedy tokens and logprobs of two ranks against one process, both loading `ck` as stored; rank 0 never
    quantizes anything itself (its parts stay as stored: a `want` weight)."""
    import hinfer.engine.tp.load as tp_load
    from hinfer.llm import LLM
    from hinfer.sampling_params import SamplingParams

    engine = dict(device="cpu", max_concurrency=2, max_context=128, prefill_chunk=16)
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(1, 1000, (n,), generator=g).tolist() for n in (7, 30)]
    params = SamplingParams(temperature=0, max_tokens=6, logprobs=0, ignore_eos=True)
    one = LLM(str(ck), **engine).generate(prompts, params)
    monkeypatch.setattr(tp_load, "quantize_model", lambda *a, **k: pytest.fail("a rank requantized its shard"))
    with LLM(str(ck), tensor_parallel=2, **engine) as llm:
        assert any(isinstance(m, want) for m in _quantized(llm.model).values())
        two = llm.generate(prompts, params)
    assert [o.token_ids for o in two] == [o.token_ids for o in one]
    torch.testing.assert_close(torch.tensor([o.logprobs for o in two]), torch.tensor([o.logprobs for o in one]),
                               rtol=0, atol=1e-4)  # fmt: skip


def test_official_fp8_over_two_ranks_as_stored(tmp_path, monkeypatch):
    """--tensor-parallel 2 on an official block-fp8 checkpoint whose parts fall on 128-row blocks at the rank's
    shapes: each rank reads its weights' rows / columns and their block scales and loads them as stored (the model
    built quantized layer by layer, never a bf16 shard first), answering as one process loading it as stored."""
    _two_ranks_answer_as_one(_synth(tmp_path / "fp8", False, TP_ALIGNED, fp8=True), monkeypatch, Fp8Weight)


@pytest.mark.parametrize(("moe", "symmetric"), [(False, True), (True, False)])
def test_compressed_tensors_over_two_ranks_as_stored(tmp_path, moe, symmetric, monkeypatch):
    """--tensor-parallel 2 on a compressed-tensors int4 checkpoint: each rank reads its rows / columns of the packed
    words, scales and zero points and keeps them as stored (dequantizing and requantizing the parts would add an
    error as large as the format's own: ~8% of the weights' norm for a symmetric scheme), so the two ranks answer
    as one process loading the same checkpoint as stored, up to fp32 reduction order. Every split dim falls on
    128-column groups and 8-row zero-point words here."""
    over = TP_ALIGNED | ({"moe_intermediate_size": 256, "shared_expert_intermediate_size": 256} if moe else {})
    ck, _ = write_ct(_synth(tmp_path / "bf16", moe, over, dtype=torch.float32), tmp_path / "ct", symmetric,
                     ["lm_head", "re:.*mlp.gate$", "re:.*shared_expert_gate$", "re:^mtp.*"])  # fmt: skip
    _two_ranks_answer_as_one(ck, monkeypatch, Int4ExpertsWeight if moe else Int4Weight)

def test_compressed_tensors_pack_matches_the_documented_bit_layout():
    """The test packer against hand-written words (so (b) does not rest on a packer that agrees with itself)."""
    u = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 15, 9]])
    words = ct_pack(u)
    assert words.shape == (1, 2)
    assert words[0, 0].item() == 0xF7654321 - 2**32 and words[0, 1].item() == 9


# ---- unsupported configs -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ct_sym(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("ctsym")
    return write_ct(_synth(d / "bf16", moe=False), d / "ct", True, ["lm_head", "re:^mtp.*"])[0]


@pytest.mark.parametrize(("change", "needle"), [
    ({"group_size": 64}, "group_size 64"),
    ({"num_bits": 8}, "8-bit int weights"),
    ({"actorder": "group"}, "actorder 'group'"),
    ({"actorder": True}, "actorder True"),
    ({"strategy": "channel", "group_size": -1}, "strategy 'channel'"),
    ({"type": "float"}, "4-bit float weights"),
])  # fmt: skip
def test_unsupported_compressed_tensors_configs(ct_sym, tmp_path, change, needle):
    ck = tmp_path / "ck"
    shutil.copytree(ct_sym, ck)
    cfg = json.loads((ck / "config.json").read_text())
    cfg["quantization_config"]["config_groups"]["group_0"]["weights"].update(change)
    (ck / "config.json").write_text(json.dumps(cfg))
    for attempt in (lambda: HFCheckpoint(ck), lambda: _load(ck), lambda: _load(ck, weights="bf16")):
        with pytest.raises(CheckpointError) as err:
            attempt()
        msg = str(err.value)
        assert "\n" not in msg and needle in msg and "compressed-tensors" in msg, msg


def test_unsupported_compressed_tensors_layouts(ct_sym, tmp_path):
    cases = {"input_activations": "activation quantization", "format": "format 'int-quantized'",
             "kv_cache_scheme": "kv_cache_scheme"}
    for key, needle in cases.items():
        ck = tmp_path / key
        shutil.copytree(ct_sym, ck)
        cfg = json.loads((ck / "config.json").read_text())
        q = cfg["quantization_config"]
        if key == "input_activations":
            q["config_groups"]["group_0"][key] = {"num_bits": 8, "type": "float", "dynamic": True}
        elif key == "format":
            q["format"] = "int-quantized"
        else:
            q[key] = {"num_bits": 8, "type": "float"}
        (ck / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(CheckpointError) as err:
            HFCheckpoint(ck)
        assert "\n" not in str(err.value) and needle in str(err.value), str(err.value)


def test_g_idx_reordering_is_refused_but_dequantizes(ct_sym, tmp_path):
    """A g_idx that permutes columns across groups cannot run on contiguous-group kernels; a trivial one can."""
    ck = tmp_path / "ck"
    shutil.copytree(ct_sym, ck)
    tensors = _stored(ck)
    mod = f"{LM}layers.0.mlp.down_proj"
    k = int(tensors[f"{mod}.weight_shape"][1])
    tensors[f"{mod}.weight_g_idx"] = (torch.arange(k) // 128).to(torch.int32)
    save_file(tensors, str(ck / "model.safetensors"))
    assert isinstance(_load(ck).model.layers[0].mlp.down_proj, Int4Weight)
    tensors[f"{mod}.weight_g_idx"] = torch.flip(tensors[f"{mod}.weight_g_idx"], [0])
    save_file(tensors, str(ck / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        _load(ck)
    assert "\n" not in str(err.value) and "weight_g_idx" in str(err.value)
    deq = _load(ck, weights="bf16").model.layers[0].mlp.down_proj  # the reference path honours g_idx
    words = tensors[f"{mod}.weight_packed"].long() & 0xFFFFFFFF
    q = ((words[..., None] >> (4 * torch.arange(8))) & 0xF).flatten(1)[:, :k].float() - 8
    g = tensors[f"{mod}.weight_g_idx"].long()
    assert torch.equal(deq, q * tensors[f"{mod}.weight_scale"].float()[:, g])


def test_zero_points_of_a_symmetric_scheme(ct_sym, tmp_path):
    """Older writers saved unpacked int8 zero points (all 0) for symmetric schemes: accepted (and repacked when
    nonzero, for an asymmetric model); nonzero ones contradict a symmetric config."""
    from hinfer.weights.compressed_tensors import PackedInt4Tensor

    ck = tmp_path / "ck"
    shutil.copytree(ct_sym, ck)
    tensors = _stored(ck)
    mod = f"{LM}layers.0.mlp.down_proj"
    n, g = tensors[f"{mod}.weight_scale"].shape
    tensors[f"{mod}.weight_zero_point"] = torch.zeros(n, g, dtype=torch.int8)
    save_file(tensors, str(ck / "model.safetensors"))
    assert _load(ck).model.layers[0].mlp.down_proj.zeros is None
    zp = torch.randint(-8, 8, (n, g), dtype=torch.int8, generator=torch.Generator().manual_seed(3))
    tensors[f"{mod}.weight_zero_point"] = zp
    save_file(tensors, str(ck / "model.safetensors"))
    with pytest.raises(CheckpointError) as err:
        _load(ck)
    assert "\n" not in str(err.value) and "nonzero zero points" in str(err.value)
    # the unpacked form means the same as the packed one
    k = int(tensors[f"{mod}.weight_shape"][1])
    args = (tensors[f"{mod}.weight_packed"], tensors[f"{mod}.weight_scale"], (n, k))
    packed = ct_pack((zp.to(torch.int16) + 8).t()).t().contiguous()
    a, b = PackedInt4Tensor(*args, zp), PackedInt4Tensor(*args, packed)
    assert torch.equal(a.dequantize(torch.float32), b.dequantize(torch.float32))
    assert torch.equal(a.to_int4weight().dequantize(torch.float32), b.dequantize(torch.float32))
