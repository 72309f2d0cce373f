"""``transformer-export format=hf`` writes a pre-norm encoder-decoder as M2M100: a model read from
(or fine-tuned from) an M2M100 or NLLB folder goes back with its tokenizer (M2M100's
SentencePiece files and language codes, NLLB's ``tokenizer.json``), and ``transformers`` loads
the folder and generates our lines; a switch M2M100 does not have is refused in one line naming
it, and nothing is written. Offline: the folders are written here (``multi_folders.py``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

from multi_folders import CODES, write_multi_folder  # noqa: E402
from transformer.export.folder import ExportError  # noqa: E402
from transformer.export.hf import export_hf  # noqa: E402
from transformer.tasks.checkpoint import load_task  # noqa: E402

SOURCES = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über",
           "she said that it was fine , but he did not agree ."]


@pytest.mark.parametrize("family", ["m2m100", "nllb"])
def test_a_model_read_from_the_family_is_written_back_as_m2m100(family, tmp_path):
    task = load_task(f"hf:{write_multi_folder(tmp_path / family, family)}")
    out = export_hf(task, tmp_path / "out")
    hf = transformers.AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    assert type(hf).__name__ == "M2M100ForConditionalGeneration"
    # the ids of the written tokenizer are ours, language codes included
    src_code = task.src_tokenizer.token_to_id(CODES[family][0])
    eos = task.src_tokenizer.eos_id
    assert tok(SOURCES)["input_ids"] == [[src_code, *ids, eos] for ids in task.src_tokenizer.encode_batch(SOURCES)]
    ours = [h[0][0] for h in task.translator({"strategy": "beam", "beam_size": 5, "max_len_a": 0, "max_len_b": 20})
            .set_target_language("fr", "en").translate(SOURCES)]
    batch = tok(SOURCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        out_ids = hf.generate(**batch, num_beams=5, max_length=22, forced_eos_token_id=None,
                              forced_bos_token_id=tok.convert_tokens_to_ids(CODES[family][1]),
                              bad_words_ids=[[tok.pad_token_id]])
    assert tok.batch_decode(out_ids[:, 2:], skip_special_tokens=True) == ours and any(ours)
    again = load_task(f"hf:{out}")  # and it reads back as the same model
    assert all(torch.equal(a, b) for a, b in zip(again.model.state_dict().values(), task.model.state_dict().values()))


def test_a_switch_m2m100_lacks_is_refused_naming_it(tmp_path):
    mbart = load_task(f"hf:{write_multi_folder(tmp_path / 'mbart50', 'mbart50')}")
    with pytest.raises(ExportError, match=r"embedding_norm=True has no counterpart in M2M100"):
        export_hf(mbart, tmp_path / "a")
    task = load_task(f"hf:{write_multi_folder(tmp_path / 'm2m100', 'm2m100')}")
    task.model.encoder.positional.layout = "interleaved"  # the paper's sinusoids, not fairseq's
    with pytest.raises(ExportError, match=r"the encoder's sinusoids \(layout='interleaved', first_position=2\)"):
        export_hf(task, tmp_path / "b")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
