"""Where adaptive speculation's greedy tokens leave plain decoding's, and whether plain decoding at one lane (1-row
GEMMs) already leaves the 4-lane baseline there: a logic error or bf16 rounding of near-ties.

    python scripts/spec_adaptive_diag.py      (CUDA)
"""

from __future__ import annotations

import torch

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import fixed_test_seed, tokenizer_dir
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.tokenizer import Tokenizer
from tests.gpu.test_engine_gpu import SMALL, _run


def main() -> None:
    cfg = ModelConfig.from_dict(SMALL | {"mtp_num_hidden_layers": 1})
    model = random_init(Qwen35ForCausalLM(cfg, torch.bfloat16, "cuda"), seed=5)
    with torch.no_grad():
        model.lm_head.mul_(8.0)
    tok = Tokenizer.from_dir(tokenizer_dir())
    g = torch.Generator().manual_seed(fixed_test_seed())
    prompts = [torch.randint(1, 4096, (n,), generator=g).tolist() for n in (1, 17, 200, 333, 64, 5)]

    def core(**kw):
        ecfg = EngineConfig(device="cuda", dtype="bf16", max_context=2048, prefill_chunk=128, **kw)
        return make_core(cfg, model, tok, resolve_engine_config(cfg, ecfg), torch.device("cuda"))

    base = _run(core(max_concurrency=4, cuda_graphs=False), prompts, 48)
    runs = {
        "plain lanes=1 graphs": core(max_concurrency=1),
        "plain lanes=1 eager": core(max_concurrency=1, cuda_graphs=False),
        "spec lanes=1 k=3": core(max_concurrency=1, spec="mtp", draft_tokens=3, spec_adaptive=False),
        "adaptive lanes=1 k=3": core(max_concurrency=1, spec="mtp", draft_tokens=3, spec_draft_cost=0.3),
        "adaptive lanes=1 k=3 eager": core(max_concurrency=1, spec="mtp", draft_tokens=3, spec_draft_cost=0.3,
                                           cuda_graphs=False),
        "adaptive lanes=4 k=3": core(max_concurrency=4, spec="mtp", draft_tokens=3, spec_draft_cost=0.3),
    }
    for name, c in runs.items():
        out = _run(c, prompts, 48)
        div = {r: next((i for i, (a, b) in enumerate(zip(out[r], base[r])) if a != b), None) for r in base}
        print(f"{name:28s} first divergence per request: {div}", flush=True)


if __name__ == "__main__":
    main()
