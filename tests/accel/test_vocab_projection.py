"""VocabProjection: same scores as nn.Linear, and its CPU copy follows every weight change."""

import torch

from transformer.accel.vocab_projection import VocabProjection


def _pair(seed=0):
    torch.manual_seed(seed)
    proj = VocabProjection(8, 30)
    ref = torch.nn.Linear(8, 30, bias=False)
    ref.weight = proj.weight  # tied, like the output projection and the embedding
    return proj, ref


def test_scores_equal_linear_in_training_and_inference():
    proj, ref = _pair()
    h = torch.randn(4, 3, 8)
    torch.testing.assert_close(proj(h), ref(h))  # autograd on: plain F.linear
    with torch.inference_mode():
        torch.testing.assert_close(proj(h), ref(h), atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(proj(h), ref(h), atol=1e-5, rtol=1e-5)
    one = torch.randn(1, 8)  # one row: the contiguous transposed copy (several take oneDNN's path)
    with torch.no_grad():
        torch.testing.assert_close(proj(one), ref(one), atol=1e-6, rtol=0)
    assert proj._w_t is not None
    assert list(proj.state_dict()) == ["weight"]  # the copies are not saved


def test_the_copy_follows_optimiser_steps_loads_and_tied_embeddings():
    proj, ref = _pair()
    emb = torch.nn.Embedding(30, 8)
    proj.weight = emb.weight  # tie after construction, as the decoders do
    h = torch.randn(5, 8)
    with torch.no_grad():
        first = proj(h)
    opt = torch.optim.SGD(emb.parameters(), lr=0.5)
    emb(torch.tensor([1, 2, 3])).sum().backward()
    opt.step()
    with torch.no_grad():
        after_step = proj(h)
        torch.testing.assert_close(after_step, h @ emb.weight.t(), atol=1e-6, rtol=0)
        assert not torch.allclose(after_step, first)
        proj.load_state_dict({"weight": torch.zeros(30, 8)})
        assert proj(h).eq(0).all()
        emb.weight[7] = 1.0  # an in-place edit of the shared weight
        torch.testing.assert_close(proj(h)[:, 7], h.sum(-1), atol=1e-6, rtol=0)


def test_gradients_still_flow_in_training():
    proj, _ = _pair()
    h = torch.randn(2, 8, requires_grad=True)
    proj(h).sum().backward()
    assert proj.weight.grad is not None and h.grad is not None
