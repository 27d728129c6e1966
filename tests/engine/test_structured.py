"""Structured output in the engine: the bitmask against a plain masked fill, grammars against the demo model."""

from __future__ import annotations

import json
import math
import random
import re

import jsonschema
import pytest
import torch
from schema_gen import random_schema

from hinfer.engine.structured.bitmask import apply_token_bitmask, unpack_bitmask
from hinfer.sampling_params import SamplingParams, StructuredOutput


def _pack(allowed: torch.Tensor) -> torch.Tensor:
    """bool [N, V] -> xgrammar's int32 words (bit j of word w: token 32*w + j)."""
    n, v = allowed.shape
    words = -(-v // 32)
    padded = torch.zeros((n, words * 32), dtype=torch.int64)
    padded[:, :v] = allowed.long()
    bits = padded.view(n, words, 32) << torch.arange(32)
    packed = bits.sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


@pytest.mark.parametrize("vocab", [7, 32, 1000, 4099])
def test_bitmask_matches_masked_fill(vocab):
    g = torch.Generator().manual_seed(vocab)
    logits = torch.randn((5, vocab), generator=g)
    allowed = torch.rand((3, vocab), generator=g) < 0.3
    allowed[:, -1] = True  # the last id and the sign bit of a word are the easy ones to get wrong
    allowed[:, min(31, vocab - 1)] = True
    rows = [4, 0, 2]
    got = logits.clone()
    apply_token_bitmask(got, rows, _pack(allowed))
    want = logits.clone()
    for j, r in enumerate(rows):
        want[r] = want[r].masked_fill(~allowed[j], -math.inf)
    assert torch.equal(got, want)  # rows 1 and 3 untouched
    assert torch.equal(unpack_bitmask(_pack(allowed), vocab), allowed)


def test_bitmask_matches_xgrammar_kernel():
    xgr = pytest.importorskip("xgrammar")
    g = torch.Generator().manual_seed(3)
    logits = torch.randn((2, 100), generator=g)
    mask = _pack(torch.rand((2, 100), generator=g) < 0.5)
    want = logits.clone()
    xgr.apply_token_bitmask_inplace(want, mask, vocab_size=100)
    got = logits.clone()
    apply_token_bitmask(got, [0, 1], mask)
    assert torch.equal(got, want)


@pytest.fixture(scope="module")
def llm():
    from hinfer import LLM

    return LLM("demo", max_concurrency=16, max_context=2048)


def _run(llm, schemas, **kw):
    # random weights love blanks: a short whitespace run keeps the answers within max_tokens
    so = [StructuredOutput(json_schema=s, max_json_whitespace=2) for s in schemas]
    params = [SamplingParams(max_tokens=256, temperature=0.0 if i % 2 else 1.0, seed=i, structured=x, **kw)
              for i, x in enumerate(so)]  # fmt: skip
    return llm.generate([[{"role": "user", "content": "Answer in JSON."}]] * len(so), params,
                        enable_thinking=False)


def test_random_schemas_always_validate(llm):
    """Seeded property test: 48 random schemas, every answer parses and validates, and ends by the grammar."""
    rng = random.Random(20261201)
    schemas = [random_schema(rng) for _ in range(48)]
    for s, out in zip(schemas, _run(llm, schemas)):
        assert out.finish_reason == "stop", (s, out.text)
        jsonschema.validate(json.loads(out.text), s)


def test_json_after_reasoning(llm):
    """Thinking on with a small budget: the reasoning is free, the forced `</think>` then JSON."""
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
              "required": ["n"]}
    think_end = llm.tokenizer.think_end_id
    p = SamplingParams(max_tokens=128, seed=1, thinking_budget=5, think_end_token_id=think_end,
                       structured=StructuredOutput(json_schema=schema, after_reasoning=True))
    out = llm.generate([[{"role": "user", "content": "hi"}]], p, enable_thinking=True)[0]
    reasoning, sep, answer = out.text.partition("</think>")
    assert out.finish_reason == "stop" and sep and len(out.token_ids) > 5
    assert answer.startswith("\n\n")
    jsonschema.validate(json.loads(answer), schema)


def test_forced_tool_call_is_parseable(llm):
    from hinfer.server.tool_parser import ToolCallParser, tool_schemas

    params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 5},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 7}},
              "required": ["city", "days"]}  # fmt: skip
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}},
             {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]
    for name in ("get_weather", None):
        so = StructuredOutput(tools=tools, tool_name=name, parallel_tool_calls=False)
        out = llm.generate(["Weather?"], SamplingParams(max_tokens=200, seed=3, structured=so))[0]
        assert out.finish_reason == "stop", out.text
        parser = ToolCallParser(tool_schemas(tools), new_id=lambda: "call_1", trim_strings=True)
        parser.feed(out.text)
        parser.flush()
        assert len(parser.calls) == 1, out.text
        if name:
            assert parser.calls[0].name == name
            jsonschema.validate(json.loads(parser.calls[0].arguments_json), params)


def test_auto_tool_calls_are_held_to_valid_calls(llm):
    """tools_optional (tool_choice auto under --tool-call-grammar): the text runs free, and a `<tool_call>` the
    model starts (made likely here with a logit bias on that token) goes on as a valid call of a tool shown."""
    from hinfer.server.tool_parser import ToolCallParser, tool_schemas

    params = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 5}},
              "required": ["city"]}  # fmt: skip
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": params}}]
    call = llm.tokenizer.token_to_id("<tool_call>")
    so = StructuredOutput(tools=tools, parallel_tool_calls=False, tools_optional=True, max_json_whitespace=2)
    # +12 on the token: every seed tried starts a call within its first ten tokens (measured over 8; +8: 7 of 8,
    # some after hundreds of tokens)
    outs = llm.generate(["Weather?"] * 4, [SamplingParams(max_tokens=200, seed=s, structured=so, logit_bias={call: 12.0})
                                           for s in range(4)])  # fmt: skip
    started = 0
    for out in outs:
        parser = ToolCallParser(tool_schemas(tools), new_id=lambda: "call_1", trim_strings=True)
        parser.feed(out.text)
        parser.flush()
        if "<tool_call>" not in out.text:
            continue
        started += 1
        assert out.finish_reason == "stop" and len(parser.calls) == 1, out.text
        jsonschema.validate(json.loads(parser.calls[0].arguments_json), params)
    assert started >= 3, [o.text[:80] for o in outs]


# a small lark grammar in the shape of Codex CLI's apply_patch, bounded so that random weights reach its end
PATCH_LARK = """start: begin hunk hunk? end
begin: "*** Begin Patch" LF
end: "*** End Patch"
hunk: "*** Update File: " NAME LF line line?
line: ("+" | "-") /[a-z ]{1,12}/ LF
NAME: /[a-z]{1,8}\\.py/
%import common.LF
"""


@pytest.mark.parametrize("syntax, definition, check", [
    ("lark", PATCH_LARK, re.compile(r"\*\*\* Begin Patch\n(\*\*\* Update File: [a-z]{1,8}\.py\n([+-][a-z ]{1,12}\n){1,2})"
                                    r"{1,2}\*\*\* End Patch")),
    ("regex", r"(ab|cd){2,4}", re.compile(r"(ab|cd){2,4}")),
])  # fmt: skip
def test_forced_custom_tool_call_follows_its_grammar(llm, syntax, definition, check):
    """A tool with a grammar (the Responses API's custom tools): the forced call's one string parameter is raw text
    in that grammar, which the output parser reads back whole."""
    from hinfer.server.tool_parser import ToolCallParser, tool_schemas

    params = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
    tools = [{"type": "function", "function": {"name": "apply_patch", "parameters": params}}]
    grammars = {"apply_patch": {"parameter": "input", "syntax": syntax, "definition": definition}}
    so = StructuredOutput(tools=tools, tool_name="apply_patch", parallel_tool_calls=False, tool_grammars=grammars)
    outs = llm.generate(["Patch?"] * 2, [SamplingParams(max_tokens=300, seed=s, structured=so) for s in range(2)])
    for out in outs:
        assert out.finish_reason == "stop", out.text
        parser = ToolCallParser(tool_schemas(tools), new_id=lambda: "call_1", trim_strings=True)
        parser.feed(out.text)
        parser.flush()
        assert len(parser.calls) == 1 and parser.calls[0].name == "apply_patch", out.text
        text = json.loads(parser.calls[0].arguments_json)["input"]
        assert check.fullmatch(text), text


def test_regex(llm):
    so = StructuredOutput(regex=r"(yes|no)-[0-9]{2}")
    outs = llm.generate(["?"] * 3, [SamplingParams(max_tokens=20, seed=i, structured=so) for i in range(3)])
    for o in outs:
        assert o.finish_reason == "stop"
        assert o.text in {f"{w}-{n:02d}" for w in ("yes", "no") for n in range(100)}


def test_bad_schema_is_a_value_error(llm):
    with pytest.raises(ValueError):
        llm.generate(["?"], SamplingParams(max_tokens=4, structured=StructuredOutput(regex="(")))


def test_unbuildable_tool_grammar_fails_forced_calls_only(llm):
    """A tool schema the grammar cannot take (an invalid pattern): forced calls fail the request (the client asked
    for them), checked auto calls run unchecked (the server's choice)."""
    bad = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "string", "pattern": "("}}}}}]  # fmt: skip
    with pytest.raises(ValueError):
        llm.generate(["?"], SamplingParams(max_tokens=4, structured=StructuredOutput(tools=bad)))
    out = llm.generate(["?"], SamplingParams(max_tokens=4, structured=StructuredOutput(tools=bad, tools_optional=True)))
    assert len(out[0].token_ids) == 4


class _Drafts:
    """Proposes each request's known continuation (everything right), or a wrong token at every position."""

    def __init__(self, expected: dict[str, list[int]], wrong: bool) -> None:
        self.expected, self.wrong = expected, wrong

    def draft(self, jobs):
        from hinfer.engine.spec import Proposal

        out = []
        for j in jobs:
            n = len(j.seq.output_ids)
            toks = self.expected[j.seq.request_id][n : n + j.num_drafts]
            out.append(Proposal([(t + 1) % 1024 for t in toks] if self.wrong else toks) if j.num_drafts else None)
        return out


@pytest.mark.parametrize("drafter", ["mtp", "known", "wrong"])
def test_constrained_lanes_speculate_and_answer_as_without(make_engine_core, tokenizer, drafter):
    """--spec mtp: constrained lanes (a regex, a JSON schema) draft and verify like the others, each verified
    position masked by its grammar after the drafts before it; the answers are plain decoding's token for token,
    whether the drafts are the MTP head's, all right (a round then runs into the grammar's end and stops there,
    as plain decoding does), or all wrong (tokens the grammar refuses)."""
    from hinfer.engine.protocol import GenerationRequest

    regex = StructuredOutput(regex=r"[0-9]{3}-(ab|cd)")
    longer = StructuredOutput(regex=r"[0-9]{6}-(ab|cd)")  # ends inside a round: cut there, as plain decoding stops
    schema = StructuredOutput(json_schema={"type": "object", "properties": {"n": {"type": "integer"}},
                                           "required": ["n"], "additionalProperties": False})  # fmt: skip
    prompt = [5, 6, 7, 8]  # the tiny model has 1024 ids

    def reqs():
        return [GenerationRequest("c", prompt, SamplingParams(temperature=0, max_tokens=20, structured=regex)),
                GenerationRequest("j", prompt, SamplingParams(temperature=0, max_tokens=24, structured=schema)),
                GenerationRequest("d", prompt, SamplingParams(temperature=0, max_tokens=20, structured=longer)),
                GenerationRequest("u", prompt, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)),
                GenerationRequest("s", prompt, SamplingParams(temperature=1.0, seed=3, max_tokens=20, structured=regex))]

    outs = {}
    for name in ("plain", "spec"):
        core = make_engine_core(max_concurrency=5, **({"spec": "mtp", "draft_tokens": 3, "spec_adaptive": False}
                                                      if name == "spec" else {}))  # fmt: skip
        if name == "spec" and drafter != "mtp":
            core.spec.drafter = _Drafts(outs["plain"], wrong=drafter == "wrong")
        for r in reqs():
            core.add(r)
        toks, seqs = {"c": [], "d": [], "j": [], "u": [], "s": []}, {s.request_id: s for s in core.scheduler.waiting}
        while core.has_work:
            for ev in core.step():
                toks[ev.request_id] += ev.token_ids
        outs[name] = toks
        for r in "cs":  # a sampled constrained lane (rejection sampling over masked rows) keeps its grammar too
            assert re.fullmatch(r"[0-9]{3}-(ab|cd)", tokenizer.decode(toks[r])), (name, r, toks[r])
        assert re.fullmatch(r"[0-9]{6}-(ab|cd)", tokenizer.decode(toks["d"])), toks["d"]
        assert isinstance(json.loads(tokenizer.decode(toks["j"]))["n"], int), tokenizer.decode(toks["j"])
        if name == "spec":
            assert seqs["c"].spec_drafted > 0 and seqs["j"].spec_drafted > 0
            if drafter == "known":
                assert seqs["j"].spec_accepted > 0
    for o in outs.values():
        del o["s"]  # sampled: the same distribution, not the same tokens
    assert outs["plain"] == outs["spec"]
