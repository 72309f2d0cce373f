"""torch.compile'd training loss: the same loss and gradients as eager (inductor runs on CPU)."""

import pytest
import torch

from transformer.models import EncoderDecoder, TransformerConfig
from transformer.tasks.translation import all_positions_loss


def _model_and_batch():
    torch.manual_seed(0)
    model = EncoderDecoder(TransformerConfig(vocab_size=50, pad_id=0, d_model=32, n_heads=4, n_encoder_layers=2,
                                             n_decoder_layers=2, d_ff=64, dropout=0.0, max_len=64))
    src = torch.randint(3, 50, (4, 8))
    src[2:, 6:] = 0
    tgt_in = torch.randint(3, 50, (4, 8))
    tgt_in[1:, 5:] = 0
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[:, -1] = 0
    return model, (src, tgt_in, tgt_out)


def _run(model, fn, batch):
    model.zero_grad()
    loss, nll = fn(model, *batch, 0.1, 0)
    loss.backward()
    return loss.detach(), nll.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.slow  # inductor compiles forward and backward: about a minute on one core
def test_compiled_loss_and_gradients_equal_eager():
    pytest.importorskip("torch._inductor")
    model, batch = _model_and_batch()
    model.train()
    eager = _run(model, all_positions_loss, batch)
    torch._dynamo.reset()
    compiled_fn = torch.compile(all_positions_loss)
    compiled = _run(model, compiled_fn, batch)
    torch.testing.assert_close(compiled[0], eager[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(compiled[1], eager[1], atol=1e-5, rtol=1e-5)
    for name, grad in eager[2].items():
        torch.testing.assert_close(compiled[2][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    # The parameters are the model's own: state-dict keys stay free of torch.compile's prefix.
    assert all(not k.startswith("_orig_mod") for k in model.state_dict())


def test_bf16_weights_train_and_decode():
    """trainer.precision=bf16-true casts the model to bf16: the loss stays fp32, every parameter
    gets a bf16 gradient, and search runs on the bf16 model."""
    from transformer.decoding import greedy_search

    model, batch = _model_and_batch()
    model.to(torch.bfloat16).train()
    loss, nll, grads = _run(model, all_positions_loss, batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(g.dtype == torch.bfloat16 and torch.isfinite(g).all() for g in grads.values())
    out = greedy_search(model.eval(), batch[0], bos_id=1, eos_id=2, pad_id=0, max_len_a=0.0, max_len_b=5)
    assert len(out) == 4 and all(len(h) <= 5 for h in out)
