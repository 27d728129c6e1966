"""Memory plan: exact bytes on a small config, the 27B inventory, PlanError figures, largest fit, `hinfer plan`."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest

from hinfer.cli.commands import plan as plan_cmd
from hinfer.config import EngineConfig, ModelConfig, load_model_config
from hinfer.engine import memory_plan
from hinfer.engine.factory import plan_for_serve
from hinfer.engine.memory_plan import (
    CUDA_RUNTIME_BYTES,
    GIB,
    captured_batch_sizes,
    check_plan,
    device_memory,
    plan_memory,
)
from hinfer.engine.weight_bytes import RECIPES, resolve_weights, weight_bytes
from hinfer.errors import ConfigError, PlanError
from hinfer.weights.inventory import inventory

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures")
F27B = FIXTURES / "qwen3.6-27b"

SMALL = {
    "model_type": "qwen3_5_text", "vocab_size": 1000, "hidden_size": 256, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4, "intermediate_size": 512, "mtp_num_hidden_layers": 1,
    "tie_word_embeddings": False,
}


def small_cfg(**kw) -> ModelConfig:
    return ModelConfig.from_dict({**SMALL, **kw})


def small_ecfg(**kw) -> EngineConfig:
    return EngineConfig(**{"max_context": 256, "max_concurrency": 2, "prefill_chunk": 32, "page_size": 16, **kw})


def test_small_config_weight_bytes_by_hand():
    cfg = small_cfg()
    # Layers 0-2 GDN, 3 attention (interval 4). GDN mixer: qkv 256x256 + z 128x256 + a,b 4x256 + conv 256x4
    # + A_log 4 + dt_bias 4 + norm 32 + out 256x128 = 134,184. Attention: q 512x256 + k,v 128x256 + o 256x256
    # + q/k norms 64 = 262,272. MLP 3 x 512x256 = 393,216; 2 norms x 256 per layer.
    layers = 3 * (134_184 + 393_216 + 512) + (262_272 + 393_216 + 512)
    main = layers + 1000 * 256 * 2 + 256  # embed + lm_head + final norm
    mtp = 256 * 512 + 3 * 256 + 262_272 + 393_216 + 512
    assert main == 2_751_992 and mtp == 787_840
    assert weight_bytes(cfg, "bf16", 2, False).total == 2 * 2_751_992
    assert weight_bytes(cfg, "bf16", 2, True).total == 2 * (2_751_992 + 787_840)
    assert weight_bytes(cfg, "bf16", 4, False).total == 4 * 2_751_992  # CPU reference path: fp32
    # Converted (attention qkv/o, GDN qkv/z/out, MLP): 3 x (131,072 + 393,216) + (262,144 + 393,216) = 2,228,224
    # elements in 3 x 1,920 + 2,304 = 8,064 rows; fp8 128x128 blocks: 3 x 32 + 40 = 136.
    conv_elts, kept = 2_228_224, 2_751_992 - 2_228_224
    assert weight_bytes(cfg, "fp8", 2, False).total == conv_elts + 4 * 8064 + 2 * kept == 3_308_016
    assert weight_bytes(cfg, "fp8-block", 2, False).total == conv_elts + 4 * 136 + 2 * kept == 3_276_304
    # int4 groups (rows x ceil(in/128)): GDN layer 512+256+256 + MLP 1024+1024+1024 = 4,096, attention layer
    # 1024+256+256+512 + 3,072 = 5,120: 17,408 groups, each a bf16 scale + a uint8 zero (int4-default) or a scale.
    assert weight_bytes(cfg, "int4", 2, False).total == conv_elts // 2 + 3 * 17_408 + 2 * kept == 2_213_872
    assert weight_bytes(cfg, "int4-sym", 2, False).total == conv_elts // 2 + 2 * 17_408 + 2 * kept == 2_196_464
    # tied embeddings drop lm_head
    assert weight_bytes(small_cfg(tie_word_embeddings=True), "bf16", 2, False).total == 2 * (2_751_992 - 256_000)


def test_small_config_plan_rows_by_hand(monkeypatch):
    cfg, ecfg = small_cfg(), small_ecfg()
    plan = plan_memory(cfg, ecfg, weights="bf16", device_bytes=10 * GIB, device_name="test", device="cuda")
    rows = {r.name: r.bytes for r in plan.rows}
    assert rows["weights"] == 2 * 2_751_992  # no MTP head without --spec (the model skips building it)
    # KV: 1 attention layer x K,V x 16 tokens x 2 heads x 64 x 2 B = 8,192 B/page; 2 lanes x 16 pages + 1
    assert rows["kv cache"] == 33 * 8192 and plan.num_pages == 33 and plan.kv_tokens == 512
    # GDN: 3 slots x 3 layers x (conv 256x3x2 B + ssm 4x32x32x4 B)
    assert rows["gdn state"] == 3 * 3 * (1536 + 16384) and plan.num_slots == 3
    assert rows["sampler state"] == 2 * 1000 * 5
    # Activations, T = 32 + 2 tokens, 2 logit rows: base 3*34*256*2 + max(attn 104,448, mlp 104,448,
    # gdn 70,176 + 16,384 + 70,176) + logits 2*1000*(2+4+40)
    assert rows["activations"] == 52_224 + 156_736 + 92_000
    # Graph pool: the same at T = 2 (3,072 + 24,640 + 92,000) + 2 graphs x 2 MiB
    assert rows["cuda graphs"] == 3072 + 24_640 + 92_000 + 2 * 2 * 2**20
    assert rows["cuda runtime"] == CUDA_RUNTIME_BYTES
    assert rows["headroom"] == 512 * 2**20  # the floor: 2% of 10 GiB is less
    assert plan.total == sum(rows.values()) and plan.fits

    spec = plan_memory(cfg, replace(ecfg, spec="mtp", draft_tokens=3), weights="bf16", device_bytes=10 * GIB,
                       device_name="test", device="cuda")
    srows = {r.name: r.bytes for r in spec.rows}
    assert srows["weights"] == 2 * (2_751_992 + 787_840)
    assert srows["kv cache"] == 33 * 2 * 8192  # the MTP layer has its own KV
    assert spec.num_slots == 2 * (1 + 4) + 1  # draft_slots = draft_tokens + 1
    assert "draft lm_head" not in srows  # bf16: the drafter shares the model's lm_head
    spec4 = plan_memory(cfg, replace(ecfg, spec="mtp", draft_tokens=3), weights="int4", device_bytes=10 * GIB,
                        device_name="test", device="cuda")
    v, h = cfg.vocab_size, cfg.hidden_size  # int4 g128 asym: packed values, bf16 scale + uint8 zero per group
    assert {r.name: r.bytes for r in spec4.rows}["draft lm_head"] == v * h // 2 + v * -(-h // 128) * 3

    # --lm-head int4: the head in int4 (v x h / 2 + a bf16 scale and uint8 zero per group) instead of bf16, and the
    # drafter shares it (no copy of its own)
    head4 = plan_memory(cfg, replace(ecfg, spec="mtp", draft_tokens=3, lm_head="int4"), weights="int4",
                        device_bytes=10 * GIB, device_name="test", device="cuda")  # fmt: skip
    hrows = {r.name: r.bytes for r in head4.rows}
    int4_head = v * h // 2 + v * -(-h // 128) * 3
    assert hrows["weights"] == {r.name: r.bytes for r in spec4.rows}["weights"] - 2 * v * h + int4_head
    assert "draft lm_head" not in hrows

    # --spec ngram: the verify rows and the draft slots of speculation, no MTP head (its KV, its lm_head copy)
    ngram = plan_memory(cfg, replace(ecfg, spec="ngram", draft_tokens=3), weights="int4", device_bytes=10 * GIB,
                        device_name="test", device="cuda")  # fmt: skip
    nrows = {r.name: r.bytes for r in ngram.rows}
    assert nrows["kv cache"] == 33 * 8192 and "draft lm_head" not in nrows
    assert ngram.num_slots == spec.num_slots

    monkeypatch.setattr(memory_plan, "MTP_LOADED_WITHOUT_SPEC", False)
    lean = plan_memory(cfg, ecfg, weights="bf16", device_bytes=10 * GIB, device_name="test", device="cuda")
    assert lean.rows[0].bytes == 2 * 2_751_992
    cpu = plan_memory(cfg, ecfg, weights="bf16", device_bytes=10 * GIB, device_name="test", device="cpu")
    crow = {r.name: r.bytes for r in cpu.rows}
    assert "cuda graphs" not in crow and crow["weights"] == 4 * 2_751_992  # fp32 activations on the CPU
    assert crow["gdn state"] == 3 * 3 * (256 * 3 * 4 + 16384)
    assert crow["kv cache"] == 33 * 2 * 8192  # the CPU reference path keeps KV in fp32


def test_recipes_mirror_the_quantizer_and_its_bytes():
    """Same recipes as hinfer.quant, and the bytes of a model it quantized (CPU, fp32) equal ours."""
    import torch

    from hinfer.model.qwen3_5 import Qwen35ForCausalLM
    from hinfer.quant import RECIPES as QUANT_RECIPES
    from hinfer.quant import quantize_model
    from hinfer.quant.apply import quantized_nbytes

    assert set(RECIPES) == set(QUANT_RECIPES)
    for name, r in RECIPES.items():
        q = QUANT_RECIPES[name]
        for f in fields(r):
            assert getattr(r, f.name) == getattr(q, f.name), (name, f.name)
    cfg = small_cfg()

    def model() -> Qwen35ForCausalLM:
        m = Qwen35ForCausalLM(cfg, torch.float32)
        with torch.no_grad():
            for t in m.parameters():  # defined values: uninitialized memory may hold slow denormals
                t.normal_(0.0, 0.02)
        return m

    base = quantized_nbytes(model())
    assert base == 4 * weight_bytes(cfg, "bf16", 4, True).params + 64  # + the model's 64 bytes of buffers
    for name, mtp in (("fp8-block", False), ("int4-default", True)):  # the others: by hand, above
        m = model()
        quantize_model(m, replace(QUANT_RECIPES[name], convert_mtp=mtp))
        ours = weight_bytes(cfg, replace(RECIPES[name], convert_mtp=mtp), 4, True).total
        assert quantized_nbytes(m) - base == ours - weight_bytes(cfg, "bf16", 4, True).total, (name, mtp)


def test_plan_kv_and_gdn_match_state_shape():
    import torch

    from hinfer.model.state import StateShape

    cfg = load_model_config(F27B)
    for ecfg in (EngineConfig(), EngineConfig(spec="mtp", kv_dtype="fp8", max_concurrency=3, max_context=1000)):
        plan = plan_memory(cfg, ecfg, weights="int4", device_bytes=10**12, device_name="t", device="cuda")
        rows = {r.name: r.bytes for r in plan.rows}
        kv_dtype = torch.bfloat16 if ecfg.kv_dtype == "bf16" else torch.float8_e4m3fn
        shape = StateShape(plan.num_pages, ecfg.page_size, plan.num_slots, kv_dtype, torch.bfloat16,
                           mtp_layers=cfg.mtp_num_hidden_layers if ecfg.spec else 0)
        assert rows["kv cache"] == shape.kv_bytes(cfg)
        assert rows["gdn state"] == shape.gdn_bytes(cfg)


def test_graph_sizes_match_the_runner():
    from hinfer.engine.cuda_graphs import BUCKETS

    for lanes in (1, 8, 13, 64):
        assert captured_batch_sizes(lanes) == [b for b in BUCKETS if b < lanes] + [lanes]


def test_27b_inventory_equals_reference_listing():
    ref = json.loads((FIXTURES / "reference" / "qwen3.6-27b.tensors.json").read_text())
    text = {n: tuple(t["shape"]) for n, t in ref["tensors"].items() if not n.startswith("model.visual.")}
    cfg = load_model_config(F27B)
    mine = {name: t.shape for t in inventory(cfg) for name in t.names()}
    assert mine == text
    visual = sum(math.prod(t["shape"]) for n, t in ref["tensors"].items() if n.startswith("model.visual."))
    assert weight_bytes(cfg, "bf16", 2, True).params == ref["total_parameters"] - visual == 27_781_427_952 - visual


def test_moe_inventory_counts_experts():
    cfg = load_model_config(FIXTURES / "qwen3.6-35b-a3b")
    experts = [t for t in inventory(cfg) if t.role == "experts"]
    assert len(experts) == 3 * (40 + 1) and all(t.count == 256 for t in experts)
    assert next(experts[0].names()).endswith("layers.0.mlp.experts.0.gate_proj.weight")
    assert 34e9 < weight_bytes(cfg, "bf16", 2, False).params < 35e9


def test_moe_routed_expert_bytes_by_hand():
    """35B-A3B: 40 MoE layers x 256 experts of gate [512, 2048], up [512, 2048], down [2048, 512]
    (3 x 1,048,576 = 3,145,728 elements); the MTP head's MoE layer (256 more) stays bf16 without convert_mtp."""
    cfg = load_model_config(FIXTURES / "qwen3.6-35b-a3b")
    n, elts, mtp_bf16 = 40 * 256, 3_145_728, 256 * 3_145_728 * 2
    per = {"bf16": 2 * elts,
           "fp8-default": elts + 4 * (512 + 512 + 2048),  # one fp32 scale per row
           "fp8-block": elts + 4 * (4 * 16 + 4 * 16 + 16 * 4),  # one per 128x128 block
           "int4-default": elts // 2 + 3 * (512 * 16 + 512 * 16 + 2048 * 4)}  # bf16 scale + uint8 zero per group
    for name, b in per.items():
        assert weight_bytes(cfg, name, 2, False).by_role["experts"] == n * b, name
        assert weight_bytes(cfg, name, 2, True).by_role["experts"] == n * b + mtp_bf16, name
    assert weight_bytes(cfg, "fp8", 2, False).by_role["experts"] == 32_338_083_840


def test_packaged_122b_config():
    cfg = plan_cmd.load_config_arg("qwen3.5-122b-a10b")
    assert cfg.model_type == "qwen3_5_moe" and cfg.hidden_size == 3072 and len(cfg.attn_layers) == 12
    assert weight_bytes(cfg, "bf16", 2, False).params == 122_111_526_912
    assert "qwen3.5-122b-a10b" in plan_cmd.packaged_configs()
    with pytest.raises(ConfigError):
        plan_cmd.load_config_arg("no-such-model")


def test_weights_auto_resolution():
    cfg = load_model_config(F27B)
    assert resolve_weights(cfg, "auto") == "bf16" and resolve_weights(cfg, "int4") == "int4"
    raw = json.loads((F27B / "config.json").read_text())
    raw["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    assert resolve_weights(ModelConfig.from_dict(raw), "auto").name == "fp8-block"
    # compressed-tensors W4A16 (llm-compressor) plans as the int4 it loads as, lm_head left out as it usually is
    w = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128, "actorder": None}
    raw["quantization_config"] = {"quant_method": "compressed-tensors", "format": "pack-quantized",
                                  "config_groups": {"g": {"targets": ["Linear"], "weights": w}}, "ignore": ["lm_head"]}
    ct = ModelConfig.from_dict(raw)
    assert resolve_weights(ct, "auto").fmt == "int4" and resolve_weights(ct, "auto").name.startswith("int4-sym")
    assert resolve_weights(ct, "bf16") == "bf16" and resolve_weights(ct, "fp8") == "fp8"
    ecfg = EngineConfig(max_context=4096, max_concurrency=1)
    int4 = plan_memory(ct, ecfg, weights=resolve_weights(ct, "auto"), device_bytes=10**12, device_name="GPU")
    bf16 = plan_memory(ct, ecfg, weights="bf16", device_bytes=10**12, device_name="GPU")
    assert int4.rows[0].bytes < bf16.rows[0].bytes / 3


def _plan(ecfg: EngineConfig, weights: str = "bf16", avail: int = 80 * 10**9):
    return plan_memory(load_model_config(F27B), ecfg, weights=weights, device_bytes=avail, device_name="GPU",
                       device="cuda")


def test_packaged_397b_config():
    """397B-A17B: 396.3B text parameters without the MTP head (0.46B more in the vision tower), 16.3B active per
    token without the embedding. Per 141 GB GPU: bf16 needs 8 ranks (4 hold 198 GB of weights each), int4 fits 4."""
    cfg = plan_cmd.load_config_arg("qwen3.5-397b-a17b")
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_experts, cfg.num_experts_per_tok) == (4096, 60, 512, 10)
    assert weight_bytes(cfg, "bf16", 2, False).params == 396_346_350_336
    assert "qwen3.5-397b-a17b" in plan_cmd.packaged_configs()
    h200 = ("qwen3.5-397b-a17b", "--gpu-memory", "141GB", "--max-context", "32768")
    assert _cli(*h200, "--weights", "bf16", "--tensor-parallel", "4") == 1
    assert _cli(*h200, "--weights", "bf16", "--tensor-parallel", "8") == 0
    assert _cli(*h200, "--weights", "int4", "--tensor-parallel", "4") == 0


def test_plan_error_carries_exact_figures_and_largest_fit():
    ecfg = EngineConfig(max_context=65536, max_concurrency=8)
    plan = _plan(ecfg)
    assert not plan.fits
    with pytest.raises(PlanError) as ei:
        check_plan(plan)
    msg = str(ei.value)
    assert "\n" not in msg
    assert f"{plan.needed:,} bytes" in msg and f"{80 * 10**9:,} bytes" in msg
    lim = plan.largest_fit()
    assert f"--max-context {lim.max_context} at --max-concurrency 8" in msg
    assert f"--max-concurrency {lim.max_concurrency} at --max-context 65536" in msg
    assert _plan(replace(ecfg, max_context=lim.max_context)).fits
    assert not _plan(replace(ecfg, max_context=lim.max_context + 1)).fits
    assert _plan(replace(ecfg, max_concurrency=lim.max_concurrency)).fits
    assert not _plan(replace(ecfg, max_concurrency=lim.max_concurrency + 1)).fits
    check_plan(_plan(replace(ecfg, max_context=lim.max_context)))  # no raise


def test_nothing_fits_says_so():
    plan = _plan(EngineConfig(), avail=40 * 10**9)  # bf16 27B weights alone are 53.8 GB
    lim = plan.largest_fit()
    assert lim.max_context is None and lim.max_concurrency is None
    with pytest.raises(PlanError, match="No --max-context or --max-concurrency fits"):
        check_plan(plan)


def test_kv_capacity_auto_fills_the_rest():
    plan = _plan(EngineConfig(kv_capacity=0), weights="int4")
    assert plan.fits and 0 <= plan.available - plan.total < plan.page_bytes
    assert plan.kv_tokens > 8 * 65536
    # text only: bf16 27B leaves 60 GB little beyond its weights
    small = _plan(EngineConfig(kv_capacity=0, max_context=262144, vision=False), weights="bf16", avail=60 * 10**9)
    assert not small.fits and small.needed > small.available
    lim = small.largest_fit()
    assert _plan(EngineConfig(kv_capacity=0, max_context=lim.max_context, vision=False), avail=60 * 10**9).fits
    assert not _plan(EngineConfig(kv_capacity=0, max_context=lim.max_context + 1, vision=False),
                     avail=60 * 10**9).fits  # fmt: skip


def test_explicit_kv_capacity():
    plan = _plan(EngineConfig(kv_capacity=100_000), weights="fp8")
    assert plan.num_pages == math.ceil(100_000 / 64) + 1 and plan.fits


def test_table_lists_rows_and_verdict():
    text = _plan(EngineConfig()).table()
    for name in ("weights", "kv cache", "gdn state", "activations", "cuda graphs", "headroom", "available"):
        assert name in text
    assert "DOES NOT FIT" in text and "53,791,996,928" in text  # no MTP head without --spec
    assert "FITS" in _plan(EngineConfig(), weights="int4").table()


def test_device_memory():
    assert device_memory(EngineConfig(gpu_memory=123))[0] == 123
    n, name = device_memory(EngineConfig(device="cpu"))
    assert n > 0 and "CPU" in name


def _cli(*argv: str) -> int:
    p = argparse.ArgumentParser()
    plan_cmd.register(p.add_subparsers())
    args = p.parse_args(["plan", *argv])
    return args.func(args)


def test_cli_exit_codes(capsys):
    assert _cli(str(F27B), "--gpu-memory", "141GB") == 0
    out = capsys.readouterr().out
    assert "FITS" in out and "largest --max-context" in out
    assert _cli(str(F27B / "config.json"), "--gpu-memory", "80GB") == 1
    cap = capsys.readouterr()
    assert "DOES NOT FIT" in cap.out and "error: the memory plan does not fit" in cap.err
    assert _cli("qwen3.5-122b-a10b", "--gpu-memory", "141GB", "--weights", "int4") == 0  # int4 routed experts
    # fp8 routed experts: 123.95 GB of weights (no MTP head without --spec); 8 x 64K needs 133.07 GiB > 131.32 GiB,
    # 8 lanes fit up to 55,872 tokens (pages of 64: 55,936 is the next context that needs another page) without
    # the prefix cache's GDN checkpoints; with them (7 slots, 1 GiB) 51,200 (text only: no vision tower)
    fp8 = ("qwen3.5-122b-a10b", "--gpu-memory", "141GB", "--weights", "fp8", "--no-vision")
    assert _cli(*fp8) == 1
    assert _cli(*fp8, "--no-prefix-cache", "--max-context", "55872") == 0
    assert _cli(*fp8, "--no-prefix-cache", "--max-context", "55936") == 1
    assert _cli(*fp8, "--max-context", "55872") == 1 and _cli(*fp8, "--max-context", "51200") == 0
    assert _cli("qwen3.6-35b-a3b", "--gpu-memory", "80GB", "--weights", "fp8") == 0  # 46.89 GiB (bf16 experts: 76.77)
    assert _cli("qwen3.6-35b-a3b", "--gpu-memory", "80GB", "--weights", "bf16") == 1
    assert _cli("qwen3.6-27b", "--gpu-memory", "80GB", "--weights", "fp8") == 0
    assert _cli(str(F27B), "--gpu-memory", "80GB", "--weights", "int4", "--device", "cpu", "--max-context", "8192") == 0
    with pytest.raises(ConfigError):
        _cli("nope", "--gpu-memory", "80GB")


def test_plan_allows_1m_with_yarn(capsys):
    """The 27B's 262,144 positions are the limit until --rope-scaling yarn:4 (or a yarn config) makes it
    4x."""
    one_m = ("--gpu-memory", "141GB", "--weights", "int4", "--kv-dtype", "fp8", "--max-concurrency", "1",
             "--max-context", "1048576")
    with pytest.raises(ConfigError, match="max_position_embeddings is 262144 tokens"):
        _cli("qwen3.6-27b", *one_m)
    assert _cli("qwen3.6-27b", *one_m, "--rope-scaling", "yarn:4") == 0
    out = capsys.readouterr().out
    assert "1,048,576 positions (yarn x4 of 262,144)" in out and "1,048,576 KV tokens" in out
    assert "largest --max-context at --max-concurrency 1: 1048576;" in out
    with pytest.raises(ConfigError, match="1048576 tokens"):
        _cli("qwen3.6-27b", *one_m[:-1], "1048577", "--rope-scaling", "yarn:4")


def test_plan_for_serve():
    cfg = load_model_config(F27B)
    ecfg = EngineConfig(device="cuda", gpu_memory=141 * 10**9)
    assert plan_for_serve(cfg, ecfg, "auto").fits
    with pytest.raises(PlanError):
        plan_for_serve(cfg, replace(ecfg, gpu_memory=80 * 10**9), "bf16")


def test_plan_command_does_not_import_torch():
    code = "import sys, hinfer.cli.commands.plan as p; p.load_config_arg('qwen3.5-122b-a10b'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_plan_per_tensor_parallel_rank(capsys):
    """27B over 2 ranks: each holds half the KV heads and GDN heads, so half the state; about half the weights
    (norms and the router replicated); the table says so."""
    cfg = load_model_config(F27B)
    plans = {n: plan_memory(cfg, EngineConfig(tensor_parallel=n), weights="bf16", device_bytes=141 * 10**9,
                            device_name="t", device="cuda") for n in (1, 2)}  # fmt: skip
    one, two = ({r.name: r.bytes for r in p.rows} for p in plans.values())
    assert two["kv cache"] * 2 == one["kv cache"] and two["gdn state"] * 2 == one["gdn state"]
    assert 0.5 < two["weights"] / one["weights"] < 0.501
    assert two["sampler state"] == one["sampler state"]  # rank 0 samples from the whole vocabulary
    assert plans[2].page_bytes * 2 == plans[1].page_bytes
    assert "tensor-parallel 2 (per rank)" in plans[2].table()
    assert _cli("qwen3.6-27b", "--gpu-memory", "80GB", "--tensor-parallel", "2") == 0  # bf16 27B: one H100 is short
    assert _cli("qwen3.6-27b", "--gpu-memory", "80GB") == 1
    capsys.readouterr()
    with pytest.raises(ConfigError, match="num_attention_heads 24"):
        _cli("qwen3.6-27b", "--tensor-parallel", "16")


def test_gpu_plans_count_the_cudnn_prefill_scratch():
    """Chunks of >= 1,024 tokens on the GPU add one block of keys and values (model dtype) and the fp32 merge
    buffers to the attention term; shorter chunks and CPU plans nothing."""
    cfg = load_model_config(F27B)
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    assert memory_plan.cudnn_prefill_bytes(cfg, 1023, 2) == 0
    assert memory_plan.cudnn_prefill_bytes(cfg, 2048, 2) == 32768 * kv * 2 * 2 + (2048 + 512) * q * 10
    gpu = memory_plan.step_workspace_bytes(cfg, 8192, 1, 2, cudnn=True)
    attn = 8192 * (7 * q + 2 * kv) * 2 + memory_plan.cudnn_prefill_bytes(cfg, 8192, 2)
    assert gpu >= 3 * 8192 * cfg.hidden_size * 2 + attn  # base + at least the attention term
