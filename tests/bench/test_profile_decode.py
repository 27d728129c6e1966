"""bench/profile_decode.py's exposed times on hand-made spans: a kernel's share of the step is how far its end
moves the end of the work before it; one hidden under another adds nothing, idle time is nobody's."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "profile_decode.py"


@pytest.fixture(scope="module")
def exposed_times():
    return runpy.run_path(str(SCRIPT))["exposed_times"]


def test_back_to_back_kernels_expose_their_durations(exposed_times):
    got = exposed_times([(0.0, 5.0, "a"), (5.0, 12.0, "b"), (20.0, 23.0, "a")])  # an 8 us idle gap before the last
    assert dict(got) == {"a": [8.0, 2], "b": [7.0, 1]}


def test_an_early_started_kernel_exposes_only_its_latency_past_its_predecessor(exposed_times):
    # PDL: b starts at 2 (waits for a, which ends at 10) and ends at 13; c runs wholly under b
    got = exposed_times([(0.0, 10.0, "a"), (2.0, 13.0, "b"), (3.0, 12.0, "c")])
    assert dict(got) == {"a": [10.0, 1], "b": [3.0, 1], "c": [0.0, 1]}
    assert sum(v[0] for v in got.values()) == 13.0  # the busy wall time
