"""The .hinfer artifact: convert, read with plain safetensors, load into the engine, version policy, fixture."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from hinfer import LLM, SamplingParams
from hinfer.cli.commands.convert import convert_checkpoint
from hinfer.errors import HinferError
from hinfer.weights.artifact import FORMAT_VERSION, open_artifact

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "artifact-v1.hinfer"
FIXTURE_PROMPT = [5, 17, 42, 99]
FIXTURE_EXPECTED = [99, 99, 99, 99, 99, 130, 130, 130]  # greedy tokens printed when the fixture was written
# v2 added int4 routed experts ("int4_experts" in the layout): a 4-layer MoE model, experts quantized
FIXTURE_V2 = FIXTURE.with_name("artifact-v2.hinfer")
FIXTURE_V2_EXPECTED = [224, 5, 222, 97, 101, 160, 90, 224]  # printed by `python tests/weights/test_artifact.py v2`
# v3 added the vision tower (`visual.*`): the v1 model's shape with a one-block tower of 4-pixel patches
FIXTURE_V3 = FIXTURE.with_name("artifact-v3.hinfer")
FIXTURE_V3_EXPECTED = [99, 99, 99, 99, 99, 130, 130, 130]  # printed by `python tests/weights/test_artifact.py v3`
# the tower's output for the request's image (first token's first 4 values, last token's last 4): the greedy
# tokens of a model this small hardly depend on the image, these do on every tower weight
FIXTURE_V3_ENCODED = ([-0.0741, -1.2655, 0.2877, -0.2663], [-0.1035, 0.5329, -1.4515, -0.0725])
V3_VISION = {"depth": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 24, "out_hidden_size": 32,
             "num_position_embeddings": 16, "patch_size": 4}  # fmt: skip
V3_IDS = {"image_token_id": 260, "video_token_id": 261, "vision_start_token_id": 262, "vision_end_token_id": 263}
TINY = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
        "head_dim": 16, "linear_num_key_heads": 1, "linear_num_value_heads": 2, "linear_key_head_dim": 8,
        "linear_value_head_dim": 8, "max_position_embeddings": 512}  # fmt: skip
PROMPT = [1, 2, 3, 4, 5, 6, 7]


def _synth(out: Path, config: Path, layers: int = 2, tokenizer: Path | None = None, **over) -> Path:
    from hinfer.weights.synth import write_synthetic_checkpoint

    return write_synthetic_checkpoint(config, out, layers=layers, progress=False, tokenizer_dir=tokenizer,
                                      overrides={**TINY, "vocab_size": 1024, **over})


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, fixtures_dir) -> Path:
    return _synth(tmp_path_factory.mktemp("ckpt"), fixtures_dir / "qwen3.5-0.8b", layers=4)


@pytest.fixture(scope="module")
def artifacts(ckpt, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("art")
    return {q: convert_checkpoint(ckpt, d / f"m-{q}.hinfer", q) for q in ("bf16", "int4", "fp8")}


def _llm(path: Path, **kw) -> LLM:
    return LLM(str(path), device="cpu", max_concurrency=1, **kw)


def _greedy(llm: LLM, prompt: list[int] = PROMPT, n: int = 6) -> list[int]:
    return llm.generate(prompt, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))[0].token_ids


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k].view(torch.uint8), sb[k].view(torch.uint8)), k


def _logits(model: torch.nn.Module, ids: list[int] = PROMPT) -> torch.Tensor:
    """Logits at every position of one prompt, straight through the model (CPU)."""
    from hinfer.model.prompt_logits import prompt_logits

    return prompt_logits(model, ids)


def test_plain_safetensors_reads_it(artifacts):
    for q, path in artifacts.items():
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            assert meta["format"] == "hinfer" and meta["format_version"] == str(FORMAT_VERSION)
            assert json.loads(meta["recipe"])["fmt"] == q
            assert json.loads(meta["config"])["text_config"]["hidden_size"] == 32
            src = json.loads(meta["source"])
            assert {"path", "config_sha256", "index_sha256", "hinfer_version", "created"} <= src.keys()
            assert meta["tokenizer_json"] and meta["chat_template"] and json.loads(meta["generation_config"])
            names = set(f.keys())
            assert "embed_tokens" in names and ("layers.0.mlp.gate_up.weight" in names) == (q == "bf16")
            for n in names:
                f.get_tensor(n)
    with safe_open(str(artifacts["int4"]), framework="pt") as f:
        assert f.get_tensor("layers.0.mlp.down_proj.qweight").dtype == torch.int32
    with safe_open(str(artifacts["fp8"]), framework="pt") as f:
        assert f.get_tensor("layers.0.mlp.down_proj.weight").dtype == torch.float8_e4m3fn


def test_bf16_artifact_matches_the_checkpoint(ckpt, artifacts):
    a, b = _llm(ckpt), _llm(artifacts["bf16"])
    _same_weights(a.model, b.model)
    assert _greedy(a) == _greedy(b)


@pytest.mark.parametrize("q", ["int4", "fp8"])
def test_quantized_artifact_matches_in_memory_quantization(ckpt, artifacts, q):
    a, b = _llm(ckpt, dtype="bf16", weights=q), _llm(artifacts[q], dtype="bf16")
    _same_weights(a.model, b.model)
    assert _greedy(a) == _greedy(b)
    c = _llm(artifacts[q])  # fp32 on CPU: scales / kept tensors cast on load
    logits = c.model.compute_logits(c.model.embed_tokens[:3])
    assert torch.isfinite(logits).all()
    assert len(_greedy(c)) == 6


def test_bf16_artifact_requantizes_on_load_and_refuses_cross_format(artifacts):
    assert len(_greedy(_llm(artifacts["bf16"], dtype="bf16", weights="int4"))) == 6
    with pytest.raises(HinferError, match="holds int4 weights"):
        _llm(artifacts["int4"], weights="fp8")


def test_moe_and_official_fp8_sources_convert(tmp_path, fixtures_dir):
    from hinfer.quant import Int4ExpertsWeight

    moe = _synth(tmp_path / "moe", fixtures_dir / "qwen3.6-35b-a3b", num_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=32, shared_expert_intermediate_size=32)
    art = convert_checkpoint(moe, tmp_path / "moe.hinfer", "int4")
    layout = open_artifact(art).layout  # int4 routed experts (format v2); the MTP head's stay bf16
    assert layout["layers.0.mlp.experts_gate_up"] == {"type": "int4_experts", "in_features": 32, "group": 128}
    assert layout["layers.0.mlp.experts_down"]["type"] == "int4_experts" and not any(p.startswith("mtp.") for p in layout)
    a, b = _llm(moe, dtype="bf16", weights="int4"), _llm(art, dtype="bf16")
    _same_weights(a.model, b.model)
    assert isinstance(b.model.layers[0].mlp.experts_gate_up, Int4ExpertsWeight)
    assert torch.equal(_logits(a.model), _logits(b.model))  # identical bits, every position
    assert _greedy(a) == _greedy(b)
    # an int4 file whose experts stayed bf16 (as every v1 file): loads so, and the plan counts them so
    from dataclasses import replace

    from hinfer.quant import get_recipe
    from hinfer.weights.artifact import engine_weights

    int4 = get_recipe("int4")
    old = convert_checkpoint(moe, tmp_path / "old.hinfer", replace(int4, targets=int4.targets - {"experts"}))
    assert engine_weights(open_artifact(art), "auto") == ("int4-default", None)
    plan_recipe, _ = engine_weights(open_artifact(old), "auto")
    assert plan_recipe.name == "int4-default" and not plan_recipe.experts and str(plan_recipe) == "int4-default"
    assert isinstance(_llm(old).model.layers[0].mlp.experts_gate_up, torch.nn.Parameter)
    from hinfer.weights.synth import write_synthetic_checkpoint

    fp8 = write_synthetic_checkpoint(fixtures_dir / "qwen3.5-0.8b", tmp_path / "fp8", layers=2, fp8=True,
                                     progress=False, overrides={**TINY, "vocab_size": 1024})
    art = convert_checkpoint(fp8, tmp_path / "fp8.hinfer", "bf16")
    _same_weights(_llm(fp8, dtype="bf16").model, _llm(art, dtype="bf16").model)  # dequantized alike


@pytest.mark.parametrize("recipe", ["fp8-default", "fp8-block"])
def test_fp8_moe_artifact_round_trip(tmp_path, fixtures_dir, recipe):
    """fp8 routed experts (layout type `fp8_experts`, format v2): the artifact holds the in-memory quantization's
    e4m3 bits and scales, loads them into Fp8ExpertsWeight, and gives identical logits."""
    from hinfer.quant import Fp8ExpertsWeight, quantize_model

    moe = _synth(tmp_path / "moe", fixtures_dir / "qwen3.6-35b-a3b", num_experts=4, num_experts_per_tok=2,
                 moe_intermediate_size=32, shared_expert_intermediate_size=32)
    art = convert_checkpoint(moe, tmp_path / "moe.hinfer", recipe)
    layout = open_artifact(art).layout
    block = [128, 128] if recipe == "fp8-block" else None
    assert layout["layers.0.mlp.experts_gate_up"] == {"type": "fp8_experts", "block": block}
    assert layout["layers.0.mlp.experts_down"]["type"] == "fp8_experts" and not any(p.startswith("mtp.") for p in layout)
    with safe_open(str(art), framework="pt") as f:
        assert f.get_tensor("layers.0.mlp.experts_gate_up.weight").dtype == torch.float8_e4m3fn
        assert f.get_tensor("layers.0.mlp.experts_gate_up.scale").shape == ((4, 1, 1) if block else (4, 64))
    a, b = _llm(moe, dtype="bf16"), _llm(art, dtype="bf16")
    quantize_model(a.model, recipe)
    _same_weights(a.model, b.model)
    experts = b.model.layers[0].mlp.experts_gate_up
    assert isinstance(experts, Fp8ExpertsWeight) and experts.block == (None if block is None else tuple(block))
    assert torch.equal(_logits(a.model), _logits(b.model))  # identical bits, every position
    if recipe == "fp8-default":
        assert _greedy(_llm(moe, dtype="bf16", weights="fp8")) == _greedy(b)


def test_newer_version_and_foreign_files_are_refused(artifacts, ckpt, tmp_path):
    data = artifacts["bf16"].read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header["__metadata__"]["format_version"] = str(FORMAT_VERSION + 1)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (n - len(raw)) if len(raw) <= n else b""
    assert len(raw) == n  # same length: tensor offsets stay valid
    newer = tmp_path / "newer.hinfer"
    newer.write_bytes(data[:8] + raw + data[8 + n :])
    newest = rf"format v{FORMAT_VERSION + 1}\); this hinfer reads v1\.\.v{FORMAT_VERSION}: upgrade"
    with pytest.raises(HinferError, match=rf"written by a newer hinfer \({newest}"):
        _llm(newer)
    plain = tmp_path / "plain.hinfer"
    plain.write_bytes((ckpt / "model-00001-of-00001.safetensors").read_bytes())
    with pytest.raises(HinferError, match="not a hinfer artifact"):
        open_artifact(plain)
    r = subprocess.run([sys.executable, "-m", "hinfer", "inspect", str(newer)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "newer hinfer" in r.stderr


def test_convert_refuses_tensors_the_folder_loader_refuses(ckpt, tmp_path):
    """A config keeping 3 of the 4 layers whose shards still hold layer 3: serving the folder fails, so converting
    it must fail too (the artifact serves what the folder serves)."""
    view = tmp_path / "view"
    view.mkdir()
    for f in ckpt.iterdir():
        if f.name != "config.json":
            (view / f.name).symlink_to(f)
    raw = json.loads((ckpt / "config.json").read_text())
    tc = raw.get("text_config", raw)
    tc["num_hidden_layers"], tc["layer_types"] = 3, tc["layer_types"][:3]
    (view / "config.json").write_text(json.dumps(raw))
    with pytest.raises(HinferError, match="unexpected tensor 'layers.3."):
        convert_checkpoint(view, tmp_path / "v.hinfer", "int4")
    assert not (tmp_path / "v.hinfer").exists() and not (tmp_path / "v.hinfer.partial").exists()


def test_cli_convert_and_inspect(ckpt, tmp_path):
    out = tmp_path / "cli.hinfer"
    r = subprocess.run([sys.executable, "-m", "hinfer", "convert", str(ckpt), str(out), "--quant", "int4",
                        "--recipe", "int4-sym"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "int4-sym" in r.stderr and "GB" in r.stderr
    r = subprocess.run([sys.executable, "-m", "hinfer", "inspect", str(out), "--tensors"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for needle in (f"format v{FORMAT_VERSION}", "int4-sym", "hidden_size=32", "int32", "tokenizer_json yes",
                   "layers.0.mlp.down_proj.qweight"):
        assert needle in r.stdout
    assert open_artifact(out).layout["layers.0.mlp.down_proj"] == {"type": "int4", "in_features": 64, "group": 128}


_RSS_SCRIPT = """
import sys
from pathlib import Path
from hinfer.cli.commands.convert import convert_checkpoint
from hinfer.weights.hf_reader import HFCheckpoint

def kb(key):
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(key))
    return int(line.split()[1])

HFCheckpoint(sys.argv[1])  # imports and header parsing done: the baseline
Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
before = kb("VmRSS")
convert_checkpoint(sys.argv[1], sys.argv[2], sys.argv[3])
print(before, kb("VmHWM"))
"""


def _convert_peak(ckpt: Path, out: Path) -> int:
    """Peak RSS growth (bytes) of converting `ckpt` to int4 in a fresh process, over its RSS once opened."""
    r = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, str(ckpt), str(out), "int4"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, peak = (int(v) * 1024 for v in r.stdout.split())
    return peak - before


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc peak-RSS reset")
def test_convert_peak_memory_does_not_grow_with_the_model(tmp_path, fixtures_dir):
    # 2 vs 16 layers of ~30 MB: a converter holding the model would peak ~450 MB higher on the larger one
    shape = dict(hidden_size=1024, intermediate_size=4096, vocab_size=4096, linear_num_key_heads=4,
                 linear_num_value_heads=8, linear_key_head_dim=64, linear_value_head_dim=64,
                 num_attention_heads=8, head_dim=64)
    small = _synth(tmp_path / "small", fixtures_dir / "qwen3.5-0.8b", layers=2, **shape)
    big = _synth(tmp_path / "big", fixtures_dir / "qwen3.5-0.8b", layers=16, **shape)
    sizes = [sum(p.stat().st_size for p in d.glob("*.safetensors")) for d in (small, big)]
    assert sizes[1] - sizes[0] > 4e8
    grow = _convert_peak(big, tmp_path / "big.hinfer") - _convert_peak(small, tmp_path / "small.hinfer")
    assert grow < (sizes[1] - sizes[0]) / 5, (grow, sizes)


def test_committed_v1_fixture_loads_and_generates():
    art = open_artifact(FIXTURE)
    assert art.version == 1 and art.fmt == "int4"
    llm = _llm(FIXTURE)
    assert _greedy(llm, FIXTURE_PROMPT, 8) == FIXTURE_EXPECTED
    assert llm.tokenizer.decode(llm.tokenizer.encode("hi there")) == "hi there"
    llm = _llm(FIXTURE, dtype="bf16", spec="mtp")  # the MTP head's tensors load too
    assert llm.model.mtp is not None


def test_plan_reads_an_artifact_header():
    """`hinfer plan X.hinfer` plans the stored recipe: its weights row is the file's tensor bytes exactly."""
    from hinfer.cli.commands.plan import config_and_weights
    from hinfer.engine.weight_bytes import weight_bytes

    cfg, recipe = config_and_weights(str(FIXTURE_V2), "auto")
    with safe_open(str(FIXTURE_V2), framework="pt") as f:
        sizes = {k: f.get_slice(k).get_shape() for k in f.keys()}
        dtypes = {k: f.get_slice(k).get_dtype() for k in f.keys()}
    item = {"BF16": 2, "I32": 4, "U8": 1, "F32": 4}
    nbytes = {k: item[dtypes[k]] * math.prod(v) for k, v in sizes.items()}
    assert weight_bytes(cfg, recipe, 2, include_mtp=True).total == sum(nbytes.values())
    assert weight_bytes(cfg, recipe, 2, include_mtp=False).total == sum(
        b for k, b in nbytes.items() if not k.startswith("mtp"))


def test_committed_v2_fixture_loads_and_generates():
    from hinfer.quant.experts import Int4ExpertsWeight

    art = open_artifact(FIXTURE_V2)
    assert art.version == 2 and art.fmt == "int4"
    llm = _llm(FIXTURE_V2)
    assert isinstance(llm.model.layers[0].mlp.experts_gate_up, Int4ExpertsWeight)
    assert _greedy(llm, FIXTURE_PROMPT, 8) == FIXTURE_V2_EXPECTED


def _v3_image_request(n: int = 8):
    """The v3 fixture's greedy request: text, one 4 x 4-patch image (4 tokens), text."""
    from hinfer.engine.protocol import GenerationRequest
    from hinfer.model.image_prompt import ImageInput

    pixels = torch.rand(16, 3 * 2 * 4 * 4, generator=torch.Generator().manual_seed(3)) * 2 - 1
    ids = [*FIXTURE_PROMPT[:2], V3_IDS["vision_start_token_id"], *[V3_IDS["image_token_id"]] * 4,
           V3_IDS["vision_end_token_id"], *FIXTURE_PROMPT[2:]]  # fmt: skip
    params = SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)
    return GenerationRequest("v3", ids, params, images=[ImageInput(pixels, (1, 4, 4))])


def _greedy_with_image(llm: LLM) -> list[int]:
    llm.core.add(_v3_image_request())
    out: list[int] = []
    while llm.core.has_work:
        for ev in llm.core.step():
            out += ev.token_ids
    return out


def test_committed_v3_fixture_loads_and_generates_with_an_image():
    art = open_artifact(FIXTURE_V3)
    assert art.version == 3 and art.fmt == "int4" and art.has_visual
    llm = _llm(FIXTURE_V3)
    assert llm.model.visual is not None
    img = _v3_image_request().images[0]
    with torch.inference_mode():
        enc = llm.model.encode_images(img.pixels, [img.grid])
    assert enc.shape == (4, 32)
    torch.testing.assert_close(enc[0, :4], torch.tensor(FIXTURE_V3_ENCODED[0]), atol=2e-4, rtol=0)
    torch.testing.assert_close(enc[3, -4:], torch.tensor(FIXTURE_V3_ENCODED[1]), atol=2e-4, rtol=0)
    assert _greedy_with_image(llm) == FIXTURE_V3_EXPECTED


# ---- the committed fixture: `python tests/weights/test_artifact.py` rewrites it (only for a new version) ---------
def _tiny_tokenizer(folder: Path) -> Path:
    """A byte-level tokenizer of 256 byte tokens + 3 specials: keeps the fixture a few tens of KB."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda c: ord(c)))}
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return folder


def write_fixture(dst: Path = FIXTURE, moe: bool = False, vision: bool = False) -> list[int]:
    """v1 was written with moe=False by the v1 code, v2 with moe=True (int4 experts) by the v2 code; the current
    code writes v3 (vision=True: the v1 model with a tiny vision tower, its token ids inside the vocabulary)."""
    import tempfile

    from hinfer.fixtures import config_dir
    from hinfer.weights.synth import write_synthetic_checkpoint

    over = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                shared_expert_intermediate_size=32) if moe else {}  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        src, tok = config_dir("qwen3.6-35b-a3b" if moe else "qwen3.5-0.8b"), _tiny_tokenizer(Path(d) / "tok")
        if vision:
            ck = write_synthetic_checkpoint(src, Path(d) / "ck", layers=4, progress=False, tokenizer_dir=tok,
                                            overrides={**TINY, "vocab_size": 272}, vision=True,
                                            vision_overrides=V3_VISION)  # fmt: skip
            raw = json.loads((ck / "config.json").read_text())
            (ck / "config.json").write_text(json.dumps(raw | V3_IDS))
        else:
            ck = _synth(Path(d) / "ck", src, layers=4, tokenizer=tok, vocab_size=272, **over)
        gen = json.loads((ck / "generation_config.json").read_text())
        gen["eos_token_id"] = [258, 256]  # <|im_end|>, <|endoftext|> of the tiny tokenizer
        (ck / "generation_config.json").write_text(json.dumps(gen))
        convert_checkpoint(ck, dst, "int4")
    return _greedy_with_image(_llm(dst)) if vision else _greedy(_llm(dst), FIXTURE_PROMPT, 8)


if __name__ == "__main__":
    if sys.argv[1:] == ["v2"]:
        print("expected tokens:", write_fixture(FIXTURE_V2, moe=True))
    elif sys.argv[1:] == ["v3"]:
        print("expected tokens:", write_fixture(FIXTURE_V3, vision=True))
    else:
        print("expected tokens:", write_fixture())
