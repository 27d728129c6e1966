"""How a tool choice reads to the model (hinfer/server/prompt.py): every choice but none shows all the tools, as
auto does, and says what it wants in a system turn right before the answer. So a conversation's prompt keeps its
head, and the prefix cache its pages, when a turn forces or narrows the choice (an agent's forced call, a
structured step); only none hides the tools."""

from __future__ import annotations

import pytest

from hinfer.server.prompt import ChatPrompt, ToolChoice, render_prompt

TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} tool",
                                           "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}
         for n in ("get_weather", "get_time")]  # fmt: skip
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"x": "Paris"}}}]},
    {"role": "tool", "content": "sunny"},
]  # fmt: skip
CHOICES = {
    "required": (ToolChoice(mode="required"), "You must answer by calling one or more of the functions above."),
    "named": (ToolChoice(mode="named", name="get_time"), "You must answer by calling the function get_time."),
    "allowed": (ToolChoice(allowed=("get_time",)), "Of the functions above, you may call only these: get_time."),
    "one call": (ToolChoice(parallel=False), "Call at most one function per answer."),
}


def _text(tokenizer, choice: ToolChoice, **kw) -> str:
    ids = render_prompt(tokenizer, ChatPrompt(messages=CONVERSATION, tools=TOOLS, tool_choice=choice, **kw))
    return tokenizer.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("name", CHOICES)
def test_a_choice_keeps_the_head_and_asks_before_the_answer(tokenizer, name):
    choice, instruction = CHOICES[name]
    auto, forced = _text(tokenizer, ToolChoice()), _text(tokenizer, choice)
    answer = auto.rindex("<|im_start|>assistant\n")
    head, generation_prompt = auto[:answer], auto[answer:]
    assert forced == f"{head}<|im_start|>system\n{instruction}<|im_end|>\n{generation_prompt}"
    assert '"get_weather"' in head and '"get_time"' in head  # every tool shown, the named choice's too


def test_the_reasoning_of_the_tool_loop_stays_with_the_instruction(tokenizer):
    """The instruction's turn is no user query: an assistant turn's reasoning after the last query stays."""
    thought = [*CONVERSATION[:2], {**CONVERSATION[2], "reasoning_content": "look it up"}, CONVERSATION[3]]
    ids = render_prompt(tokenizer, ChatPrompt(messages=thought, tools=TOOLS, tool_choice=CHOICES["named"][0]))
    assert "look it up" in tokenizer.decode(ids, skip_special_tokens=False)


def test_none_hides_the_tools_and_asks_nothing(tokenizer):
    text = _text(tokenizer, ToolChoice(mode="none"))
    assert "<tools>" not in text and "You must" not in text and "Call at most" not in text


def test_a_prompt_without_a_generation_prompt_carries_no_instruction(tokenizer):
    """POST /tokenize may count a conversation as it is: nothing is added after its last message."""
    choice = CHOICES["named"][0]
    assert _text(tokenizer, choice, add_generation_prompt=False) == _text(tokenizer, ToolChoice(),
                                                                          add_generation_prompt=False)
