"""Tokenizer (Hugging Face `tokenizers` on tokenizer.json), streaming detokenizer, chat template glue."""

from __future__ import annotations

import codecs
import json
import logging
import os
from pathlib import Path
from typing import Any

import tokenizers
import tokenizers.decoders

from hinfer import fixtures
from hinfer.chat_template import ChatTemplate
from hinfer.errors import HinferError, TemplateError

log = logging.getLogger("hinfer.tokenizer")

# Conversations the startup check renders (check_chat_template).
_PROBE_CHAT = [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello"},
               {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "How are you?"}]
_PROBE_TOOL = {"type": "function", "function": {"name": "get_time", "description": "The time",
                                                "parameters": {"type": "object", "properties": {}}}}
_PROBE_TOOLS = [{"role": "user", "content": "Time?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_time", "arguments": {}}}]},
                {"role": "tool", "content": "12:00"}]

_DEFAULT_EOS_IDS = [248046, 248044]  # <|im_end|>, <|endoftext|> (Qwen3.5 generation_config)
_FIXTURE_TOKENIZER = "qwen3.5-tokenizer"


def fixture_tokenizer_dir() -> Path | None:
    """The Qwen3.5 tokenizer folder used by the built-in demo model and the tests: $HINFER_FIXTURES/
    qwen3.5-tokenizer, else the copy packaged in hinfer/assets (see hinfer.fixtures), else
    <repo>/../shared/fixtures/qwen3.5-tokenizer; None when none of them holds a tokenizer.json."""
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / _FIXTURE_TOKENIZER
    candidates = [fixtures.tokenizer_dir(), shared]  # tokenizer_dir() already honours HINFER_FIXTURES
    return next((p for p in candidates if (p / "tokenizer.json").is_file()), None)


# From this many characters on, text is encoded through `encode_batch`, which releases the GIL while it works
# (`encode` holds it): a long prompt encoded in a worker thread then leaves the server's event loop free. Short
# texts, where that makes no difference, keep the plain call.
_RELEASE_GIL_CHARS = 1 << 16


def _encode_ids(tok: tokenizers.Tokenizer, text: str, add_special_tokens: bool) -> list[int]:
    if len(text) < _RELEASE_GIL_CHARS:
        return tok.encode(text, add_special_tokens=add_special_tokens).ids
    return tok.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids


def _byte_decoder() -> dict[str, int]:
    """Inverse of the GPT-2 byte-level alphabet: printable Latin-1 bytes stand for themselves, the other
    bytes are shifted to code points 256, 257, ... in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars: dict[str, int] = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in printable:
            chars[chr(256 + shifted)] = b
            shifted += 1
    return chars


_BYTE_OF_CHAR = _byte_decoder()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise HinferError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise HinferError(f"{path}: expected a JSON object")
    return data


def _token_str(value: Any) -> str | None:
    # tokenizer_config stores special tokens as a string or as an AddedToken dict
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class Tokenizer:
    """Encode / decode with the checkpoint's tokenizer.json; render prompts with its chat template."""

    def __init__(
        self,
        tok: tokenizers.Tokenizer,
        config: dict[str, Any] | None = None,
        chat_template: str | dict[str, str] | None = None,
        eos_token_ids: list[int] | None = None,
    ) -> None:
        self._tok = tok
        self.config = config or {}
        self._template_sources = (
            {"default": chat_template} if isinstance(chat_template, str) else chat_template
        )
        self._templates: dict[str, ChatTemplate] = {}  # compiled on first use: raw prompts work without one
        self.template_origin = "the chat template"  # the file it came from, for startup errors
        self._plain_tok: tokenizers.Tokenizer | None = None  # a copy that encodes special-token text as text
        self.vocab_size: int = tok.get_vocab_size(with_added_tokens=True)
        self.eos_token_ids: list[int] = list(eos_token_ids) if eos_token_ids else list(_DEFAULT_EOS_IDS)
        added = tok.get_added_tokens_decoder()
        self.special_ids: frozenset[int] = frozenset(i for i, t in added.items() if t.special)
        # The control tokens' text (<|im_start|>, ...): what client strings must not turn into control tokens.
        self.special_token_strings: tuple[str, ...] = tuple(sorted((t.content for t in added.values() if t.special),
                                                                  key=len, reverse=True))
        self.im_start_id = self.token_to_id("<|im_start|>")  # opens a chat turn
        self.im_end_id = self.token_to_id("<|im_end|>")
        self.think_start_id = self.token_to_id("<think>")
        self.think_end_id = self.token_to_id("</think>")
        self.tool_call_start_id = self.token_to_id("<tool_call>")
        self.tool_call_end_id = self.token_to_id("</tool_call>")
        self._token_bytes: dict[int, bytes] = {}  # id -> raw bytes, filled lazily by the detokenizer
        self._byte_level = isinstance(tok.decoder, tokenizers.decoders.ByteLevel)

    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> Tokenizer:
        """Load tokenizer.json, tokenizer_config.json, chat_template.jinja (or the config's chat_template)
        and generation_config.json (eos ids) from a checkpoint folder."""
        path = Path(path)
        tok_file = path / "tokenizer.json"
        if not tok_file.is_file():
            raise HinferError(f"{tok_file} not found (a checkpoint folder needs its tokenizer.json)")
        try:
            tok = tokenizers.Tokenizer.from_file(str(tok_file))
        except Exception as e:  # tokenizers raises plain Exception on bad files
            raise HinferError(f"cannot load {tok_file}: {e}") from e
        config = (
            _read_json(path / "tokenizer_config.json") if (path / "tokenizer_config.json").is_file() else {}
        )
        template: str | dict[str, str] | None = None
        origin = path / "tokenizer_config.json"
        if (path / "chat_template.jinja").is_file():
            origin = path / "chat_template.jinja"
            template = origin.read_text(encoding="utf-8")
        elif isinstance(config.get("chat_template"), str):
            template = config["chat_template"]
        elif isinstance(config.get("chat_template"), list):  # [{"name": ..., "template": ...}, ...]
            named = [t for t in config["chat_template"] if isinstance(t, dict)]
            template = {t.get("name"): t.get("template") for t in named if isinstance(t.get("template"), str)}
        eos: list[int] | None = None
        if (path / "generation_config.json").is_file():
            value = _read_json(path / "generation_config.json").get("eos_token_id")
            eos = [value] if isinstance(value, int) else value if isinstance(value, list) else None
        out = cls(tok, config, template, eos)
        out.template_origin = str(origin)
        return out

    # ---- ids <-> text

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return _encode_ids(self._tok, text, add_special_tokens)

    def encode_plain(self, text: str) -> list[int]:
        """Encode with special-token text as ordinary text (`<|im_start|>` -> `<`, `|`, `im`, ...); added tokens
        that are not special (`<think>`, `<tool_call>`) still match, as transformers' split_special_tokens does."""
        if self._plain_tok is None:
            plain = tokenizers.Tokenizer.from_str(self._tok.to_str())
            plain.encode_special_tokens = True
            self._plain_tok = plain
        return _encode_ids(self._plain_tok, text, False)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, tok: str) -> int | None:
        return self._tok.token_to_id(tok)

    def id_to_token(self, i: int) -> str | None:
        return self._tok.id_to_token(i) if 0 <= i < 2**32 else None

    def token_bytes(self, i: int) -> bytes:
        """The bytes token `i` decodes to (b"" for unknown ids), as the ByteLevel decoder maps them: a token
        whose characters are all in the byte alphabet gives those bytes, any other token its UTF-8."""
        cached = self._token_bytes.get(i)
        if cached is None:
            token = self.id_to_token(i)
            if token is None:
                cached = b""
            else:
                try:
                    cached = bytes(_BYTE_OF_CHAR[c] for c in token)
                except KeyError:
                    cached = token.encode("utf-8")
            self._token_bytes[i] = cached
        return cached

    def detokenizer(self, skip_special_tokens: bool = True) -> IncrementalDetokenizer:
        if not self._byte_level:
            raise HinferError(
                "streaming detokenization needs a ByteLevel tokenizer.json decoder (Qwen3.5 has one)"
            )
        return IncrementalDetokenizer(self, skip_special_tokens)

    # ---- chat

    @property
    def has_chat_template(self) -> bool:
        return bool(self._template_sources)

    @property
    def chat_template_source(self) -> str | None:
        """The default template's Jinja source the server renders with (None without one)."""
        src = (self._template_sources or {}).get("default")
        return src if isinstance(src, str) else None

    def _template(self, use_tools: bool) -> ChatTemplate:
        sources = self._template_sources
        if not sources:
            raise TemplateError(
                "this tokenizer has no chat template (no chat_template.jinja in the checkpoint)"
            )
        # named templates: transformers picks "tool_use" when tools are given and it exists
        name = "tool_use" if use_tools and "tool_use" in sources else "default"
        if name not in sources:
            raise TemplateError(f"no {name!r} chat template among {sorted(sources)}")
        if name not in self._templates:
            self._templates[name] = ChatTemplate(sources[name])
        return self._templates[name]

    def check_chat_template(self) -> None:
        """Compile every chat template and render a plain conversation with it, so that a broken template is a
        startup error naming its file rather than a 400 on every chat request. A template that only fails
        with tools is logged (tool requests will get the template's 400)."""
        if not self._template_sources:
            log.warning("%s has no chat template: only /v1/completions (raw prompts) will work",
                        self.template_origin)
            return
        try:
            for name in self._template_sources:
                if name not in self._templates:
                    self._templates[name] = ChatTemplate(self._template_sources[name])
            self.apply_chat_template(_PROBE_CHAT)
        except TemplateError as e:
            raise HinferError(f"{self.template_origin}: the chat template does not work: {e}") from e
        try:
            self.apply_chat_template(_PROBE_TOOLS, tools=[_PROBE_TOOL])
        except TemplateError as e:
            log.warning("%s: the chat template fails on a conversation with tools: %s", self.template_origin, e)

    def special_tokens_map(self) -> dict[str, str]:
        """Special token strings by role (bos_token, eos_token, ..., image_token); templates may read them."""
        out: dict[str, str] = {}
        for key in (
            "bos_token",
            "eos_token",
            "unk_token",
            "sep_token",
            "pad_token",
            "cls_token",
            "mask_token",
        ):
            value = _token_str(self.config.get(key))
            if value is not None:
                out[key] = value
        extra = self.config.get("extra_special_tokens")
        if isinstance(extra, dict):
            out.update({k: v for k, v in ((k, _token_str(v)) for k, v in extra.items()) if v is not None})
        return out

    def apply_chat_template(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        enable_thinking: bool = True,
        preserve_thinking: bool = False,
        **template_kwargs: Any,
    ) -> str:
        """The prompt text for `messages` (as transformers' apply_chat_template(tokenize=False) renders it)."""
        context = {
            **self.special_tokens_map(),
            "enable_thinking": enable_thinking,
            "preserve_thinking": preserve_thinking,
            **template_kwargs,
        }
        return self._template(bool(tools)).render(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, **context
        )


class IncrementalDetokenizer:
    """Streams text for ids as they are generated, O(new tokens) per call.

    Each token maps to fixed bytes (ByteLevel), so the text is the UTF-8 decoding of the concatenated bytes;
    an incremental UTF-8 decoder holds back a character split across tokens until it is complete and
    replaces invalid bytes exactly as a whole-sequence lossy decode does."""

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip = tokenizer.special_ids if skip_special_tokens else frozenset()
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []

    def add(self, token_ids: list[int]) -> str:
        """Text delta for the new ids (may be "" while a multi-byte character is incomplete)."""
        token_bytes = self._tokenizer.token_bytes
        data = b"".join(token_bytes(i) for i in map(int, token_ids) if i not in self._skip)
        delta = self._utf8.decode(data)
        if delta:
            self._parts.append(delta)
        return delta

    def flush(self) -> str:
        """Whatever is held back, as replacement characters (only an unfinished character can be held)."""
        delta = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        if delta:
            self._parts.append(delta)
        return delta

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]  # amortized: join once, not on every access
        return self._parts[0] if self._parts else ""


def check_checkpoint_template(path: str | os.PathLike) -> None:
    """The startup check of a checkpoint folder's chat template (see Tokenizer.check_chat_template), before
    anything else of the checkpoint is loaded; other paths (artifacts, "demo") are left to the loader."""
    path = Path(path)
    if (path / "tokenizer.json").is_file():
        Tokenizer.from_dir(path).check_chat_template()
