"""The node classifier: the same model whatever order the nodes are listed in (nodes are a set:
no positions), attention along the edges reaches L hops in L layers, GAT's attention output layer
hears a node's neighbours only, and the Laplacian front end flips eigenvector signs in training
only."""

from __future__ import annotations

import functools

import pytest
import torch

from transformer.models.nodes import NodeClassifier, NodeClassifierConfig
from transformer.modules.attention import EdgeMask
from transformer.modules.frontends import LaplacianNodeFeatures, NodeFeatures


def model(attention: str = "edges", n_layers: int = 2, **kwargs) -> NodeClassifier:
    torch.manual_seed(0)
    kwargs = {"dropout": 0.0, **kwargs}
    cfg = NodeClassifierConfig(d_model=16, n_heads=2, n_layers=n_layers, d_ff=32, n_classes=3, attention=attention,
                               frontend=functools.partial(NodeFeatures, n_features=5), **kwargs)
    return NodeClassifier(cfg).eval()


def path_graph(n: int) -> torch.Tensor:
    forward = torch.stack([torch.arange(n - 1), torch.arange(1, n)])  # (2, N-1): i -> i+1
    return torch.cat([forward, forward.flip(0)], dim=1)  # both ways


@pytest.mark.parametrize("attention", ["edges", "full"])
def test_relisting_the_nodes_relists_the_outputs(attention):
    n = 7
    net = model(attention)
    x, edges = torch.randn(1, n, 5), path_graph(n)
    perm = torch.randperm(n)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)
    out = net(x, edges)  # (1, N, C)
    relisted = net(x[:, perm], inverse[edges])
    torch.testing.assert_close(relisted, out[:, perm], atol=1e-5, rtol=1e-5)


def test_attention_along_edges_reaches_as_many_hops_as_layers():
    n = 6
    x, edges = torch.randn(1, n, 5), path_graph(n)
    for layers in (1, 2):
        net = model("edges", n_layers=layers)
        out = net(x, edges)
        y = x.clone()
        y[0, 5] += 5.0  # node 5 is 5 hops from node 0, `layers` hops from node 5 - layers
        moved = net(y, edges)
        changed = (moved - out).abs().amax(-1)[0] > 1e-6  # (N,)
        assert changed.tolist() == [i >= 5 - layers for i in range(n)]
    full = model("full", n_layers=1)
    assert ((full(y, edges) - full(x, edges)).abs().amax(-1) > 1e-6).all()  # full attention: everyone


def test_attention_weights_are_zero_off_the_edges():
    n = 5
    net = model("edges")
    edges = path_graph(n)
    _, weights = net(torch.randn(1, n, 5), edges, need_weights=True)
    off = torch.ones(n, n, dtype=torch.bool)
    off[edges[1], edges[0]] = False
    off.fill_diagonal_(False)
    assert len(weights) == 2 and all((w[0][:, off] == 0).all() for w in weights)


def test_attention_dropout_is_its_own_setting():
    net = model("full", attention_dropout=0.0, dropout=0.5)
    assert all(layer.self_attn.dropout == 0.0 for layer in net.encoder.layers) and net.dropout.p == 0.5
    assert model("full", dropout=0.3).encoder.layers[0].self_attn.dropout == 0.3  # None: the model's dropout
    net = model("edges", encoder_dropout=0.0, dropout=0.5)
    assert net.encoder.dropout.p == 0.0 and all(layer.dropout.p == 0.0 for layer in net.encoder.layers)
    assert net.dropout.p == 0.5  # before the output layer
    net = model("edges", dropout=0.3)
    assert net.encoder.dropout.p == 0.3 and net.encoder.layers[0].dropout.p == 0.3  # None: the model's dropout


def test_the_attention_score_is_a_switch_dot_by_default():
    from transformer.modules.attention import AdditiveAttention, MultiHeadAttention

    assert all(type(layer.self_attn) is MultiHeadAttention for layer in model("edges").encoder.layers)
    net = model("edges", attention_score="additive")
    assert all(type(layer.self_attn) is AdditiveAttention for layer in net.encoder.layers)
    n = 6
    x, edges = torch.randn(1, n, 5), path_graph(n)
    out, weights = net(x, edges, need_weights=True)
    torch.testing.assert_close(net(x, edges), out, atol=1e-5, rtol=1e-5)  # the edge path and the dense weights agree
    assert weights[0][0, :, 0, 2:].abs().sum() == 0  # node 0 hears nodes 0 and 1 only
    with pytest.raises(ValueError, match="attention_score must be one of"):
        model("edges", attention_score="cosine")


def test_a_node_classifier_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="attention must be one of"):
        model("everywhere")
    with pytest.raises(ValueError, match="degree_bias weighs the graph's edges"):
        model("full", degree_bias=True)
    with pytest.raises(ValueError, match="needs a node front end"):
        NodeClassifier(NodeClassifierConfig(d_model=8, n_heads=2, n_layers=1, d_ff=8, n_classes=2))
    with pytest.raises(ValueError, match="n_features is not set"):
        NodeFeatures(d_model=8)


def test_the_laplacian_front_end_flips_eigenvector_signs_in_training_only():
    torch.manual_seed(0)
    front = LaplacianNodeFeatures(d_model=8, laplacian_k=3, n_features=4)
    src, lengths = torch.randn(2, 6, 7), torch.tensor([6, 6])
    front.eval()
    a, mask = front(src, lengths)
    flipped = src.clone()
    flipped[..., 4:] *= -1
    assert mask.all() and not torch.allclose(front(flipped, lengths)[0], a)  # eval: signs matter as given
    front.train()
    seen = {tuple(torch.sign(front(src, lengths)[0] - front.proj(src[..., :4]))[0, 0].tolist()) for _ in range(20)}
    assert len(seen) > 1  # training: random signs per graph


def test_input_dropout_draws_only_for_non_zero_features():
    torch.manual_seed(0)
    front = NodeFeatures(d_model=4, n_features=1000, input_dropout=0.5).train()
    x = torch.zeros(1, 3, 1000)
    x[0, :, :10] = 1.0
    dropped = front.drop(x)
    assert (dropped[..., 10:] == 0).all()
    kept = dropped[..., :10]
    assert set(kept.unique().tolist()) <= {0.0, 2.0} and 0 < int(kept.count_nonzero()) < 30


def test_the_attention_output_layer_attends_along_the_edges_only():
    from transformer.models.nodes import EdgeAttentionOutput

    n = 6
    x, edges = torch.randn(1, n, 5), path_graph(n)
    for attention in ("edges", "full"):
        net = model(attention, n_layers=1, output="attention", output_heads=2)
        assert type(net.classifier) is EdgeAttentionOutput and net.classifier.proj.out_features == 2 * 3
        out = net(x, edges)  # (1, N, C)
        assert out.shape == (1, n, 3)
        # the output layer alone: node 0's scores hear nodes 0 and 1, never node 4
        h = torch.randn(1, n, 16)
        mask = EdgeMask(edges, n)
        moved = h.clone()
        moved[0, 4] += 5.0
        changed = (net.classifier(moved, mask) - net.classifier(h, mask)).abs().amax(-1)[0] > 1e-6  # (N,)
        assert changed.tolist() == [False, False, False, True, True, True]
    # attention in one layer and at the output: two hops, as two layers with a linear output
    net = model("edges", n_layers=1, output="attention")
    y = x.clone()
    y[0, 5] += 5.0
    changed = (net(y, edges) - net(x, edges)).abs().amax(-1)[0] > 1e-6
    assert changed.tolist() == [False, False, False, True, True, True]


def test_the_output_is_a_switch_linear_by_default():
    assert type(model("edges").classifier) is torch.nn.Linear
    with pytest.raises(ValueError, match="output must be one of"):
        model("edges", output="pooled")
    with pytest.raises(ValueError, match="needs the graph's edges"):
        model("full", output="attention")(torch.randn(1, 4, 5))


def gat(**kwargs) -> NodeClassifier:
    """GAT's network through the switches: one additive layer without projections, ELU, the
    attention output layer."""
    return model("edges", n_layers=1, attention_score="additive", residual=False, feed_forward=False,
                 layer_norm=False, activation="elu", output="attention", attention_projections=False, **kwargs)


def hand_written_gat_head(x, edges, w, a_dst, a_src, b_dst=0.0, b_src=0.0):
    """One head of the GAT authors' ``attn_head``, node by node: ``x (N, F)``, ``w (F, d)`` ->
    ``(N, d)`` values and the ``(N, N)`` attention coefficients; the score vectors are 1x1
    convolutions with a bias each (``f_1 = a_dst · W x_i + b_dst``, ``f_2 = a_src · W x_j + b_src``)."""
    n = x.size(0)
    wx = x @ w  # (N, d)
    out, alpha = torch.zeros(n, w.size(1), dtype=x.dtype), torch.zeros(n, n, dtype=x.dtype)
    for i in range(n):
        hears = sorted({i} | {int(s) for s, t in edges.T if int(t) == i})  # N(i) with the self-loop
        e = torch.stack([torch.nn.functional.leaky_relu(a_dst @ wx[i] + b_dst + a_src @ wx[j] + b_src, 0.2)
                         for j in hears])
        alpha[i, hears] = torch.softmax(e, 0)
        out[i] = sum(alpha[i, j] * wx[j] for j in hears)
    return out, alpha


def test_without_attention_projections_the_network_is_gats_exactly():
    n, heads, d_head, f, c = 6, 2, 8, 5, 3
    edges = torch.tensor([[0, 1, 1, 2, 3, 4, 2], [1, 0, 2, 1, 4, 3, 0]])  # node 5 has no edge
    net = gat().double()
    layer, out_layer = net.encoder.layers[0].self_attn, net.classifier
    biases = (layer.bias, out_layer.bias, layer.b_dst, layer.b_src, out_layer.b_dst, out_layer.b_src)
    assert all((b == 0).all() for b in biases)
    with torch.no_grad():  # biases away from their zero initialisation, so that their place is tested
        for b in biases:
            b.normal_()
    # one linear map: the front end's, without bias, is W; the attention has no W or W_o of its own
    assert net.encoder.frontend.proj.bias is None
    assert {name for name, _ in layer.named_parameters()} == {"a_dst", "a_src", "bias", "b_dst", "b_src"}
    x = torch.randn(1, n, f, dtype=torch.float64)
    w = net.encoder.frontend.proj.weight.T  # (F, H·d_head): head h is columns h·d_head ..
    hidden, alphas = zip(*(hand_written_gat_head(x[0], edges, w[:, h * d_head:(h + 1) * d_head],
                                                  layer.a_dst[h], layer.a_src[h], layer.b_dst[h], layer.b_src[h])
                                 for h in range(heads)))
    hidden = torch.nn.functional.elu(torch.cat(hidden, -1) + layer.bias)  # heads concatenated, bias, ELU
    logits, _ = hand_written_gat_head(hidden, edges, out_layer.proj.weight.T, out_layer.a_dst[0], out_layer.a_src[0],
                                      out_layer.b_dst[0], out_layer.b_src[0])
    logits = logits + out_layer.bias  # one output head: nothing to average
    got, weights = net(x, edges, need_weights=True)
    torch.testing.assert_close(net(x, edges)[0], logits, atol=1e-6, rtol=1e-6)  # along the edges
    torch.testing.assert_close(got[0], logits, atol=1e-6, rtol=1e-6)  # dense, with weights
    torch.testing.assert_close(weights[0][0], torch.stack(alphas), atol=1e-6, rtol=1e-6)
    assert (torch.stack(alphas) == 0).eq(weights[0][0] == 0).all()  # masked to the edges and self-loops


def test_without_attention_projections_each_head_is_initialised_over_its_own_fans():
    # The authors' code builds each head from 1x1 convolutions (Glorot-uniform: fan-in, fan-out of
    # that head's kernel): W is F in, d_head out; a score vector d_head in, 1 out; the output
    # layer's W is D in, C out. Over the whole tensors the bounds are smaller, so they are reached.
    heads, d_head, f, c, d, out_heads = 8, 16, 5, 16, 128, 8
    torch.manual_seed(0)
    cfg = NodeClassifierConfig(d_model=d, n_heads=heads, n_layers=1, d_ff=32, n_classes=c, attention="edges",
                               frontend=functools.partial(NodeFeatures, n_features=f), dropout=0.0,
                               attention_score="additive", residual=False, feed_forward=False, layer_norm=False,
                               activation="elu", output="attention", output_heads=out_heads,
                               attention_projections=False)
    net = NodeClassifier(cfg)
    layer, out_layer = net.encoder.layers[0].self_attn, net.classifier
    for weight, fan_in, fan_out, whole in (
            (net.encoder.frontend.proj.weight, f, d_head, (f, d)),  # (D, F): a head's W is d_head rows
            (layer.a_dst, d_head, 1, (d_head, heads)), (layer.a_src, d_head, 1, (d_head, heads)),
            (out_layer.proj.weight, d, c, (d, out_heads * c)),  # (H·C, D): a head's W is C rows
            (out_layer.a_dst, c, 1, (c, out_heads)), (out_layer.a_src, c, 1, (c, out_heads))):
        bound, whole_bound = (6 / (fan_in + fan_out)) ** 0.5, (6 / sum(whole)) ** 0.5
        assert weight.abs().max() <= bound and weight.abs().max() > max(whole_bound, 0.9 * bound)
    # the scores' biases, as the convolutions', start at zero; a model with projections has none
    assert (layer.b_dst == 0).all() and (out_layer.b_src == 0).all() and layer.b_dst.shape == (heads,)
    assert model("edges", n_layers=1, attention_score="additive").encoder.layers[0].self_attn.b_dst is None


def test_score_bias_off_leaves_gats_scores_without_a_constant():
    net = gat(score_bias=False)
    layer = net.encoder.layers[0].self_attn
    assert layer.b_dst is None and net.classifier.b_dst is None
    assert {name for name, _ in layer.named_parameters()} == {"a_dst", "a_src", "bias"}


def test_without_attention_projections_dropout_falls_where_gats_does():
    net = gat(dropout=0.5, attention_dropout=0.0)
    net.encoder.frontend.dropout.p = 0.0
    n = 6
    x, edges = torch.randn(1, n, 5), path_graph(n)
    _, weights = net(x, edges, need_weights=True)
    net.train()
    torch.manual_seed(1)
    trained, train_weights = net(x, edges, need_weights=True)
    # the scores see W x whole (no dropout on the front end's vectors) ...
    torch.testing.assert_close(train_weights[0], weights[0])
    # ... the values are dropped: every value off, the layer's output is its bias alone
    layer = net.encoder.layers[0].self_attn
    assert layer.value_dropout == 0.5 and net.classifier.value_dropout == 0.5
    layer.value_dropout = 1.0
    h = net.encoder.forward_embeddings(*net.encoder.embed(x), attn_mask=EdgeMask(edges, n))  # (1, N, D)
    torch.testing.assert_close(h, torch.nn.functional.elu(layer.bias).expand(1, n, -1))
    # an explicit encoder_dropout still applies; the dot product has no layer without projections
    assert gat(encoder_dropout=0.2).encoder.dropout.p == 0.2
    with pytest.raises(ValueError, match="attention_score='additive'"):
        model("edges", attention_projections=False)


def test_dropout_groups_draw_the_features_dropout_anew_for_each_block_of_the_map():
    torch.manual_seed(0)
    x = torch.zeros(1, 20, 50)
    x[0, :, :10] = 1.0
    for groups, same in ((1, True), (2, False)):
        front = NodeFeatures(d_model=4, n_features=50, input_dropout=0.5, bias=False, dropout_groups=groups).train()
        with torch.no_grad():
            front.proj.weight.zero_()
            front.proj.weight[:, :10] = 1.0  # every output sums the ten non-zero features
        out, _ = front(x, torch.tensor([20]))  # (1, N, 4): columns 0-1 one block, 2-3 the other
        assert torch.equal(out[..., 0], out[..., 2]) is same  # one draw for the map, or a draw per block
        torch.testing.assert_close(out[..., 0], out[..., 1])  # inside a block, one draw
        assert torch.equal(front.eval()(x, torch.tensor([20]))[0], x @ front.proj.weight.T)  # evaluation: no dropout
    with pytest.raises(ValueError, match="must divide d_model"):
        NodeFeatures(d_model=6, n_features=5, dropout_groups=4)
