"""Every NAT config (models, task, decode strategies, experiments, distill entry) composes,
and what it describes instantiates and binds to a NAT task."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra_helpers import compose_cfg, documented_commands
import torch
from hydra.utils import get_class, instantiate
from omegaconf import OmegaConf

from transformer.cli.train import check_config

CONF = Path(__file__).resolve().parents[2] / "conf"
# conf/model/ holds sizes; task=nat and task=nat_ctc make each a NAT or CTC model.
SIZES = ["tiny", "small", "medium"]
NAT_EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("multi30k_nat*.yaml"))
NAT_DECODES = ["nat_one_pass", "nat_length_beam", "mask_predict"]
FACTS = dict(vocab_size=120, pad_id=0, bos_id=1, eos_id=2, mask_id=4, src_lang="de", tgt_lang="en")


def test_the_nat_configs_exist():
    assert {"tiny", "small", "medium"} <= {p.stem for p in (CONF / "model").glob("*.yaml")}
    assert {"multi30k_nat_cpu", "multi30k_nat_ctc_cpu"} <= set(NAT_EXPERIMENTS)
    assert "distill_dir" in (CONF / "data" / "multi30k.yaml").read_text()


# Every size as a NAT model, and vanilla NAT's copied decoder inputs (Gu et al. 2018) as one key.
@pytest.mark.parametrize("model, extra", [(m, []) for m in SIZES] + [("small", ["model.decoder_input=copy"])])
def test_nat_model_config_builds_through_the_task(model, extra, tmp_path):
    cfg = compose_cfg("train", ["task=nat", f"model={model}", *extra, f"output_dir={tmp_path}"])
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    cls = get_class(task_cfg.pop("_target_"))
    task = cls(model=OmegaConf.to_container(cfg.model, resolve=True), **task_cfg, **FACTS)
    assert task.model.mask_id == (4 if cfg.model.decoder_input == "mask" else None)
    src = torch.tensor([[5, 6, 7, 2]])
    logits, length_logits = task(src, torch.tensor([[8, 4, 9]]))
    assert logits.shape == (1, 3, 120) and length_logits.dim() == 2


@pytest.mark.parametrize("model", SIZES)
def test_ctc_model_config_builds_through_its_task(model, tmp_path):
    cfg = compose_cfg("train", ["task=nat_ctc", f"model={model}", f"output_dir={tmp_path}"])
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    cls = get_class(task_cfg.pop("_target_"))
    task = cls(model=OmegaConf.to_container(cfg.model, resolve=True), **task_cfg, **FACTS)
    assert task.model.blank_id == 4  # the tokenizer's mask id serves as the blank
    logits, dec_mask = task(torch.tensor([[5, 6, 7, 2], [5, 2, 0, 0]]))
    ratio = cfg.model.upsample_ratio
    assert logits.shape == (2, 4 * ratio, 120)
    assert dec_mask.sum(1).tolist() == [4 * ratio, 2 * ratio]  # source padding stays padding


@pytest.mark.parametrize("pair", ["de_en", "en_de"])
@pytest.mark.parametrize("distilled", [False, True])
@pytest.mark.parametrize("experiment", NAT_EXPERIMENTS)
def test_nat_experiment_composes_and_instantiates(experiment, distilled, pair, tmp_path):
    src, tgt = pair.split("_")
    overrides = [f"experiment={experiment}", f"data.src_lang={src}", f"data.tgt_lang={tgt}", f"output_dir={tmp_path}"]
    if distilled:
        overrides += [f"data.distill_dir={tmp_path / 'distilled'}"]
    cfg = compose_cfg("train", overrides)
    OmegaConf.resolve(cfg)
    assert (cfg.data.src_lang, cfg.data.tgt_lang) == (src, tgt)
    # runs on distilled targets go to their own folder, e.g. multi30k_de_en_nat_distill(_cpu)
    kind = experiment.removeprefix("multi30k").removesuffix("_cpu")
    cpu = "_cpu" if experiment.endswith("_cpu") else ""
    assert cfg.name == f"multi30k_{pair}{kind}" + ("_distill" if distilled else "") + cpu
    if kind == "_nat":
        assert cfg.task._target_ == "transformer.tasks.nat.NATTranslationTask"
        assert cfg.task.val_decode.strategy == "nat_one_pass"
    dm = instantiate(cfg.data)  # constructor only: nothing is read
    if distilled:
        assert dm.train_files == {"src": f"{tmp_path}/distilled/train.{src}", "tgt": f"{tmp_path}/distilled/train.{tgt}"}
        assert dm.tokenizer_path == f"{tmp_path}/distilled/tokenizer.json"
    else:
        assert dm.train_files is None
    # validation and test keep the original references whatever the training targets
    assert dm.val_split == "val" and "test_2016_flickr" in dm.test_splits
    # the task the experiment names, with its model shrunk (sizes are the model tests' job)
    task_cfg = OmegaConf.to_container(cfg.task, resolve=True)
    cls = get_class(task_cfg.pop("_target_"))
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    model_cfg.update(d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1)
    task = cls(model=model_cfg, **task_cfg, **FACTS)
    task.search_fn(OmegaConf.to_container(cfg.test_decode))


def test_distilled_runs_are_named_apart(tmp_path):
    plain = compose_cfg("train", ["experiment=multi30k_nat_cpu", f"output_dir={tmp_path}"])
    distilled = compose_cfg("train", ["experiment=multi30k_nat_cpu", f"data.distill_dir={tmp_path}", f"output_dir={tmp_path}"])
    assert (plain.name, distilled.name) == ("multi30k_de_en_nat_cpu", "multi30k_de_en_nat_distill_cpu")


@pytest.mark.parametrize("experiment", ["multi30k_nat_cpu", "multi30k_nat_ctc_cpu"])
def test_each_nat_recipe_gives_its_gpu_command(experiment, tmp_path):
    """The GPU command a NAT recipe's comment gives: the GPU recipe's size, batches and schedule,
    trained until 20 epochs without a gain, tested on every split; the CPU recipe trains every epoch."""
    [gpu] = [args for where, args in documented_commands() if where.startswith(f"{experiment}:") and len(args) > 1]
    cpu = compose_cfg("train", [f"experiment={experiment}", f"output_dir={tmp_path}"])
    on_gpu = compose_cfg("train", [*gpu, f"output_dir={tmp_path}"])
    at = compose_cfg("train", ["experiment=multi30k", f"output_dir={tmp_path}"])
    for key in ("model.d_model", "model.n_heads", "model.n_encoder_layers", "model.d_ff", "trainer.accelerator", "trainer.precision", "data.max_tokens", "data.pad_to_multiple",
                "task.lr", "task.warmup_steps", "test_splits"):
        assert OmegaConf.select(on_gpu, key) == OmegaConf.select(at, key), key
    assert on_gpu.task._target_ == cpu.task._target_ and on_gpu.accel == "none"
    assert cpu.callbacks.early_stopping.patience == on_gpu.callbacks.early_stopping.patience == 20
    assert cpu.trainer.max_epochs < 20 < on_gpu.trainer.max_epochs
    assert OmegaConf.to_container(on_gpu, resolve=True)["name"] == experiment.replace("multi30k", "multi30k_de_en").removesuffix("_cpu")


@pytest.mark.parametrize("decode", NAT_DECODES)
@pytest.mark.parametrize("entry", ["eval", "decode", "distill"])
def test_nat_decode_configs_bind_to_a_nat_task(entry, decode):
    extra = {"eval": [], "decode": [], "distill": ["output_dir=out"]}[entry]
    cfg = compose_cfg(entry, [f"decode.strategy={decode}", "ckpt_path=x.ckpt", *extra])
    decode_cfg = OmegaConf.to_container(cfg.decode, resolve=True)
    assert decode_cfg["strategy"] == decode
    from transformer.tasks.nat import NATTranslationTask

    model_cfg = OmegaConf.to_container(compose_cfg("train", ["model=tiny", "task=nat", "output_dir=o"]).model)
    task = NATTranslationTask(model=model_cfg, **FACTS).eval()
    hyps = task.search_fn(decode_cfg)(torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]]))
    assert len(hyps) == 2


def test_decode_overrides_from_the_issue_compose():
    assert compose_cfg("eval", ["ckpt_path=x", "decode.strategy=nat_length_beam", "decode.length_beam=3"]).decode.length_beam == 3
    assert compose_cfg("eval", ["ckpt_path=x", "decode.strategy=mask_predict", "decode.iterations=10"]).decode.iterations == 10
    cfg = compose_cfg("distill", ["ckpt_path=at.ckpt", "split=train", "output_dir=d", "decode.strategy=beam", "decode.beam_size=5"])
    assert cfg.decode.strategy == "beam" and cfg.decode.beam_size == 5 and cfg.split == "train"


def test_distilled_data_module_hyperparameters_load_with_weights_only(tmp_path):
    """A run on distilled data must resume: Lightning saves the data module's hyperparameters
    in every checkpoint and reads them back with ``torch.load(weights_only=True)``, which
    refuses omegaconf objects such as the ``train_files`` mapping."""
    from transformer.cli.train import build_datamodule

    cfg = compose_cfg("train", ["experiment=multi30k_nat_cpu", f"data.distill_dir={tmp_path}",
                                f"output_dir={tmp_path}"])
    dm = build_datamodule(cfg)
    assert dm.train_files == {"src": f"{tmp_path}/train.de", "tgt": f"{tmp_path}/train.en"}
    assert dm.tokenizer_path == f"{tmp_path}/tokenizer.json"
    torch.save({"datamodule_hyper_parameters": dict(dm.hparams)}, tmp_path / "h.ckpt")
    loaded = torch.load(tmp_path / "h.ckpt", weights_only=True)
    assert loaded["datamodule_hyper_parameters"]["distill_dir"] == str(tmp_path)
