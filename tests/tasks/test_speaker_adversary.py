"""Speaker-adversarial training (``tasks.speaker_adversary``) as the classification task uses it:
the gradient reversal, the schedule, the loss a training step adds and the refusals; the command
line's run on recordings is in tests/cli/test_speech_cli.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer.tasks import classification
from transformer.tasks.classification import ClassificationTask
from transformer.tasks.speaker_adversary import (SpeakerAdversary, check_speaker_data, check_speakers, ramp,
                                                 reverse_gradient)

CLASSIFIER = {"_target_": "transformer.models.classifier.SequenceClassifier", "d_model": 16, "n_heads": 2,
              "n_layers": 1, "d_ff": 32, "dropout": 0.0, "activation": "relu", "norm_first": True, "max_len": 32,
              "pooling": {"_target_": "transformer.models.pooling.MeanPooling", "_partial_": True}}


def test_the_reversal_is_the_identity_forward_and_minus_weight_times_the_gradient_backward():
    x = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(4, 3)
    y = reverse_gradient(x, 0.7)
    assert torch.equal(y, x)
    (y * w).sum().backward()
    assert torch.allclose(x.grad, -0.7 * w)


def test_the_weight_ramps_from_zero_to_one_over_the_run():
    values = [ramp(p / 10) for p in range(11)]
    assert values[0] == 0.0 and values[-1] == pytest.approx(1.0, abs=1e-4)
    assert all(a < b for a, b in zip(values, values[1:]))
    assert ramp(-1.0) == 0.0 and ramp(2.0) == ramp(1.0)


def test_the_adversary_learns_the_speakers_while_the_vector_gets_the_reversed_gradient():
    """The head's parameters get the gradient of the plain speaker cross-entropy; what reaches
    the vector is that gradient times ``-weight``."""
    torch.manual_seed(0)
    adversary = SpeakerAdversary(8, ["a", "b", "c"])
    vector = torch.randn(5, 8, requires_grad=True)
    ids = adversary.ids(["a", "c", "b", "a", "c"], vector.device)
    loss, logits = adversary.loss(vector, ids, 0.5)
    assert logits.shape == (5, 3)
    loss.backward()
    reversed_vector, reversed_head = vector.grad.clone(), [p.grad.clone() for p in adversary.parameters()]
    vector.grad = None
    adversary.zero_grad()
    F.cross_entropy(adversary.net(vector), ids).backward()
    assert torch.allclose(reversed_vector, -0.5 * vector.grad, atol=1e-7)
    assert all(torch.allclose(a, p.grad) for a, p in zip(reversed_head, adversary.parameters()))


def task(**kw) -> ClassificationTask:
    torch.manual_seed(0)
    t = ClassificationTask(model=dict(CLASSIFIER), piece_vocab_size=30, pad_id=0, labels=["x", "y"],
                           data={"name": "toy"}, **kw)
    t.eval()
    t.log = lambda *a, **k: None
    t.optimizers = lambda: torch.optim.SGD(t.parameters(), lr=0.0)
    return t


def batch() -> dict:
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0], [9, 10, 11, 0], [12, 13, 14, 15]])  # (B, T)
    return {"src": src, "labels": torch.tensor([0, 1, 1, 0]), "index": torch.arange(4),
            "speakers": ["s1", "s2", "s1", "s2"]}


def encoder_grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in module.model.encoder.parameters() if p.grad is not None]


def test_a_training_step_adds_the_speaker_loss_and_reverses_it_into_the_encoder(monkeypatch):
    """loss = label cross-entropy + speaker cross-entropy; the encoder's gradient is the label
    loss's minus ``weight`` times the speaker loss's (here with the ramp at its end)."""
    monkeypatch.setattr(classification, "ramp", lambda progress: 1.0)
    t = task(speaker_adversarial=0.8, speakers=["s1", "s2"])
    b = batch()
    loss = t.training_step(b, 0)
    vector = t.model.pool(b["src"]).vector  # (B, D)
    label = F.cross_entropy(t.model.classify(vector), b["labels"])
    speaker_ids = torch.tensor([0, 1, 0, 1])
    speaker = F.cross_entropy(t.speaker_adversary.net(vector), speaker_ids)
    assert loss.item() == pytest.approx((label + speaker).item(), rel=1e-5)

    loss.backward()
    got = encoder_grads(t)
    t.zero_grad()
    label.backward(retain_graph=True)
    from_labels = encoder_grads(t)
    t.zero_grad()
    speaker.backward()
    from_speakers = encoder_grads(t)
    assert len(got) == len(from_labels) == len(from_speakers) > 0
    for g, a, s in zip(got, from_labels, from_speakers):
        assert torch.allclose(g, a - 0.8 * s, atol=1e-6)


def test_at_the_start_of_the_run_the_encoder_gets_nothing_from_the_speakers():
    """The ramp is 0 at step 0: the speaker loss trains its head only."""
    t = task(speaker_adversarial=1.0, speakers=["s1", "s2"])
    t.training_step(batch(), 0).backward()
    got = encoder_grads(t)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in t.speaker_adversary.parameters())
    t.zero_grad()
    b = batch()
    F.cross_entropy(t.model(b["src"]), b["labels"]).backward()
    assert len(got) > 0 and all(torch.allclose(g, a, atol=1e-7) for g, a in zip(got, encoder_grads(t)))


def test_a_checkpoint_without_the_setting_has_no_speaker_head():
    t = task()
    assert t.speaker_adversary is None
    assert not any(name.startswith("speaker_adversary") for name in t.state_dict())


@pytest.mark.parametrize("weight, speakers, match", [
    (-0.1, ["a", "b"], r"task.speaker_adversarial=-0.1: expected a weight >= 0"),
    (0.5, None, r"task.speaker_adversarial=0.5: needs the training recordings' speakers, at least two .* names 0"),
    (0.5, ["a"], r"names 1$"),
])
def test_bad_settings_are_one_line_naming_the_key(weight, speakers, match):
    with pytest.raises(ValueError, match=match) as e:
        check_speakers(weight, speakers)
    assert "\n" not in str(e.value)


def test_a_model_without_a_pooled_vector_is_refused():
    cnn = {"_target_": "transformer.models.cnn.ConvClassifier", "in_channels": 1, "channels": 4, "n_blocks": 1,
           "pooling": {"_target_": "transformer.models.pooling.MeanPooling", "_partial_": True}}
    with pytest.raises(ValueError, match=r"task.speaker_adversarial=1.0: .*ConvClassifier has none"):
        ClassificationTask(model=cnn, piece_vocab_size=30, pad_id=0, labels=["x", "y"],
                           data={"name": "images", "input": "patches", "height": 8, "width": 8, "channels": 1},
                           speaker_adversarial=1.0, speakers=["a", "b"])


def test_a_speaker_not_among_the_training_speakers_is_named():
    with pytest.raises(ValueError, match=r"speaker 'zed' is not among the training speakers \['a', 'b'\]"):
        SpeakerAdversary(4, ["a", "b"]).ids(["a", "zed"], torch.device("cpu"))


def test_data_without_recordings_is_refused_before_it_is_read():
    with pytest.raises(ValueError, match=r"task.speaker_adversarial=0.3: the speakers are a speech manifest's "
                                         r"third column; this run reads text"):
        check_speaker_data(0.3, {"name": "sst2", "train": "train.tsv"})
