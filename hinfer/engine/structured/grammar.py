"""Grammars for the engine: xgrammar's tokenizer view and compiler (one per engine), a matcher per request.

xgrammar is imported on the first constrained request (it pulls in transformers: about 2 s), and the tokenizer
view is built then (about 0.5 s for Qwen3.5's 248K vocabulary). Compiling a request's grammar takes
milliseconds to a few hundred (large schemas, many tools); xgrammar caches compiled grammars by their text.
The server compiles off the engine thread (Engine.generate -> `prepare`), so a slow compile never holds up the
other lanes' steps; the offline paths compile at admission.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch

from hinfer.engine.structured.tags import structural_tag
from hinfer.sampling_params import StructuredOutput

log = logging.getLogger("hinfer.structured")
SLOW_COMPILE_MS = 50.0  # compiles at least this long are logged with their time


@dataclass(frozen=True)
class PreparedGrammar:
    """A request's grammar, compiled ahead (GrammarBackend.prepare); `compiled` None: the request runs without
    one (checked tool calls whose tools no grammar can take)."""

    compiled: Any  # xgrammar.CompiledGrammar | None


@dataclass
class GrammarState:
    """One request's position in its grammar. `accept` is called with every token the request produces."""

    matcher: Any  # xgrammar.GrammarMatcher
    failed: bool = False  # a token the grammar refused was produced (e.g. a stop token id): constraint dropped
    accepted: int = 0

    @property
    def active(self) -> bool:
        return not self.failed and not self.matcher.is_terminated()

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        self.matcher.fill_next_token_bitmask(bitmask, row)

    def must_stop(self, vocab_size: int) -> bool:
        """The grammar is complete and nothing but a stop token may follow: the engine ends the request here
        (one step early, and right even where the model's vocabulary has no stop token)."""
        if not self.active or not self.matcher.is_completed():
            return False
        from hinfer.engine.structured.bitmask import unpack_bitmask

        mask = torch.full((1, -(-vocab_size // 32)), -1, dtype=torch.int32)
        self.matcher.fill_next_token_bitmask(mask, 0)
        allowed = unpack_bitmask(mask, vocab_size)[0]
        allowed[[t for t in self.matcher.stop_token_ids if t < vocab_size]] = False
        return not bool(allowed.any())

    def accept(self, token_id: int) -> None:
        if not self.active:
            return
        if self.matcher.accept_token(token_id):
            self.accepted += 1
            return
        self.failed = True
        log.warning("grammar refused token %d after %d tokens; the rest of the answer is unconstrained",
                    token_id, self.accepted)


class GrammarBackend:
    """Compiles StructuredOutput into matchers. `vocab_size` is the model's (logit columns, padding included);
    ids the tokenizer does not have, and special tokens, are never allowed; `stop_token_ids` end a grammar."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int], threads: int = 2) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = list(stop_token_ids)
        self.threads = threads
        self._compiler: Any = None
        self._lock = threading.Lock()

    def _get_compiler(self) -> Any:
        with self._lock:
            if self._compiler is None:
                import xgrammar as xgr

                tok = self.tokenizer
                special = tok.special_ids
                # Special tokens (and padding ids) as "" are never allowed inside a grammar; stop ids end it.
                vocab = ["" if i in special or i >= tok.vocab_size else (tok.id_to_token(i) or "")
                         for i in range(self.vocab_size)]  # fmt: skip
                info = xgr.TokenizerInfo(vocab, xgr.VocabType.BYTE_LEVEL, vocab_size=self.vocab_size,
                                         stop_token_ids=self.stop_token_ids)
                self._compiler = xgr.GrammarCompiler(info, max_threads=self.threads)
            return self._compiler

    def compile(self, so: StructuredOutput) -> Any:
        """-> xgrammar.CompiledGrammar. Raises ValueError for schemas / patterns xgrammar cannot take."""
        so.validate()
        try:
            tag = structural_tag(so)
            return self._get_compiler().compile_structural_tag(json.dumps(tag))
        except (RuntimeError, ValueError, TypeError) as e:  # xgrammar reports bad input as these
            raise ValueError(f"cannot build a grammar for this structured output: {_first_line(e)}") from e

    def prepare(self, so: StructuredOutput, request_id: str) -> PreparedGrammar:
        """Compile a request's grammar (thread-safe: the server calls it off the engine thread, so that a slow
        compile holds up only its own request). Raises ValueError for a grammar the client asked for that
        cannot be built; checked tool calls are the server's choice, not the client's: a tool schema the grammar
        cannot take leaves the calls unchecked rather than failing the request."""
        t0 = time.perf_counter()
        try:
            compiled = self.compile(so)
        except ValueError:
            if not so.tools_optional:
                raise
            log.warning("tool calls left unchecked for request %s: no grammar for its tools", request_id)
            compiled = None
        ms = (time.perf_counter() - t0) * 1e3
        if ms >= SLOW_COMPILE_MS:
            log.info("grammar for request %s compiled in %.0f ms", request_id, ms)
        return PreparedGrammar(compiled)

    def matcher(self, prepared: PreparedGrammar) -> GrammarState | None:
        """A fresh matcher over a prepared grammar; None where the request runs without one."""
        if prepared.compiled is None:
            return None
        import xgrammar as xgr

        return GrammarState(xgr.GrammarMatcher(prepared.compiled))


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
