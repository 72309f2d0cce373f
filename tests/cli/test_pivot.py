"""``transformer-decode src_lang=de tgt_lang=fr decode.pivot=en``: a multilingual model reaches
a direction it was not trained on through a third language. The output equals two decodes
chained (de→en, then its best en→fr), greedy and beam with n-best; a model that lacks a leg, a
bilingual model, or a pivot without a target is refused in one ``error:`` line, exit status 2,
before the output file exists."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hydra_helpers import compose_cfg, main_status  # noqa: E402
from tiny_multilingual import multilingual_task, save_checkpoint  # noqa: E402

from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.data.core.batching import TranslationCollator  # noqa: E402
from transformer.data.parallel.languages import tagged_source_ids  # noqa: E402
from transformer.tasks.checkpoint import load_task  # noqa: E402

SOURCES = ["ein hund läuft über die wiese .", "", "zwei männer spielen fußball .", "ein hund"]
# The untrained model writes to its length cap: short outputs keep the second leg's input within
# the model's positional range, so no leg cuts a sentence.
CAP = {"max_len_a": 0, "max_len_b": 8}
CAP_ARGS = ["decode.max_len_a=0", "decode.max_len_b=8"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> str:
    return save_checkpoint(multilingual_task(), tmp_path_factory.mktemp("pivot") / "mul.ckpt")


def search(ckpt: str, sentences: list[str], tgt_lang: str, **decode) -> list[list[tuple[str, float]]]:
    """Our own search on each sentence tagged for ``tgt_lang``, one at a time: n-best lists."""
    task = load_task(ckpt)
    tok = task.src_tokenizer
    run = task.search_fn({"strategy": "greedy", **CAP, **decode})
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id)
    out = []
    for text in sentences:
        if not text.strip():
            out.append([("", 0.0)])
            continue
        src = collate([{"src": tagged_source_ids(tok, text, tgt_lang), "index": 0}])["src"]  # (1, S)
        out.append([(task.tgt_tokenizer.decode(ids), score) for ids, score in run(src)[0]])
    return out


def decode(ckpt: str, tmp_path: Path, *overrides: str) -> tuple[list[str], Path]:
    src, out = tmp_path / "in.de", tmp_path / "out.fr"
    src.write_text("".join(s + "\n" for s in SOURCES), encoding="utf-8")
    cfg = compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", f"output={out}", "device=cpu", *CAP_ARGS,
                                 *overrides])
    return decode_cli.run(cfg), out


def test_a_pivot_is_two_decodes_chained(ckpt, tmp_path):
    lines, out = decode(ckpt, tmp_path, "src_lang=de", "tgt_lang=fr", "decode.pivot=en")
    english = [n[0][0] for n in search(ckpt, SOURCES, "en")]
    french = [n[0][0] for n in search(ckpt, english, "fr")]
    assert lines == french and out.read_text(encoding="utf-8").splitlines() == french
    assert lines[1] == ""  # an empty line stays empty through both legs
    assert french != [n[0][0] for n in search(ckpt, SOURCES, "fr")]  # not the direct (zero-shot) de→fr


def test_both_legs_take_the_same_beam_settings(ckpt, tmp_path):
    beam = ["decode.strategy=beam", "decode.beam_size=3", "decode.n_best=2"]
    lines, _ = decode(ckpt, tmp_path, "src_lang=de", "tgt_lang=fr", "decode.pivot=en", *beam)
    settings = dict(strategy="beam", beam_size=3, n_best=2)
    english = [n[0][0] for n in search(ckpt, SOURCES, "en", **settings)]
    expected = search(ckpt, english, "fr", **settings)
    got = [line.split(" ||| ") for line in lines]
    assert [(int(i), text) for i, text, _ in got] == [(i, t) for i, n in enumerate(expected) for t, _ in n]
    assert [float(s) for *_, s in got] == pytest.approx([s for n in expected for _, s in n], abs=1e-3)


@pytest.mark.parametrize("overrides,words", [
    (["src_lang=de", "tgt_lang=fr", "decode.pivot=es"], ["decode.pivot=es", "first leg", "de-en, en-de"]),
    (["src_lang=fr", "tgt_lang=de", "decode.pivot=en"], ["decode.pivot=en", "fr-en"]),  # fr-en, en-de: both there
    (["src_lang=de", "tgt_lang=en", "decode.pivot=fr"], ["decode.pivot=fr", "de-fr", "not trained"]),
    (["src_lang=de", "decode.pivot=en"], ["decode.pivot=en", "give tgt_lang"]),
    (["src_lang=de", "tgt_lang=fr", "decode.pivot=en", "decode.print_alignment=true"],
     ["decode.print_alignment", "decode.pivot"]),
])
def test_a_pivot_the_model_cannot_take_is_one_error_line(ckpt, tmp_path, capsys, monkeypatch, overrides, words):
    out = tmp_path / "out.fr"
    src = tmp_path / "in.de"
    src.write_text("ein hund\n", encoding="utf-8")
    code, err = main_status(decode_cli, [f"ckpt_path={ckpt}", f"input={src}", f"output={out}", "device=cpu",
                                         *overrides], capsys, monkeypatch)
    if overrides[0] == "src_lang=fr":  # fr -> en -> de: both legs trained, so it runs
        assert code == 0 and out.exists(), err
        return
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
    assert all(w in lines[0] for w in words), lines[0]
    assert not out.exists()


def test_a_bilingual_checkpoint_has_no_pivot(tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
    from serve_models import build_checkpoints

    ckpt = build_checkpoints(tmp_path)["translation"]
    code, err = main_status(decode_cli, [f"ckpt_path={ckpt}", "input=-", f"output={tmp_path / 'o'}", "device=cpu",
                                         "tgt_lang=fr", "decode.pivot=en"], capsys, monkeypatch, stdin=b"a\n")
    assert code == 2 and err.strip().startswith("error: decode.pivot=en") and "multilingual" in err, err
    assert len(err.strip().splitlines()) == 1


def test_a_pivot_equals_two_transformer_decode_runs(ckpt, tmp_path):
    pivoted, _ = decode(ckpt, tmp_path, "src_lang=de", "tgt_lang=fr", "decode.pivot=en")
    (tmp_path / "leg1").mkdir()
    _, english = decode(ckpt, tmp_path / "leg1", "src_lang=de", "tgt_lang=en")
    cfg = compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={english}", f"output={tmp_path / 'fr'}",
                                 "device=cpu", *CAP_ARGS, "src_lang=en", "tgt_lang=fr"])
    assert pivoted == decode_cli.run(cfg)
