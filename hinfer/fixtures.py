"""Where the packaged tokenizer and model configs live (the shared fixtures, copied into the package).

`HINFER_FIXTURES` points at a fixtures folder laid out like ../shared/fixtures and takes precedence.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


def tokenizer_dir() -> Path:
    env = os.environ.get("HINFER_FIXTURES")
    if env and (Path(env) / "qwen3.5-tokenizer").is_dir():
        return Path(env) / "qwen3.5-tokenizer"
    return PACKAGE_DIR / "assets" / "tokenizer"


def config_dir(name: str) -> Path | None:
    """A packaged model config by short name (qwen3.6-27b, qwen3.6-35b-a3b, qwen3.5-0.8b, qwen3.5-122b-a10b,
    qwen3.5-397b-a17b)."""
    env = os.environ.get("HINFER_FIXTURES")
    if env and (Path(env) / name / "config.json").is_file():
        return Path(env) / name
    p = PACKAGE_DIR / "configs" / name
    return p if (p / "config.json").is_file() else None


def fixed_test_seed() -> int:
    """The seed of a randomized test: HINFER_TEST_SEED (an integer, or `random` for a fresh draw), default 0, so
    a CI run is reproducible and a failure names its seed (printed: pytest shows it with the failure)."""
    import random

    env = os.environ.get("HINFER_TEST_SEED", "0")
    s = random.SystemRandom().randrange(2**31) if env == "random" else int(env)
    print(f"test seed {s} (HINFER_TEST_SEED={s} reproduces it)")
    return s
