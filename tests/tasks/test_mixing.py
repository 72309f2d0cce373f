"""Mixing training images and speech frames (``tasks.mixing``): mixup blends pairs, CutMix pastes
a box of an image, and the classifier's training loss mixes the two labels' losses by the same
weight; mixed recordings are as long as the longer of the pair."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer.tasks.classification import ClassificationTask
from transformer.tasks.mixing import cutmix_box, mix_frames, mix_images

VIT = {"_target_": "transformer.models.classifier.SequenceClassifier", "d_model": 16, "n_heads": 2, "n_layers": 1,
       "d_ff": 32, "dropout": 0.0, "activation": "relu", "norm_first": True, "max_len": 5, "scale_embeddings": False,
       "positional": {"_target_": "transformer.modules.positional.LearnedPositionalEncoding", "_partial_": True},
       "frontend": {"_target_": "transformer.modules.frontends.PatchEmbedding", "_partial_": True, "height": 4,
                    "width": 4, "channels": 1, "patch_size": 2},
       "pooling": {"_target_": "transformer.models.pooling.ClsPooling", "_partial_": True}}
IMAGES = {"name": "toy", "input": "patches", "height": 4, "width": 4, "channels": 1}


def images(b: int = 6) -> torch.Tensor:
    return torch.arange(b * 16, dtype=torch.float).view(b, 1, 4, 4) / (b * 16)  # (B, 1, 4, 4), each image its own


def test_without_mixing_the_batch_is_itself():
    src = images()
    mixed = mix_images(src)
    assert mixed.src is src and mixed.lam == 1.0 and mixed.partner.tolist() == list(range(6))


def test_mixup_blends_each_image_with_its_partner_by_lam():
    torch.manual_seed(0)
    src = images()
    mixed = mix_images(src, mixup=0.4)
    assert 0 < mixed.lam < 1
    assert sorted(mixed.partner.tolist()) == list(range(6))  # a pairing within the batch
    assert torch.allclose(mixed.src, mixed.lam * src + (1 - mixed.lam) * src[mixed.partner])


def test_cutmix_pastes_one_box_of_the_partner_and_lam_is_the_share_left():
    torch.manual_seed(3)
    src = images()
    mixed = mix_images(src, cutmix=1.0)
    pasted = mixed.src.eq(src[mixed.partner]) & mixed.src.ne(src)  # (B, 1, 4, 4)
    own = mixed.src.eq(src)
    assert (pasted | own).all()  # every pixel is its own or its partner's
    rows, cols = pasted.any(0)[0].nonzero(as_tuple=True)
    box = (rows.max() - rows.min() + 1) * (cols.max() - cols.min() + 1)
    assert pasted.any(0)[0].sum() == box  # one rectangle
    assert mixed.lam == pytest.approx(1 - int(box) / 16)


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.75, 0.99])
def test_cutmix_box_stays_inside_the_image(lam):
    torch.manual_seed(1)
    for _ in range(50):
        top, bottom, left, right = cutmix_box(8, 8, lam)
        assert 0 <= top <= bottom <= 8 and 0 <= left <= right <= 8


def test_text_batches_are_refused():
    with pytest.raises(ValueError, match="mixup and CutMix mix images"):
        mix_images(torch.zeros(2, 5, dtype=torch.long), mixup=0.2)
    with pytest.raises(ValueError, match="mixing blends images .*this run reads text"):
        ClassificationTask(model=dict(VIT), piece_vocab_size=1, pad_id=0, labels=["a", "b"], data={"name": "toy"},
                           mixup=0.2)
    with pytest.raises(ValueError, match="this run reads frames"):  # CutMix pastes image boxes only
        ClassificationTask(model=dict(VIT), piece_vocab_size=1, pad_id=0, labels=["a", "b"],
                           data={"name": "toy", "input": "frames"}, cutmix=1.0)


def test_mixup_of_frames_blends_pairs_over_the_longer_of_the_two():
    torch.manual_seed(0)
    lengths = torch.tensor([5, 3, 2, 4])
    src = torch.rand(4, 5, 3) * (torch.arange(5)[None, :, None] < lengths[:, None, None])  # (B, T, F), zero padding
    mixed = mix_frames(src, lengths, 0.4)
    assert 0 < mixed.lam < 1 and sorted(mixed.partner.tolist()) == [0, 1, 2, 3]
    assert torch.allclose(mixed.src, mixed.lam * src + (1 - mixed.lam) * src[mixed.partner])
    assert mixed.lengths.tolist() == [max(a, b) for a, b in zip(lengths.tolist(), lengths[mixed.partner].tolist())]
    beyond = torch.arange(5)[None, :] >= mixed.lengths[:, None]  # (B, T): padding of both recordings
    assert mixed.src[beyond].eq(0).all()


def image_task(**kw) -> ClassificationTask:
    torch.manual_seed(0)
    task = ClassificationTask(model=dict(VIT), piece_vocab_size=1, pad_id=0, labels=["a", "b", "c"],
                              data=dict(IMAGES), **kw)
    task.eval()  # no dropout: the passes below are deterministic
    task.log = lambda *a, **k: None
    task.optimizers = lambda: torch.optim.SGD(task.parameters(), lr=0.0)
    return task


@pytest.mark.parametrize("setting", [{"mixup": 0.5}, {"cutmix": 1.0}, {"mixup": 0.5, "cutmix": 1.0}])
def test_the_training_loss_mixes_both_labels_losses(setting):
    task = image_task(label_smoothing=0.1, **setting)
    batch = {"src": images(), "labels": torch.tensor([0, 1, 2, 0, 1, 2]), "index": torch.arange(6)}
    torch.manual_seed(7)
    loss = task.training_step(batch, 0)
    torch.manual_seed(7)  # the same draws: the same pairing and weight
    mixed = mix_images(batch["src"], **setting)
    logits = task.model(mixed.src)
    labels = batch["labels"]
    expected = (mixed.lam * F.cross_entropy(logits, labels, label_smoothing=0.1)
                + (1 - mixed.lam) * F.cross_entropy(logits, labels[mixed.partner], label_smoothing=0.1))
    assert mixed.lam < 1
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    plain = F.cross_entropy(task.model(batch["src"]), labels, label_smoothing=0.1)
    assert loss.item() != pytest.approx(plain.item(), rel=1e-3)


def test_without_mixing_the_loss_is_the_plain_one():
    task = image_task()
    batch = {"src": images(), "labels": torch.tensor([0, 1, 2, 0, 1, 2]), "index": torch.arange(6)}
    loss = task.training_step(batch, 0)
    assert loss.item() == pytest.approx(F.cross_entropy(task.model(batch["src"]), batch["labels"]).item(), rel=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_the_teacher_s_term_is_at_the_distillation_temperature(temperature):
    """``task.distill_temperature`` reaches the training loss: ``T² · KL`` of the teacher's and
    the student's probabilities, both softened by ``T`` (Hinton et al. 2015), not those at 1."""
    task = image_task(distill_weight=1.0, distill_temperature=temperature)
    batch = {"src": images(), "labels": torch.tensor([0, 1, 2, 0, 1, 2]), "index": torch.arange(6)}
    torch.manual_seed(1)
    task._teacher_probs = torch.softmax(3 * torch.randn(6, 3), -1)  # (N, C): each training row's
    loss = task.training_step(batch, 0)
    logits = task.model(batch["src"])  # (B, C)
    p_t = torch.softmax(task._teacher_probs.log() / temperature, -1)
    expected = F.kl_div(F.log_softmax(logits / temperature, -1), p_t, reduction="batchmean") * temperature ** 2
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    if temperature != 1.0:
        at_1 = F.kl_div(F.log_softmax(logits, -1), task._teacher_probs, reduction="batchmean")
        assert loss.item() != pytest.approx(at_1.item(), rel=1e-2)
