"""A downloaded folder is untrusted input: a config number that would build a million layers, a
size of the wrong type, a config that claims more parameters than its weights file holds, a
weights file that is not one (or whose header lies), a pickle that asks for code, a tokenizer
file that is broken, nested too deep, of another schema or with an id no embedding row has, and
a ``source.spm`` that is no SentencePiece model are each refused on one line naming the file,
before anything is built, in bounded time and memory."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.hub.folders import vocabulary_files, write_folder  # noqa: E402
from tests.hub.marian_folder import write_marian_folder  # noqa: E402
from tests.peak_memory import run_with_peak  # noqa: E402
from transformer.hub import HubError, checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory) -> Path:
    return write_folder("bert", tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def roberta_files(tmp_path_factory) -> Path:
    """A RoBERTa folder without tokenizer.json: vocab.json, merges.txt, tokenizer_config.json."""
    root = tmp_path_factory.mktemp("roberta")
    return vocabulary_files(write_folder("roberta", root / "hf"), root / "files", "roberta")


@pytest.fixture(scope="module")
def marian(tmp_path_factory) -> Path:
    return write_marian_folder(tmp_path_factory.mktemp("marian"))


def edited(folder: Path, tmp_path: Path, **changes) -> Path:
    """A copy of ``folder`` (its files linked) whose config.json has ``changes``."""
    out = tmp_path / f"edited-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    for f in folder.iterdir():
        if f.name != "config.json":
            (out / f.name).symlink_to(f)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (out / "config.json").write_text(json.dumps(config))
    return out


def replaced(folder: Path, tmp_path: Path, name: str, data: str | bytes) -> Path:
    """A copy of ``folder`` (its files linked) whose file ``name`` holds ``data``."""
    out = tmp_path / f"replaced-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    for f in folder.iterdir():
        if f.name != name:
            (out / f.name).symlink_to(f)
    (out / name).write_bytes(data.encode(errors="surrogateescape") if isinstance(data, str) else data)
    return out


DEEP = "[" * 100_000 + "]" * 100_000


def refusal(folder: Path) -> str:
    start = time.perf_counter()
    with pytest.raises(HubError) as err:
        checkpoint(f"hf:{folder}")
    assert time.perf_counter() - start < 30
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("key", ["num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads"])
def test_a_bert_size_of_a_million_is_refused_by_name_before_anything_is_built(bert_folder, tmp_path, key):
    assert key in refusal(edited(bert_folder, tmp_path, **{key: 1_000_000}))


@pytest.mark.parametrize("key", ["encoder_layers", "decoder_layers", "d_model"])
def test_a_marian_size_of_a_million_is_refused_by_name(marian, tmp_path, key):
    assert key in refusal(edited(marian, tmp_path, **{key: 1_000_000}))


@pytest.mark.parametrize("value", [-32, 0, "32", 32.5, None, True])
def test_a_size_of_the_wrong_type_or_range_is_refused_by_name(bert_folder, tmp_path, value):
    message = refusal(edited(bert_folder, tmp_path, hidden_size=value))
    assert "hidden_size" in message and "config.json" in message


@pytest.mark.parametrize("key, value", [("layer_norm_eps", "tiny"), ("hidden_dropout_prob", [0.1]),
                                        ("tie_word_embeddings", "yes"), ("pad_token_id", -1)])
def test_other_values_of_the_wrong_type_are_refused_by_name(bert_folder, tmp_path, key, value):
    assert key in refusal(edited(bert_folder, tmp_path, **{key: value}))


def test_a_config_claiming_more_parameters_than_its_file_holds_is_refused(bert_folder, tmp_path):
    # Inside every declared range, but 30 layers of width 4096 do not fit in a tiny file.
    message = refusal(edited(bert_folder, tmp_path, hidden_size=4096, intermediate_size=16384, num_hidden_layers=30,
                             num_attention_heads=32))
    assert "implies" in message and "model.safetensors" in message


def test_a_config_nested_too_deep_is_one_line(bert_folder, tmp_path):
    folder = edited(bert_folder, tmp_path)
    (folder / "config.json").unlink()
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    assert "config.json" in refusal(folder)


@pytest.mark.parametrize("damage", ["truncated", "empty", "random", "huge_header", "system_file"])
def test_a_weights_file_that_is_not_one_is_refused_on_one_line(bert_folder, tmp_path, damage):
    folder = edited(bert_folder, tmp_path)
    weights = folder / "model.safetensors"
    data = weights.read_bytes()
    weights.unlink()
    if damage == "truncated":
        weights.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        weights.write_bytes(b"")
    elif damage == "random":
        weights.write_bytes(os.urandom(len(data)))
    elif damage == "huge_header":
        weights.write_bytes((10**15).to_bytes(8, "little") + data[8:])
    else:
        weights.symlink_to("/etc/hostname" if Path("/etc/hostname").exists() else sys.executable)
    assert "model.safetensors" in refusal(folder)


class Boom:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_a_pickled_weights_file_that_asks_for_code_is_refused_and_never_runs(bert_folder, tmp_path, monkeypatch):
    import torch

    from safetensors.torch import load_file

    folder = edited(bert_folder, tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save({**state, "y": Boom()}, folder / "pytorch_model.bin")
    monkeypatch.chdir(tmp_path)
    message = refusal(folder)
    assert "was refused" in message and "weights_only" not in message
    assert not (tmp_path / "pwned").exists()


def test_fill_refuses_a_million_layers_in_one_line_within_bounded_time_and_memory(bert_folder, tmp_path):
    folder = edited(bert_folder, tmp_path, num_hidden_layers=1_000_000)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc, peak = run_with_peak([sys.executable, "-m", "transformer.cli.fill", f"ckpt_path=hf:{folder}"],
                               input="the [MASK] .\n", cwd=tmp_path, env=env, timeout=120)
    assert time.perf_counter() - start < 60
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert "num_hidden_layers=1000000" in lines[0]
    assert peak < 1024 * 1024  # KiB: under 1 GB
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("edited")) == []


def tokenizer_json(folder: Path, damage: str) -> str:
    """The folder's tokenizer.json damaged as a careless or hostile hand would."""
    state = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if damage == "malformed":
        return '{"version": "1.0", "model": {'
    if damage == "nested":
        return DEEP
    if damage == "nested_object":
        return '{"a":' * 100_000 + "1" + "}" * 100_000
    if damage == "another_schema":
        return json.dumps({"model": {"type": "NoSuchModel"}})
    if damage == "not_an_object":
        return "[1, 2]"
    vocab = state["model"]["vocab"]
    piece = next(p for p in vocab if p.isalpha())
    if damage == "negative_id":
        vocab[piece] = -1
    elif damage == "negative_added_id":
        state["added_tokens"][0]["id"] = -5
    elif damage == "id_past_u32":
        vocab[piece] = 10**12
    elif damage == "id_past_the_embedding":  # within u32, but the model has no such row
        vocab[piece] = 5000
    return json.dumps(state)


TOKENIZER_DAMAGES = ["malformed", "nested", "nested_object", "another_schema", "not_an_object", "negative_id",
                     "negative_added_id", "id_past_u32", "id_past_the_embedding"]


@pytest.mark.parametrize("damage", TOKENIZER_DAMAGES)
def test_a_broken_tokenizer_json_is_refused_naming_it(bert_folder, tmp_path, damage):
    message = refusal(replaced(bert_folder, tmp_path, "tokenizer.json", tokenizer_json(bert_folder, damage)))
    assert "tokenizer.json" in message
    if damage in ("negative_id", "negative_added_id"):
        assert ("model.vocab[" if damage == "negative_id" else "added_tokens[0].id") in message


#: What a broken file holds, by name (the rest are written as given).
BROKEN = {"nested": DEEP, "malformed": "{not json", "not_utf8": "\udcff not UTF-8", "empty": "",
          "text": "hello world\n"}


def broken(data: str) -> str:
    return BROKEN.get(data, data)


@pytest.mark.parametrize("name, data", [
    ("tokenizer_config.json", "nested"), ("tokenizer_config.json", "malformed"), ("tokenizer_config.json", "[]"),
    ("vocab.json", "nested"), ("vocab.json", "malformed"), ("vocab.json", '{"<s>": -3}'),
    ("vocab.json", '{"<s>": "zero"}'), ("special_tokens_map.json", "nested"), ("added_tokens.json", "nested"),
    ("added_tokens.json", '{"extra": -1}'), ("merges.txt", "not_utf8")])
def test_a_broken_vocabulary_file_is_refused_naming_it(roberta_files, tmp_path, name, data):
    assert name in refusal(replaced(roberta_files, tmp_path, name, broken(data)))


@pytest.mark.parametrize("name, data", [
    ("tokenizer_config.json", "nested"), ("tokenizer_config.json", "malformed"), ("tokenizer_config.json", "[1]"),
    ("tokenizer_config.json", '{"unk_token": {"no": "content"}}'),
    ("tokenizer_config.json", '{"separate_vocabs": true, "target_vocab_file": "/etc/passwd"}'),
    ("vocab.json", "nested"), ("vocab.json", "malformed"), ("vocab.json", "[1]"), ("vocab.json", "negative"),
    ("vocab.json", "string_id"), ("vocab.json", "past_the_embedding"),
    ("source.spm", "random"), ("source.spm", "empty"), ("source.spm", "text"), ("source.spm", "half"),
    ("target.spm", "random")])
def test_a_broken_marian_tokenizer_file_is_refused_naming_it(marian, tmp_path, name, data):
    if data == "random":
        data = os.urandom(3000)
    elif data in ("negative", "string_id", "past_the_embedding"):
        vocab = json.loads((marian / "vocab.json").read_text(encoding="utf-8"))
        vocab[list(vocab)[5]] = {"negative": -3, "string_id": "x", "past_the_embedding": 9000}[data]
        data = json.dumps(vocab)
    elif data == "half":
        data = (marian / name).read_bytes()[:1000]
    else:
        data = broken(data)
    assert name.split(".")[0] in refusal(replaced(marian, tmp_path, name, data))


def lying_header(weights: bytes, lie: str) -> bytes:
    """A safetensors file whose header lies about one tensor's ``shape``, ``offsets`` or ``dtype``."""
    n = struct.unpack("<Q", weights[:8])[0]
    header = json.loads(weights[8:8 + n])
    name = next(k for k in header if k != "__metadata__")
    if lie == "shape":
        header[name]["shape"] = [2 * s for s in header[name]["shape"]]
    elif lie == "offsets":
        header[name]["data_offsets"] = [0, 10**12]
    elif lie == "half_offsets":
        start, end = header[name]["data_offsets"]
        header[name]["data_offsets"] = [start, start + (end - start) // 2]
    elif lie == "dtype":
        header[name]["dtype"] = "F64"
    else:
        header[name]["dtype"] = "Q7"
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + weights[8 + n:]


@pytest.mark.parametrize("lie", ["shape", "offsets", "half_offsets", "dtype", "unknown_dtype"])
@pytest.mark.parametrize("family", ["bert", "marian"])
def test_a_safetensors_header_that_lies_is_refused_naming_the_file(bert_folder, marian, tmp_path, lie, family):
    folder = bert_folder if family == "bert" else marian
    data = lying_header((folder / "model.safetensors").read_bytes(), lie)
    assert "model.safetensors" in refusal(replaced(folder, tmp_path, "model.safetensors", data))


def one_line_in_bounds(args: list[str], stdin: str, cwd: Path) -> str:
    """A command's one ``error:`` line, exit 2, within 30 s and 1 GB, nothing written."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc, peak = run_with_peak([sys.executable, "-m", *args], input=stdin, cwd=cwd, env=env, timeout=120)
    assert time.perf_counter() - start < 60  # 30 s on a quiet machine; the suite's load doubles it
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert peak < 1024 * 1024  # KiB: under 1 GB
    assert list(cwd.iterdir()) == []
    return lines[0]


def test_fill_refuses_a_negative_tokenizer_id_in_one_line(bert_folder, tmp_path):
    folder = replaced(bert_folder, tmp_path, "tokenizer.json", tokenizer_json(bert_folder, "negative_id"))
    (tmp_path / "cwd").mkdir()
    line = one_line_in_bounds(["transformer.cli.fill", f"ckpt_path=hf:{folder}"], "the [MASK] .\n", tmp_path / "cwd")
    assert "tokenizer.json: model.vocab[" in line


def test_decode_and_export_refuse_a_source_spm_that_is_not_one_in_one_line(marian, tmp_path):
    folder = replaced(marian, tmp_path, "source.spm", os.urandom(3000))
    (tmp_path / "cwd").mkdir()
    line = one_line_in_bounds(["transformer.cli.decode", f"ckpt_path=hf:{folder}"], "the movie was great .\n",
                              tmp_path / "cwd")
    assert line == f"error: {folder}/source.spm: not a SentencePiece model"
    line = one_line_in_bounds(["transformer.cli.export", f"ckpt_path=hf:{folder}", "format=hf", "output_dir=out"], "",
                              tmp_path / "cwd")
    assert "source.spm" in line
