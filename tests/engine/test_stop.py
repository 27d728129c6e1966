from __future__ import annotations

import random

from hinfer.engine.stop import StopStringMatcher


def test_stop_string_split_across_deltas_is_cut_and_nothing_leaks():
    m = StopStringMatcher(["STOP", "\n\n"])
    out = []
    for d in ["hello S", "TO", "P world"]:
        text, hit = m.feed(d)
        out.append(text)
        if hit:
            break
    assert "".join(out) == "hello " and hit == "STOP"


def test_false_prefix_is_released():
    m = StopStringMatcher(["STOP"])
    a, _ = m.feed("ST")
    b, _ = m.feed("AR")
    assert a + b + m.flush() == "STAR"


def test_random_streams_equal_reference():
    rng = random.Random()
    for _ in range(200):
        text = "".join(rng.choice("abS TOP\n") for _ in range(rng.randint(0, 30)))
        stops = ["STOP", "a\n"]
        cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=len(text))
        m, got, pos = StopStringMatcher(stops), "", 0
        hit = None
        while pos < len(text) and hit is None:
            n = rng.randint(1, 4)
            t, hit = m.feed(text[pos : pos + n])
            got += t
            pos += n
        if hit is None:
            got += m.flush()
        assert got == text[:cut]
