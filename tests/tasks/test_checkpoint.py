import pytest
import torch

from transformer.data.core.batching import token_budget_batches
from transformer.tasks.checkpoint import CheckpointError, load_task, read_checkpoint


def test_missing_checkpoint_names_the_path(tmp_path):
    with pytest.raises(CheckpointError, match="not found.*nope.ckpt"):
        load_task(tmp_path / "nope.ckpt")


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"this is not a checkpoint")
    with pytest.raises(CheckpointError, match="bad.ckpt is not a readable checkpoint"):
        read_checkpoint(bad)


def test_foreign_checkpoint_is_rejected(tmp_path):
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {}}, foreign)
    with pytest.raises(CheckpointError, match="transformer_task"):
        read_checkpoint(foreign)


def test_token_budget_batches_cover_every_sentence_once_within_budget():
    lengths = [5, 1, 9, 3, 3, 7, 30, 2]
    batches = token_budget_batches(lengths, max_tokens=12)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 12
