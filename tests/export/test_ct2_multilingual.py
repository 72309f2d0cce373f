"""A multilingual checkpoint exported to CTranslate2: the folder records the directions and
keeps the ``<2xx>`` tags as source tokens, and the export translates each direction as our own
search does on the tagged source (greedy and beam, n-best included), alone or served; a model
that reads the tag as its decoder's first token (``data.tag_side=decoder``) too, through
CTranslate2's target prefix."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("ctranslate2")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_multilingual import DIRECTIONS, multilingual_task, save_checkpoint  # noqa: E402

from transformer.data.core.batching import TranslationCollator  # noqa: E402
from transformer.data.core.tokenizer import SubwordTokenizer  # noqa: E402
from transformer.data.parallel.languages import tagged_source_ids  # noqa: E402
from transformer.export.ctranslate2 import CTranslate2Translator, export_ctranslate2  # noqa: E402
from transformer.export.folder import ExportError  # noqa: E402
from transformer.tasks.checkpoint import load_task  # noqa: E402

SOURCES = ["ein hund läuft über die wiese .", "", "a dog runs across the meadow .", "zwei männer spielen"]
TARGETS = ["en", "de", "fr"]


@pytest.fixture(scope="module", params=["source", "decoder"])
def task(request):
    return multilingual_task(tag_side=request.param)


@pytest.fixture(scope="module")
def export_dir(task, tmp_path_factory) -> Path:
    return export_ctranslate2(task, tmp_path_factory.mktemp("ct2") / "mul")


def ours(task, tgt_lang: str, **decode) -> list[list[str]]:
    """Our own search on each sentence tagged for ``tgt_lang``: its n-best texts (searched once
    per task; the key holds the task itself, so a freed task's id cannot stand for another's)."""
    key = (task, tgt_lang, tuple(sorted(decode.items())))
    if key not in _SEARCHED:
        _SEARCHED[key] = _ours(task, tgt_lang, **decode)
    return _SEARCHED[key]


_SEARCHED: dict = {}


def _ours(task, tgt_lang: str, **decode) -> list[list[str]]:
    tok = task.src_tokenizer
    search = task.search_fn({"strategy": "greedy", **decode})
    decoder = task.hparams["data"]["tag_side"] == "decoder"
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id, tag_to_decoder=decoder)
    out = []
    for text in SOURCES:
        if not text.strip():
            out.append([""])
            continue
        batch = collate([{"src": tagged_source_ids(tok, text, tgt_lang), "index": 0}])  # src (1, S)
        start = {"start": batch["start"]} if decoder else {}  # the tag, each target's first token
        out.append([task.tgt_tokenizer.decode(ids) for ids, _ in search(batch["src"], **start)[0]])
    return out


def test_the_folder_records_directions_and_keeps_the_tags(export_dir, task):
    record = json.loads((export_dir / "languages.json").read_text())
    assert record["data"]["directions"] == DIRECTIONS
    assert record["data"]["tag_side"] == task.hparams["data"]["tag_side"]
    config = json.loads((export_dir / "config.json").read_text())
    assert config["decoder_start_token"] == (None if record["data"]["tag_side"] == "decoder" else "<s>")
    src = SubwordTokenizer.load(export_dir / "source_tokenizer.json")
    for lang in TARGETS:
        i = src.token_to_id(f"<2{lang}>")
        assert i == task.src_tokenizer.token_to_id(f"<2{lang}>") and i in src.special_ids


@pytest.mark.parametrize("tgt", TARGETS)
def test_each_direction_translates_as_our_search(export_dir, task, tgt):
    ct2 = CTranslate2Translator(export_dir)
    assert ct2.translate(SOURCES, tgt_lang=tgt) == [n[0] for n in ours(task, tgt)]
    nbest = ct2.translate_nbest(SOURCES, beam_size=3, n_best=3, tgt_lang=tgt)
    assert [[t for t, _ in n] for n in nbest] == ours(task, tgt, strategy="beam", beam_size=3, n_best=3)


def test_one_call_translates_each_sentence_into_its_own_language(export_dir, task):
    ct2 = CTranslate2Translator(export_dir)
    mixed = ct2.translate(SOURCES * 3, tgt_lang=[t for t in TARGETS for _ in SOURCES])
    assert mixed == [n[0] for t in TARGETS for n in ours(task, t)]
    assert len({tuple(mixed[i * len(SOURCES):(i + 1) * len(SOURCES)]) for i in range(3)}) > 1


def test_a_bilingual_export_records_its_pair(tmp_path):
    from tiny_translation import TINY_MODEL  # noqa: F401 (the same test helpers)

    from transformer.tasks.translation import TranslationTask

    tok = SubwordTokenizer.train(["ein hund", "a dog"] * 5, 270)
    task = TranslationTask(model=dict(TINY_MODEL, max_len=32), vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                           bos_id=tok.bos_id, eos_id=tok.eos_id, src_lang="de", tgt_lang="en",
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    folder = export_ctranslate2(task, tmp_path / "bi")
    record = json.loads((folder / "languages.json").read_text())
    assert (record["src_lang"], record["tgt_lang"], record["data"]["directions"]) == ("de", "en", None)


def test_a_multilingual_model_without_its_tags_is_refused(task, tmp_path):
    from transformer.tasks.translation import TranslationTask

    plain = SubwordTokenizer.train(["ein hund", "a dog"] * 5, 270)
    hp = dict(task.hparams)
    broken = TranslationTask(**{**hp, "vocab_size": plain.vocab_size, "model": dict(hp["model"]),
                                "tokenizers": {"src": plain.to_str(), "tgt": plain.to_str()}})
    with pytest.raises(ExportError, match=r"translates into en .* no special token <2en>"):
        export_ctranslate2(broken, tmp_path / "broken")
    assert not (tmp_path / "broken").exists()


def test_the_export_serves_each_direction_as_its_checkpoint(export_dir, task, tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
    from serve_models import serve_cfg

    from transformer.cli import serve as serve_cli
    from transformer.serve.app import ServeConfig, create_app

    ckpt = save_checkpoint(task, tmp_path / "mul.ckpt")
    served = serve_cli.check(serve_cfg(f"models=[{{id:pt,ckpt_path:{ckpt}}},{{id:ct2,ckpt_path:{export_dir}}}]"))
    with TestClient(create_app(served, ServeConfig())) as client:
        listed = {m["id"]: m for m in client.get("/v1/models").json()["models"]}
        assert listed["ct2"]["directions"] == listed["pt"]["directions"] == DIRECTIONS
        for tgt in TARGETS:
            answers = [client.post("/v1/translate", json={"model": m, "inputs": SOURCES, "tgt_lang": tgt}).json()
                       for m in ("pt", "ct2")]
            assert [o["translation"] for o in answers[1]["outputs"]] == [o["translation"] for o in answers[0]["outputs"]]
        r = client.post("/v1/translate", json={"model": "ct2", "inputs": ["a"], "tgt_lang": "es"})
        assert r.status_code == 422 and "en, de, fr" in r.json()["error"]
    assert load_task(ckpt).hparams["data"]["directions"] == DIRECTIONS


def test_a_decoder_tagged_model_is_refused_as_a_hugging_face_folder(tmp_path):
    from tiny_multilingual import multilingual_task

    from transformer.export.hf import export_hf

    with pytest.raises(ExportError, match=r"data.tag_side=decoder .* no counterpart in Marian"):
        export_hf(multilingual_task(tag_side="decoder"), tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    assert (export_hf(multilingual_task(), tmp_path / "source") / "config.json").is_file()  # the tag in the source
