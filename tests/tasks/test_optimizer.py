"""Adam's fused CUDA kernel and gradient clipping: Lightning's mixed precision refuses the pair."""

import torch

from transformer.tasks.seq2seq import fused_adam


def test_adam_is_fused_on_cuda_only_without_gradient_clipping():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert fused_adam(cuda, None) and fused_adam(cuda, 0.0)
    # The GPU recipes clip at 1.0: a fused Adam there stops the first update with
    # "does not allow for gradient clipping".
    assert not fused_adam(cuda, 1.0)
    assert not fused_adam(cpu, None) and not fused_adam(cpu, 1.0)


def test_a_fused_optimizer_is_what_lightning_refuses_to_clip():
    # The reason for the rule above, checked against the pinned Lightning on a CPU.
    from lightning.pytorch.plugins.precision.amp import MixedPrecision

    w = torch.nn.Parameter(torch.ones(3))
    w.grad = torch.full((3,), 10.0)
    plugin = MixedPrecision("bf16-mixed", "cpu")
    fused = torch.optim.Adam([w], fused=True)
    try:
        plugin.clip_gradients(fused, 1.0)
    except RuntimeError as exc:
        assert "gradient clipping" in str(exc)
    else:
        raise AssertionError("Lightning clipped a fused optimizer's gradients")
    plugin.clip_gradients(torch.optim.Adam([w]), 1.0)
    assert torch.linalg.vector_norm(w.grad) <= 1.0 + 1e-5
