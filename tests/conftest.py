"""Shared test fixtures. Keep each addition self-contained: several test modules rely on this file."""

# ruff: noqa: E402  (Triton is set up before anything can import it)
from __future__ import annotations

import triton_interpreter

# Kernels run compiled on a GPU and in Triton's CPU interpreter otherwise, one way for the whole process:
# tests/triton_interpreter.py says why this comes first.
INTERPRETED = triton_interpreter.configure()

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hinfer.config import EngineConfig, ModelConfig
from hinfer.engine.factory import make_core, resolve_engine_config
from hinfer.fixtures import fixed_test_seed, tokenizer_dir
from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.model.random_init import random_init
from hinfer.ops import dispatch
from hinfer.tokenizer import Tokenizer


def fixtures_root() -> Path:
    """Checkpoint-metadata fixtures: $HINFER_FIXTURES, else tests/fixtures (the shared fixtures, copied into the
    repo so a clean clone tests the same: tokenizer and configs link to the packaged copies in hinfer/)."""
    env = os.environ.get("HINFER_FIXTURES")
    return Path(env) if env else Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    root = fixtures_root()
    if not root.is_dir():
        pytest.skip(f"fixtures not found at {root} (set HINFER_FIXTURES)")
    return root


@pytest.fixture(scope="session")
def interpreter() -> None:
    """For tests that run Triton kernels on CPU tensors: skipped where the kernels are compiled for a GPU
    (tests/gpu runs them there, at the real shapes)."""
    if not INTERPRETED:
        pytest.skip("kernels are compiled for the GPU here: tests/gpu covers them")


class CompiledChild:
    """A fresh Python process without TRITON_INTERPRET, in the repository root: where the sm_90 ahead-of-time
    checks compile kernels (this process cannot when it interprets them: triton's own helpers are interpreted
    functions here)."""

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        root = Path(__file__).resolve().parents[1]
        return subprocess.run([sys.executable, *args], env=env, cwd=root, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip

    def call(self, path: str, function: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """Run `function()` of the Python file at `path` (a test module's compile helper), its folder on the path
        as pytest puts it (for the helper modules beside it)."""
        folder = str(Path(path).resolve().parent)
        code = f"import runpy, sys; sys.path.insert(0, {folder!r}); runpy.run_path({path!r})[{function!r}]()"
        return self.run("-c", code, timeout=timeout)


@pytest.fixture(scope="session")
def compiled_child() -> CompiledChild:
    return CompiledChild()


@pytest.fixture
def seed() -> int:
    """A randomized test's seed (fixed_test_seed: 0 unless HINFER_TEST_SEED says otherwise, printed), with torch's
    and Python's global generators seeded by it."""
    s = fixed_test_seed()
    torch.manual_seed(s)
    random.seed(s)
    return s


@pytest.fixture
def ops_backend(monkeypatch):
    """Pin the ops backend ("triton", "reference", "auto") for one test: the live choice, and HINFER_TRITON for
    the models the test builds (a model chooses the backend when it is built)."""

    def pin(name: str) -> None:
        monkeypatch.setenv("HINFER_TRITON", {"triton": "1", "reference": "0", "auto": ""}[name])
        monkeypatch.setattr(dispatch, "_backend", name)

    return pin


# ---- a tiny random model behind a real EngineCore (tests/engine, tests/bench) ------------------------------
TINY = {
    "model_type": "qwen3_5_text", "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "linear_num_key_heads": 2,
    "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "mtp_num_hidden_layers": 1,
}  # fmt: skip


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(tokenizer_dir())


@pytest.fixture(scope="session")
def tiny_model() -> tuple[ModelConfig, Qwen35ForCausalLM]:
    cfg = ModelConfig.from_dict(TINY)
    model = random_init(Qwen35ForCausalLM(cfg, torch.float32), seed=7)
    with torch.no_grad():  # flatter logits so sampled tokens vary
        model.lm_head.mul_(0.3)
    return cfg, model


@pytest.fixture
def make_engine_core(tiny_model, tokenizer):
    def make(**kw):
        cfg, model = tiny_model
        ecfg = resolve_engine_config(cfg, EngineConfig(device="cpu", **{"max_context": 512, "page_size": 16} | kw))
        return make_core(cfg, model, tokenizer, ecfg, torch.device("cpu"))

    return make
