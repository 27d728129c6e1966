"""The ops backend is chosen once, when the model is built, and a kernel that falls back says so once."""

from __future__ import annotations

import logging

import pytest
import torch

from hinfer.model.qwen3_5 import Qwen35ForCausalLM
from hinfer.ops import dispatch


@pytest.fixture(autouse=True)
def _restore(monkeypatch):
    monkeypatch.setattr(dispatch, "_backend", dispatch._backend)


def test_the_environment_is_read_when_the_backend_is_chosen_not_per_call(monkeypatch):
    x = torch.zeros(2)
    monkeypatch.setenv("HINFER_TRITON", "0")
    assert dispatch.set_backend() == "reference"
    monkeypatch.setenv("HINFER_TRITON", "1")
    assert not dispatch.use_triton(x)  # still the choice made above
    monkeypatch.delenv("HINFER_TRITON")
    assert dispatch.set_backend() == "auto" and not dispatch.use_triton(x)  # auto: CUDA tensors only


def test_building_the_model_chooses(monkeypatch, tiny_model):
    cfg, _ = tiny_model
    monkeypatch.setenv("HINFER_TRITON", "0")
    net = Qwen35ForCausalLM(cfg, torch.float32, "meta", with_mtp=False)
    assert net.backend == "reference" and dispatch._backend == "reference"


def test_unknown_backend_is_an_error():
    with pytest.raises(ValueError, match="expected one of"):
        dispatch.set_backend("cuda")


def test_a_fallback_is_logged_once(caplog):
    dispatch.warn_fallback.cache_clear()
    with caplog.at_level(logging.WARNING, logger="hinfer"):
        for _ in range(3):
            dispatch.warn_fallback("moe_experts", "no kernel for this format")
    assert [r.getMessage() for r in caplog.records] == [
        "moe_experts runs its slow reference body on the GPU: no kernel for this format"
    ]
