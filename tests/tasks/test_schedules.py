"""The warm-up as a fraction of the run (``task.warmup``): a run of 3 epochs warms up over that
share of its updates and reaches its peak rate, where a fixed ``task.warmup_steps`` longer than the
run never would; a resumed run asks the trainer only after its restore."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest
from cli.hydra_helpers import compose_cfg

from model_configs import TINY
from transformer.cli import train
from transformer.tasks.build import RunLength, WarmupLength, warmup_linear_factor


class Trainer(SimpleNamespace):
    """What the schedule asks of Lightning's trainer: the run's updates, and the checkpoint it resumes."""

    asked = 0

    @property
    def estimated_stepping_batches(self):
        self.asked += 1
        return self.total


def factors(trainer, steps: int, fraction: float | None) -> list[float]:
    warmup = WarmupLength(trainer, steps, fraction)
    total = RunLength(trainer, warmup)
    return [warmup_linear_factor(step, warmup(step), total(step)) for step in range(trainer.total)]


def test_a_fraction_of_the_run_reaches_the_peak_where_a_fixed_count_does_not():
    run = Trainer(total=150, ckpt_path=None)
    fixed = factors(run, 200, None)  # 200 warm-up updates of a 150-update run: never at the peak
    assert max(fixed) == pytest.approx(150 / 200)
    shared = factors(Trainer(total=150, ckpt_path=None), 200, 0.06)  # 9 warm-up updates, then decay
    assert shared.index(max(shared)) == 8 and max(shared) == pytest.approx(1.0)
    assert shared[0] == pytest.approx(1 / 9) and shared[-1] == pytest.approx(0.0)


def test_a_resumed_run_asks_the_run_length_only_after_its_restore():
    resumed = Trainer(total=100, ckpt_path="last.ckpt")
    warmup = WarmupLength(resumed, 0, 0.1)
    assert warmup(0) == 1 and resumed.asked == 0  # the schedule built before the restore asks nothing
    assert warmup(40) == 10 and resumed.asked == 1
    assert WarmupLength(resumed, 7)(0) == 7  # a count needs no trainer


def test_task_warmup_is_a_share_of_the_run_end_to_end(tmp_path):
    rows = [f"the film was {word}\t{label}" for word, label in [("great", "pos"), ("dull", "neg")] * 32]
    (tmp_path / "train.tsv").write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    dev = tmp_path / "train.tsv"
    out = tmp_path / "run"
    overrides = ["experiment=classify", *TINY["classifier_tiny"], f"data.train={tmp_path / 'train.tsv'}",
                 f"data.dev={dev}", "test_splits=[]", "data.tokenizer_model=word", "data.vocab_size=100",
                 f"data.data_dir={tmp_path / 'cache'}", "data.max_tokens=80", "task.lr=1e-3",
                 "task.warmup_steps=200", "task.warmup=0.25", "trainer.max_epochs=3", "++trainer.limit_train_batches=4",
                 "++trainer.log_every_n_steps=1", "++trainer.enable_model_summary=false",
                 "trainer.num_sanity_val_steps=0",
                 "callbacks.progress_bar=null", "callbacks.early_stopping=null", "logger.tensorboard=null",
                 f"output_dir={out}"]
    summary = train.run(compose_cfg("train", overrides))
    assert summary["global_step"] == 12
    with open(out / "csv" / "metrics.csv", encoding="utf-8") as f:
        lrs = [float(row["lr"]) for row in csv.DictReader(f) if row.get("lr")]
    # 3 warm-up updates of 12 (a quarter), the peak at the third, then linear decay
    assert len(lrs) == 12 and lrs[:3] == pytest.approx([1e-3 / 3, 2e-3 / 3, 1e-3])
    assert max(lrs) == pytest.approx(1e-3) and lrs[3] < 1e-3
