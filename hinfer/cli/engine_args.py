"""Engine flags shared by serve, generate, bench and plan: one definition, one EngineConfig."""

from __future__ import annotations

import argparse
from pathlib import Path

from hinfer.config import LM_HEAD_FORMATS, EngineConfig, apply_rope_scaling, load_model_config
from hinfer.errors import ConfigError
from hinfer.kv_format import CLI_KV_DTYPES


def parse_bytes(text: str) -> int:
    """'141GB', '80GiB', '512MB', '1e9' -> bytes (GB = 1e9, GiB = 2**30)."""
    s = text.strip().upper().replace(" ", "")
    units = {"TIB": 2**40, "GIB": 2**30, "MIB": 2**20, "KIB": 2**10, "TB": 10**12, "GB": 10**9, "MB": 10**6,
             "KB": 10**3, "B": 1}
    for u, mult in units.items():
        if s.endswith(u):
            return int(float(s[: -len(u)]) * mult)
    return int(float(s))


def _kv_capacity(text: str) -> int | None:
    return 0 if text == "auto" else int(text)


def add_engine_args(p: argparse.ArgumentParser) -> None:
    d = EngineConfig()
    g = p.add_argument_group("engine")
    g.add_argument("--max-context", type=int, default=None,
                   help=f"longest prompt + completion of one request, in tokens (default {d.max_context}, or the "
                        "model's max_position_embeddings when that is smaller; asking for more than the model "
                        "allows is an error)")
    g.add_argument("--max-concurrency", type=int, default=d.max_concurrency,
                   help=f"sequences decoded at once, 1..64 (default {d.max_concurrency})")
    g.add_argument("--kv-capacity", type=_kv_capacity, default=None, metavar="N|auto",
                   help="KV-cache tokens in the pool. Default: max-concurrency x max-context, so every admitted "
                        "request is guaranteed its pages. 'auto' fills the memory left after weights; a smaller "
                        "N makes admission wait for free pages instead")
    g.add_argument("--max-pending-requests", type=int, default=d.max_pending_requests,
                   help=f"requests waiting for a lane before new ones get HTTP 429 (default {d.max_pending_requests})")
    g.add_argument("--pending-timeout-ms", type=int, default=d.pending_timeout_ms,
                   help=f"a queued request fails with 429 after waiting this long (default {d.pending_timeout_ms})")
    g.add_argument("--prefill-chunk", type=int, default=d.prefill_chunk,
                   help=f"prompt tokens per step; a long prompt delays other lanes by at most one chunk "
                        f"(default {d.prefill_chunk})")
    g.add_argument("--kv-dtype", choices=list(CLI_KV_DTYPES), default=d.kv_dtype,
                   help="attention KV-cache format (default bf16): fp8 (e4m3) and int8 (a scale per token "
                        "and head) halve its bytes, k8v4 (int8 keys, 4-bit values with a scale per 64) takes "
                        "0.39 of them, int4 (4-bit keys and values with a scale per 64, keys "
                        "Hadamard-rotated; llama.cpp's q4_0 cache types are the nearest) 0.28; "
                        "docs/quantization.md, KV cache")
    g.add_argument("--rope-scaling", default=None, metavar="yarn:FACTOR|none",
                   help="RoPE context extension: yarn:4 runs the model to 4x its original window (1,048,576 "
                        "positions on the 262,144-position Qwen3.5 models); none turns off a yarn block in "
                        "the checkpoint's config (default: as the config says). docs/usage.md, Long context")
    g.add_argument("--generation-config", default="auto", metavar="auto|none|PATH",
                   help="sampling defaults for the fields a request leaves out (temperature, top_p, top_k, min_p, "
                        "repetition_penalty): auto takes the checkpoint's generation_config.json (Qwen3.5: "
                        "temperature 1, top_k 20, top_p 0.95), none hinfer's neutral ones (temperature 1, no "
                        "filter), PATH another generation_config.json. A request's own values always win "
                        "(default auto; docs/api.md, Sampling defaults)")
    g.add_argument("--page-size", type=int, default=d.page_size, help="KV page size in tokens (default 64)")
    g.add_argument("--dtype", choices=["bf16", "fp32"], default=None,
                   help="activation dtype (default bf16 on GPU, fp32 on CPU)")
    g.add_argument("--weights", choices=["auto", "bf16", "fp8", "int4"], default="auto",
                   help="weight format to run; auto uses what the checkpoint stores")
    g.add_argument("--lm-head", choices=list(LM_HEAD_FORMATS), default=d.lm_head,
                   help="the logits projection's format: keep (default: the model dtype, as every other engine keeps "
                        "it) or fp8 / int4 (that format's default recipe, whatever --weights says): the largest "
                        "single weight a decode step reads, 1/2 or ~1/4 of its bf16 bytes; unlike --weights it "
                        "changes every token's logits directly (docs/quantization.md, The logits projection)")
    g.add_argument("--spec", choices=["mtp", "ngram"], default=None,
                   help="speculative decoding: mtp drafts with the checkpoint's multi-token-prediction head, ngram "
                        "looks drafts up in the request's own prompt and output (no model runs; it pays where text "
                        "repeats: edits, quotes, code) (docs/speculative.md)")
    g.add_argument("--draft-tokens", type=int, default=d.draft_tokens,
                   help=f"tokens drafted per round with --spec mtp, 1..5 (default {d.draft_tokens})")
    g.add_argument("--spec-adaptive", action=argparse.BooleanOptionalAction, default=d.spec_adaptive,
                   help="with --spec mtp, each lane drafts 0..K tokens as its recent acceptance pays for and a step "
                        "speculates only while that beats a plain decode step (default on; --no-spec-adaptive "
                        "always drafts K)")
    g.add_argument("--spec-draft-cost", type=float, default=None, metavar="C",
                   help="adaptive speculation's cost model: a round of K drafts costs 1 + C*K plain steps "
                        "(default: timed on the host, starting from C=0.3)")
    g.add_argument("--spec-draft-vocab", type=int, default=None, metavar="N",
                   help="with --spec mtp, draft only among the first N token ids (a multiple of 64): each draft step "
                        "reads N rows of the lm_head instead of all (the tokenizer orders ids roughly by frequency); "
                        "acceptance may drop, the output does not change (default: the whole vocabulary)")
    g.add_argument("--spec-draft", choices=["argmax", "sample"], default=d.spec_draft,
                   help="with --spec mtp, how sampled requests draft: the head's argmax (default, as vLLM drafts), "
                        "which runs the draft steps as greedy ones do (on the device, in their CUDA graphs), or a draw "
                        "from the head's distribution after the request's own sampler settings, which accepts more "
                        "where the distribution is flat but runs each draft step's sampling on the host side (a "
                        "sampled round at K=3 cost 1.45-2.5x a greedy one on an H200). The output distribution is the "
                        "same either way (rejection sampling with the argmax as a one-point draft distribution)")
    g.add_argument("--no-cuda-graphs", action="store_true", help="run decode eagerly (debugging)")
    g.add_argument("--decode-ahead", action=argparse.BooleanOptionalAction, default=d.decode_ahead,
                   help="while every lane only decodes, queue each step (its input tokens taken on the device) "
                        "before reading the previous step's tokens, so the GPU never waits for the host between "
                        "steps (default on; with --spec its plain steps, and each round is launched before the "
                        "last one's text and events where no lane can stop in it; needs CUDA graphs; "
                        "--no-decode-ahead reads and accounts for every step first)")
    g.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where to run (default: cuda if available)")
    g.add_argument("--gpu-memory", type=parse_bytes, default=None, metavar="BYTES",
                   help="memory the plan may use, e.g. 141GB or 80GiB (default: what the device reports free)")
    g.add_argument("--seed", type=int, default=0, help="seed for requests that give none")
    g.add_argument("--no-prefix-cache", action="store_true",
                   help="compute every prompt from its first token (default: reuse cached prefixes)")
    g.add_argument("--prefix-cache-slots", type=int, default=None, metavar="N",
                   help="GDN state checkpoints the prefix cache keeps on the device (default 2 per lane; "
                        "0 turns the cache off)")
    g.add_argument("--host-cache-gib", type=float, default=None, metavar="GIB",
                   help="host RAM for GDN checkpoints evicted from the device, restored on a hit (default 4 on "
                        "CUDA, pinned; 0 on the CPU; 0 turns the spill off; per rank with --tensor-parallel)")
    g.add_argument("--host-kv-gib", type=float, default=0, metavar="GIB",
                   help="host RAM for KV pages evicted from the device, restored on a hit (default 0: none; per "
                        "rank with --tensor-parallel)")
    g.add_argument("--tensor-parallel", type=int, default=d.tensor_parallel, metavar="N",
                   help="split the model over N ranks, one process and GPU each (default 1); the engine starts "
                        "the other processes itself, or runs under torchrun. Images are encoded on rank 0; no --spec; "
                        "docs/tensor-parallel.md")
    g.add_argument("--no-vision", action="store_true",
                   help="skip the checkpoint's vision tower: text only, its memory left free (default: load it)")


def engine_config_from_args(a: argparse.Namespace) -> EngineConfig:
    cfg = EngineConfig(
        max_context=a.max_context if a.max_context is not None else EngineConfig.max_context,
        max_concurrency=a.max_concurrency,
        kv_capacity=a.kv_capacity,
        max_pending_requests=a.max_pending_requests,
        pending_timeout_ms=a.pending_timeout_ms,
        prefill_chunk=a.prefill_chunk,
        kv_dtype=a.kv_dtype,
        rope_scaling=a.rope_scaling,
        generation_config=a.generation_config,
        page_size=a.page_size,
        dtype=a.dtype or "auto",
        weights=a.weights,
        spec=a.spec,
        draft_tokens=a.draft_tokens,
        spec_adaptive=a.spec_adaptive,
        spec_draft_cost=a.spec_draft_cost,
        spec_draft_vocab=a.spec_draft_vocab,
        spec_draft=a.spec_draft,
        lm_head=a.lm_head,
        cuda_graphs=not a.no_cuda_graphs,
        decode_ahead=a.decode_ahead,
        device=a.device,
        gpu_memory=a.gpu_memory,
        seed=a.seed,
        prefix_cache=not a.no_prefix_cache,
        prefix_cache_slots=a.prefix_cache_slots,
        host_cache_bytes=None if a.host_cache_gib is None else int(a.host_cache_gib * 2**30),
        host_kv_bytes=int(a.host_kv_gib * 2**30),
        vision=not a.no_vision,
        tensor_parallel=a.tensor_parallel,
    )
    return cfg


def model_context_limit(model: str | None, rope_scaling: str | None = None) -> int | None:
    """The model's max_position_embeddings (under --rope-scaling), from its config alone (no weights read);
    None when the config cannot be read here (loading the model then reports why, in its own words)."""
    from hinfer.demo import DEMO_OVERRIDES

    try:
        if model in (None, "", "demo"):
            limit = int(DEMO_OVERRIDES["max_position_embeddings"])
            return limit if rope_scaling is None else int(limit * (parse_rope_factor(rope_scaling) or 1))
        if model.endswith(".hinfer") and Path(model).is_file():
            from hinfer.weights.artifact import open_artifact

            cfg = open_artifact(model).load_config_and_tokenizer()[0]
        else:
            cfg = load_model_config(model)
        return apply_rope_scaling(cfg, rope_scaling).max_position_embeddings
    except Exception:  # missing or broken checkpoint: the load that follows gives the precise error
        return None


def parse_rope_factor(flag: str) -> float | None:
    from hinfer.config import parse_rope_scaling

    return parse_rope_scaling(flag)[1]


def check_max_context(a: argparse.Namespace, model: str | None, limit: int | None = None) -> None:
    """An explicit --max-context beyond what the model allows (`limit`, else read from its config) is an error,
    not a silent cap. The default is capped quietly: it is not the user's choice."""
    if a.max_context is None:
        return
    if limit is None:
        limit = model_context_limit(model, getattr(a, "rope_scaling", None))
    if limit is not None and a.max_context > limit:
        what = "the demo model" if model in (None, "", "demo") else model
        yarn = "" if getattr(a, "rope_scaling", None) else "; --rope-scaling yarn:4 extends it 4x"
        raise ConfigError(f"--max-context {a.max_context} is more than {what} allows: its max_position_embeddings "
                          f"is {limit} tokens (use --max-context {limit} or less, or leave it out{yarn})")
