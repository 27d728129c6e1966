"""Sampling defaults from a generation config: the keys taken, greedy for do_sample false, bad values refused at
startup, where --generation-config looks, and what LLM.generate uses when given no SamplingParams."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hinfer.errors import ConfigError
from hinfer.sampling_defaults import NEUTRAL, SamplingDefaults, load_sampling_defaults

QWEN = {"bos_token_id": 248044, "do_sample": True, "eos_token_id": [248046, 248044], "temperature": 1.0,
        "top_k": 20, "top_p": 0.95}  # fmt: skip


def test_generation_config_keys_become_defaults_and_requests_win() -> None:
    d = SamplingDefaults.from_dict(QWEN | {"min_p": 0.05, "repetition_penalty": 1.05, "max_new_tokens": 9})
    assert (d.temperature, d.top_k, d.top_p, d.min_p, d.repetition_penalty) == (1.0, 20, 0.95, 0.05, 1.05)
    sp = d.params(max_tokens=7, top_p=0.5)
    assert (sp.temperature, sp.top_k, sp.top_p, sp.min_p, sp.repetition_penalty, sp.max_tokens) == (
        1.0, 20, 0.5, 0.05, 1.05, 7)  # fmt: skip
    assert NEUTRAL.params(max_tokens=3) == SamplingDefaults().params(max_tokens=3)
    assert d.describe() == "temperature 1, top_p 0.95, top_k 20, min_p 0.05, repetition_penalty 1.05"


def test_do_sample_false_is_greedy() -> None:
    d = SamplingDefaults.from_dict(QWEN | {"do_sample": False})
    assert d.params().greedy and d.top_k is None


@pytest.mark.parametrize("bad, needle", [({"top_k": "20"}, "top_k must be a number"),
                                         ({"temperature": True}, "temperature must be a number"),
                                         ({"top_p": 0}, "top_p"), ({"temperature": -1}, "temperature")])  # fmt: skip
def test_bad_values_are_a_startup_error(bad: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        SamplingDefaults.from_dict(QWEN | bad, "g.json")


def test_where_generation_config_looks(tmp_path: Path) -> None:
    assert load_sampling_defaults("auto", tmp_path) is NEUTRAL  # no file: hinfer's own
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN))
    assert load_sampling_defaults("auto", tmp_path).top_k == 20
    assert load_sampling_defaults("none", tmp_path) is NEUTRAL
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"temperature": 0.6}))
    assert load_sampling_defaults(str(other), tmp_path).temperature == 0.6
    assert load_sampling_defaults("auto", tmp_path / "m.hinfer", {"top_k": 5}).top_k == 5  # an artifact's copy
    with pytest.raises(ConfigError, match="no such file"):
        load_sampling_defaults(str(tmp_path / "missing.json"), tmp_path)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ConfigError, match="unreadable"):
        load_sampling_defaults(str(tmp_path / "broken.json"), tmp_path)


def test_llm_generate_without_params_takes_the_checkpoints_defaults(tmp_path: Path) -> None:
    from hinfer import LLM
    from hinfer.demo import demo_model_dir

    demo = demo_model_dir()
    for f in demo.iterdir():
        (tmp_path / f.name).symlink_to(f)
    (tmp_path / "generation_config.json").unlink()
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN | {"temperature": 0.7}))
    llm = LLM(str(tmp_path), device="cpu", max_context=256, max_concurrency=1)
    sp = llm.default_sampling(max_tokens=3)
    assert (sp.temperature, sp.top_k, sp.top_p, sp.max_tokens) == (0.7, 20, 0.95, 3)
    seen = []
    add = llm.core.add
    llm.core.add = lambda req: (seen.append(req.sampling), add(req))[1]
    llm.generate("Hi")
    assert (seen[0].temperature, seen[0].top_k, seen[0].top_p) == (0.7, 20, 0.95)
    neutral = LLM(str(tmp_path), device="cpu", max_context=256, max_concurrency=1, generation_config="none")
    assert neutral.default_sampling().top_k == 0


def test_serve_flag_reaches_the_engine_config() -> None:
    from hinfer.cli.engine_args import engine_config_from_args
    from hinfer.cli.main import build_parser

    parse = lambda *f: engine_config_from_args(build_parser().parse_args(["serve", *f]))  # noqa: E731
    assert parse().generation_config == "auto"
    assert parse("--generation-config", "none").generation_config == "none"
