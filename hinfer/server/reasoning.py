"""Split generated text into reasoning and answer on `</think>`.

The Qwen3.5 template opens `<think>\\n` in the prompt when thinking is on, so generation starts inside the
reasoning and `</think>` (one token) ends it. Incremental: text that might be the start of `</think>`, and
whitespace that might sit just before it, is held back until the next delta decides.
"""

from __future__ import annotations

THINK_START = "<think>"
THINK_END = "</think>"

REASONING = "reasoning"
CONTENT = "content"


def _partial_suffix(buf: str, marker: str) -> int:
    """Length of the longest suffix of `buf` that is a proper prefix of `marker`."""
    for n in range(min(len(buf), len(marker) - 1), 0, -1):
        if marker.startswith(buf[-n:]):
            return n
    return 0


class ReasoningSplitter:
    def __init__(self, start_in_reasoning: bool):
        self.in_reasoning = start_in_reasoning
        self._buf = ""
        self._reasoning_started = False  # strip leading whitespace / a repeated `<think>` once
        self._tag_checked = False
        self._content_started = False  # strip the blank lines that follow `</think>`

    def feed(self, text: str) -> list[tuple[str, str]]:
        """Return (kind, text) pieces, kind being REASONING or CONTENT, in order."""
        self._buf += text
        out: list[tuple[str, str]] = []
        while self._buf:
            if self.in_reasoning:
                if not self._reasoning_started and not self._start_reasoning():
                    break
                idx = self._buf.find(THINK_END)
                if idx >= 0:
                    self._emit(out, REASONING, self._buf[:idx].rstrip())
                    self._buf = self._buf[idx + len(THINK_END):]
                    self.in_reasoning = False
                    continue
                hold = _partial_suffix(self._buf, THINK_END)
                body = self._buf[: len(self._buf) - hold]
                kept = body.rstrip()  # whitespace right before `</think>` is not reasoning
                self._emit(out, REASONING, kept)
                self._buf = self._buf[len(kept):]
                break
            if not self._content_started:
                self._buf = self._buf.lstrip()
                if not self._buf:
                    break
                self._content_started = True
            self._emit(out, CONTENT, self._buf)
            self._buf = ""
        return out

    def flush(self) -> list[tuple[str, str]]:
        """End of generation: whatever is held back goes out as what it was."""
        out: list[tuple[str, str]] = []
        if self.in_reasoning:
            self._emit(out, REASONING, self._buf.strip() if not self._reasoning_started else self._buf.rstrip())
        elif self._content_started:
            self._emit(out, CONTENT, self._buf)
        self._buf = ""
        return out

    def _start_reasoning(self) -> bool:
        """Drop leading whitespace and one `<think>` the model may repeat; False while undecided."""
        stripped = self._buf.lstrip()
        if not stripped:
            return False
        if not self._tag_checked:
            if THINK_START.startswith(stripped) and stripped != THINK_START:
                return False  # maybe a partial `<think>`
            if stripped.startswith(THINK_START):
                stripped = stripped[len(THINK_START):].lstrip()
            self._tag_checked = True
            if not stripped:
                self._buf = ""
                return False
        self._buf = stripped
        self._reasoning_started = True
        return True

    @staticmethod
    def _emit(out: list[tuple[str, str]], kind: str, text: str) -> None:
        if text:
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + text)
            else:
                out.append((kind, text))
