"""The multi-turn agent workload: N conversations of T turns whose prompts grow toward a target context.

Turn t's prompt is the whole conversation so far: an opening context block (a system prompt with tool
definitions and documents, as agents send), then for every earlier turn its user message and the model's
answer, then this turn's user message. User messages are random token ids of 200-1000 tokens (seeded); answers
have a fixed length (greedy, ignoring EOS), so every prompt's length is known up front and the workload is the
same with the prefix cache on or off. The opening block is sized so that the last turn's prompt plus its answer
lands near the target context; a user message that would pass the target is cut short.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class AgentWorkload:
    conversations: int = 4
    turns: int = 20
    target_context: int = 32768  # tokens of the last turn's prompt + answer
    user_tokens: tuple[int, int] = (200, 1000)  # a new user message's length, uniform in [lo, hi]
    answer_tokens: int = 128  # every answer's length
    seed: int = 0

    @property
    def opening_tokens(self) -> int:
        """The opening block: what the turns' expected growth leaves of the target (at least one page's worth)."""
        lo, hi = self.user_tokens
        growth = self.turns * ((lo + hi) // 2 + self.answer_tokens)
        return max(64, self.target_context - growth)

    def messages(self, vocab: int) -> list[list[list[int]]]:
        """Per conversation, per turn: the new prompt tokens of that turn (turn 0 includes the opening block)."""
        rng = random.Random(self.seed)
        lo, hi = self.user_tokens
        out = []
        for _ in range(self.conversations):
            conv, total = [], 0  # total: the conversation's tokens so far, answers included
            for t in range(self.turns):
                n = rng.randint(lo, hi) + (self.opening_tokens if t == 0 else 0)
                n = max(1, min(n, self.target_context - self.answer_tokens - total))  # stay within the target
                conv.append([rng.randrange(1, vocab) for _ in range(n)])
                total += n + self.answer_tokens
            out.append(conv)
        return out


def longest_conversation(messages: list[list[list[int]]], answer_tokens: int) -> int:
    """Tokens of the longest conversation, every answer included: the context the engine must allow."""
    return max(sum(len(m) + answer_tokens for m in conv) for conv in messages)
