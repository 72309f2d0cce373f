"""The classification recipes compose: sst2 on a CPU and with its GPU overrides (the CPU one
smaller than the GPU one), the pooling swapped by ``_target_``, and the user-files recipe."""

from __future__ import annotations

import pytest
from hydra_helpers import compose_cfg, documented_commands
from omegaconf import OmegaConf

from transformer.cli.train import check_config
from transformer.models.pooling import MeanPooling
from transformer.tasks.classification import ClassificationTask


def gpu_overrides() -> list[str]:
    """The GPU command the sst2 recipe's comment gives, as overrides."""
    [gpu] = [args for where, args in documented_commands() if where.startswith("sst2:") and "accel=none" in args]
    return gpu[1:]


def test_sst2_sizes(tmp_path):
    cpu = compose_cfg("train", ["experiment=sst2", f"output_dir={tmp_path}"])
    gpu = compose_cfg("train", ["experiment=sst2", *gpu_overrides(), f"output_dir={tmp_path}"])
    assert (cpu.trainer.accelerator, cpu.trainer.precision, cpu.accel) == ("cpu", "32-true", "cpu")
    assert (gpu.trainer.accelerator, gpu.trainer.precision, gpu.accel) == ("gpu", "bf16-mixed", "none")
    assert cpu.model.d_model < gpu.model.d_model and cpu.data.max_tokens < gpu.data.max_tokens
    for cfg in (cpu, gpu):
        check_config(cfg)
        assert cfg.monitor == "val/acc" and cfg.test_splits == ["test"] and cfg.task.get("val_decode") is None
        assert OmegaConf.to_container(cfg.data, resolve=True)["train"].endswith("sst2/train.tsv")


def test_pooling_is_swapped_by_target(tmp_path):
    cfg = compose_cfg("train", ["experiment=sst2", "model.pooling._target_=transformer.models.pooling.MeanPooling",
                                f"output_dir={tmp_path}"])
    task = ClassificationTask(model=OmegaConf.to_container(cfg.model, resolve=True), piece_vocab_size=50, pad_id=0,
                              labels=["0", "1"], data={})
    assert type(task.model.pooling) is MeanPooling


def test_own_files_recipe_takes_the_columns(tmp_path):
    cfg = compose_cfg("train", ["experiment=classify", "data.train=a.csv", "data.dev=b.csv", "data.header=true",
                                "data.text_column=sentence", "data.label_column=label", f"output_dir={tmp_path}"])
    check_config(cfg)
    assert (cfg.data.text_column, cfg.data.header, cfg.name) == ("sentence", True, "classify_a")  # named after a.csv
    with pytest.raises(Exception, match="sst2_tpu"):
        compose_cfg("train", ["experiment=sst2_tpu", f"output_dir={tmp_path}"])
