"""A Hugging Face MarianMT folder served as it is (``ckpt_path: 'hf:<folder>'``): the server
answers as ``transformer-decode ckpt_path=hf:<folder>`` does, greedy and beam, and lists the
model as a translation model."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))

from fastapi.testclient import TestClient  # noqa: E402
from marian_folder import write_marian_folder  # noqa: E402
from serve_models import cli_cfg, serve_cfg  # noqa: E402

from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.cli import serve as serve_cli  # noqa: E402
from transformer.serve.app import ServeConfig, create_app  # noqa: E402

SOURCES = ["ein hund läuft über die wiese .", "", "zwei männer spielen fußball ."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_marian_folder(tmp_path_factory.mktemp("hf") / "marian")


@pytest.mark.parametrize("decode", [["decode.strategy=greedy"], ["decode.strategy=beam", "decode.beam_size=3"]])
def test_a_marian_folder_is_served_as_transformer_decode_reads_it(folder, tmp_path, decode):
    short = ["decode.max_len_a=0", "decode.max_len_b=8"]
    src = tmp_path / "src.txt"
    src.write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    lines = decode_cli.run(cli_cfg("decode", f"ckpt_path=hf:{folder}", f"input={src}",
                                   f"output={tmp_path / 'out.txt'}", *decode, *short))
    entry = ",".join([f"id:m,ckpt_path:'hf:{folder}'", *(d.replace("decode.strategy=", "decode:")
                                                       .replace("decode.", "").replace("=", ":") for d in decode),
                      "max_len_a:0", "max_len_b:8"])
    served = serve_cli.check(serve_cfg(f"models=[{{{entry}}}]"))
    with TestClient(create_app(served, ServeConfig())) as client:
        r = client.post("/v1/translate", json={"model": "m", "inputs": SOURCES})
        assert r.status_code == 200, r.text
        assert [o["translation"] for o in r.json()["outputs"]] == lines
        assert any(lines) and lines[1] == ""
        listed = client.get("/v1/models").json()["models"]
        assert [(m["id"], m["kind"]) for m in listed] == [("m", "translation")]
