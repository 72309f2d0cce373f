"""What a newcomer with their own data meets first: a corpus named after its training file,
one data cache whatever folder a command starts from, no warning about a size the recipe chose,
and ``--help`` that shows the experiment asked for."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra_helpers import compose_cfg

from transformer.data.core.datamodule import TokenBudgetDataModule
from transformer.files import corpus_name

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("source, name", [
    ("/data/en_lines-ud-train.conllu", "en_lines-ud"), ("corpus/sst2/train.tsv", "sst2"), ("corpus/train", "corpus"),
    ("cmn.txt", "cmn"), ("reviews_training.jsonl.gz", "reviews"), (None, "fallback"), ("../../evil/x.tsv", "x"),
])
def test_a_corpus_is_named_after_its_training_file(source, name):
    assert corpus_name(source, "fallback") == name


@pytest.mark.parametrize("experiment, extra, key, name, run_name", [
    ("ud_upos", ["data.train=/t/en_lines-ud-train.conllu"], "dataset", "en_lines-ud", "en_lines-ud_upos"),
    ("ud_upos", ["data.train=/t/x-train.conllu", "data.dataset=lines"], "dataset", "lines", "lines_upos"),
    ("classify", ["data.train=/t/reviews-train.tsv"], "name", "reviews", "classify_reviews"),
    ("parallel", ["data.train=/t/cmn.txt", "data.src_lang=en", "data.tgt_lang=zh"], "corpus_name", "cmn", "cmn_en_zh"),
    ("gum_upos", [], "dataset", "gum", "gum_upos"),
    ("sst2", [], "name", "sst2", "sst2_cpu"),
])
def test_own_data_recipes_take_their_name_from_the_files(experiment, extra, key, name, run_name):
    cfg = compose_cfg("train", [f"experiment={experiment}", *extra])
    assert cfg.data[key] == name and cfg.name == run_name


def test_every_command_shares_one_cache_root(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path / "cache"))
    for config, overrides in (("train", ["model=tiny"]), ("train", ["experiment=ud_upos"]),
                              ("train", ["experiment=classify"]), ("train", ["experiment=parallel"]),
                              ("eval", []), ("distill", [])):
        cfg = compose_cfg(config, overrides)
        value = cfg.data.data_dir if config == "train" else cfg.data_dir
        assert value == str(tmp_path / "cache"), (config, overrides)
    monkeypatch.delenv("TRANSFORMER_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compose_cfg("eval", []).data_dir == str(tmp_path / "home" / ".cache" / "transformer")


class _Tok:
    vocab_size = 300


class _Data(TokenBudgetDataModule):
    def __init__(self, vocab_size: int):
        super().__init__(max_tokens=100, num_workers=0, seed=1)
        self.save_hyperparameters({"vocab_size": vocab_size})


@pytest.mark.parametrize("chosen, warned", [(True, True), (False, False)])
def test_a_smaller_vocabulary_is_a_warning_only_when_the_user_chose_the_size(chosen, warned, caplog):
    data = _Data(4000)
    data.vocab_size_chosen = chosen
    with caplog.at_level(logging.DEBUG, logger="transformer.data.core.datamodule"):
        data._record_vocab_size(_Tok())
    assert data.hparams["vocab_size"] == 300  # recorded either way
    levels = [r.levelno for r in caplog.records if "asked for" in r.getMessage()]
    assert levels == [logging.WARNING if warned else logging.DEBUG]


def test_help_shows_the_experiment_on_the_command_line():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    for args in (["experiment=ud_upos", "--help"],):
        proc = subprocess.run([sys.executable, "-m", "transformer.cli.train", *args], env=env, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        config = proc.stdout.split("== Config ==", 1)[1]
        assert "TaggingDataModule" in config and "TranslationDataModule" not in config
