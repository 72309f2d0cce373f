"""The image CNN baseline: built from its config by the registry like every model, one score per
label, its pooling a choice, learns a tiny batch, and refuses what it has no use for."""

from __future__ import annotations

import pytest
import torch

from transformer.models.cnn import ConvClassifier
from transformer.tasks.build import build_model

POOL = "transformer.models.pooling.{}"


def cnn(**kw) -> ConvClassifier:
    return build_model({"_target_": "ConvClassifier", "channels": 4, **kw}, n_classes=3, vocab_size=1, pad_id=0)


@pytest.mark.parametrize("pooling", ["MeanPooling", "AttentionPooling"])
def test_one_score_per_label_for_any_image_size(pooling):
    model = cnn(n_blocks=2, pooling={"_target_": POOL.format(pooling), "_partial_": True}).eval()
    for size in ((8, 8), (9, 13)):
        assert model(torch.rand(5, 1, *size)).shape == (5, 3)


def test_mean_pooling_is_global_average_pooling_of_the_last_map():
    model = cnn(n_blocks=1).eval()
    x = torch.rand(2, 1, 6, 6)
    expected = model.classifier(model.features(x).mean(dim=(2, 3)))  # (B, K) -> (B, L)
    torch.testing.assert_close(model(x), expected)


def test_it_learns_a_tiny_batch():
    torch.manual_seed(0)
    model = cnn(n_blocks=1, dropout=0.0)
    x, y = torch.rand(6, 1, 4, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    opt = torch.optim.Adam(model.parameters(), lr=3e-2)
    losses = []
    for _ in range(80):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]


def test_no_input_vectors_to_perturb_and_no_single_label():
    with pytest.raises(ValueError, match="adversarial_eps must be 0"):
        cnn()(torch.rand(1, 1, 8, 8), lambda v: v)
    with pytest.raises(ValueError, match="at least 2 labels"):
        build_model({"_target_": "ConvClassifier"}, n_classes=1, vocab_size=1, pad_id=0)
