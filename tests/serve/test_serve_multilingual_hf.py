"""An M2M100 or NLLB folder served as it is (``ckpt_path: 'hf:<folder>'``): each request names
its ``src_lang`` and ``tgt_lang``, and the server answers as ``transformer-decode
ckpt_path=hf:<folder> src_lang=.. tgt_lang=..`` does, requests into different languages
batched together; a request without ``src_lang`` is refused naming it."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))

from fastapi.testclient import TestClient  # noqa: E402
from multi_folders import write_multi_folder  # noqa: E402
from serve_models import cli_cfg, serve_cfg  # noqa: E402

from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.cli import serve as serve_cli  # noqa: E402
from transformer.serve.app import ServeConfig, create_app  # noqa: E402

SOURCES = ["the movie was great .", "", "café naïve 日本語 😀 a good day and a good night .", "über",
           "she said that it was fine , but he did not agree ."]
SHORT = ["decode.max_len_a=0", "decode.max_len_b=20"]


@pytest.mark.parametrize("family", ["m2m100", "nllb"])
def test_a_multilingual_folder_is_served_as_transformer_decode_reads_it(family, tmp_path):
    folder = write_multi_folder(tmp_path / family, family)
    src = tmp_path / "src.txt"
    src.write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    expected = {tgt: decode_cli.run(cli_cfg("decode", f"ckpt_path=hf:{folder}", f"input={src}",
                                            f"output={tmp_path / f'{tgt}.txt'}", "src_lang=en", f"tgt_lang={tgt}",
                                            "decode.strategy=beam", "decode.beam_size=3", *SHORT))
                for tgt in ("fr", "de")}
    assert expected["fr"] != expected["de"] and any(expected["fr"])
    entry = f"id:m,ckpt_path:'hf:{folder}',decode:beam,beam_size:3,max_len_a:0,max_len_b:20"
    served = serve_cli.check(serve_cfg(f"models=[{{{entry}}}]"))
    with TestClient(create_app(served, ServeConfig())) as client:
        def ask(tgt):
            return client.post("/v1/translate", json={"model": "m", "inputs": SOURCES, "src_lang": "en",
                                                      "tgt_lang": tgt})

        with ThreadPoolExecutor(2) as pool:  # both languages at once: they may share a batch
            answers = dict(zip(("fr", "de"), pool.map(ask, ("fr", "de"))))
        for tgt, r in answers.items():
            assert r.status_code == 200, r.text
            assert [o["translation"] for o in r.json()["outputs"]] == expected[tgt]
        r = client.post("/v1/translate", json={"model": "m", "inputs": SOURCES, "tgt_lang": "fr"})
        assert r.status_code in (400, 422) and "src_lang: required" in r.text
