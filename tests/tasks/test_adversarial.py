"""Adversarial training on the encoder inputs (``tasks.adversarial``) as the classifier uses it;
the tagger's use is tested in test_tagging.py."""

from __future__ import annotations

import pytest
import torch

from transformer.tasks.adversarial import InputCapture, adversarial_shift
from transformer.tasks.classification import ClassificationTask

CLASSIFIER = {"_target_": "transformer.models.classifier.SequenceClassifier", "d_model": 32, "n_heads": 2,
              "n_layers": 2, "d_ff": 64, "dropout": 0.0, "activation": "relu", "norm_first": True, "max_len": 64,
              "positional": {"_target_": "transformer.modules.positional.RelativePositionBias", "_partial_": True},
              "pooling": {"_target_": "transformer.models.pooling.MeanPooling", "_partial_": True}}


def classifier_task(**kw) -> ClassificationTask:
    torch.manual_seed(0)
    task = ClassificationTask(model=dict(CLASSIFIER), piece_vocab_size=50, pad_id=0, labels=["neg", "pos"],
                              data={"name": "toy"}, **kw)
    task.eval()  # no dropout: every pass below is deterministic
    task.log = lambda *a, **k: None
    task.optimizers = lambda: torch.optim.SGD(task.parameters(), lr=0.0)
    return task


def toy_batch() -> dict:
    src = torch.tensor([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0], [13, 14, 0, 0, 0]])  # (B, T), 0 = padding
    return {"src": src, "labels": torch.tensor([0, 1, 1]), "index": torch.arange(3)}


def test_the_shift_has_each_rows_share_of_its_norm_along_the_gradient():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, requires_grad=True)
    w = torch.randn(5)
    objective = ((x @ w) ** 2).sum()
    r = adversarial_shift(objective, x, 0.1)
    (g,) = torch.autograd.grad(objective, x, retain_graph=True)
    assert not r.requires_grad
    norms = r.flatten(1).norm(dim=1)
    assert torch.allclose(norms, 0.1 * x.detach().flatten(1).norm(dim=1), rtol=1e-5)
    cosine = torch.nn.functional.cosine_similarity(r.flatten(1), g.flatten(1), dim=1)
    assert torch.allclose(cosine, torch.ones(3), atol=1e-5)
    objective.backward()  # the objective's graph was kept for its own backward pass
    assert x.grad is not None


def test_adversarial_classifier_adds_the_loss_at_the_moved_embeddings():
    """With ``adversarial_eps`` the training loss is the clean loss plus the loss with the piece
    embeddings moved by eps * |x_b| along the loss gradient, which is higher than the clean one."""
    eps = 0.1
    task = classifier_task(adversarial_eps=eps)
    batch = toy_batch()

    seen = InputCapture()
    clean = task._loss(task.model(batch["src"], seen), batch["labels"])
    x = seen.x  # (B, T, D) piece embeddings
    (g,) = torch.autograd.grad(clean, x)
    b = x.size(0)
    r = eps * x.detach().reshape(b, -1).norm(dim=1) / g.reshape(b, -1).norm(dim=1)
    moved = task._loss(task.model(batch["src"], lambda v: v + r.view(b, 1, 1) * g), batch["labels"])

    total = task.training_step(batch, 0)
    assert moved > clean  # moving up the gradient raises the loss
    assert torch.allclose(total, clean + moved, atol=1e-5)
    total.backward()  # both passes reach the parameters
    assert task.model.classifier.weight.grad.abs().sum() > 0
    assert task.model.encoder.embedding.weight.grad.abs().sum() > 0


def test_the_classifier_trains_as_before_without_it():
    task = classifier_task()
    assert task.hparams.adversarial_eps == 0.0
    batch = toy_batch()
    expected = task._loss(task.model(batch["src"]), batch["labels"])
    assert torch.allclose(task.training_step(batch, 0), expected)
    with pytest.raises(ValueError, match=r"task\.adversarial_eps=-0\.1"):
        classifier_task(adversarial_eps=-0.1)
