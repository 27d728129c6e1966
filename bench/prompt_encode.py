"""How long the server takes to turn an agent's conversation into token ids, turn after turn: the chat template,
then the encoding through PromptGuard, with its memo of encoded pieces (the next turn) and without it (a fresh
guard), on a synthetic conversation shaped like a coding agent's (a long system prompt, tools, turns of a
question, a call and a long tool result). CPU only; prints a table and writes JSON with --json.

    python bench/prompt_encode.py [--turns 40] [--reps 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def conversation(turns: int, rng: random.Random, words: list[str]) -> tuple[list[dict], list[dict]]:
    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    tools = [{"type": "function", "function": {"name": f"tool{i}", "description": text(150), "parameters": {
        "type": "object", "properties": {f"p{j}": {"type": "string", "description": text(15)} for j in range(5)}}}}
        for i in range(20)]  # fmt: skip
    messages = [{"role": "system", "content": text(2500)}]
    for t in range(turns):
        messages.append({"role": "user", "content": text(100)})
        messages.append({"role": "assistant", "content": text(50), "tool_calls": [
            {"id": f"c{t}", "type": "function", "function": {"name": "tool1", "arguments": {"p0": text(10)}}}]})
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": text(500)})
    return messages, tools


def main() -> None:
    from hinfer.fixtures import tokenizer_dir
    from hinfer.server.prompt import ChatPrompt, render_prompt
    from hinfer.server.prompt_guard import PromptGuard
    from hinfer.tokenizer import Tokenizer

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    tok = Tokenizer.from_dir(tokenizer_dir())
    words = (Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md").read_text().split()
    messages, tools = conversation(a.turns, random.Random(0), words)
    PromptGuard(tok).encode("warm-up: builds the plain tokenizer once")
    memo, fresh, sizes = [], [], []
    for rep in range(a.reps):
        guard = PromptGuard(tok)
        render_prompt(tok, ChatPrompt(messages=messages, tools=tools), guard)  # the turn before: fills the memo
        nxt = [*messages, {"role": "assistant", "content": "Done."}, {"role": "user", "content": f"next {rep}"}]
        prompt = ChatPrompt(messages=nxt, tools=tools)
        t0 = time.perf_counter()
        ids = render_prompt(tok, prompt, guard)
        t1 = time.perf_counter()
        want = render_prompt(tok, prompt, PromptGuard(tok))
        t2 = time.perf_counter()
        if ids != want:
            raise SystemExit("the memo changed the ids")
        memo.append(t1 - t0)
        fresh.append(t2 - t1)
        sizes.append(len(ids))
    row = {"tokens": sizes[-1], "next_turn_ms": statistics.median(memo) * 1e3,
           "fresh_ms": statistics.median(fresh) * 1e3, "reps": a.reps, "turns": a.turns}
    print(f"{row['tokens']} tokens: next turn {row['next_turn_ms']:.1f} ms with the memo, {row['fresh_ms']:.1f} ms "
          f"without (median of {a.reps}); ids identical")
    if a.json:
        a.json.write_text(json.dumps(row, indent=1) + "\n")


if __name__ == "__main__":
    main()
