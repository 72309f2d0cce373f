"""Dropout with the CPU fast mask: rate, scaling, independence, gradients, seeding, fallbacks."""

import pytest
import torch
import torch.nn.functional as F

from transformer.accel.dropout import LEVELS, Dropout, dropout, keep_mask, rounded_p


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_mask_drops_at_rate_p_and_keeps_the_expectation(p):
    m = keep_mask((400, 1000), p)
    scale = 1.0 / (1.0 - rounded_p(p))
    values = m.unique()
    assert len(values) == 2 and values[0] == 0.0 and abs(float(values[1]) - scale) < 1e-6
    dropped = (m == 0).float()
    # 400k draws: the rate's standard error is < 0.001
    assert abs(float(dropped.mean()) - p) < 0.004
    assert abs(float(m.mean()) - 1.0) < 0.01
    # every 16-bit lane of the 64-bit draws is uniform (a lane stuck at one sign would skew these)
    lanes = dropped.view(-1, 4).mean(0)
    assert torch.allclose(lanes, torch.full((4,), p), atol=0.006), lanes


def test_neighbouring_elements_are_independent():
    d = (keep_mask((1_000_000,), 0.5) == 0).float()
    both = float((d[:-1] * d[1:]).mean())  # P(drop, drop) of neighbours = p^2
    assert abs(both - 0.25) < 0.004


def test_rounding_of_p_is_to_multiples_of_one_over_65536():
    assert rounded_p(0.1) == 6554 / LEVELS
    assert abs(rounded_p(0.1) - 0.1) < 1 / LEVELS


def test_output_is_input_times_mask_and_gradient_is_the_mask():
    x = torch.randn(64, 50, requires_grad=True)
    y = dropout(x, 0.25)
    kept = y != 0
    scale = 1.0 / (1.0 - rounded_p(0.25))
    torch.testing.assert_close(y[kept], x[kept] * scale)
    y.sum().backward()
    torch.testing.assert_close(x.grad, kept.float() * scale)


def test_seeded_masks_repeat_and_differ_across_seeds():
    x = torch.ones(1000)
    torch.manual_seed(3)
    a = dropout(x, 0.1)
    torch.manual_seed(3)
    b = dropout(x, 0.1)
    torch.manual_seed(4)
    c = dropout(x, 0.1)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_identity_when_not_training_or_p_zero_and_zeros_at_p_one():
    x = torch.randn(10, 10)
    assert dropout(x, 0.5, training=False) is x
    assert dropout(x, 0.0) is x
    assert torch.equal(dropout(x, 1.0), torch.zeros_like(x))
    with pytest.raises(ValueError, match="dropout probability"):
        dropout(x, 1.5)


def test_module_follows_train_and_eval_and_other_dtypes_fall_back():
    layer = Dropout(0.5)
    x = torch.ones(100, 100)
    assert torch.equal(layer.eval()(x), x)
    y = layer.train()(x)
    assert 0.4 < float((y == 0).float().mean()) < 0.6
    assert dropout(torch.ones(50, dtype=torch.bfloat16), 0.5).dtype == torch.bfloat16
    ints = torch.ones(10, dtype=torch.int64)
    with pytest.raises(RuntimeError):
        F.dropout(ints, 0.5, True)  # torch refuses integer dropout; so does ours, by delegating
    with pytest.raises(RuntimeError):
        dropout(ints, 0.5)


def test_attention_dropout_in_training_is_unbiased_and_random():
    from transformer.modules.attention import MultiHeadAttention

    mha = MultiHeadAttention(16, 2, dropout=0.3)
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2]).view(2, 1, 1, 5)
    with torch.no_grad():
        expected, _ = mha.eval()(x, x, x, mask)
        mha.train()
        a, _ = mha(x, x, x, mask)
        b, _ = mha(x, x, x, mask)
        xs, masks = x.repeat(2000, 1, 1), mask.repeat(2000, 1, 1, 1)  # 2000 copies of the batch
        mean = mha(xs, xs, xs, masks)[0].view(2000, 2, 5, 16).mean(0)
    assert not torch.allclose(a, b)  # a fresh mask each call
    torch.testing.assert_close(mean, expected, atol=0.05, rtol=0)
