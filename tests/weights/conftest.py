"""Fixtures for the checkpoint tests: fixture paths and tiny shape overrides (pytest fixtures only, so
no test imports this module by name)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

TINY = {
    "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16, "vocab_size": 512,
}


@dataclass(frozen=True)
class Fixtures:
    root: Path

    @property
    def dense(self) -> Path:  # Qwen3.6-27B: qwen3_5 wrapper, untied, MTP
        return self.root / "qwen3.6-27b"

    @property
    def moe(self) -> Path:  # Qwen3.6-35B-A3B: qwen3_5_moe wrapper, has generation_config.json
        return self.root / "qwen3.6-35b-a3b"

    @property
    def tied(self) -> Path:  # Qwen3.5-0.8B: tied embeddings
        return self.root / "qwen3.5-0.8b"

    @property
    def tokenizer(self) -> Path:
        return self.root / "qwen3.5-tokenizer"

    @property
    def reference_27b(self) -> Path:
        return self.root / "reference" / "qwen3.6-27b.tensors.json"


@pytest.fixture(scope="session")
def fx(fixtures_dir: Path) -> Fixtures:
    """The project's fixtures (tests/conftest.py: $HINFER_FIXTURES, else tests/fixtures)."""
    fx = Fixtures(fixtures_dir)
    if not (fx.dense / "config.json").is_file() or not fx.reference_27b.is_file():
        pytest.skip(f"model fixtures not found under {fixtures_dir} (set HINFER_FIXTURES)")
    return fx


@pytest.fixture
def tiny_dense() -> dict:
    return {**TINY, "intermediate_size": 128}


@pytest.fixture
def tiny_moe() -> dict:
    return {**TINY, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 48}


@pytest.fixture
def text_config_from(tmp_path: Path) -> Callable[[Path], Path]:
    """Make a `*_text` config folder (tensor prefix `model.`) from a wrapper fixture's text_config."""

    def make(src: Path) -> Path:
        raw = json.loads((src / "config.json").read_text())
        text = dict(raw["text_config"])
        text["tie_word_embeddings"] = raw.get("tie_word_embeddings", False)
        dst = tmp_path / f"{src.name}-text"
        dst.mkdir()
        (dst / "config.json").write_text(json.dumps(text, indent=2))
        return dst

    return make
