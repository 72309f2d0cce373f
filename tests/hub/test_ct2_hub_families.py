"""M2M100, NLLB and mBART-50 folders exported to CTranslate2: ``transformer-export
format=ctranslate2 ckpt_path=hf:<folder>`` writes their switches (fairseq's sinusoids or
mBART's learned table from its offset row, mBART's embedding LayerNorm, pre-norm stacks) and
their language codes, and ``CTranslate2Translator`` then gives, greedy, the lines
``transformer-decode ... src_lang=en tgt_lang=fr`` gives. Offline: the folders are written here."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("sentencepiece")
pytest.importorskip("transformers")
pytest.importorskip("ctranslate2")

from cli.hydra_helpers import compose_cfg  # noqa: E402
from multi_folders import FAMILIES, write_multi_folder  # noqa: E402
from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.cli import export as export_cli  # noqa: E402
from transformer.export.ctranslate2 import CTranslate2Translator  # noqa: E402

MAX_B = 20
SOURCES = ["the movie was great .", "café naïve 日本語 😀 a good day and a good night .", "über",
           "she said that it was fine , but he did not agree .", "東京 北京 🎉 ça va très bien"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_export_decodes_as_transformer_decode(family, tmp_path):
    folder = write_multi_folder(tmp_path / family, family)
    out = tmp_path / "ct2"
    export_cli.run(compose_cfg("export", [f"ckpt_path=hf:{folder}", "format=ctranslate2", f"output_dir={out}"]))
    record = json.loads((out / "languages.json").read_text(encoding="utf-8"))
    assert record["data"]["tag_side"] == "codes" and "fr" in record["data"]["language_codes"]
    inp = tmp_path / "src.txt"
    inp.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    ct2 = CTranslate2Translator(out, max_len_a=0.0, max_len_b=MAX_B)
    for beams in (1, 5):
        ours = decode_cli.run(compose_cfg("decode", [f"ckpt_path=hf:{folder}", f"input={inp}", "output=-",
                                                     "device=cpu", "src_lang=en", "tgt_lang=fr",
                                                     f"decode.strategy={'greedy' if beams == 1 else 'beam'}",
                                                     f"decode.beam_size={beams}", "decode.max_len_a=0",
                                                     f"decode.max_len_b={MAX_B}"]))
        theirs = ct2.translate(SOURCES, beam_size=beams, tgt_lang="fr", src_lang="en")
        if beams == 1:
            assert theirs == ours and any(ours)
        else:  # CTranslate2 ranks finished hypotheses its own way
            assert sum(a == b for a, b in zip(ours, theirs)) >= len(SOURCES) - 1
    with pytest.raises(ValueError, match="src_lang: required"):
        ct2.translate(SOURCES[:1], tgt_lang="fr")
