"""The blocked label-smoothed cross-entropy: the reference loss's values and gradients, fp32 and
bf16, and no (N, V) fp32 tensor written on the way."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from transformer.accel import cross_entropy
from transformer.accel.cross_entropy import runs_on, smoothed_cross_entropy
from transformer.tasks.translation import label_smoothed_nll


def _scores_and_targets(n=300, v=1000, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(n, v, generator=g)).to(dtype).requires_grad_()
    target = torch.randint(0, v, (n,), generator=g)
    target[::7] = 0  # PAD rows
    target[5] = -100  # an ignored row
    return logits, target


def _loss_and_grad(fn, logits, target, pad_id, eps=0.1):
    logits.grad = None
    loss, nll = fn(logits, target, eps, pad_id)
    (1.3 * loss + 0.7 * nll).backward()  # both outputs carry a gradient
    return loss.detach(), nll.detach(), logits.grad.clone()


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few rows, so a few hundred rows span many blocks and a ragged last one."""
    monkeypatch.setattr(cross_entropy, "BLOCK_BYTES", 4 * 1000 * 7)


@pytest.mark.parametrize("pad_id", [0, None])
def test_values_and_gradients_equal_the_reference_loss_in_fp32(small_blocks, pad_id):
    assert cross_entropy.block_rows(1000) == 7
    logits, target = _scores_and_targets()
    ours = _loss_and_grad(smoothed_cross_entropy, logits, target, pad_id)
    ref = _loss_and_grad(label_smoothed_nll, logits, target, pad_id)
    torch.testing.assert_close(ours[0], ref[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours[1], ref[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours[2], ref[2], atol=1e-7, rtol=0)
    ignored = target.eq(-100) | (target.eq(pad_id) if pad_id is not None else torch.zeros_like(target, dtype=torch.bool))
    assert ours[2][ignored].abs().max() == 0 and ours[2][~ignored].abs().min() > 0


def test_bf16_scores_give_the_reference_values_and_a_bf16_gradient_within_its_rounding(small_blocks):
    logits, target = _scores_and_targets(dtype=torch.bfloat16)
    ours = _loss_and_grad(smoothed_cross_entropy, logits, target, 0)
    ref = _loss_and_grad(label_smoothed_nll, logits, target, 0)  # fp32 math, gradient cast back to bf16
    assert ours[2].dtype == torch.bfloat16
    torch.testing.assert_close(ours[0], ref[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours[1], ref[1], atol=1e-6, rtol=0)
    # the same fp32 gradient rounded once to bf16: at most one bf16 step apart
    torch.testing.assert_close(ours[2].float(), ref[2].float(), atol=1e-9, rtol=2 ** -7)


def test_batched_scores_and_the_last_dimension_as_classes():
    logits, target = _scores_and_targets(n=60, v=50)
    batched = logits.detach().view(6, 10, 50).requires_grad_()
    ours = _loss_and_grad(smoothed_cross_entropy, batched, target.view(6, 10), 0)
    ref = _loss_and_grad(label_smoothed_nll, batched, target.view(6, 10), 0)
    torch.testing.assert_close(ours[0], ref[0], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours[2], ref[2], atol=1e-7, rtol=0)


class _Outputs(TorchDispatchMode):
    """The (shape, dtype) of every tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.seen.append((tuple(t.shape), t.dtype))
        return out


@pytest.mark.parametrize("fn, writes_full_fp32", [(smoothed_cross_entropy, False), (label_smoothed_nll, True)])
def test_no_full_fp32_scores_are_written_forward_or_backward(fn, writes_full_fp32):
    logits, target = _scores_and_targets(n=400, v=2000, dtype=torch.bfloat16)
    with _Outputs() as outputs:
        loss, _ = fn(logits, target, 0.1, 0)
        loss.backward()
    full_fp32 = [s for s in outputs.seen if s == ((400, 2000), torch.float32)]
    assert bool(full_fp32) == writes_full_fp32


def test_takes_cpu_fp32_and_bf16_scores_only():
    assert runs_on(torch.zeros(2, 3)) and runs_on(torch.zeros(2, 3, dtype=torch.bfloat16))
    assert not runs_on(torch.zeros(2, 3, dtype=torch.float16)) and not runs_on(torch.zeros(2, 3, device="meta"))
