"""Sampling defaults: what a request that leaves a sampling field out gets, read from the checkpoint's
generation_config.json as its authors recommend it (Qwen3.5 / 3.6: temperature 1.0, top_k 20, top_p 0.95). vLLM and
SGLang do the same by default; without it a client that sends only `temperature` samples from the whole
vocabulary, which these models were not tuned for.

A request's own values always win; `hinfer serve --generation-config none` keeps hinfer's neutral defaults
(temperature 1, no top-k / top-p / min-p, no penalty); `--generation-config PATH` reads another file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hinfer.errors import ConfigError
from hinfer.sampling_params import SamplingParams

# generation_config.json keys taken, each a SamplingParams field of the same name and meaning
KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


@dataclass(frozen=True)
class SamplingDefaults:
    """Values for SamplingParams fields a request does not set (None: hinfer's own default)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    source: str = ""  # where they came from, for the startup log

    def params(self, **kw: Any) -> SamplingParams:
        """SamplingParams with these defaults, then `kw` (the request's own fields) over them."""
        mine = {k: getattr(self, k) for k in KEYS if getattr(self, k) is not None}
        return SamplingParams(**mine | kw)

    def describe(self) -> str:
        set_ = [f"{k} {getattr(self, k):g}" for k in KEYS if getattr(self, k) is not None]
        return ", ".join(set_) if set_ else "none"

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "") -> SamplingDefaults:
        """The sampling keys of a generation config. `do_sample: false` means greedy decoding in transformers: its
        temperature and filters are then unused, so the default is greedy."""
        if not isinstance(raw, dict):
            raise ConfigError(f"{source}: a generation config is a JSON object")
        if raw.get("do_sample") is False:
            return cls(temperature=0.0, source=source)
        vals: dict[str, Any] = {}
        for k in KEYS:
            v = raw.get(k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float):
                raise ConfigError(f"{source}: {k} must be a number, got {v!r}")
            vals[k] = int(v) if k == "top_k" else float(v)
        out = cls(**vals, source=source)
        try:
            out.params().validate()
        except ValueError as e:
            raise ConfigError(f"{source}: {e}") from None
        return out


NEUTRAL = SamplingDefaults(source="hinfer's own")


def load_sampling_defaults(choice: str, model_dir: Path | None, artifact_config: dict | None = None) -> SamplingDefaults:
    """`choice`: "auto" (the model's generation_config.json: `model_dir`'s file, or the one an artifact carries in
    `artifact_config`; none there: hinfer's own), "none" (hinfer's own) or a path to a generation_config.json."""
    if choice == "none":
        return NEUTRAL
    if choice == "auto":
        if artifact_config is not None:
            return SamplingDefaults.from_dict(artifact_config, "the artifact's generation_config.json")
        path = model_dir / "generation_config.json" if model_dir is not None else None
        if path is None or not path.is_file():
            return NEUTRAL
    else:
        path = Path(choice)
        if path.is_dir():
            path = path / "generation_config.json"
        if not path.is_file():
            raise ConfigError(f"--generation-config {choice}: no such file (a generation_config.json, auto or none)")
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: unreadable generation config ({e})") from None
    return SamplingDefaults.from_dict(raw, str(path))
