"""`hinfer plan`: the memory plan for a model and serve flags, without reading any weight."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from hinfer.cli.engine_args import add_engine_args, check_max_context, engine_config_from_args
from hinfer.config import ModelConfig, apply_rope_scaling, load_model_config
from hinfer.engine.memory_plan import check_plan, device_memory, plan_memory
from hinfer.engine.weight_bytes import resolve_weights
from hinfer.errors import ConfigError, PlanError

CONFIGS_DIR = Path(__file__).resolve().parents[2] / "configs"  # hinfer/configs (package data)


def packaged_configs() -> list[str]:
    return sorted(p.parent.name for p in CONFIGS_DIR.glob("*/config.json"))


def load_config_arg(arg: str) -> ModelConfig:
    """A checkpoint or config directory, a config.json, or the short name of a packaged config."""
    if Path(arg).exists():
        return load_model_config(arg)
    if (CONFIGS_DIR / arg / "config.json").is_file():
        return load_model_config(CONFIGS_DIR / arg)
    raise ConfigError(f"{arg}: not a directory or config.json, nor a packaged config "
                      f"({', '.join(packaged_configs()) or 'none'})")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="print the memory plan (weights, KV, GDN state, workspaces) and whether it fits",
        description="Compute the memory plan serve would use, from the model's config.json and the engine "
        "flags alone (no weights are read), print it as a table, and say whether it fits. Exit status 0 if "
        "it fits, 1 if not. With --gpu-memory the plan is for a GPU of that size, on any machine.",
    )
    p.add_argument("model", metavar="MODEL_OR_CONFIG",
                   help="checkpoint directory, .hinfer artifact, config directory, config.json, or a packaged config name "
                   f"({', '.join(packaged_configs())})")
    add_engine_args(p)
    p.set_defaults(func=run)


def config_and_weights(model: str, weights: str):
    """(ModelConfig, recipe the plan counts) for a folder, config or packaged name, or a .hinfer artifact (its
    stored recipe, read from the header alone)."""
    if model.endswith(".hinfer") and Path(model).is_file():
        from hinfer.weights.artifact import engine_weights, open_artifact  # torch: only for an artifact

        art = open_artifact(model)
        cfg = art.load_config_and_tokenizer()[0]
        if not art.has_visual:  # converted text only: no tower to count
            cfg = replace(cfg, vision=None)
        return cfg, engine_weights(art, weights)[0]
    cfg = load_config_arg(model)
    return cfg, resolve_weights(cfg, weights)


def run(args: argparse.Namespace) -> int:
    ecfg = engine_config_from_args(args)
    ecfg.validate()
    cfg, weights = config_and_weights(args.model, ecfg.weights)
    cfg = apply_rope_scaling(cfg, ecfg.rope_scaling)
    check_max_context(args, args.model, cfg.max_position_embeddings)
    available, name = device_memory(ecfg)
    plan = plan_memory(cfg, ecfg, weights=weights, device_bytes=available, device_name=name)
    print(plan.table())
    lim = plan.largest_fit()
    ctx = lim.max_context if lim.max_context is not None else "none"
    conc = lim.max_concurrency if lim.max_concurrency is not None else "none"
    print(f"largest --max-context at --max-concurrency {ecfg.max_concurrency}: {ctx}; "
          f"largest --max-concurrency at --max-context {ecfg.max_context}: {conc}")
    try:
        check_plan(plan)
    except PlanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
