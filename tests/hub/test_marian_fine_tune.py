"""Fine-tuning a translation model from a Marian folder: ``transformer-train experiment=parallel
init_from=hf:<folder>`` starts the whole encoder-decoder from the folder (its weights, its
switches, both SentencePiece tokenizers and the decoder's start id), reads the pairs with the
folder's tokenizers, and writes a checkpoint that decodes, evaluates, resumes, averages and
serves with the folder deleted. Before any update the model computes ``MarianMTModel``'s
teacher-forced logits on the batches training builds; ``transformer-evaluate ckpt_path=hf:<folder>``
scores a corpus named on the command line; and a model of ours written as Marian (which starts
from its own BOS) reads back with ``hf:`` and decodes as ``transformers``' ``generate`` does.
Offline: the folders are written here (``marian_folder.py``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import datasets
import pytest
import torch
from cli.hydra_helpers import compose_cfg, main_status

pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

from folders import sentences  # noqa: E402
from marian_folder import write_marian_folder  # noqa: E402
from transformer.cli import decode as decode_cli  # noqa: E402
from transformer.cli import train as train_cli  # noqa: E402
from transformer.hub import translation_checkpoint  # noqa: E402
from transformer.tasks.checkpoint import load_task, read_checkpoint  # noqa: E402
from transformer.tasks.transfer import model_settings_to_take  # noqa: E402

TOL = 1e-5
QUIET = ["logger.tensorboard=null", "callbacks.progress_bar=null"]
SHORT = ["decode.max_len_a=0", "decode.max_len_b=8"]


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    """``(source, target)``: varied sentences (accents, CJK, emoji) and the same words reversed."""
    lines = sentences(n + seed)[seed:]
    return [(line, " ".join(line.split()[::-1])) for line in lines]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_marian_folder(tmp_path_factory.mktemp("hf") / "marian")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for name, rows in (("train", pairs(48, 0)), ("dev", pairs(8, 60)), ("test", pairs(10, 80))):
        for side, lang in ((0, "en"), (1, "de")):
            (root / f"{name}.{lang}").write_text("".join(p[side] + "\n" for p in rows), encoding="utf-8")
    return root


def data_args(corpus: Path) -> list[str]:
    return ["experiment=parallel", "data.src_lang=en", "data.tgt_lang=de", f"data.train={corpus}/train",
            f"data.valid={corpus}/dev", f"data.test={corpus}/test"]


def train_args(corpus: Path, folder: Path, run: Path, *extra: str) -> list[str]:
    return [*data_args(corpus), f"init_from=hf:{folder}", "data.max_tokens=400", "trainer.max_epochs=1",
            "trainer.limit_train_batches=3", "trainer.limit_val_batches=1", "task.warmup_steps=2",
            "task.val_decode.max_len_a=0", "task.val_decode.max_len_b=8", "test_splits=[]",
            f"data.data_dir={run.parent / 'cache'}", *QUIET, f"hydra.run.dir={run}", *extra]


def _hf(folder: Path):
    return transformers.MarianMTModel.from_pretrained(folder).eval()


def test_training_starts_from_the_folder_and_reads_with_its_tokenizers(folder, corpus, tmp_path, capsys,
                                                                         monkeypatch):
    run = tmp_path / "run"
    code, err = main_status(train_cli, train_args(corpus, folder, run, "task.lr=0.0", "model.dropout=0.0"), capsys,
                            monkeypatch)
    assert code == 0, err
    ckpt = read_checkpoint(run / "checkpoints" / "last.ckpt")
    source = translation_checkpoint(f"hf:{folder}")
    # the whole model, tensor by tensor (learning rate 0), and the folder's switches and ids
    assert set(ckpt["state_dict"]) == set(source["state_dict"])
    assert all(torch.equal(ckpt["state_dict"][k], v) for k, v in source["state_dict"].items())
    hp, theirs = ckpt["hyper_parameters"], source["hyper_parameters"]
    model = hp["model"]
    assert model_settings_to_take(source, {**model, "dropout": theirs["model"]["dropout"]}, ()) == {}
    assert model["dropout"] == 0.0  # typed: fine-tuning's own regularisation
    assert (model["activation"], model["positional"]["layout"], model["output_bias"], model["mask_target_padding"],
            model["norm_first"], model["n_decoder_layers"]) == ("silu", "halves", True, False, False, 2)
    assert [hp[k] for k in ("vocab_size", "pad_id", "bos_id", "eos_id")] == \
        [theirs[k] for k in ("vocab_size", "pad_id", "bos_id", "eos_id")]
    assert ckpt["tokenizers"] == source["tokenizers"]
    # the cached training ids are MarianTokenizer's, row by row
    tok = transformers.MarianTokenizer.from_pretrained(folder)
    train = pairs(48, 0)
    theirs_src = tok([s for s, _ in train])["input_ids"]
    theirs_tgt = tok(text_target=[t for _, t in train])["input_ids"]
    cached = [p for p in (tmp_path / "cache" / "arrow").glob("*-en-de-train-*.arrow") if "-raw-" not in p.name]
    assert cached
    for path in cached:
        rows = datasets.Dataset.from_file(str(path))
        assert [theirs_src[i] for i in rows["index"]] == [r + [tok.eos_token_id] for r in rows["src"]]
        assert [theirs_tgt[i] for i in rows["index"]] == [r + [tok.eos_token_id] for r in rows["tgt"]]
    # teacher forcing on the batches training builds: MarianMTModel's logits, from its start id
    from transformer.cli.train import build_datamodule

    cfg = compose_cfg("train", train_args(corpus, folder, tmp_path / "dm")[:-1] + [f"output_dir={tmp_path / 'dm'}"])
    dm = build_datamodule(cfg, ckpt)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    hf = _hf(folder)
    assert batch["tgt_in"][:, 0].eq(hf.config.decoder_start_token_id).all()
    task = load_task(str(run / "checkpoints" / "last.ckpt"))
    real = batch["tgt_out"].ne(tok.pad_token_id)
    assert not real.all()  # padded targets
    with torch.no_grad():
        expected = hf(input_ids=batch["src"], attention_mask=batch["src_pad_mask"].long(),
                      decoder_input_ids=batch["tgt_in"]).logits
        ours = task.model(batch["src"], batch["tgt_in"])
    assert (ours - expected)[real].abs().max().item() < TOL and expected.abs().max().item() > 1.0


def test_a_fine_tuned_checkpoint_decodes_with_the_folder_deleted(folder, corpus, tmp_path, capsys, monkeypatch):
    copy = tmp_path / "marian"
    shutil.copytree(folder, copy)
    run = tmp_path / "run"
    code, err = main_status(train_cli, train_args(corpus, copy, run), capsys, monkeypatch)
    assert code == 0, err
    last = run / "checkpoints" / "last.ckpt"
    tuned = read_checkpoint(last)
    assert tuned["global_step"] == 3
    start = translation_checkpoint(f"hf:{copy}")["state_dict"]
    assert any(not torch.equal(tuned["state_dict"][k], v) for k, v in start.items())  # it trained
    shutil.rmtree(copy)
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s, _ in pairs(6, 90)), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    code, err = main_status(decode_cli, [f"ckpt_path={last}", f"input={src}", "output=out.txt", "device=cpu", *SHORT],
                            capsys, monkeypatch)
    assert code == 0, err
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 6 and any(lines)


@pytest.mark.parametrize("typed,named", [
    (["model.d_ff=128"], "d_ff=64, but model.d_ff=128"),
    (["model.activation=relu"], "activation='silu', but model.activation='relu'"),
    (["data.tokenizer_path=tok.json"], "leave data.tokenizer_path unset"),
    (["task=nat", "~task.loss"], "starts a translation model (task: translation), not 'nat'"),
])
def test_what_the_folder_cannot_start_is_one_line(folder, corpus, tmp_path, capsys, monkeypatch, typed, named):
    run = tmp_path / "run"
    code, err = main_status(train_cli, train_args(corpus, folder, run, *typed), capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: init_from: hf:") and named in lines[0], lines[0]
    assert not run.exists()


@pytest.mark.parametrize("tag_side", ["source", "decoder"])
def test_several_directions_cannot_start_from_a_marian_folder(folder, corpus, tmp_path, capsys, monkeypatch,
                                                              tag_side):
    """Marian's SentencePiece vocabularies take no <2xx> target tags: data.pairs is refused by name
    before anything is written, not a tokenizers parse error once training has begun."""
    three = shutil.copytree(corpus, tmp_path / "three")
    for name in ("train", "dev", "test"):
        (three / f"{name}.fr").write_text((three / f"{name}.de").read_text(encoding="utf-8"), encoding="utf-8")
    run = tmp_path / "run"
    code, err = main_status(train_cli, train_args(three, folder, run, "data.pairs=[en-de,en-fr]",
                                                  f"data.tag_side={tag_side}"), capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: init_from: hf:") and "data.pairs=[en-de,en-fr]" in lines[0], lines[0]
    assert ("data.tag_side=decoder" in lines[0]) == (tag_side == "decoder")
    assert not run.exists()


def test_evaluate_scores_a_marian_folder_on_a_corpus_named_on_the_command_line(folder, corpus, tmp_path, capsys,
                                                                               monkeypatch):
    from transformer.cli import evaluate as evaluate_cli

    monkeypatch.chdir(tmp_path)
    args = [f"ckpt_path=hf:{folder}", "data=parallel", "data.src_lang=en", "data.tgt_lang=de",
            f"data.test={corpus}/test", "split=test", f"output_dir={tmp_path / 'eval'}", "device=cpu",
            "decode.strategy=greedy", *SHORT]
    code, err = main_status(evaluate_cli, args, capsys, monkeypatch)
    assert code == 0, err
    metrics = json.loads((tmp_path / "eval" / "test.greedy.json").read_text(encoding="utf-8"))
    assert (metrics["pair"], metrics["sentences"], metrics["split"]) == ("en-de", 10, "test")
    assert 0.0 <= metrics["bleu"] <= 100.0 and "chrf" in metrics
    # the hypotheses are the folder's translations of the test sources, as transformer-decode gives them
    code, err = main_status(decode_cli, [f"ckpt_path=hf:{folder}", f"input={corpus}/test.en", "output=dec.txt",
                                         "device=cpu", "decode.strategy=greedy", *SHORT], capsys, monkeypatch)
    assert code == 0, err
    hyps = (tmp_path / "eval" / "test.greedy.hyp.de").read_text(encoding="utf-8").splitlines()
    assert hyps == (tmp_path / "dec.txt").read_text(encoding="utf-8").splitlines() and any(hyps)
    # without a corpus named, a folder has none of its own to read a split from
    code, err = main_status(evaluate_cli, args[:1] + ["split=test", "device=cpu"], capsys, monkeypatch)
    assert code == 2 and err.strip().startswith(f"error: hf:{folder} carries no corpus"), err


# ----------------------------------------------------------------------------- a model of ours as Marian
def _save(task, path: Path) -> str:
    from transformer.tasks.checkpoint import TASK_KEY

    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": dict(task.hparams), TASK_KEY: "translation"}
    task.on_save_checkpoint(ckpt)
    torch.save(ckpt, path)
    return str(path)


@pytest.fixture(scope="module")
def exported(mirror_root, tmp_path_factory):
    """A tiny post-norm translation model trained here (interleaved sinusoids, its own BOS as the
    decoder's start), its checkpoint and its ``transformer-export format=hf`` folder."""
    from tiny_translation import multi30k_slice, tiny_task

    from transformer.cli import export as export_cli

    root = tmp_path_factory.mktemp("ours")
    task = tiny_task(multi30k_slice(mirror_root, "train", 1000, root / "cache"), steps=150, norm_first=False)
    ckpt = _save(task, root / "ours.ckpt")
    out = export_cli.run(compose_cfg("export", [f"ckpt_path={ckpt}", "format=hf", f"output_dir={root / 'hf'}"]))
    return task, ckpt, Path(out)


@pytest.mark.parametrize("beams", [1, 4, 5])
def test_a_model_of_ours_written_as_marian_reads_back_and_decodes_as_generate(exported, mirror_root, tmp_path,
                                                                            beams):
    from tiny_translation import multi30k_slice

    task, ckpt, out = exported
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["decoder_start_token_id"] == task.hparams.bos_id != task.hparams.pad_id
    read = translation_checkpoint(f"hf:{out}")
    assert read["hyper_parameters"]["bos_id"] == task.hparams.bos_id
    sources = [s for s, _ in multi30k_slice(mirror_root, "val", 12, tmp_path / "cache")]
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    max_new = 20
    decode = ["decode.strategy=greedy" if beams == 1 else "decode.strategy=beam", f"decode.beam_size={beams}",
              "decode.length_penalty=1.0", "decode.max_len_a=0", f"decode.max_len_b={max_new}", "device=cpu"]

    def lines(path: str) -> list[str]:
        return decode_cli.run(compose_cfg("decode", [f"ckpt_path={path}", f"input={src}", "output=-", *decode]))

    ours = lines(ckpt)
    assert lines(f"hf:{out}") == ours
    assert len(set(ours)) > 1 and any(ours)
    hf = transformers.MarianMTModel.from_pretrained(out).eval()
    tok = transformers.AutoTokenizer.from_pretrained(out)
    batch = tok(sources, padding=True, return_tensors="pt")
    with torch.no_grad():
        generated = hf.generate(**batch, num_beams=beams, do_sample=False, max_length=max_new + 1, length_penalty=1.0,
                                early_stopping=True, forced_eos_token_id=None,
                                bad_words_ids=[[tok.pad_token_id], [task.hparams.bos_id]])
    assert generated[:, 0].eq(task.hparams.bos_id).all()
    assert tok.batch_decode(generated, skip_special_tokens=True) == ours


# ----------------------------------------------------------------------------- the round trip
def _main(module, args: list[str]) -> int:
    """A command's real ``main()`` (Hydra included) in this process; its exit status."""
    import sys

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", [module.__name__, *args])
        try:
            module.main()
        except SystemExit as exc:
            return 0 if exc.code is None else int(exc.code)
    return 0


@pytest.fixture(scope="module")
def tuned(folder, corpus, tmp_path_factory):
    """A run fine-tuned from a copy of the folder (3 steps), the copy deleted afterwards:
    ``(run folder, the arguments that trained it)``."""
    root = tmp_path_factory.mktemp("tuned")
    copy = root / "marian"
    shutil.copytree(folder, copy)
    run = root / "run"
    args = train_args(corpus, copy, run)
    assert _main(train_cli, args) == 0
    shutil.rmtree(copy)
    return run, args


def _decode(ckpt: str, tmp_path: Path, beams: int = 1) -> list[str]:
    src = tmp_path / "src.txt"
    src.write_text("".join(s + "\n" for s, _ in pairs(8, 90)), encoding="utf-8")
    strategy = "greedy" if beams == 1 else "beam"
    return decode_cli.run(compose_cfg("decode", [f"ckpt_path={ckpt}", f"input={src}", "output=-", "device=cpu",
                                                 f"decode.strategy={strategy}", f"decode.beam_size={beams}", *SHORT]))


def test_a_fine_tuned_checkpoint_resumes_and_averages(tuned, tmp_path):
    from transformer.cli import average as average_cli

    run, args = tuned
    resumed = tmp_path / "run"
    shutil.copytree(run, resumed)  # resumed in place, in a copy of the run's folder
    last = resumed / "checkpoints" / "last.ckpt"
    first = read_checkpoint(last)
    args = [a for a in args if not a.startswith(("hydra.run.dir=", "trainer.max_epochs="))]
    # the folder is gone: a resumed run reads its weights, switches and tokenizers from the checkpoint
    assert _main(train_cli, [*args, "trainer.max_epochs=2", f"ckpt_path={last}", f"hydra.run.dir={resumed}"]) == 0
    second = read_checkpoint(last)
    assert (first["global_step"], second["global_step"]) == (3, 6)
    assert second["tokenizers"] == first["tokenizers"]
    assert second["hyper_parameters"]["model"] == first["hyper_parameters"]["model"]
    assert any(not torch.equal(second["state_dict"][k], v) for k, v in first["state_dict"].items())
    # averaged with the checkpoint it resumed from: the mean of the two, which decodes
    old = tmp_path / "first.ckpt"
    torch.save(first, old)
    avg = average_cli.average_checkpoints([str(old), str(last)], tmp_path / "avg.ckpt")
    averaged = read_checkpoint(avg)
    key = "model.decoder.layers.0.ffn.w_1.weight"
    assert torch.allclose(averaged["state_dict"][key], (first["state_dict"][key] + second["state_dict"][key]) / 2)
    assert averaged["tokenizers"] == first["tokenizers"]
    lines = _decode(str(avg), tmp_path)
    assert len(lines) == 8 and any(lines)


def test_a_fine_tuned_checkpoint_is_served_as_transformer_decode_reads_it(tuned, tmp_path):
    import sys

    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
    from fastapi.testclient import TestClient
    from serve_models import serve_cfg

    from transformer.cli import serve as serve_cli
    from transformer.serve.app import ServeConfig, create_app

    last = tuned[0] / "checkpoints" / "last.ckpt"
    sources = [s for s, _ in pairs(8, 90)]
    lines = _decode(str(last), tmp_path, beams=3)
    served = serve_cli.check(serve_cfg(f"models=[{{id:m,ckpt_path:'{last}',decode:beam,beam_size:3,max_len_a:0,"
                                       f"max_len_b:8}}]"))
    with TestClient(create_app(served, ServeConfig())) as client:
        r = client.post("/v1/translate", json={"model": "m", "inputs": sources})
        assert r.status_code == 200, r.text
        assert [o["translation"] for o in r.json()["outputs"]] == lines and any(lines)


def test_a_fine_tuned_checkpoint_exports_to_ctranslate2_and_translates_as_we_do(tuned, tmp_path):
    pytest.importorskip("ctranslate2")
    from transformer.cli import export as export_cli
    from transformer.export.ctranslate2 import CTranslate2Translator

    last = tuned[0] / "checkpoints" / "last.ckpt"
    out = export_cli.run(compose_cfg("export", [f"ckpt_path={last}", "format=ctranslate2",
                                                f"output_dir={tmp_path / 'ct2'}"]))
    ct2 = CTranslate2Translator(out, max_len_a=0, max_len_b=8)
    sources = [s for s, _ in pairs(8, 90)]
    for beams in (1, 4):
        lines = _decode(str(last), tmp_path, beams)
        assert ct2.translate(sources, beam_size=beams) == lines
    assert any(lines)
