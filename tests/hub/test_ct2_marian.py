"""A Marian folder exported to CTranslate2: ``transformer-export format=ctranslate2
ckpt_path=hf:<folder>`` (or a checkpoint of ours made from such a folder) writes Marian's
switches (halves sinusoids, SiLU, the vocabulary-score bias, the embedding scale or its absence,
the padding id as the decoder's start), and ``ctranslate2.Translator`` then gives, greedy and beam,
the lines ``transformer-decode`` gives and, token for token, the ids of our search. Offline: the
folder is written here (``marian_folder.py``)."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("sentencepiece")
pytest.importorskip("transformers")
ctranslate2 = pytest.importorskip("ctranslate2")

from cli.hydra_helpers import compose_cfg  # noqa: E402
from folders import sentences  # noqa: E402
from marian_folder import write_marian_folder  # noqa: E402
from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.cli import export as export_cli  # noqa: E402
from transformer.export.ctranslate2 import CTranslate2Translator, check_exportable  # noqa: E402
from transformer.export.folder import ExportError  # noqa: E402
from transformer.tasks.checkpoint import TASK_KEY, load_task  # noqa: E402

MAX_B = 20
SOURCES = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über",
           "she said that it was fine , but he did not agree .", "東京 北京 🎉 ça va très bien"]
VARIANTS = [{}, {"activation": "gelu", "scale_embedding": False}, {"activation": "relu", "share": False}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_marian_folder(tmp_path_factory.mktemp("hf") / "marian")


def _export(ckpt: str, out) -> str:
    export_cli.run(compose_cfg("export", [f"ckpt_path={ckpt}", "format=ctranslate2", f"output_dir={out}"]))
    return str(out)


def _decode_lines(ckpt: str, tmp_path, beams: int) -> list[str]:
    inp = tmp_path / "src.txt"
    inp.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    strategy = "greedy" if beams == 1 else "beam"
    return decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={inp}", "output=-", "device=cpu",
                                                 f"decode.strategy={strategy}", f"decode.beam_size={beams}",
                                                 "decode.max_len_a=0", f"decode.max_len_b={MAX_B}"]))


def _our_ids(task, texts, beams):
    search = task.search_fn({"strategy": "greedy" if beams == 1 else "beam", "beam_size": beams,
                             "max_len_a": 0, "max_len_b": MAX_B})
    tok = task.src_tokenizer
    ids = [tok.frame(i) for i in tok.encode_batch(texts)]
    longest = max(map(len, ids))
    src = torch.tensor([i + [task.hparams.pad_id] * (longest - len(i)) for i in ids])  # (B, S)
    return [nbest[0][0] for nbest in search(src)]


@pytest.mark.parametrize("variant", VARIANTS, ids=["swish_scaled_shared", "gelu_unscaled", "relu_separate"])
def test_export_searches_as_transformer_decode(folder, tmp_path, variant):
    path = write_marian_folder(tmp_path / "m", **variant) if variant else folder
    out = _export(f"hf:{path}", tmp_path / "ct2")
    config = json.loads((tmp_path / "ct2" / "config.json").read_text())
    assert config["decoder_start_token"] == "<pad>" and config["eos_token"] == "</s>"
    task = load_task(f"hf:{path}")
    ct2 = CTranslate2Translator(out, max_len_a=0, max_len_b=MAX_B)
    texts = sentences(60)
    for beams in (1, 5):
        lines = _decode_lines(f"hf:{path}", tmp_path, beams)
        assert ct2.translate(SOURCES, beam_size=beams) == lines
        want = _our_ids(task, texts, beams)
        assert ct2.translate_ids([task.src_tokenizer.encode(t) for t in texts], beam_size=beams) == want
        assert len({tuple(h) for h in want}) > 1  # outputs that depend on the source


def test_a_checkpoint_made_from_a_marian_folder_exports_the_same(folder, tmp_path):
    task = load_task(f"hf:{folder}")
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "translation"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, tmp_path / "marian.ckpt")
    out = _export(str(tmp_path / "marian.ckpt"), tmp_path / "ct2")
    ct2 = CTranslate2Translator(out, max_len_a=0, max_len_b=MAX_B)
    for beams in (1, 5):
        lines = _decode_lines(str(tmp_path / "marian.ckpt"), tmp_path, beams)
        assert ct2.translate(SOURCES, beam_size=beams) == lines
        assert len(set(lines)) > 1 and any(lines)  # not one line for all, not all empty


def test_the_output_bias_and_the_sinusoid_layout_are_what_makes_it_equal(folder):
    """Without the bias, or with the paper's interleaved sinusoids, the export would search
    differently: the properties above depend on writing both."""
    from transformer.export.ctranslate2 import build_ctranslate2_spec

    task = load_task(f"hf:{folder}")
    spec = build_ctranslate2_spec(task)
    bias = task.model.decoder.output_bias.detach().numpy()
    assert (spec.decoder.projection.bias.numpy() == bias).all() and abs(bias).max() > 1.0
    table = spec.encoder.position_encodings.encodings.numpy()  # (P, D): [sin | cos], position 1
    half = table.shape[1] // 2
    assert abs(table[1, :half] - torch.sin(1 / 10000 ** (torch.arange(0, 2 * half, 2) / (2 * half))).numpy()).max() < 1e-6


def test_what_ctranslate2_cannot_compute_is_refused_by_name(folder):
    task = load_task(f"hf:{folder}")
    # an embedding LayerNorm is CTranslate2's layernorm_embedding (mBART's); token types have no counterpart
    task.model.cfg.type_vocab_size = 2
    with pytest.raises(ExportError, match="token-type embedding") as err:
        check_exportable(task.model)
    assert "\n" not in str(err.value)
