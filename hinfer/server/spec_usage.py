"""Speculative decoding's extension fields of a response's `usage` (docs/api.md)."""

from __future__ import annotations

from collections.abc import Iterable

from hinfer.server.generation import EngineRun


def spec_usage(runs: Iterable[EngineRun]) -> dict[str, int]:
    """Drafted and accepted draft tokens summed over the runs of one response; empty when nothing was drafted,
    so responses without speculation keep the standard shape."""
    drafted = accepted = 0
    for r in runs:
        t = r.final.timings if r.final is not None else None
        if t is not None:
            drafted, accepted = drafted + t.spec_drafted, accepted + t.spec_accepted
    return {"spec_drafted_tokens": drafted, "spec_accepted_tokens": accepted} if drafted else {}
