"""GET /tokenizer_info's body, as vLLM builds it: the checkpoint's tokenizer_config.json (file paths dropped,
added-token objects reduced to their text), `tokenizer_class`, and the chat template the server renders with.
lm-eval's `local-completions` reads `eos_token` (and `bos_token`) from it to use the server as its tokenizer."""

from __future__ import annotations

from typing import Any

from hinfer.tokenizer import Tokenizer

_FILE_FIELDS = ("vocab_file", "merges_file", "tokenizer_file")


def _plain(value: Any) -> Any:
    # tokenizer_config stores special tokens as AddedToken objects ({"content": ..., "special": ...})
    if isinstance(value, dict):
        if isinstance(value.get("content"), str) and ("special" in value or value.get("__type") == "AddedToken"):
            return value["content"]
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def tokenizer_info(tokenizer: Tokenizer) -> dict[str, Any]:
    info = {k: _plain(v) for k, v in tokenizer.config.items() if k not in _FILE_FIELDS}
    if info.get("eos_token") is None and tokenizer.eos_token_ids:
        # clients find the end-of-text token here; without a config the generation config's eos names it
        info["eos_token"] = tokenizer.id_to_token(tokenizer.eos_token_ids[0])
    info["tokenizer_class"] = info.get("tokenizer_class") or "PreTrainedTokenizerFast"
    template = _default_template(tokenizer)
    if template is not None:
        info["chat_template"] = template
    return info


def _default_template(tokenizer: Tokenizer) -> str | None:
    # The source the server renders with (chat_template.jinja wins over the config's copy, as in from_dir).
    return tokenizer.chat_template_source
