"""Shared test fixtures. Keep each addition self-contained: several test modules rely on this file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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
