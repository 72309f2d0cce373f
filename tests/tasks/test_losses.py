import math

import pytest
import torch

from transformer.tasks.losses import label_smoothed_nll
from transformer.tasks.schedules import inverse_sqrt_factor, inverse_sqrt_schedule


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
