"""The memory plan: every byte the engine will hold on the device, from the config and flags alone.

Computed before any weight is read, so `hinfer serve` fails within seconds when it does not fit, and
`hinfer plan` answers for any memory size. Rows (formulas in docs/memory-plan.md):

- weights: per format/recipe (weight_bytes.py), the MTP head included while the model builds it (see below).
- kv cache: `StateShape.kv_bytes`: (attention layers + MTP layers with --spec) x pages x page bytes;
  pages = ceil(capacity / page_size) + 1 reserved, capacity = max_concurrency x max_context by default
  (each lane rounded up to whole pages, so every admitted request is guaranteed its pages), N tokens with
  --kv-capacity N, and everything left over with --kv-capacity auto.
- gdn state: `StateShape.gdn_bytes`: GDN layers x slots x (conv + fp32 ssm), slots = lanes x (1 + draft
  slots) + 1 reserved.
- prefix checkpoints: GDN layers x checkpoint slots x (conv + fp32 ssm): the prefix cache's saved GDN states
  (--prefix-cache-slots; default 2 per lane, at most a tenth of the KV bytes; 0 with --no-prefix-cache or
  --spec). Cached KV pages need no row: they live in the KV pool's free pages.
- host checkpoints (host RAM, outside the device total): rows for checkpoints spilled from the device slots
  (--host-cache-gib, per rank of a split model; default 4 GiB on CUDA, at most a quarter of MemAvailable over
  all ranks; 0 on the CPU).
- host kv pages (host RAM, outside the device total): rows for named KV pages spilled from the KV pool
  (--host-kv-gib; default 0).
- sampler state: per-lane [V] int32 token counts + [V] bool prompt mask (penalties).
- activations: one forward step at its largest (a prefill chunk plus every lane's decode tokens) through one
  layer, plus logits and sampler temporaries for the lanes (estimate).
- cuda graphs: the shared pool of the captured decode graphs (estimate: one decode step's activations plus a
  fixed amount per graph).
- cuda runtime: CUDA context, cuBLAS workspace, kernel images (fixed estimate, GPU only).
- headroom: allocator fragmentation and transient spikes (fixed fraction of the memory, with a floor).

With --tensor-parallel N every row is one rank's (one device each): the shapes of sharding.rank_config, the
vocabulary rows of the embedding and lm_head divided by N (docs/tensor-parallel.md).

No torch import here: `hinfer plan` must answer in well under a second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.vision_bytes import vision_activation_bytes, vision_weight_bytes
from hinfer.engine.weight_bytes import (
    DTYPE_BYTES,
    Recipe,
    draft_head_bytes,
    get_recipe,
    lm_head_delta,
    weight_bytes,
)
from hinfer.errors import PlanError
from hinfer.kv_format import KV_FORMATS
from hinfer.sharding import rank_config, rank_settings

GIB = 2**30
RESERVED_PAGES = 1  # same as model/state.py (page 0 is CUDA-graph scratch; this module stays torch-free)
CUDNN_BLOCK, CUDNN_MIN_Q, CUDNN_QUANTUM = 32768, 1024, 256  # ops/triton/attention_cudnn.py's BLOCK, MIN_Q, QUANTUM
RESERVED_SLOTS = 1
CUDA_RUNTIME_BYTES = 1 * GIB  # context + cuBLAS workspace + Triton/fla kernel images
HEADROOM_FRACTION = 0.02
HEADROOM_MIN = 512 * 2**20
HOST_CACHE_DEFAULT = 4 * GIB  # host RAM for spilled GDN checkpoints on CUDA (pinned)
GRAPH_FIXED_BYTES = 2 * 2**20  # per captured graph: its own small buffers
SAMPLER_TMP_BYTES_PER_LOGIT = 40  # processed fp32 logits + scores, int64 hash, fp64 noise, sort values+ids
GDN_CHUNK = 64  # chunk size of the chunked GDN prefill (fla)
# The model builds the MTP head whenever the checkpoint has one, --spec or not; when it stops doing that
# without --spec, set this False and the plan drops those weights (0.85 GB for 27B bf16, 5 GB for 122B).
MTP_LOADED_WITHOUT_SPEC = False


def resolve_device(ecfg: EngineConfig) -> str:
    """The device the plan is for. --device auto with --gpu-memory plans for a GPU without touching one."""
    if ecfg.device in ("cpu", "cuda"):
        return ecfg.device
    if ecfg.gpu_memory is not None:
        return "cuda"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def activation_dtype(ecfg: EngineConfig, device: str) -> str:
    if ecfg.dtype != "auto":
        return ecfg.dtype
    return "bf16" if device == "cuda" else "fp32"


def kv_dtype(ecfg: EngineConfig, device: str) -> str:
    """As the engine allocates it: --kv-dtype on the GPU, the activation dtype on the CPU reference path."""
    return ecfg.kv_dtype if device == "cuda" else activation_dtype(ecfg, device)


def captured_batch_sizes(lanes: int) -> list[int]:
    """Decode batch sizes with a CUDA graph, as engine/cuda_graphs.py BUCKETS (not imported: it imports torch)."""
    sizes = [s for s in (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64) if s < lanes]
    return [*sizes, lanes]


def cudnn_prefill_bytes(cfg: ModelConfig, tokens: int, act: int) -> int:
    """The cuDNN prefill attention's scratch for a chunk of `tokens` (0 below its MIN_Q): one block of keys and
    values read back in the model dtype; over the chunk's rows padded by up to two quanta, the fp32 merged
    output, a part's output and the two padded copies of the queries."""
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    if tokens < CUDNN_MIN_Q:
        return 0
    return CUDNN_BLOCK * kv * 2 * act + (tokens + 2 * CUDNN_QUANTUM) * q * (4 + 3 * act)


def step_workspace_bytes(cfg: ModelConfig, tokens: int, logit_rows: int, act: int, cudnn: bool = False) -> int:
    """Peak live activations of one forward step of `tokens` tokens (estimate; formula in docs/memory-plan.md).

    The residual stream and its normed copy live across the layer; the mixer's and the MLP's intermediates
    do not overlap, so the peak is base + the largest of the three; logits come after the last layer. `cudnn`:
    prefill attention on cuDNN (the GPU's), its scratch in the attention term."""
    t, h = tokens, cfg.hidden_size
    base = 3 * t * h * act
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    attn = t * (2 * q + 2 * kv + 3 * q) * act  # q+gate, k, v, roped q, attention out, gated out
    attn += cudnn_prefill_bytes(cfg, t, act) if cudnn else 0
    hv, kd, vd = cfg.linear_num_value_heads, cfg.linear_key_head_dim, cfg.linear_value_head_dim
    conv = cfg.gdn_conv_dim
    gdn = t * (2 * conv + 3 * cfg.gdn_value_dim + 2 * hv + 2 * cfg.gdn_key_dim) * act  # projections, conv, o
    gdn += math.ceil(t / GDN_CHUNK) * hv * kd * vd * 4  # fp32 state at each chunk boundary
    gdn += t * hv * (kd + vd + GDN_CHUNK + 1) * 4  # fp32 w, u, intra-chunk A, cumulative g
    if cfg.is_moe:
        k, e, i = cfg.num_experts_per_tok, cfg.num_experts, cfg.moe_intermediate_size
        mlp = t * e * 8 + t * k * 12  # router logits + probs fp32, top-k ids + weights
        mlp += t * k * (2 * h + 3 * i) * act  # dispatched rows, gate_up, act, expert out
        mlp += t * 3 * cfg.shared_expert_intermediate_size * act
    else:
        mlp = t * 3 * cfg.intermediate_size * act
    logits = logit_rows * cfg.vocab_size * (act + 4 + SAMPLER_TMP_BYTES_PER_LOGIT)
    return base + max(attn, gdn, mlp) + logits


@dataclass(frozen=True)
class PlanRow:
    name: str
    bytes: int
    note: str


@dataclass(frozen=True)
class FitLimits:
    """Largest settings that fit, each with the other setting as given; None when nothing fits."""

    max_context: int | None
    max_concurrency: int | None


@dataclass
class MemoryPlan:
    cfg: ModelConfig
    ecfg: EngineConfig
    weights: str  # recipe name
    device: str  # "cuda" | "cpu"
    device_name: str
    available: int  # bytes the plan may use
    rows: list[PlanRow]
    num_pages: int  # including the reserved page
    num_slots: int  # lane slots, including the reserved slot
    kv_dtype: str
    act_dtype: str
    min_kv_pages: int = 0  # --kv-capacity auto: pages one max-context request needs (else 0)
    notes: list[str] = field(default_factory=list)
    recipe: Recipe | None = None  # the weights' recipe (`weights` is its name)
    checkpoint_slots: int = 0  # prefix-cache GDN checkpoint slots, after the lane slots
    host_checkpoints: int = 0  # host-RAM rows for checkpoints spilled from the device slots
    host_rows: list[PlanRow] = field(default_factory=list)  # host memory: shown, not counted in `total`
    host_kv_pages: int = 0  # host-RAM rows for KV pages spilled from the KV pool
    rank_cfg: ModelConfig | None = None  # the shapes one tensor-parallel rank holds (None: cfg)

    @property
    def needed(self) -> int:
        """Bytes needed: every row; with --kv-capacity auto the KV row counts as one max-context request."""
        if self.min_kv_pages:
            return self._fixed + (self.min_kv_pages + RESERVED_PAGES) * self.page_bytes
        return sum(r.bytes for r in self.rows)

    @property
    def _fixed(self) -> int:
        return sum(r.bytes for r in self.rows if r.name != "kv cache")

    @property
    def total(self) -> int:
        return sum(r.bytes for r in self.rows)

    @property
    def page_bytes(self) -> int:
        return kv_page_bytes(self.rank_cfg or self.cfg, self.ecfg, self.kv_dtype)

    @property
    def kv_tokens(self) -> int:
        return (self.num_pages - RESERVED_PAGES) * self.ecfg.page_size

    @property
    def fits(self) -> bool:
        if self.min_kv_pages:
            return self.num_pages - RESERVED_PAGES >= self.min_kv_pages and self._fixed <= self.available
        return self.total <= self.available

    def largest_fit(self) -> FitLimits:
        """Largest --max-context at this concurrency and largest --max-concurrency at this context (binary
        search on the same formula)."""
        def ok_ctx(n: int) -> bool:
            return self._replan(max_context=n).fits

        def ok_conc(n: int) -> bool:
            return self._replan(max_concurrency=n).fits

        return FitLimits(_largest(ok_ctx, 16, self.cfg.max_position_embeddings),
                         _largest(ok_conc, 1, 64))

    def _replan(self, **kw: int) -> MemoryPlan:
        return plan_memory(self.cfg, replace(self.ecfg, **kw), weights=self.recipe,
                           device_bytes=self.available, device_name=self.device_name, device=self.device)

    def table(self) -> str:
        e = self.ecfg
        name_w = max(len(r.name) for r in self.rows)
        lines = [
            f"model: {_model_line(self.cfg)}",
            f"settings: weights {self.weights}, activations {self.act_dtype}, kv {self.kv_dtype}, "
            f"max-context {e.max_context}, max-concurrency {e.max_concurrency}, "
            f"kv-capacity {_kv_cap_text(e)}, prefill-chunk {e.prefill_chunk}, page-size {e.page_size}, "
            f"spec {f'{e.spec} x{e.draft_tokens}' if e.spec else 'off'}, "
            f"prefix-cache {f'{e.checkpoint_slots} slots' if e.checkpoint_slots else 'off'}"
            + (f", tensor-parallel {e.tensor_parallel} (per rank)" if e.tensor_parallel > 1 else ""),
            f"device: {self.device_name}",
            "",
            f"{'row':<{name_w}}  {'GiB':>8}  {'bytes':>17}  note",
        ]
        for r in self.rows:
            lines.append(f"{r.name:<{name_w}}  {_gib(r.bytes):>8}  {r.bytes:>17,}  {r.note}")
        rule = "-" * (name_w + 2 + 8 + 2 + 17)
        lines += [rule, f"{'total':<{name_w}}  {_gib(self.total):>8}  {self.total:>17,}"]
        if self.min_kv_pages:
            lines.append(f"{'needed':<{name_w}}  {_gib(self.needed):>8}  {self.needed:>17,}  "
                         f"with KV for one {e.max_context}-token request")
        lines.append(f"{'available':<{name_w}}  {_gib(self.available):>8}  {self.available:>17,}  "
                     f"{self.device_name}")
        lines += [f"{r.name:<{name_w}}  {_gib(r.bytes):>8}  {r.bytes:>17,}  {r.note}" for r in self.host_rows]
        lines += [f"note: {n}" for n in self.notes]
        if self.fits:
            spare = self.available - self.total
            lines.append(f"FITS ({_gib(spare).strip()} GiB spare, {self.kv_tokens:,} KV tokens)")
        else:
            lines.append(f"DOES NOT FIT (short by {self.needed - self.available:,} bytes, "
                         f"{_gib(self.needed - self.available).strip()} GiB)")
        return "\n".join(lines)

    def error_message(self) -> str:
        e = self.ecfg
        lim = self.largest_fit()
        weights = next(r.bytes for r in self.rows if r.name == "weights")
        msg = (f"the memory plan does not fit: it needs {self.needed:,} bytes ({_gib(self.needed).strip()} GiB) "
               f"but {self.available:,} bytes ({_gib(self.available).strip()} GiB) are available on "
               f"{self.device_name} (weights {self.weights}: {weights:,} bytes; KV {self.kv_dtype} for "
               f"{e.max_concurrency} x {e.max_context} tokens; run `hinfer plan` for the table).")
        if lim.max_context is None and lim.max_concurrency is None:
            smaller = {"bf16": "--weights fp8 or int4, ", "fp8": "--weights int4, "}.get(self.recipe.fmt, "")
            msg += (f" No --max-context or --max-concurrency fits with these weights; try {smaller}"
                    "a device with more memory.")
            return msg
        parts = []
        if lim.max_context is not None:
            parts.append(f"--max-context {lim.max_context} at --max-concurrency {e.max_concurrency}")
        if lim.max_concurrency is not None:
            parts.append(f"--max-concurrency {lim.max_concurrency} at --max-context {e.max_context}")
        msg += " Largest that fits: " + ", or ".join(parts) + "."
        if self.kv_dtype == "bf16" and self.device == "cuda":
            msg += " --kv-dtype fp8 or int8 halves the KV cache, k8v4 takes 0.39 of it, int4 0.28."
        return msg


def _largest(ok, lo: int, hi: int) -> int | None:
    """Largest n in [lo, hi] with ok(n), for ok monotone decreasing; None if not even ok(lo)."""
    if not ok(lo):
        return None
    if ok(hi):
        return hi
    while hi - lo > 1:  # invariant: ok(lo), not ok(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def kv_page_bytes(cfg: ModelConfig, ecfg: EngineConfig, dtype: str) -> int:
    """One page of K and V in every KV layer (attention layers + MTP layers with --spec mtp)."""
    layers = len(cfg.attn_layers) + (cfg.mtp_num_hidden_layers if ecfg.spec == "mtp" else 0)
    return layers * KV_FORMATS[dtype].page_bytes(ecfg.page_size, cfg.num_key_value_heads, cfg.head_dim)


def gdn_slot_bytes(cfg: ModelConfig, act: str) -> int:
    """One slot in every GDN layer: conv state (activation dtype) + fp32 recurrent state."""
    conv = cfg.gdn_conv_dim * (cfg.linear_conv_kernel_dim - 1) * DTYPE_BYTES[act]
    ssm = cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim * 4
    return len(cfg.gdn_layers) * (conv + ssm)


def checkpoint_slots(ecfg: EngineConfig, kv_bytes: int, slot_bytes: int) -> int:
    """Prefix-cache GDN checkpoint slots: --prefix-cache-slots, else 2 per lane (a finished turn leaves its
    prompt-end and answer-end states) but at most a tenth of the KV cache's bytes, and at least 1. A slot is
    costly on large models (147 MiB on the 27B, the KV of ~2,300 tokens), so a small KV pool gets fewer."""
    n = ecfg.checkpoint_slots
    if ecfg.prefix_cache_slots is not None or n == 0:
        return n
    return max(1, min(n, kv_bytes // (10 * slot_bytes)))


def host_checkpoint_rows(ecfg: EngineConfig, device_slots: int, slot_bytes: int, device: str) -> int:
    """Host-RAM rows for spilled GDN checkpoints: --host-cache-gib, else 4 GiB on CUDA (at most a quarter of
    MemAvailable: it is pinned; shared by the ranks of a split model, each of which holds rows of its shard) and
    none on the CPU, where the device slots are host memory already. None without device checkpoint slots (the
    prefix cache is off)."""
    if not device_slots or not slot_bytes:
        return 0
    n = ecfg.host_cache_bytes
    if n is None:
        n = min(HOST_CACHE_DEFAULT, _mem_available() // (4 * ecfg.tensor_parallel)) if device == "cuda" else 0
    return n // slot_bytes


def host_kv_rows(ecfg: EngineConfig, device_slots: int, page_bytes: int) -> int:
    """Host-RAM rows for spilled KV pages: --host-kv-gib (default 0); none without the prefix cache."""
    return ecfg.host_kv_bytes // page_bytes if device_slots and page_bytes else 0


def plan_memory(cfg: ModelConfig, ecfg: EngineConfig, *, weights: str | Recipe, device_bytes: int,
                device_name: str, device: str | None = None) -> MemoryPlan:
    """The plan for `cfg` under flags `ecfg`, weight format, recipe name or Recipe `weights` (not 'auto'), against
    `device_bytes`. `device` ("cuda" | "cpu") defaults to resolve_device(ecfg)."""
    device = device or resolve_device(ecfg)
    whole, ecfg = cfg, rank_settings(ecfg)
    cfg = rank_config(whole, ecfg.tensor_parallel)  # the shapes one rank holds (the whole model at 1)
    recipe = get_recipe(weights)
    act = activation_dtype(ecfg, device)
    kvd = kv_dtype(ecfg, device)
    if ecfg.max_context > cfg.max_position_embeddings:  # the engine clamps it so
        ecfg = replace(ecfg, max_context=cfg.max_position_embeddings)
    ab = DTYPE_BYTES[act]
    lanes, ps = ecfg.max_concurrency, ecfg.page_size
    q_per_lane = 1 + ecfg.draft_tokens if ecfg.spec else 1
    rows: list[PlanRow] = []
    notes: list[str] = []

    with_mtp = bool(cfg.mtp_num_hidden_layers) and (ecfg.spec == "mtp" or MTP_LOADED_WITHOUT_SPEC)
    wb = weight_bytes(cfg, recipe, ab, with_mtp)
    kept = "" if recipe.fmt == "bf16" else f"; {wb.kept_params:,} params kept {act}"
    if recipe.fmt != "bf16" and cfg.is_moe and not recipe.experts:
        kept += " (routed experts included)"
    what = {"bf16": f"{wb.params:,} params x {ab} B ({act})",
            "fp8": f"fp8 e4m3 + fp32 {'128x128 block' if recipe.fp8_scales == 'block' else 'per-row'} scales",
            "int4": f"int4 g{recipe.int4_group} + {act} scales"
                    + (" + uint8 zeros" if recipe.int4_zero_point else " (symmetric)")}[recipe.fmt]
    mtp = "" if not cfg.mtp_num_hidden_layers else (", MTP head included" if with_mtp else ", MTP head not loaded")
    head = "" if ecfg.lm_head == "keep" else f"; lm_head {ecfg.lm_head}"
    rows.append(PlanRow("weights", wb.total + lm_head_delta(cfg, ecfg.lm_head, ab), f"{recipe.name}: {what}{kept}{mtp}"
                        f"{head}"))  # fmt: skip
    shared = ecfg.lm_head != "keep"  # the drafter shares a quantized head
    mtp_drafts = ecfg.spec == "mtp" and not shared
    draft_head = draft_head_bytes(cfg, recipe, ab, ecfg.spec_draft_vocab) if mtp_drafts else 0
    if draft_head:
        rows.append(PlanRow("draft lm_head", draft_head, f"--spec mtp: the drafter's lm_head copy in {recipe.fmt} "
                                                    f"({min(ecfg.spec_draft_vocab or cfg.vocab_size, cfg.vocab_size):,}"
                                                    f" x {cfg.hidden_size:,})"))

    vision = vision_weight_bytes(cfg, ecfg, ab) + vision_activation_bytes(cfg, ecfg, ab)
    if vision:
        rows.append(PlanRow("vision tower", vision, f"weights {act} + encoding one largest image (--no-vision: 0)"))

    n_slots = lanes * (1 + ecfg.draft_slots) + RESERVED_SLOTS
    gdn = n_slots * gdn_slot_bytes(cfg, act)
    sampler = lanes * cfg.vocab_size * 5
    t_step = ecfg.prefill_chunk + lanes * q_per_lane
    work = step_workspace_bytes(cfg, t_step, lanes * q_per_lane, ab, cudnn=device == "cuda")
    graphs = 0
    if device == "cuda" and ecfg.cuda_graphs:
        sizes = captured_batch_sizes(lanes)
        graphs = step_workspace_bytes(cfg, lanes * q_per_lane, lanes * q_per_lane, ab)
        # + verify, and with MTP drafts its 1-row and K+1-row graphs
        graphs += len(sizes) * GRAPH_FIXED_BYTES * {"mtp": 4, "ngram": 2}.get(ecfg.spec or "", 1)
    runtime = CUDA_RUNTIME_BYTES if device == "cuda" else 0
    headroom = max(HEADROOM_MIN, int(device_bytes * HEADROOM_FRACTION))

    page = kv_page_bytes(cfg, ecfg, kvd)
    fixed = wb.total + draft_head + vision + gdn + sampler + work + graphs + runtime + headroom
    slot = gdn_slot_bytes(cfg, act)
    min_pages = 0
    if ecfg.kv_capacity == 0:  # auto: the checkpoints take their share of what is left, the KV the rest
        n_ckpt = checkpoint_slots(ecfg, max(0, device_bytes - fixed), slot)
        fixed += n_ckpt * slot
    if ecfg.kv_capacity is None:
        pages = lanes * math.ceil(ecfg.max_context / ps)
        kv_note = f"{lanes} lanes x {ecfg.max_context} tokens"
    elif ecfg.kv_capacity == 0:
        min_pages = math.ceil(ecfg.max_context / ps)
        pages = max(0, (device_bytes - fixed) // page - RESERVED_PAGES)
        kv_note = "auto: all memory left"
    else:
        pages = math.ceil(ecfg.kv_capacity / ps)
        kv_note = f"--kv-capacity {ecfg.kv_capacity}"
    num_pages = pages + RESERVED_PAGES
    if ecfg.kv_capacity != 0:
        n_ckpt = checkpoint_slots(ecfg, num_pages * page, slot)
    ckpt = n_ckpt * slot
    kv_layers = len(cfg.attn_layers) + (cfg.mtp_num_hidden_layers if ecfg.spec == "mtp" else 0)
    rows.append(PlanRow("kv cache", num_pages * page,
                        f"{kv_note}: {pages:,} pages of {ps} + 1 reserved, {kv_layers} layers, "
                        f"{page // ps:,} B/token ({KV_FORMATS[kvd].describe()})"))
    draft = f" x (1 + {ecfg.draft_slots} draft)" if ecfg.draft_slots else ""
    rows.append(PlanRow("gdn state", gdn, f"{lanes} lanes{draft} + 1 reserved = {n_slots} slots x "
                                          f"{len(cfg.gdn_layers)} layers (conv {act} + ssm fp32)"))
    why_off = "--no-prefix-cache" if not ecfg.prefix_cache else "--prefix-cache-slots 0"
    rows.append(PlanRow("prefix checkpoints", ckpt,
                        f"prefix cache: {n_ckpt} GDN checkpoint slots x {len(cfg.gdn_layers)} layers, "
                        f"{gdn_slot_bytes(cfg, act):,} B each" if n_ckpt else f"prefix cache off ({why_off})"))
    rows.append(PlanRow("sampler state", sampler, f"{lanes} lanes x V={cfg.vocab_size} (int32 counts + bool mask)"))
    rows.append(PlanRow("activations", work, f"estimate: one step of {t_step} tokens through the widest layer "
                                             f"+ logits/sampler for {lanes * q_per_lane} rows"))
    if device == "cuda":
        n_graphs = len(captured_batch_sizes(lanes))
        graph_note = f"estimate: decode pool, {n_graphs} graphs up to {lanes} lanes" if graphs else "off"
        rows.append(PlanRow("cuda graphs", graphs, graph_note))
        rows.append(PlanRow("cuda runtime", runtime, "estimate: context, cuBLAS workspace, kernels"))
    rows.append(PlanRow("headroom", headroom, f"{HEADROOM_FRACTION:.0%} of available, at least "
                                              f"{HEADROOM_MIN // 2**20} MiB (fragmentation, spikes)"))
    n_host = host_checkpoint_rows(ecfg, n_ckpt, slot, device)
    host_rows = [PlanRow("host checkpoints", n_host * slot,
                         f"host RAM, not in the total: {n_host} spilled GDN checkpoints"
                         + (" (pinned)" if device == "cuda" else "") + " (--host-cache-gib)" if n_host
                         else "host RAM: no spill tier (--host-cache-gib 0, or the prefix cache is off)")]
    n_host_kv = host_kv_rows(ecfg, n_ckpt, page)
    if n_host_kv:
        host_rows.append(PlanRow("host kv pages", n_host_kv * page,
                                 f"host RAM, not in the total: {n_host_kv} spilled KV pages of {ps} tokens "
                                 f"({n_host_kv * ps:,} tokens) (--host-kv-gib)"))
    if ecfg.tensor_parallel > 1:
        notes.append(f"--tensor-parallel {ecfg.tensor_parallel}: bytes of one rank's device (rank 0's: it alone holds "
                     "the sampler state and the vision tower); weights, KV heads and GDN state split as "
                     "docs/tensor-parallel.md says")
    if ecfg.kv_capacity and ecfg.kv_capacity < ecfg.max_context:
        notes.append(f"--kv-capacity {ecfg.kv_capacity} is below --max-context {ecfg.max_context}: "
                     "longer requests are refused")
    return MemoryPlan(whole, ecfg, recipe.name, device, device_name, device_bytes, rows, num_pages, n_slots,
                      kvd, act, min_pages, notes, recipe, n_ckpt, n_host, host_rows, n_host_kv, cfg)


def check_plan(plan: MemoryPlan) -> MemoryPlan:
    """Raise PlanError (one paragraph with the exact figures) unless the plan fits."""
    if not plan.fits:
        raise PlanError(plan.error_message())
    return plan


def device_memory(ecfg: EngineConfig) -> tuple[int, str]:
    """(bytes the plan may use, description): --gpu-memory if given, else the CUDA device's free memory, or
    on the CPU the machine's MemAvailable."""
    device = resolve_device(ecfg)
    if ecfg.gpu_memory is not None:
        return ecfg.gpu_memory, f"{'GPU' if device == 'cuda' else 'CPU'} (--gpu-memory {ecfg.gpu_memory:,} B)"
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        return free, f"{torch.cuda.get_device_name()} (free memory)"
    return _mem_available(), "CPU RAM (MemAvailable)"


def _mem_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _gib(n: int) -> str:
    return f"{n / GIB:8.2f}"


def _kv_cap_text(e: EngineConfig) -> str:
    return "default" if e.kv_capacity is None else ("auto" if e.kv_capacity == 0 else str(e.kv_capacity))


def _model_line(cfg: ModelConfig) -> str:
    kind = (f"MoE {cfg.num_experts} experts top-{cfg.num_experts_per_tok}" if cfg.is_moe
            else f"dense, intermediate {cfg.intermediate_size}")
    return (f"{cfg.model_type}, hidden {cfg.hidden_size}, {cfg.num_hidden_layers} layers "
            f"({len(cfg.attn_layers)} attention + {len(cfg.gdn_layers)} GDN), {kind}, {_positions(cfg)}")


def _positions(cfg: ModelConfig) -> str:
    s = cfg.rope_scaling
    if s is None:
        return f"{cfg.max_position_embeddings:,} positions"
    return (f"{cfg.max_position_embeddings:,} positions (yarn x{s.factor:g} of "
            f"{s.original_max_position_embeddings:,})")
