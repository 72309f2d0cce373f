"""Training one model on several directions: validation scores each direction besides the whole
split; the temperature sample of the directions is drawn anew each epoch, reproducibly; the
Mask-Predict and CTC students train on several directions and decode each with ``tgt_lang=``;
``transformer-distill`` writes a multilingual teacher's targets for every direction, which a
multilingual student reads back with ``data.distill_dir``."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hydra_helpers import compose_cfg, main_status
from test_multilingual import SHORT, TINY, _data_args, _lines

from transformer.cli import decode as decode_cli
from transformer.cli import distill as distill_cli
from transformer.cli import train as train_cli
from transformer.tasks.checkpoint import load_task, read_checkpoint

PAIRS = "data.pairs=[en-de,en-fr]"
# A student's settings over the autoregressive TINY run: its task, and what validation decodes with.
STUDENTS = {
    "translation": ([], ["decode.strategy=greedy"]),
    # (experiment=parallel's task.loss is the autoregressive task's)
    "nat": (["task=nat", "~task.loss", "model.max_offset=32", "task.val_decode.strategy=nat_one_pass"],
            ["decode.strategy=mask_predict", "decode.iterations=2"]),
    "nat_ctc": (["task=nat_ctc", "~task.loss", "task.val_decode.strategy=ctc_one_pass"], ["decode.strategy=ctc_one_pass"]),
}


@pytest.fixture(scope="module")
def corpus(mirror_root, tmp_path_factory) -> Path:
    """corpus/{train,dev,test}.{en,de,fr} from slices of Multi30k; train.fr has its last 200
    lines empty, so en-fr has 100 training pairs and en-de 300."""
    folder = tmp_path_factory.mktemp("corpus")
    for split, name, n in (("train", "train", 300), ("val", "dev", 12), ("test_2016_flickr", "test", 16)):
        for lang in ("en", "de", "fr"):
            lines = _lines(mirror_root, split, lang, n)
            if name == "train" and lang == "fr":
                lines = lines[:100] + [""] * 200
            (folder / f"{name}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict:
    """A tiny two-direction run of each task kind, trained on demand and kept for the module."""
    done: dict = {}

    def get(kind: str) -> dict:
        if kind not in done:
            tmp = tmp_path_factory.mktemp(kind)
            cfg = compose_cfg("train", [*_data_args(corpus), PAIRS, *TINY, *STUDENTS[kind][0],
                                        "trainer.limit_val_batches=1.0", f"data.data_dir={tmp / 'cache'}",
                                        f"output_dir={tmp / 'run'}"])
            done[kind] = {"summary": train_cli.run(cfg), "tmp": tmp}
        return done[kind]

    return get


def _metrics(run_dir: Path) -> list[dict]:
    with open(run_dir / "csv" / "metrics.csv", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("kind", list(STUDENTS))
def test_validation_logs_bleu_per_direction(runs, kind):
    run = runs(kind)
    rows = [r for r in _metrics(Path(run["summary"]["output_dir"])) if r.get("val/bleu")]
    assert rows, "no validation row"
    last = rows[-1]
    for name in ("en-de", "en-fr"):
        value = last.get(f"val/bleu/{name}")
        assert value not in (None, "") and not math.isnan(float(value)), (name, last)
    # the whole split's score still picks the checkpoint
    assert run["summary"]["monitor"] == "val/bleu" and not math.isnan(float(last["val/bleu"]))


def test_a_direction_s_score_is_its_own_sentences_bleu():
    """A batch of two directions: each direction's statistics are those of its own sentences, and
    the overall score is the joined split's."""
    import torch

    from transformer.evaluation import CorpusBLEU
    from transformer.tasks.translation import TranslationTask
    from tiny_multilingual import TINY as TINY_MODEL, tagged_tokenizer

    tok = tagged_tokenizer()
    task = TranslationTask(model=TINY_MODEL, vocab_size=tok.vocab_size, pad_id=tok.pad_id, bos_id=tok.bos_id,
                           eos_id=tok.eos_id, src_lang="en", tgt_lang="mul", data={"directions": ["en-de", "en-fr"]},
                           tokenizers={"src": tok.to_str(), "tgt": tok.to_str()})
    hyps = ["ein hund", "un chien", "zwei männer", "deux hommes"]
    refs = ["ein hund läuft", "un chien court", "zwei männer", "deux hommes jouent"]
    direction = [0, 1, 0, 1]
    ids = [tok.encode(r) + [tok.eos_id] for r in refs]
    width = max(map(len, ids))
    batch = {"src": torch.zeros(4, 3, dtype=torch.long), "direction": torch.tensor(direction),
             "tgt_out": torch.tensor([i + [tok.pad_id] * (width - len(i)) for i in ids])}
    task.search_fn = lambda cfg: (lambda src: [[(tok.encode(h), 0.0)] for h in hyps])
    task._add_bleu_stats(batch)
    overall, *directions = task._validation_bleu()
    for i, bleu in enumerate(directions):
        own = CorpusBLEU()
        own.update([h for h, d in zip(hyps, direction) if d == i], [r for r, d in zip(refs, direction) if d == i])
        assert bleu.stats == own.stats and bleu.stats[0] > 0
    whole = CorpusBLEU()
    whole.update(hyps, refs)
    assert overall.stats == whole.stats


@pytest.mark.parametrize("kind", ["nat", "nat_ctc"])
def test_students_decode_each_direction_with_its_tag(runs, kind, tmp_path, monkeypatch):
    ckpt = runs(kind)["summary"]["best_checkpoint"]
    assert read_checkpoint(ckpt)["hyper_parameters"]["data"]["directions"] == ["en-de", "en-fr"]
    task = load_task(ckpt)
    tok = task.src_tokenizer
    seen = []
    search_fn = task.search_fn

    def recording(*args, **kwargs):
        search = search_fn(*args, **kwargs)

        def run(src):
            seen.append(src.clone())
            return search(src)
        return run

    monkeypatch.setattr(task, "search_fn", recording)
    monkeypatch.setattr(decode_cli, "load_for_inference", lambda *a, **k: (task, "cpu"))
    src = tmp_path / "in.en"
    src.write_text("A dog runs in the park.\nTwo men are talking.\n", encoding="utf-8")
    for lang in ("de", "fr"):
        seen.clear()
        lines = decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", f"tgt_lang={lang}",
                                                      "device=cpu", *STUDENTS[kind][1]]))
        assert len(lines) == 2
        assert seen and all((batch[:, 0] == tok.token_to_id(f"<2{lang}>")).all() for batch in seen)


def _dm(corpus: Path, tmp: Path, *extra: str):
    from hydra.utils import instantiate

    cfg = compose_cfg("train", [*_data_args(corpus), PAIRS, *TINY, f"data.data_dir={tmp / 'cache'}",
                                f"output_dir={tmp / 'run'}", *extra])
    dm = instantiate(cfg.data, _recursive_=False)
    dm.setup()
    return dm


def _epochs(dm, epochs=(0, 1)) -> list[list[int]]:
    sampler = dm.train_dataloader().batch_sampler
    out = []
    for epoch in epochs:
        sampler.set_epoch(epoch)
        out.append(sorted(i for batch in sampler for i in batch))
        assert len(sampler) == sum(1 for _ in sampler)
    return out


def test_each_epoch_draws_its_own_temperature_sample(corpus, tmp_path):
    dm = _dm(corpus, tmp_path, "data.temperature=5")
    de, fr = dm.mix["en-de"], dm.mix["en-fr"]
    assert (de["pairs"], fr["pairs"]) == (300, 100)
    assert de["per_epoch"] < 300 and fr["per_epoch"] > 100  # en-de down-sampled, en-fr up-sampled
    first, second = _epochs(dm)
    assert first != second
    for drawn in (first, second):
        rows = np.asarray(drawn)
        assert (rows < 300).sum() == de["per_epoch"] and (rows >= 300).sum() == fr["per_epoch"]
        assert set(range(300, 400)) <= set(drawn)  # every en-fr pair at least once
    # the up-sampled direction repeats a different part of itself in each epoch
    repeats = [sorted(i for i in set(d) if i >= 300 and d.count(i) > 1) for d in (first, second)]
    assert repeats[0] != repeats[1]
    # the same seed draws the same epochs; another seed others
    assert _epochs(_dm(corpus, tmp_path, "data.temperature=5")) == [first, second]
    assert _epochs(_dm(corpus, tmp_path, "data.temperature=5", "data.seed=7"))[0] != first


def test_a_run_resumed_mid_epoch_continues_that_epoch_s_draw(corpus, tmp_path):
    dm = _dm(corpus, tmp_path, "data.temperature=5", "data.max_tokens=300")
    loader = dm.train_dataloader()
    loader.batch_sampler.set_epoch(1)
    whole = list(loader.batch_sampler)
    resumed = dm.train_dataloader()
    resumed.load_state_dict({"epoch": 1, "batches": 3})
    assert list(resumed.batch_sampler) == whole[3:]
    # saved after the epoch's last batch: the next epoch, whole
    resumed.load_state_dict({"epoch": 1, "batches": len(whole)})
    loader.batch_sampler.set_epoch(2)
    assert resumed.batch_sampler.epoch == 2 and list(resumed.batch_sampler) == list(loader.batch_sampler)


def test_temperature_one_uses_every_pair_once_each_epoch(corpus, tmp_path):
    dm = _dm(corpus, tmp_path)
    assert _epochs(dm) == [list(range(400))] * 2


def test_distill_writes_every_direction_and_a_student_reads_them(runs, corpus, tmp_path, mirror_root):
    teacher = runs("translation")
    ckpt = teacher["summary"]["best_checkpoint"]
    out = tmp_path / "distilled"
    summary = distill_cli.run(compose_cfg("distill", [f"ckpt_path={ckpt}", "split=train", f"output_dir={out}",
                                                      "decode.strategy=greedy", *SHORT[:2], "limit=20",
                                                      f"data_dir={teacher['tmp'] / 'cache'}", "device=cpu"]))
    assert summary["pairs"] == ["en-de", "en-fr"] and set(summary["directions"]) == {"en-de", "en-fr"}
    written = {lang: (out / f"train.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de", "fr")}
    # en-fr's empty lines are dropped from training, but the split is read as it is
    assert written["en"] == (corpus / "train.en").read_text(encoding="utf-8").splitlines()[:20]
    assert len(written["de"]) == len(written["fr"]) == 20
    assert written["de"] != (corpus / "train.de").read_text(encoding="utf-8").splitlines()[:20]
    assert json.loads((out / "distill.json").read_text())["directions"]["en-fr"]["sentences"] == 20
    # a Mask-Predict student reads each direction's distilled targets, with the teacher's tokenizer
    student = _dm(corpus, tmp_path, *STUDENTS["nat"][0], f"++data.distill_dir={out}")
    pairs = list(student.raw("train"))
    assert [t for _, t in pairs] == [t for t in written["de"] + written["fr"] if t]  # one-sided pairs left out
    assert student.src_tokenizer.to_str() == read_checkpoint(ckpt)["tokenizers"]["src"]
    assert student.dataset("valid.en-fr")[0]["tgt"] == student.tgt_tokenizer.encode(
        (corpus / "dev.fr").read_text(encoding="utf-8").splitlines()[0])  # validation keeps its references
    result = train_cli.run(compose_cfg("train", [*_data_args(corpus), PAIRS, *TINY, *STUDENTS["nat"][0],
                                                 f"++data.distill_dir={out}", f"data.data_dir={tmp_path / 'cache'}",
                                                 f"output_dir={tmp_path / 'student'}"]))
    hp = read_checkpoint(result["best_checkpoint"])["hyper_parameters"]
    assert hp["data"]["directions"] == ["en-de", "en-fr"]


def test_distill_refuses_a_teacher_whose_targets_are_also_sources(tmp_path, capsys, monkeypatch):
    from tiny_multilingual import multilingual_task, save_checkpoint

    ckpt = save_checkpoint(multilingual_task(), tmp_path / "mul.ckpt")  # de-en, en-de, en-fr, fr-en
    code, err = main_status(distill_cli, [f"ckpt_path={ckpt}", f"output_dir={tmp_path / 'out'}", "device=cpu"],
                            capsys, monkeypatch)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("error: ckpt_path=") and "source and a target" in last, err
    assert not (tmp_path / "out").exists()


def test_a_distill_dir_without_a_language_is_one_error(corpus, tmp_path):
    from transformer.data.parallel.languages import check_pairs

    (tmp_path / "train.en").write_text("a\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("b\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"data.pairs: en-fr: unknown language 'fr'.*no data.distill_dir file"):
        check_pairs({"train": f"{corpus}/train", "pairs": ["en-de", "en-fr"], "corpus_name": "parallel",
                     "distill_dir": str(tmp_path)})


def test_every_epoch_trains_every_batch_of_its_own_draw(corpus, tmp_path):
    """An epoch's sample cuts into a batch count of its own; an epoch with more batches than the
    first must not stop at the first one's count (Lightning reads a loader's length once, so the
    trainer makes the loader again each epoch)."""
    keys = ["data.temperature=5", "data.max_tokens=300"]
    seed = next(s for s in range(40)
                if (lambda n: max(n[1:]) > n[0])(_batch_counts(_dm(corpus, tmp_path / f"s{s}", *keys, f"seed={s}"))))
    counts = _batch_counts(_dm(corpus, tmp_path / f"s{seed}", *keys, f"seed={seed}"))
    cfg = compose_cfg("train", [*_data_args(corpus), PAIRS, *TINY, *keys, f"seed={seed}", "trainer.max_epochs=3",
                                "trainer.limit_train_batches=null", "trainer.limit_val_batches=0",
                                "trainer.num_sanity_val_steps=0", "test_splits=[]",
                                f"data.data_dir={tmp_path / 'cache'}", f"output_dir={tmp_path / 'run'}"])
    train_cli.run(cfg)
    ckpt = read_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert ckpt["global_step"] == sum(counts)


def _batch_counts(dm, epochs: int = 3) -> list[int]:
    sampler = dm.train_dataloader().batch_sampler
    return [sampler.batches_in(epoch) for epoch in range(epochs)]
