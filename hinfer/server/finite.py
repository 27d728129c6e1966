"""Numbers that go on the wire: JSON has no NaN or Infinity (strict parsers reject them), so a non-finite
logprob is mapped to what OpenAI itself sends rather than written as a bare `NaN` / `-Infinity`."""

from __future__ import annotations

import math

# OpenAI reports tokens with no probability mass at -9999.0.
FLOOR_LOGPROB = -9999.0


def wire_logprob(x: float | None) -> float | None:
    """A finite logprob as is; -inf (and anything below the floor) as FLOOR_LOGPROB; NaN or +inf as None."""
    if x is None or math.isnan(x) or x == math.inf:
        return None
    return max(float(x), FLOOR_LOGPROB)
