"""Fine-tuned Hugging Face classifiers served as they are (``ckpt_path: 'hf:<folder>'``): a
``*ForSequenceClassification`` folder answers ``/v1/classify`` as ``transformer-classify`` does,
a ``*ForTokenClassification`` folder ``/v1/tag`` as ``transformer-tag`` does, with the folder's
``id2label`` names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "hub"))

from fastapi.testclient import TestClient  # noqa: E402
from head_folders import SEQUENCE_LABELS, TOKEN_LABELS, write_head_folder  # noqa: E402
from serve_models import cli_cfg, serve_cfg  # noqa: E402

from transformer.cli import classify as classify_cli  # noqa: E402
from transformer.cli import serve as serve_cli  # noqa: E402
from transformer.cli import tag as tag_cli  # noqa: E402
from transformer.serve.app import ServeConfig, create_app  # noqa: E402

SOURCES = ["the movie was great", "café naïve 日本語", "she said that it was fine"]


def test_fine_tuned_folders_are_served_as_the_commands_read_them(tmp_path):
    sequence = write_head_folder("bert", "sequence", tmp_path / "sequence")
    token = write_head_folder("roberta", "token", tmp_path / "token")
    src = tmp_path / "src.txt"
    src.write_text("".join(line + "\n" for line in SOURCES), encoding="utf-8")
    labels = classify_cli.run(cli_cfg("classify", f"ckpt_path=hf:{sequence}", f"input={src}",
                                      f"output={tmp_path / 'labels.txt'}"))
    tags = tag_cli.run(cli_cfg("tag", f"ckpt_path=hf:{token}", f"input={src}", f"output={tmp_path / 'tags.txt'}"))
    served = serve_cli.check(serve_cfg(f"models=[{{id:c,ckpt_path:'hf:{sequence}'}},{{id:t,ckpt_path:'hf:{token}'}}]"))
    with TestClient(create_app(served, ServeConfig())) as client:
        r = client.post("/v1/classify", json={"model": "c", "inputs": SOURCES})
        assert r.status_code == 200, r.text
        outputs = r.json()["outputs"]
        assert [f"{o['label']}\t{o['top'][0]['probability']:.4f}" for o in outputs] == labels
        assert set(outputs[0]["probabilities"]) == set(SEQUENCE_LABELS)
        r = client.post("/v1/tag", json={"model": "t", "inputs": SOURCES})
        assert r.status_code == 200, r.text
        got = [" ".join(f"{w}_{t}" for w, t in zip(o["words"], o["tags"])) for o in r.json()["outputs"]]
        assert got == tags and {t for o in r.json()["outputs"] for t in o["tags"]} <= set(TOKEN_LABELS)
        kinds = {m["id"]: m["kind"] for m in client.get("/v1/models").json()["models"]}
        assert kinds == {"c": "classification", "t": "tagging"}
