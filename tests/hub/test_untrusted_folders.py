"""A downloaded folder is untrusted input: a config number that would build a million layers, a
size of the wrong type, a config that claims more parameters than its weights file holds, a
weights file that is not one, or a pickle that asks for code are each refused on one line,
before anything is built, in bounded time and memory."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.hub.folders import write_folder  # noqa: E402
from tests.hub.marian_folder import write_marian_folder  # noqa: E402
from transformer.hub import HubError, checkpoint  # noqa: E402


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory) -> Path:
    return write_folder("bert", tmp_path_factory.mktemp("bert"))


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
    proc = subprocess.run([sys.executable, "-m", "transformer.cli.fill", f"ckpt_path=hf:{folder}"],
                          input="the [MASK] .\n", capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert time.perf_counter() - start < 60
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert "num_hidden_layers=1000000" in lines[0]
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1024 * 1024  # KiB: under 1 GB
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("edited")) == []
