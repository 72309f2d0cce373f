import math

import pytest
import torch

from transformer.tasks.classification import distillation_loss
from transformer.tasks.build import inverse_sqrt_factor, inverse_sqrt_schedule
from transformer.tasks.translation import label_smoothed_nll


def explicit_smoothed_loss(logits, target, eps, pad_id):
    """Reference: cross-entropy against an explicit target distribution with PAD mass 0."""
    v = logits.size(-1)
    lp = torch.log_softmax(logits, -1)
    total, n = 0.0, 0
    for b in range(target.size(0)):
        for t in range(target.size(1)):
            y = int(target[b, t])
            if y == pad_id:
                continue
            q = torch.full((v,), eps / (v - 1))
            q[pad_id] = 0.0
            q[y] += 1.0 - eps
            assert math.isclose(float(q.sum()), 1.0, rel_tol=1e-6)
            total += float(-(q * lp[b, t]).sum())
            n += 1
    return total / n


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_matches_explicit_distribution_without_pad_mass(eps):
    torch.manual_seed(1)
    logits = torch.randn(2, 4, 7)
    target = torch.tensor([[3, 5, 1, 0], [2, 0, 0, 0]])  # 0 = PAD
    loss, nll = label_smoothed_nll(logits, target, eps, pad_id=0)
    assert loss.item() == pytest.approx(explicit_smoothed_loss(logits, target, eps, 0), rel=1e-5)
    plain = torch.nn.functional.cross_entropy(logits.view(-1, 7), target.view(-1), ignore_index=0)
    assert nll.item() == pytest.approx(plain.item(), rel=1e-5)


def test_loss_is_a_mean_over_real_tokens_only():
    logits = torch.randn(1, 3, 5)
    target = torch.tensor([[2, 3, 0]])
    padded_logits = torch.cat([logits, torch.randn(1, 4, 5)], dim=1)
    padded_target = torch.cat([target, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    a, _ = label_smoothed_nll(logits, target, 0.1, 0)
    b, _ = label_smoothed_nll(padded_logits, padded_target, 0.1, 0)
    assert a.item() == pytest.approx(b.item(), rel=1e-6)


def test_inverse_sqrt_warms_up_linearly_then_decays():
    w = 100
    factors = [inverse_sqrt_factor(s, w) for s in range(400)]
    assert factors[0] == pytest.approx(1 / w)
    assert factors[w - 1] == pytest.approx(1.0)
    assert all(a < b for a, b in zip(factors[: w - 1], factors[1:w]))
    assert factors[4 * w - 1] == pytest.approx(0.5)  # sqrt(w / 4w)
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = inverse_sqrt_schedule(opt, w)
    for _ in range(w - 1):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(2.0)


def test_real_positions_loss_equals_the_all_positions_loss_and_its_gradients():
    from transformer.models import EncoderDecoder, TransformerConfig
    from transformer.tasks.translation import all_positions_loss, real_positions_loss

    torch.manual_seed(0)
    model = EncoderDecoder(TransformerConfig(vocab_size=30, pad_id=0, d_model=16, n_heads=2, n_encoder_layers=1,
                                             n_decoder_layers=1, d_ff=32, dropout=0.0))
    src = torch.tensor([[5, 6, 7, 2, 0, 0], [8, 9, 2, 0, 0, 0]])
    tgt_in = torch.tensor([[1, 10, 11, 12, 0, 0], [1, 13, 0, 0, 0, 0]])
    tgt_out = torch.tensor([[10, 11, 12, 2, 0, 0], [13, 2, 0, 0, 0, 0]])
    results = []
    for fn in (all_positions_loss, real_positions_loss):
        model.zero_grad()
        loss, nll = fn(model, src, tgt_in, tgt_out, 0.1, 0)
        loss.backward()
        results.append((loss.detach(), nll.detach(), [p.grad.clone() for p in model.parameters()]))
    (ref_loss, ref_nll, ref_grads), (loss, nll, grads) = results
    torch.testing.assert_close(loss, ref_loss)
    torch.testing.assert_close(nll, ref_nll)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, atol=1e-6, rtol=1e-5)
    # the states are what the vocabulary projection sees
    torch.testing.assert_close(model.project(model.decoder_states(src, tgt_in)), model(src, tgt_in))


def test_translation_task_computes_the_loss_it_was_built_with():
    from transformer.tasks.translation import TranslationTask, all_positions_loss, real_positions_loss

    model = {"_target_": "transformer.models.EncoderDecoder", "d_model": 16, "n_heads": 2,
             "n_encoder_layers": 1, "n_decoder_layers": 1, "d_ff": 32, "dropout": 0.0}
    kw = dict(model=model, vocab_size=30, pad_id=0, bos_id=1, eos_id=2, src_lang="de", tgt_lang="en")
    assert TranslationTask(**kw).loss_fn is all_positions_loss
    task = TranslationTask(**kw, loss="real_positions")
    assert task.loss_fn is real_positions_loss and task.hparams.loss == "real_positions"
    with pytest.raises(ValueError, match="task.loss must be one of"):
        TranslationTask(**kw, loss="fast")


def test_distillation_against_a_sure_teacher_is_cross_entropy():
    logits, labels = torch.randn(6, 3), torch.tensor([0, 2, 1, 1, 0, 2])
    one_hot = torch.nn.functional.one_hot(labels, 3).float()
    expected = torch.nn.functional.cross_entropy(logits, labels)
    assert torch.allclose(distillation_loss(logits, one_hot), expected, atol=1e-5)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_distillation_is_zero_only_where_the_student_matches_the_teacher(temperature):
    logits = torch.randn(5, 4)
    assert float(distillation_loss(logits, torch.softmax(logits, -1), temperature)) == pytest.approx(0.0, abs=1e-5)
    assert float(distillation_loss(logits, torch.softmax(-logits, -1), temperature)) > 0.1


def test_a_higher_temperature_softens_the_teachers_target():
    """Student and teacher are compared at the same temperature: logits equal to the teacher's
    log-probabilities match it at any T, half of them do not."""
    teacher = torch.softmax(torch.tensor([[4.0, 0.0, -2.0]]), -1)
    student = teacher.log() / 2
    assert float(distillation_loss(student, teacher, 2.0)) > 0.01
    assert float(distillation_loss(student * 2, teacher, 2.0)) == pytest.approx(0.0, abs=1e-5)
