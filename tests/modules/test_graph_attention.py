"""A graph's adjacency as self-attention's mask: attention along the edges (the dense mask and
the edge-by-edge path) equals full attention with a -inf bias off the edges, gradients included;
the mask has self-loops and reads edges source -> target; GAT's additive score follows its
formula along the edges as on the dense mask."""

from __future__ import annotations

import pytest
import torch

from transformer.modules.attention import AdditiveAttention, EdgeMask, MultiHeadAttention, adjacency_mask


def random_graph(n: int = 30, e: int = 80, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (2, e), generator=g)


def test_the_adjacency_mask_has_self_loops_and_reads_source_to_target():
    edges = torch.tensor([[0, 1], [1, 2]])  # 0 -> 1, 1 -> 2
    mask = adjacency_mask(edges, 4)
    assert mask.tolist() == [[True, False, False, False],  # node 0 hears only itself
                             [True, True, False, False],  # node 1 hears 0 (0 -> 1) and itself
                             [False, True, True, False],
                             [False, False, False, True]]  # node 3 has no edge: itself alone
    assert adjacency_mask(edges, 4, self_loops=False).diagonal().tolist() == [False] * 4


def test_masked_attention_equals_full_attention_with_minus_infinity_off_the_edges():
    n = 30
    edges = random_graph(n)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, n, 16, requires_grad=True)
    bias = torch.zeros(n, n).masked_fill(~adjacency_mask(edges, n), float("-inf"))  # (N, N)
    reference, _ = mha(x, x, x, None, attn_bias=bias)
    dense, _ = mha(x, x, x, adjacency_mask(edges, n))
    along_edges, _ = mha(x, x, x, EdgeMask(edges, n))
    weighed, weights = mha(x, x, x, EdgeMask(edges, n), need_weights=True)
    for out in (dense, along_edges, weighed):
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
    assert (weights[:, :, ~adjacency_mask(edges, n)] == 0).all()  # no weight off the edges
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, n))
    grad_ref, = torch.autograd.grad(reference.square().sum(), x)
    grad_edges, = torch.autograd.grad(along_edges.square().sum(), x)
    torch.testing.assert_close(grad_edges, grad_ref, atol=1e-5, rtol=1e-5)


def test_repeated_edges_count_once():
    n = 6
    edges = torch.tensor([[0, 0, 0, 2], [1, 1, 1, 1]])
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, n, 8)
    once, _ = mha(x, x, x, EdgeMask(edges[:, [0, 3]], n))
    repeated, _ = mha(x, x, x, EdgeMask(edges, n))
    torch.testing.assert_close(repeated, once)


def test_a_node_hears_nothing_beyond_its_edges():
    n = 5
    edges = torch.tensor([[0, 1], [1, 2]])
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, n, 8)
    out, _ = mha(x, x, x, EdgeMask(edges, n))
    y = x.clone()
    y[0, 4] += 10.0  # node 4 sends to no one
    y[0, 2] -= 3.0  # node 2 sends to no one either (1 -> 2 only)
    moved, _ = mha(y, y, y, EdgeMask(edges, n))
    torch.testing.assert_close(moved[0, :2], out[0, :2])


def test_the_additive_score_is_gats_formula_and_nothing_off_the_edges():
    n, d, h = 4, 4, 2
    edges = torch.tensor([[0, 2, 3], [1, 1, 2]])  # 0 -> 1, 2 -> 1, 3 -> 2; node 0 hears only itself
    torch.manual_seed(0)
    att = AdditiveAttention(d, h).eval()
    x = torch.randn(1, n, d)
    wx = att.w_v(x)[0].view(n, h, d // h)  # (N, H, d_head): W x, shared by score and value
    expected = torch.zeros(n, h, d // h)
    weights = torch.zeros(h, n, n)
    for i in range(n):
        hears = [i] + [int(s) for s, t in edges.T if int(t) == i]  # N(i) and i itself
        for head in range(h):
            e = torch.stack([torch.nn.functional.leaky_relu(
                att.a_dst[head] @ wx[i, head] + att.a_src[head] @ wx[j, head], 0.2) for j in hears])
            alpha = torch.softmax(e, 0)
            expected[i, head] = sum(a * wx[j, head] for a, j in zip(alpha, hears))
            weights[head, i, hears] = alpha
    expected = att.w_o(expected.reshape(1, n, d))
    along_edges, _ = att(x, x, x, EdgeMask(edges, n))
    dense, got = att(x, x, x, EdgeMask(edges, n), need_weights=True)
    for out in (along_edges, dense):
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[0], weights, atol=1e-6, rtol=1e-5)
    assert (got[0][:, ~adjacency_mask(edges, n)] == 0).all()  # masked entries get exactly 0
    assert not hasattr(att, "w_q") and not hasattr(att, "w_k")  # one projection: W


@pytest.mark.parametrize("projections", [True, False])
def test_additive_attention_along_the_edges_equals_its_dense_mask_gradients_included(projections):
    n = 30
    edges = random_graph(n)
    att = AdditiveAttention(16, 4, projections=projections).eval()
    x = torch.randn(2, n, 16, requires_grad=True)
    bias = torch.zeros(n, n).masked_fill(~adjacency_mask(edges, n), float("-inf"))  # (N, N)
    reference, _ = att(x, x, x, None, attn_bias=bias)
    along_edges, _ = att(x, x, x, EdgeMask(edges, n))
    torch.testing.assert_close(along_edges, reference, atol=1e-5, rtol=1e-5)
    grad_ref, = torch.autograd.grad(reference.square().sum(), x)
    grad_edges, = torch.autograd.grad(along_edges.square().sum(), x)
    torch.testing.assert_close(grad_edges, grad_ref, atol=1e-5, rtol=1e-5)


def test_the_degree_bias_is_gcns_normalisation_along_the_edges_as_on_the_dense_mask():
    n = 12
    edges = random_graph(n, 30, seed=1)
    mask = adjacency_mask(edges, n)
    degree = mask.sum(-1).float()  # (N,): incoming edges with the self-loop
    gcn = torch.zeros(n, n).masked_fill(~mask, float("-inf")) - 0.5 * (degree[:, None] * degree[None, :]).log()
    for att in (MultiHeadAttention(8, 2).eval(), AdditiveAttention(8, 2).eval()):
        x = torch.randn(1, n, 8)
        reference, _ = att(x, x, x, None, attn_bias=gcn)
        along_edges, _ = att(x, x, x, EdgeMask(edges, n, degree_bias=True))
        weighed, weights = att(x, x, x, EdgeMask(edges, n, degree_bias=True), need_weights=True)
        plain, _ = att(x, x, x, EdgeMask(edges, n))
        for out in (along_edges, weighed):
            torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(plain, reference, atol=1e-3)  # the bias changes what a node hears
        assert (weights[0][:, ~mask] == 0).all()


@pytest.mark.parametrize("cls", [MultiHeadAttention, AdditiveAttention])
def test_attention_along_the_edges_runs_under_bf16_autocast_as_dense_attention_does(cls):
    # trainer.precision=bf16-mixed: the projections give bf16 values; the edge-by-edge softmax and
    # sums run in float32 (as autocast runs dense attention's softmax) and return the values' dtype
    n = 30
    edges = random_graph(n)
    att = cls(16, 4).eval()
    x = torch.randn(2, n, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        along_edges, _ = att(x, x, x, EdgeMask(edges, n))
        dense, _ = att(x, x, x, adjacency_mask(edges, n))
    assert along_edges.dtype == dense.dtype == torch.bfloat16
    torch.testing.assert_close(along_edges.float(), dense.float(), atol=3e-2, rtol=3e-2)
    reference, _ = att(x, x, x, EdgeMask(edges, n))
    torch.testing.assert_close(along_edges.float(), reference, atol=5e-2, rtol=5e-2)
    along_edges.float().square().sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
