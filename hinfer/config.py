"""ModelConfig: the text model's shape, read from a Hugging Face config.json (all four Qwen3.5 model types)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hinfer.errors import ConfigError
from hinfer.kv_format import CLI_KV_DTYPES, KV_FORMATS
from hinfer.vision_config import VisionConfig

SUPPORTED_MODEL_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
LAYER_TYPES = ("linear_attention", "full_attention")
# Qwen3.5 chat models end a turn with <|im_end|> (248046) and pad/eos with <|endoftext|> (248044).
DEFAULT_STOP_TOKEN_IDS = (248046, 248044)


@dataclass(frozen=True)
class RopeScaling:
    """YaRN context extension, as the Qwen3.5 model cards give it (`rope_type` yarn, `factor` 4,
    `original_max_position_embeddings` 262144). Fields and defaults are those transformers reads."""

    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float = 1.0  # scales cos and sin (so attention logits by its square)
    truncate: bool = True

    @property
    def context(self) -> int:
        """Positions the scaled model covers."""
        return int(self.factor * self.original_max_position_embeddings)


def yarn_attention_factor(
    factor: float, mscale: float | None = None, mscale_all_dim: float | None = None
) -> float:
    """The YaRN paper's cos/sin scale (transformers' default when `attention_factor` is not given)."""

    def get(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if mscale and mscale_all_dim:
        return get(factor, mscale) / get(factor, mscale_all_dim)
    return get(factor)


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    layer_types: tuple[str, ...]
    rms_norm_eps: float
    # gated full attention
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float
    partial_rotary_factor: float
    # Gated DeltaNet
    linear_num_key_heads: int
    linear_num_value_heads: int
    linear_key_head_dim: int
    linear_value_head_dim: int
    linear_conv_kernel_dim: int
    # dense MLP (0 for MoE models)
    intermediate_size: int = 0
    # MoE (num_experts == 0 for dense models)
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    mlp_only_layers: tuple[int, ...] = ()
    # MTP head
    mtp_num_hidden_layers: int = 0
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 262144
    attn_output_gate: bool = True
    mamba_ssm_dtype: str = "float32"
    torch_dtype: str = "bfloat16"
    eos_token_ids: tuple[int, ...] = DEFAULT_STOP_TOKEN_IDS
    rope_scaling: RopeScaling | None = None  # YaRN; max_position_embeddings is then the scaled context
    # multi-axis rotary positions (t, h, w) of image tokens: rotary frequencies interleaved t,h,w,t,h,w,...
    # with the h and w axes taking section[1] and section[2] of them (text tokens: all axes equal)
    mrope_section: tuple[int, int, int] = (11, 11, 10)
    vision: VisionConfig | None = None  # the vision tower, for multimodal checkpoints
    # ranks the shapes above are split over (hinfer/sharding.py rank_config): 1 is the whole model; N > 1 holds
    # one rank's heads and intermediate rows (vocab_size and hidden_size stay the model's)
    tensor_parallel: int = 1
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    # ---- derived shapes -------------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def attn_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "full_attention"]

    @property
    def gdn_layers(self) -> list[int]:
        return [i for i, t in enumerate(self.layer_types) if t == "linear_attention"]

    @property
    def gdn_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def gdn_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def gdn_conv_dim(self) -> int:
        return 2 * self.gdn_key_dim + self.gdn_value_dim

    def layer_is_moe(self, i: int) -> bool:
        # transformers' Qwen3.5-MoE makes every layer MoE (mlp_only_layers is read but unused): match it
        return self.is_moe

    # ---- construction --------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "config.json") -> ModelConfig:
        model_type = raw.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(
                f"{source}: unsupported model_type {model_type!r}; hinfer runs {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        text = raw.get("text_config", raw) if model_type in ("qwen3_5", "qwen3_5_moe") else raw
        if not isinstance(text, dict):
            raise ConfigError(f"{source}: text_config must be an object")
        is_moe = "moe" in model_type

        def need(key: str) -> Any:
            if key not in text:
                raise ConfigError(f"{source}: missing required field {key!r}")
            return text[key]

        n_layers = int(need("num_hidden_layers"))
        layer_types = text.get("layer_types")
        if layer_types is None:
            interval = int(text.get("full_attention_interval", 4))
            layer_types = [
                "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)
            ]
        layer_types = tuple(layer_types)
        if len(layer_types) != n_layers:
            raise ConfigError(f"{source}: layer_types has {len(layer_types)} entries, num_hidden_layers is {n_layers}")
        bad = [t for t in layer_types if t not in LAYER_TYPES]
        if bad:
            raise ConfigError(f"{source}: unsupported layer type {bad[0]!r} (expected one of {LAYER_TYPES})")

        rope = dict(text.get("rope_parameters") or {})
        rope |= {k: v for k, v in (text.get("rope_scaling") or {}).items() if k not in rope}  # older key
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", "mrope", "yarn"):
            raise ConfigError(f"{source}: unsupported rope_type {rope_type!r} (default, mrope or yarn)")
        max_pos = int(text.get("max_position_embeddings", 262144))
        scaling = _yarn(rope, max_pos, source) if rope_type == "yarn" else None
        rope_theta = float(rope.get("rope_theta", text.get("rope_theta", 10_000_000)))
        prf = float(rope.get("partial_rotary_factor", text.get("partial_rotary_factor", 0.25)))
        mrope_section = tuple(int(x) for x in rope.get("mrope_section", (11, 11, 10)))
        if len(mrope_section) != 3:
            raise ConfigError(f"{source}: mrope_section must have 3 entries (t, h, w)")

        hidden = int(need("hidden_size"))
        n_heads = int(need("num_attention_heads"))
        head_dim = int(text.get("head_dim") or hidden // n_heads)
        if int(head_dim * prf) % 2:
            raise ConfigError(f"{source}: rotary dim head_dim*partial_rotary_factor must be even")
        hk, hv = int(need("linear_num_key_heads")), int(need("linear_num_value_heads"))
        if hv % hk:
            raise ConfigError(f"{source}: linear_num_value_heads {hv} is not a multiple of linear_num_key_heads {hk}")
        n_kv = int(need("num_key_value_heads"))
        if n_heads % n_kv:
            raise ConfigError(f"{source}: num_attention_heads {n_heads} is not a multiple of num_key_value_heads {n_kv}")
        if text.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"{source}: unsupported hidden_act {text.get('hidden_act')!r} (only silu)")
        if text.get("attention_bias", False):
            raise ConfigError(f"{source}: attention_bias=true is not supported")
        if text.get("attn_output_gate", True) is not True:
            raise ConfigError(f"{source}: attn_output_gate=false is not supported")
        ssm_dtype = text.get("mamba_ssm_dtype", "float32")
        if ssm_dtype != "float32":
            raise ConfigError(f"{source}: mamba_ssm_dtype {ssm_dtype!r} is not supported (only float32)")
        vision = VisionConfig.from_dict(raw, source) if text is not raw else None
        eos = text.get("eos_token_id", raw.get("eos_token_id"))
        eos_ids = tuple(sorted(set(DEFAULT_STOP_TOKEN_IDS) | set(_as_list(eos))))
        tie = bool(raw.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
        if "tie_word_embeddings" in text:
            tie = bool(text["tie_word_embeddings"])

        return cls(
            model_type=model_type,
            vocab_size=int(need("vocab_size")),
            hidden_size=hidden,
            num_hidden_layers=n_layers,
            layer_types=layer_types,
            rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
            num_attention_heads=n_heads,
            num_key_value_heads=n_kv,
            head_dim=head_dim,
            rope_theta=rope_theta,
            partial_rotary_factor=prf,
            linear_num_key_heads=hk,
            linear_num_value_heads=hv,
            linear_key_head_dim=int(need("linear_key_head_dim")),
            linear_value_head_dim=int(need("linear_value_head_dim")),
            linear_conv_kernel_dim=int(text.get("linear_conv_kernel_dim", 4)),
            intermediate_size=int(text.get("intermediate_size", 0) or 0) if not is_moe else 0,
            num_experts=int(need("num_experts")) if is_moe else 0,
            num_experts_per_tok=int(need("num_experts_per_tok")) if is_moe else 0,
            moe_intermediate_size=int(need("moe_intermediate_size")) if is_moe else 0,
            shared_expert_intermediate_size=int(text.get("shared_expert_intermediate_size", 0)) if is_moe else 0,
            mlp_only_layers=tuple(text.get("mlp_only_layers") or ()) if is_moe else (),
            mtp_num_hidden_layers=int(text.get("mtp_num_hidden_layers", 0) or 0),
            tie_word_embeddings=tie,
            max_position_embeddings=max(max_pos, scaling.context) if scaling else max_pos,
            attn_output_gate=True,
            mamba_ssm_dtype=ssm_dtype,
            torch_dtype=str(text.get("dtype", text.get("torch_dtype", "bfloat16"))),
            eos_token_ids=eos_ids,
            rope_scaling=scaling,
            mrope_section=mrope_section,
            vision=vision,
            extra={"raw": raw},
        )


def _yarn(rope: dict[str, Any], max_pos: int, source: str) -> RopeScaling:
    """transformers' reading of a yarn `rope_parameters` dict (the original window defaults to
    max_position_embeddings, the attention factor to the YaRN formula)."""
    try:
        factor = float(rope["factor"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{source}: rope_type yarn needs a numeric 'factor'") from None
    if factor < 1:
        raise ConfigError(f"{source}: yarn factor {factor} must be >= 1")
    att = rope.get("attention_factor")
    if att is None:
        att = yarn_attention_factor(factor, rope.get("mscale"), rope.get("mscale_all_dim"))
    return RopeScaling(
        factor=factor,
        original_max_position_embeddings=int(rope.get("original_max_position_embeddings") or max_pos),
        beta_fast=float(rope.get("beta_fast") or 32.0),
        beta_slow=float(rope.get("beta_slow") or 1.0),
        attention_factor=float(att),
        truncate=bool(rope.get("truncate", True)),
    )


def parse_rope_scaling(text: str) -> tuple[str, float | None]:
    """`--rope-scaling` values: 'yarn:FACTOR' or 'none' -> ('yarn', factor) | ('none', None)."""
    kind, _, arg = text.strip().lower().partition(":")
    if kind == "none" and not arg:
        return "none", None
    if kind == "yarn":
        try:
            factor = float(arg)
        except ValueError:
            factor = 0.0
        if factor >= 1:
            return "yarn", factor
    raise ConfigError(f"--rope-scaling {text!r}: expected yarn:FACTOR (FACTOR >= 1, e.g. yarn:4) or none")


def apply_rope_scaling(cfg: ModelConfig, flag: str | None) -> ModelConfig:
    """The model config under `--rope-scaling` (None: as the checkpoint says). yarn:F scales the checkpoint's
    original window (its own yarn original, else its max_position_embeddings) by F; none drops a yarn
    block."""
    if flag is None:
        return cfg
    kind, factor = parse_rope_scaling(flag)
    old = cfg.rope_scaling
    original = old.original_max_position_embeddings if old else cfg.max_position_embeddings
    if kind == "none" or factor == 1:
        return _replace(cfg, rope_scaling=None, max_position_embeddings=original)
    assert factor is not None
    scaling = RopeScaling(factor=factor, original_max_position_embeddings=original,
                          attention_factor=yarn_attention_factor(factor))
    return _replace(cfg, rope_scaling=scaling, max_position_embeddings=max(original, scaling.context))


def _as_list(x: Any) -> list[int]:
    if x is None:
        return []
    return [int(v) for v in x] if isinstance(x, list | tuple) else [int(x)]


def find_config_file(path: str | Path) -> Path:
    """Accept a model directory, a fixture directory, or a config.json path."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"{p}: no config.json found")
    return p


def load_model_config(path: str | Path) -> ModelConfig:
    cfg_path = find_config_file(path)
    try:
        raw = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{cfg_path}: invalid JSON ({e})") from None
    cfg = ModelConfig.from_dict(raw, source=str(cfg_path))
    gen = cfg_path.parent / "generation_config.json"
    if gen.is_file():
        try:
            g = json.loads(gen.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"{gen}: invalid JSON ({e})") from None
        ids = tuple(sorted(set(cfg.eos_token_ids) | set(_as_list(g.get("eos_token_id")))))
        cfg = _replace(cfg, eos_token_ids=ids)
    return cfg


def _replace(cfg: ModelConfig, **kw: Any) -> ModelConfig:
    from dataclasses import replace

    return replace(cfg, **kw)


LM_HEAD_FORMATS = ("keep", "fp8", "int4")


@dataclass
class EngineConfig:
    """Serving settings, from `hinfer serve/generate/bench/plan` flags (names follow ninfer-serve's)."""

    max_context: int = 65536  # longest prompt + completion of one request, tokens
    max_concurrency: int = 8  # lanes decoding at once (1..64)
    kv_capacity: int | None = None  # KV tokens in the pool; None: max_concurrency * max_context; 0: auto (fill)
    max_pending_requests: int = 64  # bounded FIFO queue
    pending_timeout_ms: int = 60_000  # a queued request fails after this long without a lane
    prefill_chunk: int = 2048  # tokens of one prompt per step
    kv_dtype: str = "bf16"  # bf16 | fp8 | int8 | k8v4 | int4 (hinfer.kv_format)
    rope_scaling: str | None = None  # yarn:FACTOR | none; None: as the checkpoint's config says
    # sampling defaults for what a request leaves out: auto (the checkpoint's generation_config.json) | none | PATH
    generation_config: str = "auto"
    page_size: int = 64  # tokens per KV page
    dtype: str = "auto"  # activation / unquantized weight dtype: auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32
    weights: str = "auto"  # auto (as stored) | bf16 | fp8 | int4
    spec: str | None = None  # None | "mtp"
    draft_tokens: int = 3
    spec_adaptive: bool = True  # per-lane and per-step draft length from measured acceptance (0: plain steps)
    spec_draft_cost: float | None = None  # a round at K costs 1 + c*K plain steps; None: time steps on the host
    spec_draft_vocab: int | None = None  # the drafter's logits over the first N token ids only; None: all
    spec_draft: str = "argmax"  # how sampled lanes draft: argmax (of the head's logits) | sample (its processed distribution)
    lm_head: str = "keep"  # keep (the model dtype) | fp8 | int4: the logits projection's format (quant/apply.py)
    cuda_graphs: bool = True
    decode_ahead: bool = True  # queue each plain decode step before reading the previous one's tokens
    device: str = "auto"  # auto | cpu | cuda
    gpu_memory: int | None = None  # bytes the plan may use; None: what the device reports free
    seed: int = 0
    prefix_cache: bool = True  # reuse KV pages + GDN checkpoints of earlier requests (docs/prefix-cache.md)
    prefix_cache_slots: int | None = None  # GDN checkpoint slots; None: 2 per lane
    host_cache_bytes: int | None = None  # host RAM for spilled GDN checkpoints; None: 4 GiB on CUDA, 0 on CPU
    host_kv_bytes: int = 0  # host RAM for spilled KV pages (0: none)
    vision: bool = True  # load the vision tower when the checkpoint has one (--no-vision: text only)
    tensor_parallel: int = 1  # ranks (one process and device each) the model is split over (docs/tensor-parallel.md)

    def validate(self) -> None:
        if not 1 <= self.max_concurrency <= 64:
            raise ConfigError("--max-concurrency must be in 1..64")
        if self.max_context < 16:
            raise ConfigError("--max-context must be >= 16")
        if self.prefill_chunk < 16:
            raise ConfigError("--prefill-chunk must be >= 16")
        if self.kv_dtype not in KV_FORMATS:  # fp32: CPU reference runs
            raise ConfigError(f"--kv-dtype {self.kv_dtype!r}: expected one of {', '.join(CLI_KV_DTYPES)}")
        if self.rope_scaling is not None:
            parse_rope_scaling(self.rope_scaling)
        if self.dtype not in ("auto", "bf16", "fp32"):
            raise ConfigError(f"--dtype {self.dtype!r}: expected bf16 or fp32")
        if self.spec not in (None, "mtp", "ngram"):
            raise ConfigError(f"--spec {self.spec!r}: expected mtp or ngram")
        if not 1 <= self.draft_tokens <= 5:
            raise ConfigError("--draft-tokens must be in 1..5")
        if self.spec_draft_cost is not None and not self.spec_draft_cost >= 0:
            raise ConfigError("--spec-draft-cost must be >= 0")
        if self.spec_draft not in ("sample", "argmax"):
            raise ConfigError(f"--spec-draft {self.spec_draft!r}: expected sample or argmax")
        if self.spec_draft_vocab is not None and (self.spec_draft_vocab < 64 or self.spec_draft_vocab % 64):
            raise ConfigError("--spec-draft-vocab must be a multiple of 64 (and >= 64)")
        if self.lm_head not in LM_HEAD_FORMATS:
            raise ConfigError(f"--lm-head {self.lm_head!r}: expected one of {', '.join(LM_HEAD_FORMATS)}")
        if self.lm_head != "keep" and self.spec_draft_vocab is not None:
            raise ConfigError("--spec-draft-vocab with a quantized --lm-head: not supported (the drafter shares the "
                              "quantized head whole)")
        if self.max_pending_requests < 0:
            raise ConfigError("--max-pending-requests must be >= 0")
        if self.page_size not in (16, 32, 64, 128):
            raise ConfigError("--page-size must be 16, 32, 64 or 128")
        if self.prefix_cache_slots is not None and self.prefix_cache_slots < 0:
            raise ConfigError("--prefix-cache-slots must be >= 0")
        if self.host_cache_bytes is not None and self.host_cache_bytes < 0:
            raise ConfigError("--host-cache-gib must be >= 0")
        if self.host_kv_bytes < 0:
            raise ConfigError("--host-kv-gib must be >= 0")
        if not 1 <= self.tensor_parallel <= 64:
            raise ConfigError("--tensor-parallel must be in 1..64")
        if self.tensor_parallel > 1:
            unsupported = [flag for flag, on in (("--spec", self.spec is not None),
                                                 ("--lm-head", self.lm_head != "keep")) if on]  # fmt: skip
            if unsupported:
                raise ConfigError(f"--tensor-parallel {self.tensor_parallel}: {', '.join(unsupported)} not available "
                                  "with more than one rank yet (docs/tensor-parallel.md)")

    @property
    def draft_slots(self) -> int:
        """GDN state slots per lane beyond the current one (speculative rollback)."""
        return self.draft_tokens + 1 if self.spec else 0

    @property
    def checkpoint_slots(self) -> int:
        """GDN checkpoint slots the prefix cache asks for; 0 turns it off (as --no-prefix-cache and --spec do).
        The default, 2 per lane, is capped by the KV pool's size (memory_plan.checkpoint_slots)."""
        if not self.prefix_cache:
            return 0
        return 2 * self.max_concurrency if self.prefix_cache_slots is None else self.prefix_cache_slots
