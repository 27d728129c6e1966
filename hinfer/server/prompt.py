"""Dialect-neutral request preparation: chat messages -> template -> token ids, tool choice, token budget.

Both dialects convert their request into a `ChatPrompt` (messages in the shape the Qwen3.5 chat template
reads: role, content string, reasoning_content, tool_calls with dict arguments) and share the rest.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from hinfer.errors import TemplateError
from hinfer.server.errors import APIError, bad_request
from hinfer.server.late_system import hide_late_system, late_system_turn, restore_late_system
from hinfer.server.prompt_guard import PromptGuard
from hinfer.server.tool_parser import tool_schemas

log = logging.getLogger(__name__)

# Template variables a request may not set: what the server passes itself, and the tokenizer's special-token
# strings (bos_token, eos_token, ...: checked by suffix), which a template writes as control tokens.
_RESERVED_TEMPLATE_KWARGS = {"messages", "tools", "documents", "add_generation_prompt", "enable_thinking",
                             "preserve_thinking", "continue_final_message", "raise_exception", "strftime_now",
                             "namespace", "dict", "range", "loop", "self", "tokenizer"}


@dataclass
class ToolChoice:
    mode: str = "auto"  # auto | none | required | named
    name: str | None = None
    parallel: bool = True  # False: at most one call per answer (OpenAI parallel_tool_calls, Anthropic
    # disable_parallel_tool_use); asked for in the prompt, and calls after the first are dropped from the output
    # OpenAI's allowed_tools: calls only to these names (mode auto or required); every tool is still shown, the rest
    # are neither parsed nor allowed by the grammar
    allowed: tuple[str, ...] | None = None


@dataclass
class ChatPrompt:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)  # OpenAI-style {"type": "function", "function": ...}
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    enable_thinking: bool = True
    preserve_thinking: bool = False
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    late_system: bool = False  # system messages after the first render in place (late_system.py); else 400
    images: list[Any] = field(default_factory=list)  # decoded images of the user messages, in prompt order
    add_generation_prompt: bool = True  # False only for POST /tokenize, which may count a conversation as is
    continuation: str = ""  # an assistant prefill: the answer goes on from this text, after the generation prompt
    # tools whose one string parameter follows a grammar (the Responses API's custom tools): StructuredOutput's
    tool_grammars: dict[str, dict[str, str]] | None = None
    # the custom (freeform) tools by the name the model calls them: their calls come back as text, not JSON arguments
    custom_tools: frozenset[str] = frozenset()
    # tools made callable mid-conversation (the Responses API's tool search results): listed where they were
    # found, in the messages, rather than in the system prompt; callable like `tools`
    loaded_tools: list[dict[str, Any]] = field(default_factory=list)

    def starts_in_reasoning(self) -> bool:
        """Whether the generated text opens inside the thinking block: thinking on and no continuation past it
        (a continued answer's prefill closes it; </think> is an ordinary added token, so the model sees it too)."""
        return self.enable_thinking and "</think>" not in self.continuation

    @property
    def max_calls(self) -> int | None:
        return None if self.tool_choice.parallel else 1

    def template_tools(self) -> list[dict[str, Any]] | None:
        """Tools shown to the model in the system prompt: all of them for every choice but none (which hides them:
        the model then answers in text), so that a conversation's head, and the prefix cache's pages of it, stay
        the same when a turn forces or narrows the choice; that turn's instruction comes at the prompt's end."""
        if self.tool_choice.mode == "none":
            return None
        return self.tools or None

    def callable_tools(self) -> list[dict[str, Any]]:
        """The tools a call may name: those shown and those loaded; only the named one for a named choice."""
        if self.tool_choice.mode == "none":
            return []
        tools = [*self.tools, *self.loaded_tools]
        if self.tool_choice.mode == "named":
            return [t for t in tools if _tool_name(t) == self.tool_choice.name][:1]
        if self.tool_choice.allowed is not None:
            return [t for t in tools if _tool_name(t) in self.tool_choice.allowed]
        return tools

    def parse_tools(self) -> dict[str, dict[str, Any]] | None:
        """{name: parameters schema} the output parser accepts, or None to leave tool-call text alone."""
        tools = self.callable_tools()
        return tool_schemas(tools) if tools else None


def loaded_text(tools: list[dict[str, Any]]) -> str:
    """How tools made callable mid-conversation read to the model: listed as the system prompt lists its own."""
    if not tools:
        return "No tools were found."
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return f"These functions can be called from now on:\n<tools>\n{listed}\n</tools>"


def _tool_name(tool: dict[str, Any]) -> str | None:
    fn = tool.get("function")
    return fn.get("name") if isinstance(fn, dict) else None


def check_tool_choice(prompt: ChatPrompt, param: str) -> None:
    tools = [*prompt.tools, *prompt.loaded_tools]
    if prompt.tool_choice.mode in ("required", "named") and not tools:
        raise bad_request("tool_choice requires tools", param=param)
    if prompt.tool_choice.mode == "named":
        names = [_tool_name(t) for t in tools]
        if prompt.tool_choice.name not in names:
            raise bad_request(f"tool_choice names {prompt.tool_choice.name!r}, which is not in tools", param=param)
    for name in prompt.tool_choice.allowed or ():
        if name not in {_tool_name(t) for t in tools}:
            raise bad_request(f"tool_choice allows {name!r}, which is not in tools", param=param)


def _tool_choice_instruction(choice: ToolChoice) -> str | None:
    # Without constrained decoding a call cannot be forced; a plain instruction is the honest best effort.
    parts = []
    if choice.allowed is not None:
        parts.append(f"Of the functions above, you may call only these: {', '.join(choice.allowed)}.")
    if choice.mode == "required":
        which = "them" if choice.allowed is not None else "the functions above"
        parts.append(f"You must answer by calling one or more of {which}."
                     if choice.parallel else f"You must answer by calling one of {which}.")
    elif choice.mode == "named":
        parts.append(f"You must answer by calling the function {choice.name}.")
    if not choice.parallel:
        parts.append("Call at most one function per answer.")
    return " ".join(parts) or None


def render_prompt(tokenizer: Any, prompt: ChatPrompt, guard: PromptGuard | None = None) -> list[int]:
    """Chat template -> token ids. Template complaints (bad message order, no user turn) are 400s.

    guard: client strings are rendered through it, so special-token text in them stays text (prompt_guard.py);
    None renders them as they are (--allow-special-tokens-in-content)."""
    messages = prompt.messages
    tools = prompt.template_tools()
    kwargs = check_template_kwargs(prompt.template_kwargs)
    if guard is not None:
        messages, tools, kwargs = guard.shield(messages), guard.shield(tools), guard.shield(kwargs)
    swaps: dict[str, str] = {}
    if prompt.late_system:
        messages, swaps = hide_late_system(messages)
    instruction = _tool_choice_instruction(prompt.tool_choice) if prompt.callable_tools() else None
    if instruction and prompt.add_generation_prompt:  # a system turn right before the answer: the head stays
        turn, swap = late_system_turn(instruction)
        messages = [*messages, turn]
        swaps |= swap
    try:
        text = tokenizer.apply_chat_template(
            messages,
            tools=tools,
            add_generation_prompt=prompt.add_generation_prompt,
            enable_thinking=prompt.enable_thinking,
            preserve_thinking=prompt.preserve_thinking,
            **kwargs,
        )
        text = restore_late_system(text, swaps)
        if prompt.continuation:  # client text like any other: shielded, so its special-token text stays text
            text += guard.shield(prompt.continuation) if guard is not None else prompt.continuation
    except TemplateError as e:
        raise bad_request(f"the chat template rejected the messages: {e}", param="messages") from e
    except Exception as e:  # jinja errors on odd-but-valid JSON (e.g. a non-string in a string slot)
        log.debug("chat template failed", exc_info=True)
        raise bad_request(f"the chat template could not render the messages: {e}", param="messages") from e
    return guard.encode(text) if guard is not None else tokenizer.encode(text, add_special_tokens=False)


async def render_prompt_off_loop(tokenizer: Any, prompt: ChatPrompt, guard: PromptGuard | None = None) -> list[int]:
    """render_prompt in a worker thread: a long prompt takes seconds to encode, and the event loop must go on
    serving the other requests meanwhile (the tokenizer releases the GIL for long texts, tokenizer.py)."""
    return await asyncio.to_thread(render_prompt, tokenizer, prompt, guard)


def check_template_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """chat_template_kwargs as the template gets them; a reserved or malformed name is a 400 (silently dropping
    it would answer a different question than the client asked)."""
    for k in kwargs:
        if not isinstance(k, str) or not k.isidentifier() or k.startswith("_"):
            raise bad_request(f"chat_template_kwargs key {k!r} is not a template variable name",
                              param="chat_template_kwargs")
        if k in _RESERVED_TEMPLATE_KWARGS or k.endswith("_token") or k.endswith("_tokens"):
            raise bad_request(f"chat_template_kwargs may not set {k!r}: the server sets it", param="chat_template_kwargs")
    return dict(kwargs)


def plan_max_tokens(prompt_len: int, requested: int | None, max_context: int, param: str = "max_tokens",
                    prompt_param: str = "messages") -> int:
    """The completion budget. A prompt that leaves no room, or a max_tokens beyond the whole context,
    is a 400; a max_tokens that merely overruns what the prompt leaves is clamped to it (agents send
    generous max_tokens and expect `length` when the context runs out).

    The messages use the wording each dialect's clients look for: OpenAI's "maximum context length" (LiteLLM,
    LangChain map it to a context-window error) and Anthropic's "prompt is too long" (Claude Code compacts)."""
    room = max_context - prompt_len
    if room < 1:
        raise APIError(
            400, f"This model's maximum context length is {max_context} tokens. However, your messages resulted "
                 f"in {prompt_len} tokens (prompt plus at least one completion token must fit; --max-context). "
                 "Please reduce the length of the messages.",
            param=prompt_param, code="context_length_exceeded",
            anthropic_message=f"prompt is too long: {prompt_len} tokens > {max_context - 1} maximum")
    if requested is None:
        return room
    if requested < 1:
        raise bad_request(f"{param} must be at least 1", param=param)
    if requested > max_context:
        raise APIError(
            400, f"{param} is {requested}, more than this server's whole context of {max_context} tokens",
            param=param, code="context_length_exceeded",
            anthropic_message=f"{param}: {requested} > {max_context}, which is the maximum allowed number of "
                              "output tokens (this server's --max-context)")
    return min(requested, room)


def stop_list(stop: str | list[str] | None, param: str = "stop") -> list[str]:
    if stop is None:
        return []
    items = [stop] if isinstance(stop, str) else list(stop)
    if len(items) > 64:
        raise bad_request("at most 64 stop sequences are supported", param=param)
    return [s for s in items if s]


def check_token_ids(ids: list[int], vocab_size: int, param: str) -> None:
    for t in ids:
        if not 0 <= t < vocab_size:
            raise bad_request(f"token id {t} is outside the vocabulary (0..{vocab_size - 1})", param=param)


def normalize_seed(seed: int | None) -> int | None:
    # Any JSON integer is accepted; the sampler wants a 63-bit one.
    return None if seed is None else seed % (2**63)
