"""The translation tasks are siblings over ``Seq2SeqTask``; their optimizer is a config node
checked against a registry; checkpoints that keep the optimizer's settings flat still load."""

from __future__ import annotations

import copy
import inspect
from types import SimpleNamespace

import pytest
import torch
from model_configs import model_config

from transformer.tasks.build import HyperparameterError, check_optimizer, task_class, task_parameters
from transformer.tasks.checkpoint import TASK_KEY, CheckpointError, check_hyper_parameters, load_task
from transformer.tasks.ctc import CTCTranslationTask
from transformer.tasks.nat import NATTranslationTask
from transformer.tasks.seq2seq import Seq2SeqTask
from transformer.tasks.translation import TranslationTask

IDS = dict(vocab_size=40, pad_id=0, bos_id=1, eos_id=2, src_lang="de", tgt_lang="en")
SHARED = set(task_parameters(Seq2SeqTask))


def make(cls, **settings):
    model = {TranslationTask: "tiny", NATTranslationTask: "nat_tiny", CTCTranslationTask: "nat_ctc_tiny"}[cls]
    extra = {} if cls is TranslationTask else {"mask_id": 4}
    return cls(model=model_config(model), **IDS, **extra, **settings)


def ckpt_of(task) -> dict:
    ckpt = {"state_dict": task.state_dict(), "hyper_parameters": copy.deepcopy(dict(task.hparams)),
            TASK_KEY: task.task_name}
    task.on_save_checkpoint(ckpt)
    return ckpt


@pytest.mark.parametrize("cls, own", [
    (TranslationTask, {"loss", "compile", "compile_mode", "ctc_weight", "attention_guide"}),
    (NATTranslationTask, {"mask_id", "length_loss_weight", "glancing"}),
    (CTCTranslationTask, {"mask_id", "glancing", "label_smoothing"}),
])
def test_the_three_tasks_are_siblings_that_name_only_their_own_settings(cls, own):
    assert cls.__bases__ == (Seq2SeqTask,)
    named = {k for k in inspect.signature(cls.__init__).parameters if k not in ("self", "shared")}
    assert named == own
    assert set(task_parameters(cls)) == SHARED | own
    assert set(make(cls).hparams) == (SHARED | own) - {"tokenizers"}  # recorded: every setting, no more


def test_the_corpus_comes_from_the_data_module_with_no_default_of_its_own():
    tok = SimpleNamespace(vocab_size=40, pad_id=0, bos_id=1, eos_id=2, mask_id=4, to_str=lambda: "{}")
    corpus = {"name": "mine", "src_lang": "xx", "tgt_lang": "yy", "sources": {"train": "a.tsv"}}
    dm = SimpleNamespace(src_tokenizer=tok, tgt_tokenizer=tok, src_lang="xx", tgt_lang="yy", corpus=corpus)
    for cls in (TranslationTask, NATTranslationTask, CTCTranslationTask):
        kwargs = cls.kwargs_from_datamodule(dm)
        assert kwargs["data"] is corpus and ("mask_id" in kwargs) == (cls is not TranslationTask)


@pytest.mark.parametrize("name, cls", [("Adam", torch.optim.Adam), ("AdamW", torch.optim.AdamW)])
def test_the_optimizer_node_chooses_the_class_and_its_settings(name, cls):
    node = {"_target_": f"torch.optim.{name}", "_partial_": True, "betas": [0.8, 0.9], "eps": 1e-6,
            "weight_decay": 0.05}
    optimizer = make(TranslationTask, lr=1e-3, optimizer=node).configure_optimizers()["optimizer"]
    assert type(optimizer) is cls
    group = optimizer.param_groups[0]
    assert (group["initial_lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-3, (0.8, 0.9), 1e-6, 0.05)


def test_without_a_node_each_task_trains_with_its_default_optimizer():
    adam = make(NATTranslationTask).configure_optimizers()["optimizer"]
    assert type(adam) is torch.optim.Adam
    assert (adam.param_groups[0]["betas"], adam.param_groups[0]["eps"]) == ((0.9, 0.98), 1e-9)


@pytest.mark.parametrize("node, key", [
    ({"_target_": "builtins.open", "_partial_": True, "file": "x"}, "optimizer._target_"),
    ({"_target_": "torch.optim.SGD", "_partial_": True}, "optimizer._target_"),
    ({"_target_": "torch.optim.Adam"}, "optimizer"),
    ({"_target_": "torch.optim.Adam", "_partial_": True, "betas": [0.9, 1.5]}, "optimizer.betas"),
    ({"_target_": "torch.optim.Adam", "_partial_": True, "eps": -1}, "optimizer.eps"),
    ({"_target_": "torch.optim.Adam", "_partial_": True, "lr": 1.0}, "optimizer.lr: unknown key"),
    ({"_target_": "torch.optim.Adam", "_partial_": True, "hook": {"_target_": "os.system"}}, "optimizer.hook"),
])
def test_a_checkpoint_optimizer_names_only_a_registered_class_with_checked_settings(node, key):
    ckpt = ckpt_of(make(TranslationTask))
    ckpt["hyper_parameters"]["optimizer"] = node
    with pytest.raises(HyperparameterError, match=f"hyper_parameters.{key}"):
        check_hyper_parameters(ckpt)
    with pytest.raises(HyperparameterError):
        check_optimizer(node)


@pytest.mark.parametrize("cls", [TranslationTask, NATTranslationTask, CTCTranslationTask])
def test_a_checkpoint_with_flat_optimizer_settings_loads_and_trains_with_the_same_adam(cls):
    task = make(cls).eval()
    ckpt = ckpt_of(task)
    hp = ckpt["hyper_parameters"]
    node = hp.pop("optimizer") or cls.default_optimizer
    hp.update(betas=list(node["betas"]), eps=node["eps"], weight_decay=0.01)  # the flat form
    if cls is not TranslationTask:
        hp.update(compile=False, compile_mode="default")  # recorded, off, by every translation task
    check_hyper_parameters(ckpt)
    again = task_class(task.task_name).from_checkpoint_dict(ckpt).eval()
    assert again.hparams.optimizer == {"_target_": "torch.optim.Adam", "_partial_": True, "betas": [0.9, 0.98],
                                       "eps": 1e-9, "weight_decay": 0.01}
    group = again.configure_optimizers()["optimizer"].param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.9, 0.98), 1e-9, 0.01)
    for name, value in task.state_dict().items():
        assert torch.equal(again.state_dict()[name], value), name


def test_a_task_without_a_compile_switch_refuses_one_that_is_on():
    ckpt = ckpt_of(make(NATTranslationTask))
    ckpt["hyper_parameters"].update(compile=True)
    with pytest.raises(HyperparameterError, match="hyper_parameters.compile: unknown key"):
        check_hyper_parameters(ckpt)


def test_settings_that_belong_to_a_sibling_are_refused(tmp_path):
    ckpt = ckpt_of(make(NATTranslationTask))
    ckpt["hyper_parameters"]["loss"] = "real_positions"  # the autoregressive task's
    torch.save(ckpt, tmp_path / "nat.ckpt")
    with pytest.raises(CheckpointError, match="hyper_parameters.loss: unknown key"):
        load_task(tmp_path / "nat.ckpt")


def test_the_linear_schedule_decays_to_zero_at_the_trainers_last_step():
    """``schedule: linear`` warms up, then falls linearly to 0 at the run's last update (the
    trainer's estimate); the default stays the inverse square root; another name is refused."""
    task = make(CTCTranslationTask, lr=1e-3, warmup_steps=10, schedule="linear")
    task._trainer = SimpleNamespace(estimated_stepping_batches=110, gradient_clip_val=None)
    scheduler = task.configure_optimizers()["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(110):
        rates.append(scheduler.get_last_lr()[0])
        scheduler.optimizer.step()
        scheduler.step()
    assert rates[9] == pytest.approx(1e-3) and rates[59] == pytest.approx(0.5e-3) and rates[109] == 0.0
    plain = make(CTCTranslationTask, lr=1e-3, warmup_steps=10).configure_optimizers()["lr_scheduler"]["scheduler"]
    for _ in range(39):
        plain.optimizer.step()
        plain.step()
    assert plain.get_last_lr()[0] == pytest.approx(1e-3 * (10 / 40) ** 0.5)
    with pytest.raises(ValueError, match="task.schedule"):
        make(TranslationTask, schedule="cosine")
