"""One model for several directions (Johnson et al. 2017): ``data.pairs`` trains a model whose
sources carry a ``<2xx>`` target-language tag; the checkpoint records its directions; decode
takes ``tgt_lang=`` (every search, since the tag is in the source); evaluate scores each
direction; bad ``data.pairs`` values are one ``error:`` line before any folder is made."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from hydra_helpers import compose_cfg, documented_commands, main_status

from transformer.cli import decode as decode_cli
from transformer.cli import evaluate as evaluate_cli
from transformer.cli import train as train_cli
from transformer.cli.common import user_errors
from transformer.data.core.batching import TranslationCollator
from transformer.data.core.tokenizer import SubwordTokenizer
from transformer.data.parallel.languages import add_tags, tagged_source_ids
from transformer.data.parallel.languages import check_pairs
from transformer.tasks.checkpoint import load_task, read_checkpoint
from transformer.tasks.translation import TranslationTask

M30K = "multi30k/data/task1/raw"
LANGS = ("en", "de", "fr")
TINY = ["model=tiny", "data.vocab_size=400", "data.max_tokens=600", "trainer.max_epochs=1",
        "trainer.limit_train_batches=4", "trainer.limit_val_batches=1", "trainer.log_every_n_steps=1",
        "callbacks.progress_bar=null", "logger.tensorboard=null", "task.warmup_steps=5", "accel=none",
        "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=6", "trainer.max_time=null"]
# The multilingual CPU recipe: the command experiment=multi30k_cpu's comment gives.
[MULTI30K_MULTI_CPU] = [args for where, args in documented_commands() if where.startswith("multi30k_cpu:") and len(args) > 1]
SHORT = ["decode.max_len_a=0", "decode.max_len_b=6", "device=cpu"]


def _lines(mirror_root: Path, split: str, lang: str, n: int) -> list[str]:
    with gzip.open(mirror_root / M30K / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(n), f)]


@pytest.fixture(scope="module")
def corpus(mirror_root, tmp_path_factory) -> Path:
    """A user's multi-way parallel files from slices of Multi30k: corpus/{train,dev,test}.{en,de,fr}."""
    folder = tmp_path_factory.mktemp("corpus")
    for split, name, n in (("train", "train", 300), ("val", "dev", 12), ("test_2016_flickr", "test", 16)):
        for lang in LANGS:
            (folder / f"{name}.{lang}").write_text("\n".join(_lines(mirror_root, split, lang, n)) + "\n",
                                                   encoding="utf-8")
    return folder


def _data_args(corpus: Path) -> list[str]:
    return ["experiment=parallel", f"data.train={corpus}/train", f"data.valid={corpus}/dev", f"data.test={corpus}/test"]


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> dict:
    """A two-direction model (en→de, en→fr) trained a few steps, and its run summary."""
    tmp = tmp_path_factory.mktemp("multi")
    cfg = compose_cfg("train", [*_data_args(corpus), "data.pairs=[en-de,en-fr]", *TINY,
                                f"data.data_dir={tmp / 'cache'}", f"output_dir={tmp / 'run'}", "test_splits=[test]",
                                "test_decode.max_len_a=0", "test_decode.max_len_b=6"])
    summary = train_cli.run(cfg)
    return {"summary": summary, "ckpt": summary["best_checkpoint"], "tmp": tmp}


def test_the_checkpoint_records_its_directions_and_tags(trained):
    ckpt = read_checkpoint(trained["ckpt"])
    hp = ckpt["hyper_parameters"]
    assert hp["data"]["directions"] == ["en-de", "en-fr"]
    assert (hp["src_lang"], hp["tgt_lang"]) == ("en", "mul")
    tok = SubwordTokenizer.from_str(ckpt["tokenizers"]["src"])
    assert tok.token_to_id("<2de>") is not None and tok.token_to_id("<2fr>") is not None
    assert tok.token_to_id("<2en>") is None  # no direction writes English
    assert hp["vocab_size"] == tok.vocab_size
    # training's test split was scored in each direction
    assert set(trained["summary"]["test"]["test"]) == {"en-de", "en-fr"}


def test_each_training_source_starts_with_its_target_tag(corpus, tmp_path):
    from hydra.utils import instantiate

    cfg = compose_cfg("train", [*_data_args(corpus), "data.pairs=[en-de,en-fr]", "data.temperature=2", *TINY,
                                f"data.data_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}"])
    dm = instantiate(cfg.data, _recursive_=False)
    dm.setup()
    tok = dm.src_tokenizer
    tags = {tok.token_to_id("<2de>"): "de", tok.token_to_id("<2fr>"): "fr"}
    firsts = [row[0] for row in dm.dataset("train")["src"]]
    assert set(firsts) == set(tags) and firsts.count(firsts[0]) < len(firsts)
    assert dm.mix == {"en-de": {"pairs": 300, "per_epoch": 300}, "en-fr": {"pairs": 300, "per_epoch": 300}}
    # each direction's evaluation splits apart, validation joined for training
    assert {"test.en-de", "test.en-fr", "valid.en-de", "valid.en-fr", "valid"} <= set(dm.splits)
    assert len(dm.dataset("valid")) == 24 and len(dm.dataset("test.en-fr")) == 16
    fr = dm.raw("test.en-fr")
    assert fr[0][1] == (corpus / "test.fr").read_text(encoding="utf-8").splitlines()[0]


def test_decode_tags_the_source_for_every_search(trained, tmp_path, monkeypatch):
    src = tmp_path / "in.en"
    src.write_text("A dog runs in the park.\nTwo men are talking.\n", encoding="utf-8")
    task = load_task(trained["ckpt"])
    tok = task.src_tokenizer
    seen: list[torch.Tensor] = []
    original = task.model.encode if hasattr(task.model, "encode") else None
    assert original is not None

    def recording(src_ids, *args, **kwargs):
        seen.append(src_ids.clone())
        return original(src_ids, *args, **kwargs)

    monkeypatch.setattr(task.model, "encode", recording)
    monkeypatch.setattr(decode_cli, "load_for_inference", lambda *a, **k: (task, "cpu"))
    outputs = {}
    for strategy in (["decode.strategy=greedy"], ["decode.strategy=beam", "decode.beam_size=3"],
                     ["decode.strategy=beam", "decode.beam_size=3", "decode.n_best=3"]):
        for lang in ("de", "fr"):
            seen.clear()
            lines = decode_cli.run(compose_cfg("decode", [f"ckpt_path={trained['ckpt']}", f"input={src}",
                                                          f"tgt_lang={lang}", *SHORT, *strategy]))
            assert len(lines) == (6 if "decode.n_best=3" in strategy else 2)
            # the encoder read every source with the tag of the language asked for
            tag = tok.token_to_id(f"<2{lang}>")
            assert seen and all((batch[:, 0] == tag).all() for batch in seen)
            outputs[strategy[-1], lang] = lines
    # the tag changes what the decoder sees: teacher-forced logits differ by target language
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id)
    text = "A dog runs in the park."
    batch = {lang: collate([{"src": tagged_source_ids(tok, text, lang), "tgt": tok.encode("Ein Hund"), "index": 0}])
             for lang in ("de", "fr")}
    with torch.no_grad():
        de, fr = (task.model(batch[lang]["src"], batch[lang]["tgt_in"]) for lang in ("de", "fr"))
    assert not torch.allclose(de, fr)


@pytest.mark.parametrize("tag_side", ["source", "decoder"])
def test_outputs_follow_the_tag_once_trained(mirror_root, tag_side):
    """A tiny model trained on en→de and en→fr with tags writes German after <2de> and French
    after <2fr> for the same English sentences, the tag read in front of the source or as the
    decoder's first token."""
    from tiny_translation import TINY_MODEL, _train

    en, de, fr = (_lines(mirror_root, "train", lang, 600) for lang in LANGS)
    tok = add_tags(SubwordTokenizer.train(en + de + fr, 500), ["de", "fr"])
    torch.manual_seed(0)
    task = TranslationTask(model=dict(TINY_MODEL), vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                           eos_id=tok.eos_id, src_lang="en", tgt_lang="mul",
                           data={"directions": ["en-de", "en-fr"], "tag_side": tag_side},
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    data = [{"src": tagged_source_ids(tok, s, lang), "tgt": tok.encode(t), "index": i}
            for i, (s, t, lang) in enumerate(x for pair in zip(zip(en, de, ["de"] * 600), zip(en, fr, ["fr"] * 600))
                                             for x in pair)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        task.train()
        _train(task, data, TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id, tag_to_decoder=tag_side == "decoder"),
               torch.optim.Adam(task.model.parameters(), lr=3e-3), 150, tok.pad_id)
    finally:
        torch.set_num_threads(threads)
    task.eval()
    sentences = _lines(mirror_root, "val", "en", 20)
    out = {lang: [n[0][0] for n in task.translator({"strategy": "greedy", "max_len_a": 0, "max_len_b": 8})
                  .set_target_language(lang).translate(sentences)] for lang in ("de", "fr")}
    differ = sum(a != b for a, b in zip(out["de"], out["fr"]))
    assert differ >= 15, out
    # German articles after <2de>, French after <2fr>
    starts = {lang: [h.split(" ")[0] for h in out[lang]] for lang in out}
    assert sum(w in ("Ein", "Eine", "Zwei", "Der", "Die", "Drei") for w in starts["de"]) >= 10, starts
    assert sum(w in ("Un", "Une", "Deux", "Le", "La", "Des", "Trois") for w in starts["fr"]) >= 10, starts


def test_decode_refuses_a_language_it_does_not_write(trained, tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.en"
    src.write_text("A dog.\n", encoding="utf-8")
    for args, message in (([], "error: tgt_lang: required, this model translates into de, fr"),
                          (["tgt_lang=cs"], "error: tgt_lang=cs: this model translates into de, fr (its directions: "
                                            "en-de, en-fr)"),
                          (["tgt_lang=fr", "src_lang=de"], "error: src_lang=de: this model translates from en")):
        code, err = main_status(decode_cli, [f"ckpt_path={trained['ckpt']}", f"input={src}", *SHORT, *args], capsys,
                                monkeypatch)
        lines = err.strip().splitlines()
        assert code == 2 and lines[-1].startswith(message), err


def test_evaluate_scores_every_direction(trained, tmp_path, capsys):
    out = tmp_path / "eval"
    results = evaluate_cli.run(compose_cfg("eval", [f"ckpt_path={trained['ckpt']}", f"output_dir={out}", *SHORT]))
    assert [(m["split"], m["pair"]) for m in results] == [("test", "en-de"), ("test", "en-fr")]
    assert all(m["sentences"] == 16 and "tok:13a" in m["bleu_signature"] and "chrf" in m for m in results)
    assert [m["pair"] for m in json.loads((out / "summary.json").read_text())] == ["en-de", "en-fr"]
    assert (out / "test.en-fr.greedy.hyp.fr").is_file()
    table = capsys.readouterr().err
    assert "| split | en-de | en-fr |" in table and "| test |" in table
    # one direction, several splits
    one = evaluate_cli.run(compose_cfg("eval", [f"ckpt_path={trained['ckpt']}", f"output_dir={out}", "tgt_lang=fr",
                                                "split=[valid,test]", *SHORT]))
    assert [(m["split"], m["pair"], m["sentences"]) for m in one] == [("valid", "en-fr", 12), ("test", "en-fr", 16)]
    with pytest.raises(ValueError, match="tgt_lang=cs: this model translates into de, fr"):
        evaluate_cli.run(compose_cfg("eval", [f"ckpt_path={trained['ckpt']}", "tgt_lang=cs", *SHORT]))


def test_pairs_all_and_the_multi30k_preset(corpus):
    assert check_pairs({"train": f"{corpus}/train", "pairs": "all", "corpus_name": "parallel"}) == [
        ("de", "en"), ("de", "fr"), ("en", "de"), ("en", "fr"), ("fr", "de"), ("fr", "en")]
    cfg = compose_cfg("train", [*MULTI30K_MULTI_CPU, "data.pairs=all"])
    from omegaconf import OmegaConf

    d = OmegaConf.to_container(cfg.data, resolve=True)
    assert len(check_pairs(d)) == 12  # en, de, fr, cs: every ordered pair
    cfg = compose_cfg("train", MULTI30K_MULTI_CPU)
    assert check_pairs(OmegaConf.to_container(cfg.data, resolve=True)) == [("en", "de"), ("en", "fr"), ("en", "cs")]
    # a table with a column per language
    assert check_pairs({"train": f"{corpus}/t.tsv", "pairs": "all", "corpus_name": "parallel",
                        "columns": {"en": 0, "fr": 2}}) == [("en", "fr"), ("fr", "en")]


def test_a_split_missing_a_language_is_one_error(corpus, tmp_path):
    partial = tmp_path / "partial"
    partial.mkdir()
    for lang in ("en", "de"):  # no dev.fr
        (partial / f"dev.{lang}").write_text((corpus / f"dev.{lang}").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"data.valid=.*/partial/dev: no file for fr \(expected .*dev.\{lang\}"):
        check_pairs({"train": f"{corpus}/train", "valid": f"{partial}/dev", "pairs": ["en-de", "en-fr"],
                     "corpus_name": "parallel"})


@pytest.mark.parametrize("pairs, message", [
    ("[en-xx]", "data.pairs: en-xx: unknown language 'xx'; the files hold de, en, fr"),
    ("[en-cs]", "unknown language 'cs'"),  # no corpus/train.cs
    ("[en-en]", "data.pairs: 'en-en' translates en into itself"),
    ("[]", "data.pairs=[]: empty"),
    ("[ende]", "data.pairs: 'ende' is not a direction"),
    ("[en-de,en-de]", "en-de is given twice"),
])
def test_bad_pairs_are_one_error_before_any_folder(pairs, message, corpus, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    args = [*_data_args(corpus), f"data.pairs={pairs}", "model=tiny", f"data.data_dir={tmp_path / 'cache'}"]
    code, err = main_status(train_cli, [*args, f"hydra.run.dir={run}"], capsys, monkeypatch)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("error: ") and message in lines[-1], err
    assert not run.exists() and not (tmp_path / "cache").exists()
    with pytest.raises(user_errors()):
        train_cli.run(compose_cfg("train", [*args, f"output_dir={run}"]))


def test_a_bilingual_checkpoint_takes_its_own_target_and_refuses_others(corpus, tmp_path, capsys, monkeypatch):
    cfg = compose_cfg("train", [*_data_args(corpus), "data.src_lang=en", "data.tgt_lang=de", *TINY,
                                f"data.data_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}"])
    ckpt = train_cli.run(cfg)["best_checkpoint"]
    hp = read_checkpoint(ckpt)["hyper_parameters"]
    assert "directions" not in hp["data"] and (hp["src_lang"], hp["tgt_lang"]) == ("en", "de")
    tok = SubwordTokenizer.from_str(read_checkpoint(ckpt)["tokenizers"]["src"])
    assert tok.token_to_id("<2de>") is None  # no tags in a bilingual vocabulary
    src = tmp_path / "in.en"
    src.write_text("A dog runs.\nTwo men.\n", encoding="utf-8")
    plain = decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", *SHORT]))
    assert decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", "tgt_lang=de", *SHORT])) == plain
    code, err = main_status(decode_cli, [f"ckpt_path={ckpt}", f"input={src}", "tgt_lang=fr", *SHORT], capsys,
                            monkeypatch)
    assert code == 2 and err.strip().splitlines()[-1] == ("error: tgt_lang=fr: this model translates into de "
                                                         "(its directions: en-de)"), err


@pytest.fixture(scope="module")
def english_centric(corpus, tmp_path_factory) -> str:
    """A model trained a few steps on en↔de and en↔fr only: de→fr is a direction it never saw."""
    tmp = tmp_path_factory.mktemp("centric")
    cfg = compose_cfg("train", [*_data_args(corpus), "data.pairs=[en-de,de-en,en-fr,fr-en]", *TINY,
                                f"data.data_dir={tmp / 'cache'}", f"output_dir={tmp / 'run'}", "test_splits=[]"])
    return train_cli.run(cfg)["best_checkpoint"]


def test_zero_shot_is_asked_for_and_scored_beside_the_pivot(english_centric, corpus, tmp_path, capsys,
                                                             monkeypatch):
    ckpt, src = english_centric, corpus / "test.de"
    direct = ["src_lang=de", "tgt_lang=fr", *SHORT]
    code, err = main_status(decode_cli, [f"ckpt_path={ckpt}", f"input={src}", f"output={tmp_path / 'no'}", *direct],
                            capsys, monkeypatch)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "decode.zero_shot=true" in err, err
    assert not (tmp_path / "no").exists()
    # asked for, de→fr is the de source with the French tag
    zero = decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", *direct, "decode.zero_shot=true"]))
    task = load_task(ckpt)
    tok = task.src_tokenizer
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id)
    search = task.search_fn({"strategy": "greedy", "max_len_a": 0, "max_len_b": 6})
    first = src.read_text(encoding="utf-8").splitlines()[0]
    batch = collate([{"src": tagged_source_ids(tok, first, "fr"), "index": 0}])["src"]
    assert zero[0] == task.tgt_tokenizer.decode(search(batch)[0][0][0])
    pivot = decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", *direct, "decode.pivot=en"]))
    # evaluate scores the same two ways on the test split's de→fr pairs, each with its own outputs
    for setting, lines in (("decode.zero_shot=true", zero), ("decode.pivot=en", pivot)):
        out = tmp_path / setting.split("=")[0]
        results = evaluate_cli.run(compose_cfg("eval", [f"ckpt_path={ckpt}", f"output_dir={out}", "split=test",
                                                        *direct, setting]))
        assert [(m["split"], m["pair"], m["sentences"]) for m in results] == [("test", "de-fr", 16)]
        assert (out / "test.de-fr.greedy.hyp.fr").read_text(encoding="utf-8").splitlines() == lines
    with pytest.raises(ValueError, match="zero_shot=true"):
        evaluate_cli.run(compose_cfg("eval", [f"ckpt_path={ckpt}", "split=test", *direct]))
    with pytest.raises(ValueError, match="same language"):
        evaluate_cli.run(compose_cfg("eval", [f"ckpt_path={ckpt}", "split=test", "src_lang=fr", "tgt_lang=fr",
                                              "decode.zero_shot=true", *SHORT]))


# ---------------------------------------------------------------------------- the tag as the decoder's first token


@pytest.fixture(scope="module")
def decoder_tagged(corpus, tmp_path_factory) -> dict:
    """A two-direction model trained a few steps with ``data.tag_side=decoder``."""
    tmp = tmp_path_factory.mktemp("decoder_tag")
    cfg = compose_cfg("train", [*_data_args(corpus), "data.pairs=[en-de,en-fr]", "data.tag_side=decoder", *TINY,
                                f"data.data_dir={tmp / 'cache'}", f"output_dir={tmp / 'run'}", "test_splits=[test]",
                                "test_decode.max_len_a=0", "test_decode.max_len_b=6"])
    summary = train_cli.run(cfg)
    return {"summary": summary, "ckpt": summary["best_checkpoint"], "tmp": tmp, "cfg": cfg}


def test_with_tag_side_decoder_the_tag_starts_each_target(decoder_tagged):
    from hydra.utils import instantiate

    hp = read_checkpoint(decoder_tagged["ckpt"])["hyper_parameters"]
    assert hp["data"]["tag_side"] == "decoder" and hp["data"]["directions"] == ["en-de", "en-fr"]
    assert set(decoder_tagged["summary"]["test"]["test"]) == {"en-de", "en-fr"}
    dm = instantiate(decoder_tagged["cfg"].data, _recursive_=False)
    dm.setup()
    tok = dm.src_tokenizer
    tags = {tok.token_to_id("<2de>"), tok.token_to_id("<2fr>")}
    for batch in dm.train_dataloader():
        assert set(batch["tgt_in"][:, 0].tolist()) <= tags and torch.equal(batch["start"], batch["tgt_in"][:, 0])
        assert not torch.isin(batch["src"], torch.tensor(sorted(tags))).any()  # the source carries no tag
        assert batch["tgt_in"][:, 1:].ne(tok.bos_id).all()


def test_every_search_starts_the_decoder_from_the_tag(decoder_tagged, tmp_path, monkeypatch):
    src = tmp_path / "in.en"
    src.write_text("A dog runs in the park.\nTwo men are talking.\n", encoding="utf-8")
    task = load_task(decoder_tagged["ckpt"])
    tok = task.src_tokenizer
    tags = {lang: tok.token_to_id(f"<2{lang}>") for lang in ("de", "fr")}
    firsts: list[torch.Tensor] = []
    encoded: list[torch.Tensor] = []
    step, encode = task.model.decode_step, task.model.encode

    def recording_step(tokens, enc, cache, *args, **kwargs):
        if cache.length == 0:
            firsts.append(tokens[:, 0].clone())
        return step(tokens, enc, cache, *args, **kwargs)

    def recording_encode(src_ids, *args, **kwargs):
        encoded.append(src_ids.clone())
        return encode(src_ids, *args, **kwargs)

    monkeypatch.setattr(task.model, "decode_step", recording_step)
    monkeypatch.setattr(task.model, "encode", recording_encode)
    monkeypatch.setattr(decode_cli, "load_for_inference", lambda *a, **k: (task, "cpu"))
    outputs = {}
    for strategy in (["decode.strategy=greedy"], ["decode.strategy=beam", "decode.beam_size=3", "decode.n_best=3"],
                     ["decode.strategy=greedy", "decode.print_alignment=true"]):
        for lang in ("de", "fr"):
            firsts.clear(), encoded.clear()
            lines = decode_cli.run(compose_cfg("decode", [f"ckpt_path={decoder_tagged['ckpt']}", f"input={src}",
                                                          f"tgt_lang={lang}", *SHORT, *strategy]))
            assert firsts and all((f == tags[lang]).all() for f in firsts), (strategy, firsts)
            assert encoded and not any(torch.isin(e, torch.tensor(list(tags.values()))).any() for e in encoded)
            if "decode.print_alignment=true" in strategy:
                assert all(" ||| " in line for line in lines)
            outputs[strategy[-1], lang] = lines
    # the tag is what the decoder reads first: teacher-forced logits differ by target language
    collate = TranslationCollator(tok.pad_id, tok.bos_id, tok.eos_id, tag_to_decoder=True)
    batch = {lang: collate([{"src": tagged_source_ids(tok, "A dog runs.", lang), "tgt": tok.encode("Ein Hund"),
                             "index": 0}]) for lang in ("de", "fr")}
    assert torch.equal(batch["de"]["src"], batch["fr"]["src"])
    with torch.no_grad():
        de, fr = (task.model(batch[lang]["src"], batch[lang]["tgt_in"]) for lang in ("de", "fr"))
    assert not torch.allclose(de, fr)


def test_a_decoder_tagged_ensemble_and_its_attention_pictures(decoder_tagged, tmp_path):
    pytest.importorskip("matplotlib")
    import numpy as np

    from transformer.cli import inspect as inspect_cli

    ckpt, src = decoder_tagged["ckpt"], tmp_path / "in.en"
    src.write_text("A dog runs in the park.\nTwo men are talking.\n", encoding="utf-8")
    one = decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", "tgt_lang=fr", *SHORT]))
    two = decode_cli.run(compose_cfg("decode", [f"ckpt_path=[{ckpt},{ckpt}]", f"input={src}", "tgt_lang=fr", *SHORT]))
    assert two == one  # two copies average to the same probabilities, from the same start token
    inspect_cli.run(compose_cfg("inspect", [f"ckpt_path={ckpt}", "text='A dog runs.'", "tgt_lang=fr",
                                            f"output_dir={tmp_path / 'pictures'}", *SHORT[:2]]))
    arrays = np.load(tmp_path / "pictures" / "sentence_0" / "attention.npz")
    assert str(arrays["target_in"][0]) == "<2fr>" and "<2fr>" not in [str(x) for x in arrays["source"]]


def test_tag_side_settings_are_one_error_each(corpus, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    base = [*_data_args(corpus), "model=tiny", f"data.data_dir={tmp_path / 'cache'}", f"hydra.run.dir={run}"]
    for args, message in (
        (["data.pairs=[en-de,en-fr]", "data.tag_side=target"], "data.tag_side='target': expected one of source, decoder"),
        (["data.src_lang=en", "data.tgt_lang=de", "data.tag_side=decoder"],
         "data.tag_side=decoder: a target-language tag needs several directions"),
        (["experiment=multi30k_nat_cpu", "data.pairs=[en-de,en-fr]", "data.tag_side=decoder"],
         "data.tag_side=decoder: a Mask-Predict translation model has no decoder start token"),
    ):
        code, err = main_status(train_cli, [*base, *args], capsys, monkeypatch)
        lines = err.strip().splitlines()
        assert code == 2 and lines[-1].startswith("error: ") and message in lines[-1], err
        assert not run.exists() and not (tmp_path / "cache").exists()


def test_an_ensemble_of_both_tag_sides_is_refused():
    from tiny_multilingual import multilingual_task

    from transformer.tasks.translation import TranslationTask

    with pytest.raises(ValueError, match="member 2 has data.tag_side=decoder, member 1 has source"):
        TranslationTask.ensemble([multilingual_task(), multilingual_task(tag_side="decoder")])
