"""accel.losses: the real-positions loss equals the fixed-shape reference loss and its gradients."""

import torch

from transformer.accel.losses import real_positions_loss
from transformer.models import EncoderDecoder
from transformer.tasks.translation import translation_loss


def test_real_positions_loss_equals_the_fixed_shape_loss():
    torch.manual_seed(0)
    model = EncoderDecoder(vocab_size=30, pad_id=0, d_model=16, n_heads=2, n_encoder_layers=1,
                           n_decoder_layers=1, d_ff=32, dropout=0.0)
    src = torch.tensor([[5, 6, 7, 2, 0, 0], [8, 9, 2, 0, 0, 0]])
    tgt_in = torch.tensor([[1, 10, 11, 12, 0, 0], [1, 13, 0, 0, 0, 0]])
    tgt_out = torch.tensor([[10, 11, 12, 2, 0, 0], [13, 2, 0, 0, 0, 0]])
    results = []
    for fn in (translation_loss, real_positions_loss):
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
    torch.testing.assert_close(model.decoder.output_proj(model.decoder_states(src, tgt_in)), model(src, tgt_in))
