"""Stop strings on a text stream: emit text only once it can no longer be the start of a stop string."""

from __future__ import annotations


class StopStringMatcher:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self._pending = ""

    def feed(self, delta: str) -> tuple[str, str | None]:
        """-> (text safe to emit now, the stop string if one matched). After a match the text is cut before it."""
        if not self.stops:
            return delta, None
        buf = self._pending + delta
        hit, cut = None, len(buf)
        for s in self.stops:
            i = buf.find(s)
            if i != -1 and i < cut:
                hit, cut = s, i
        if hit is not None:
            self._pending = ""
            return buf[:cut], hit
        keep = self._partial_suffix(buf)
        self._pending = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], None

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out

    def _partial_suffix(self, buf: str) -> int:
        """Length of the longest suffix of buf that is a proper prefix of some stop string."""
        for n in range(min(self._hold, len(buf)), 0, -1):
            tail = buf[-n:]
            if any(s.startswith(tail) for s in self.stops):
                return n
        return 0
