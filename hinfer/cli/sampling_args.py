"""Sampling flags shared by generate, chat and bench."""

from __future__ import annotations

import argparse

from hinfer.sampling_params import SamplingParams


def add_sampling_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("--max-tokens", type=int, default=128, help="tokens to generate at most (default 128)")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default 0)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0 = off)")
    g.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (default 0 = off)")
    g.add_argument("--min-p", type=float, default=0.0, help="drop tokens below min_p x the top probability")
    g.add_argument("--presence-penalty", type=float, default=0.0, help="OpenAI presence penalty (-2..2)")
    g.add_argument("--frequency-penalty", type=float, default=0.0, help="OpenAI frequency penalty (-2..2)")
    g.add_argument("--repetition-penalty", type=float, default=1.0, help="HF repetition penalty (1 = off)")
    g.add_argument("--sample-seed", type=int, default=None, help="seed of this request's sampling")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--ignore-eos", action="store_true", help="keep generating past end-of-sequence tokens")


def sampling_from_args(a: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        temperature=a.temperature,
        top_p=a.top_p,
        top_k=a.top_k,
        min_p=a.min_p,
        presence_penalty=a.presence_penalty,
        frequency_penalty=a.frequency_penalty,
        repetition_penalty=a.repetition_penalty,
        seed=a.sample_seed,
        max_tokens=a.max_tokens,
        stop=list(a.stop),
        ignore_eos=a.ignore_eos,
    )
