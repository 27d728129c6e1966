"""The whole GPU path: CUDA-graph decode equals eager decode token for token; Triton ops vs reference ops on a
few 27B-shaped layers (close logits)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hinfer.batch import SeqChunk, build_forward_batch
from hinfer.config import EngineConfig, ModelConfig, load_model_config
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.engine.protocol import GenerationRequest
from hinfer.fixtures import config_dir, fixed_test_seed, tokenizer_dir
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.model.state import ModelState, StateShape
from hinfer.ops.dispatch import set_backend
from hinfer.sampling_params import SamplingParams
from hinfer.tokenizer import Tokenizer

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

SMALL = {
    "model_type": "qwen3_5_text", "vocab_size": 4096, "hidden_size": 512, "intermediate_size": 1024,
    "num_hidden_layers": 4, "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
    "max_position_embeddings": 8192, "tie_word_embeddings": False,
}  # fmt: skip


def _run(core, prompts: list[list[int]], steps: int) -> dict[str, list[int]]:
    for i, p in enumerate(prompts):
        core.add(GenerationRequest(f"r{i}", p, SamplingParams(temperature=0, max_tokens=steps, ignore_eos=True)))
    out = {f"r{i}": [] for i in range(len(prompts))}
    while core.has_work:
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
    return out


def test_graph_decode_equals_eager_for_64_steps():
    cfg = ModelConfig.from_dict(SMALL)
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda"), seed=3)
    tok = Tokenizer.from_dir(tokenizer_dir())
    g = torch.Generator().manual_seed(fixed_test_seed())
    # the 4070-token prompt crosses 4096 tokens while decoding: it moves to the wider page-table graphs
    prompts = [torch.randint(1, 4096, (n,), generator=g).tolist() for n in (1, 17, 333, 4070)]
    outs = []
    for graphs in (True, False):
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cuda", dtype="bf16", max_context=8192,
                                                       max_concurrency=4, cuda_graphs=graphs))  # fmt: skip
        core = make_core(cfg, model, tok, ecfg, torch.device("cuda"))
        assert bool(core.runner.graphs) == graphs
        if graphs:
            assert [g.width for g in core.runner.graphs] == [64, 128]
        outs.append(_run(core, prompts, 64))
    assert outs[0] == outs[1]


def test_decode_ahead_equals_reading_every_step():
    """Graph decode queued a step ahead (input ids from the device) gives the tokens of reading every step first,
    greedy and seeded sampling, lanes finishing at different lengths while others go on."""
    cfg = ModelConfig.from_dict(SMALL)
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda"), seed=5)
    tok = Tokenizer.from_dir(tokenizer_dir())
    g = torch.Generator().manual_seed(fixed_test_seed())
    prompts = [torch.randint(1, 4096, (n,), generator=g).tolist() for n in (3, 40, 200, 1000)]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in (50, 20, 64, 33)]
    params[1] = SamplingParams(temperature=0.8, top_p=0.9, seed=1, max_tokens=20, ignore_eos=True)
    outs = []
    for ahead in (True, False):
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cuda", dtype="bf16", max_context=2048,
                                                       max_concurrency=4, decode_ahead=ahead))  # fmt: skip
        core = make_core(cfg, model, tok, ecfg, torch.device("cuda"))
        for i, (p, sp) in enumerate(zip(prompts, params)):
            core.add(GenerationRequest(f"r{i}", p, sp))
        out = {f"r{i}": [] for i in range(len(prompts))}
        while core.has_work:
            for ev in core.step():
                out[ev.request_id] += ev.token_ids
        assert core.stats().lanes_busy == 0
        outs.append(out)
    assert outs[0] == outs[1]
    assert [len(v) for v in outs[0].values()] == [50, 20, 64, 33]


def test_spec_graphs_greedy_equal_plain_decode():
    """MTP speculation with captured verify and draft graphs gives plain greedy decoding's tokens, at several lane
    counts and draft counts, with prefill chunking (the same check as the CPU test, on the Triton path)."""
    cfg = ModelConfig.from_dict(SMALL | {"mtp_num_hidden_layers": 1})
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda"), seed=5)
    with torch.no_grad():  # peaked logits: random weights' near-ties would let bf16 rounding (a K+1-row verify vs
        model.lm_head.mul_(8.0)  # 1-row decode GEMM) flip a greedy pick; a real bug still shows
    tok = Tokenizer.from_dir(tokenizer_dir())
    g = torch.Generator().manual_seed(fixed_test_seed())
    prompts = [torch.randint(1, 4096, (n,), generator=g).tolist() for n in (1, 17, 200, 333, 64, 5)]

    def core(**kw):
        ecfg = EngineConfig(device="cuda", dtype="bf16", max_context=2048, prefill_chunk=128, **kw)
        return make_core(cfg, model, tok, resolve_engine_config(cfg, ecfg), torch.device("cuda"))

    for lanes, k in [(1, 3), (4, 3), (2, 1), (4, 5)]:
        spec = core(max_concurrency=lanes, spec="mtp", draft_tokens=k, spec_adaptive=False)
        assert spec.spec.graphs and all(s.graphs for s in spec.spec.graphs)
        # verify rows (lanes x (K + 1)) and 1-row decode steps run GEMMs of other shapes than the 4-lane baseline,
        # which round differently: a near-tie may flip (measured: plain decode at one lane leaves the baseline at
        # two positions of these prompts), so each token must be the teacher-forced argmax up to rounding
        _assert_greedy_up_to_rounding(model, prompts, _run(spec, prompts, 48), (lanes, k))
        # adaptive: random weights accept (almost) nothing, so most steps are plain ones on the decode graphs
        adaptive = core(max_concurrency=lanes, spec="mtp", draft_tokens=k, spec_draft_cost=0.3)
        _assert_greedy_up_to_rounding(model, prompts, _run(adaptive, prompts, 48), (lanes, k))
        st = adaptive.stats().extra
        assert st["spec_plain_steps"] > st["spec_verify_steps"], st


@pytest.mark.parametrize("quant", ["bf16", "int4"])
def test_spec_graphs_accept_what_eager_drafts_accept(quant):
    """Drafts through the captured graphs (device drafts, the early pass, the next round's chain) are the drafts
    of eager steps: on a model whose target alternates two tokens and whose head drafts the alternation
    (tests/drafting_models.py), every draft is right, so rounds keep all K, and a round's drafts differ from step
    to step (a draft step's graph output kept past its next replay once cost most second drafts). With int4
    weights the drafter reads its own int4 lm_head copy and verification the int4 kernels at 4 rows."""
    from drafting_models import alternating

    from hinfer.quant.apply import quantize_model

    cfg = ModelConfig.from_dict(SMALL | {"mtp_num_hidden_layers": 1})
    model = alternating(random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda"), seed=5))
    if quant != "bf16":
        quantize_model(model, quant)
    tok = Tokenizer.from_dir(tokenizer_dir())
    g = torch.Generator().manual_seed(fixed_test_seed())
    prompts = [torch.randint(1, 4096, (n,), generator=g).tolist() for n in (1, 17, 200, 64)]
    rate = {}
    for graphs in (True, False):
        ecfg = EngineConfig(device="cuda", dtype="bf16", max_context=2048, max_concurrency=4, cuda_graphs=graphs,
                            spec="mtp", draft_tokens=3, spec_adaptive=False)  # fmt: skip
        core = make_core(cfg, model, tok, resolve_engine_config(cfg, ecfg), torch.device("cuda"))
        assert bool(core.spec.graphs) == graphs
        _run(core, prompts, 96)
        st = core.stats().extra
        rate[graphs] = st["spec_accepted"] / st["spec_rounds"]
    print(f"accepted drafts a round: graphs {rate[True]:.2f}, eager {rate[False]:.2f}")
    assert rate[False] >= 2.5, rate  # the model's drafts are right (the last rounds draft fewer)
    assert rate[True] >= 0.95 * rate[False], rate


def test_spec_graphs_sampled_lanes_judged_on_the_device(monkeypatch):
    """Sampled lanes (the Qwen defaults) drafting the argmax through captured graphs: their rows are judged on the
    device and the drafter's pass is queued behind verification (spec/picks.py, the early pass); every request
    completes with its tokens in range and every lane and page is given back. (Token identity with host-side
    acceptance is the CPU test's: here the two paths' draft passes run GEMMs of other shapes.)"""
    from hinfer.engine.spec import decoder as decoder_mod
    from hinfer.engine.spec import mtp as mtp_mod

    cfg = ModelConfig.from_dict(SMALL | {"mtp_num_hidden_layers": 1})
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda"), seed=5)
    tok = Tokenizer.from_dir(tokenizer_dir())
    g = torch.Generator().manual_seed(fixed_test_seed())
    prompts = [torch.randint(1, 4096, (n,), generator=g).tolist() for n in (1, 17, 200, 64)]
    judged, early = [], []
    real_picks, real_rows = decoder_mod.sampled_picks, mtp_mod.MTPDrafter._early_rows
    monkeypatch.setattr(decoder_mod, "sampled_picks", lambda *a, **kw: judged.append(1) or real_picks(*a, **kw))
    monkeypatch.setattr(mtp_mod.MTPDrafter, "_early_rows",
                        lambda self, jobs: (lambda h: early.append(h is not None) or h)(real_rows(self, jobs)))  # fmt: skip
    ecfg = EngineConfig(device="cuda", dtype="bf16", max_context=2048, prefill_chunk=128, max_concurrency=4,
                        spec="mtp", draft_tokens=3, spec_adaptive=False)  # fmt: skip
    core = make_core(cfg, model, tok, resolve_engine_config(cfg, ecfg), torch.device("cuda"))
    for i, p in enumerate(prompts):
        sp = SamplingParams(temperature=1.0, top_k=20, top_p=0.95, seed=i, max_tokens=40, ignore_eos=True)
        core.add(GenerationRequest(f"r{i}", p, sp))
    out = {f"r{i}": [] for i in range(len(prompts))}
    while core.has_work:
        for ev in core.step():
            out[ev.request_id] += ev.token_ids
    assert all(len(t) == 40 and all(0 <= x < cfg.vocab_size for x in t) for t in out.values()), out
    assert len(judged) > 5 and sum(early) > 5, (len(judged), sum(early))
    assert core.stats().extra["spec_drafted"] > 0
    st = core.stats()
    assert (st.pages_free, st.slots_free, st.lanes_busy) == (st.pages_total, st.slots_total, 0)


def _assert_greedy_up_to_rounding(model, prompts: list[list[int]], out: dict[str, list[int]], tag,
                                  tol: float = 0.1) -> None:  # fmt: skip
    """Every generated token's logit is within `tol` standard deviations of its row's maximum, in one prefill of
    prompt + output. Rounding flips near-ties (gaps ~1e-2 std); a logic error picks tokens far below the top
    (about one of 4096 random tokens lies within 0.1 std of it)."""
    from hinfer.model.prompt_logits import prompt_logits

    for i, p in enumerate(prompts):
        toks = out[f"r{i}"]
        z = prompt_logits(model, p + toks[:-1])[len(p) - 1 :].float()
        gap = z.max(dim=1).values - z.gather(1, torch.tensor(toks, device=z.device)[:, None])[:, 0]
        bad = (gap > tol * z.std(dim=1)).nonzero().flatten().tolist()
        assert not bad, (tag, f"r{i}", bad, gap[bad].tolist())


def _triton_vs_reference(cfg, model, n: int = 700, ps: int = 64) -> float:
    """Logits of an n-token prefill and 3 decode steps, Triton ops vs reference ops: relative L2 error."""
    ids = torch.randint(1, 200_000, (n + 3,)).tolist()
    logits = {}
    for mode in ("triton", "reference"):
        set_backend(mode)
        try:
            pages = -(-(n + 3) // ps)
            st = ModelState(cfg, StateShape(pages + 1, ps, 2, torch.bfloat16, torch.bfloat16), "cuda")
            chunks = [SeqChunk(ids[:n], 0, list(range(1, pages + 1)), 1, all_logits=True)]
            b = build_forward_batch(chunks, ps, "cuda")
            rows = [model.compute_logits(model(b, st)[b.logits_indices])]
            for j in range(3):  # then decode steps
                b = build_forward_batch([SeqChunk([ids[n + j]], n + j, list(range(1, pages + 1)), 1)], ps, "cuda")
                rows.append(model.compute_logits(model(b, st)[b.logits_indices]))
            logits[mode] = torch.cat(rows)
        finally:
            set_backend("auto")
    a, r = logits["triton"], logits["reference"]
    assert torch.isfinite(a).all()
    return ((a - r).norm() / r.norm()).item()


def test_long_prompts_prefill_on_cudnn_by_default(monkeypatch):
    """The default prefill path of a long prompt: its full 1,024-token chunks (shapes planned at startup) on cuDNN
    by parts, the shorter last chunk on the Triton kernel, then greedy decode whose every token is the top of a
    one-chunk prefill's logits up to rounding (_assert_greedy_up_to_rounding)."""
    import hinfer.ops.triton.attention as ta

    monkeypatch.delenv("HINFER_PREFILL_CUDNN", raising=False)
    calls = []
    real = ta.cudnn_prefill
    monkeypatch.setattr(ta, "cudnn_prefill", lambda q, *a, **k: (calls.append(q.shape[0]), real(q, *a, **k))[1])
    cfg = ModelConfig.from_dict(SMALL)
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda"), seed=5)
    tok = Tokenizer.from_dir(tokenizer_dir())
    g = torch.Generator().manual_seed(fixed_test_seed())
    prompts = [torch.randint(1, 4096, (3 * 1024 + 300,), generator=g).tolist()]
    ecfg = resolve_engine_config(cfg, EngineConfig(device="cuda", dtype="bf16", max_context=8192, max_concurrency=2,
                                                   prefill_chunk=1024))  # fmt: skip
    out = _run(make_core(cfg, model, tok, ecfg, torch.device("cuda")), prompts, 16)
    assert calls == [1024, 1024, 1024], calls  # one attention layer; the 300-token chunk stayed on Triton
    _assert_greedy_up_to_rounding(model, prompts, out, "cudnn prefill")


def test_triton_matches_reference_on_27b_layers():
    cfg = load_model_config(config_dir("qwen3.6-27b"))
    cfg = replace(cfg, num_hidden_layers=4, layer_types=cfg.layer_types[:4], mtp_num_hidden_layers=0)
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda", with_mtp=False), seed=1)
    rel = _triton_vs_reference(cfg, model)
    print(f"27B-shaped 4 layers: Triton vs reference logits rel-L2 {rel:.2e}")
    assert rel < 3e-2


def test_router_in_the_norm_launch_matches_reference(monkeypatch):
    """bf16 MoE layers with the router in the norm's launch at every row count (norm_linear), Triton vs reference,
    as test_triton_matches_reference_on_27b_layers."""
    monkeypatch.setenv("HINFER_FUSE_LAUNCHES", "slot_sum,tail,gate,norm_linear")
    cfg = load_model_config(config_dir("qwen3.6-35b-a3b"))
    cfg = replace(cfg, num_hidden_layers=4, layer_types=cfg.layer_types[:4], mtp_num_hidden_layers=0)
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda", with_mtp=False), seed=1)
    rel = _triton_vs_reference(cfg, model, n=300)
    print(f"35B-A3B 4 layers, router in the norm's launch: Triton vs reference logits rel-L2 {rel:.2e}")
    assert rel < 3e-2


@pytest.mark.parametrize("name,recipe", [("qwen3.6-27b", "int4"), ("qwen3.6-27b", "int4-rows"), ("qwen3.6-27b", "fp8"),
                                         ("qwen3.6-35b-a3b", "int4")])  # fmt: skip
def test_triton_matches_reference_on_quantized_layers(name, recipe):
    """Quantized models built layer by layer (as `hinfer bench --quant` does): int4 / fp8 projections and, on the
    35B-A3B, int4 routed experts through the grouped kernels; the reference dequantizes the same weights. int4:
    in fragment order as the engine places them (int4-rows: the row-packed kernels)."""
    from hinfer.model.random_init import random_quantized
    from hinfer.quant.int4_mma_weight import Int4MmaWeight, use_fragment_order

    cfg = load_model_config(config_dir(name))
    cfg = replace(cfg, num_hidden_layers=4, layer_types=cfg.layer_types[:4], mtp_num_hidden_layers=0)
    model = random_quantized(cfg, recipe.removesuffix("-rows"), "cuda", seed=2)
    if recipe == "int4":
        use_fragment_order(model)
        assert any(isinstance(m, Int4MmaWeight) for m in model.modules())
    rel = _triton_vs_reference(cfg, model, n=300)
    print(f"{name} 4 layers {recipe}: Triton vs reference logits rel-L2 {rel:.2e}")
    assert rel < 3e-2


def test_folded_moe_layers_match_reference():
    """The 35B-A3B's MoE layers as the engine places them (the shared expert folded into the int4 experts, fragment
    order, the experts' words stripe by stripe): a one-token decode routes in the gate_up launch and leaves its
    expert rows to the next add + norm (`norm_slots`), a 40-token prefill (360 pairs: the grouped kernels) leaves
    its rows too; Triton vs reference."""
    from hinfer.model.expert_stripes import stripe_int4_experts
    from hinfer.model.random_init import random_quantized
    from hinfer.model.shared_expert_fold import fold_shared_experts
    from hinfer.quant.int4_mma_weight import use_fragment_order

    cfg = load_model_config(config_dir("qwen3.6-35b-a3b"))
    cfg = replace(cfg, num_hidden_layers=4, layer_types=cfg.layer_types[:4], mtp_num_hidden_layers=0)
    model = random_quantized(cfg, "int4", "cuda", seed=2)
    assert fold_shared_experts(model) == 4
    use_fragment_order(model)
    assert stripe_int4_experts(model) == 8
    rel = _triton_vs_reference(cfg, model, n=40)
    print(f"35B-A3B 4 layers int4, shared expert folded: Triton vs reference logits rel-L2 {rel:.2e}")
    assert rel < 3e-2


def test_silu_mul_kernel_at_real_shapes():
    from hinfer.ops.activation import silu_mul_ref
    from hinfer.ops.triton.activation import silu_mul

    for t in (1, 8, 4096):
        x = torch.randn(t, 2 * 17408, device="cuda", dtype=torch.bfloat16) * 3
        got, want = silu_mul(x), silu_mul_ref(x)
        ulp = (got.float() - want.float()).abs() > 2.0**-7 * want.float().abs() + 1e-6
        assert ulp.double().mean().item() < 1e-3, "silu_mul differs from torch beyond one bf16 ulp"


def test_sigmoid_gate_kernel_at_real_shapes():
    from hinfer.ops.activation import sigmoid_gate_ref
    from hinfer.ops.triton.activation import sigmoid_gate

    for t in (1, 8, 4096):
        qg = torch.randn(t, 24, 512, device="cuda", dtype=torch.bfloat16) * 3
        _, g = qg.chunk(2, dim=-1)
        x = torch.randn(t, 24, 256, device="cuda", dtype=torch.bfloat16)
        got, want = sigmoid_gate(x, g), sigmoid_gate_ref(x, g)
        off = (got.float() - want.float()).abs() > 2.0**-7 * want.float().abs() + 1e-6
        assert off.double().mean().item() < 1e-3, "sigmoid_gate differs from torch beyond one bf16 ulp"
