"""Node classification: one label per node of a graph, the lectures' n -> n shape (as tagging,
with a graph's nodes for a sentence's words).

A graph is one "sequence" of its nodes. A front end (``modules.frontends.NodeFeatures``) makes
each node's feature row a vector; the encoder's self-attention then either runs along the
graph's edges only (``attention="edges"``: the adjacency with self-loops is the attention mask,
which is what graph attention networks do) or over every node (``attention="full"``), which
needs the graph told another way: ``LaplacianNodeFeatures`` adds Laplacian eigenvectors as
positions. A linear layer scores each node's classes, or (``output="attention"``) one more
attention along the edges whose values are the classes' scores, a graph attention network's
output layer (``EdgeAttentionOutput``).

Shape legend: B graphs, N nodes, F features per node, D = d_model, H heads, C classes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.models.transformer import EncoderConfig, TransformerEncoder, hp, init_weights
from transformer.modules.attention import EdgeMask
from transformer.modules.positional import NoPositionalEncoding
from transformer.ranges import Probability, Range

#: What each node attends to: its neighbours and itself, or every node.
ATTENTIONS = ("edges", "full")
#: What scores a node's classes from the encoder's output: a linear layer, or attention along the edges.
OUTPUTS = ("linear", "attention")


def xavier_uniform_per_head_(weight: Tensor, n_heads: int) -> Tensor:
    """Xavier-uniform (Glorot & Bengio 2010) over each of ``n_heads`` equal row blocks of a
    ``(rows, fan_in)`` weight, a head's map by itself: fan-out ``rows / n_heads``, fan-in a row's
    size, as the GAT authors' code initialises each head's 1x1 convolutions (``init_weights`` does
    the same for ``AdditiveAttention``'s score vectors without projections). In place."""
    fan_out, fan_in = weight.size(0) // n_heads, weight[0].numel()
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        return weight.uniform_(-bound, bound)


class EdgeAttentionOutput(nn.Module):
    """A graph attention network's output layer (Velickovic et al. 2018, sec. 3.3, eq. 6): per head
    ``h``, ``W_h x`` maps each node to C class scores, node ``i`` takes the softmax-weighted mean of
    ``W_h x_j`` over itself and its neighbours ``j`` with GAT's additive score
    ``LeakyReLU_0.2(a_dst · W_h x_i + a_src · W_h x_j)``, and the heads' results are averaged
    (not concatenated: the output is the classes).

    One more hop than a linear classifier: a node's class scores are its neighbours' scores,
    weighted. GAT uses one head on Cora and CiteSeer, eight on PubMed.

    Shapes: x ``(B, N, D)``, mask an ``EdgeMask`` over the N nodes -> logits ``(B, N, C)``;
    internally ``(B, H, N, C)``; ``a_dst, a_src (H, C)``.

    Args:
        d_model: D, the encoder's width.
        n_classes: C.
        n_heads: H, heads averaged.
        attention_dropout: dropout on the attention weights (GAT: 0.6, as on its first layer).
        negative_slope: the LeakyReLU's, 0.2 as GAT's.
        value_dropout: dropout on the values ``W_h x_j`` after the scores are taken (GAT's code: 0.6).
        projection_bias: a bias in ``W x``; False: a bias ``(C,)`` after the heads' mean instead,
            as GAT's code adds it. The two are the same when the weights sum to 1 (in evaluation:
            ``a_dst·b`` and ``a_src·b`` are the same for every key of a query, so the softmax does
            not see ``b``), not in training with dropout on the weights.
        score_bias: a learned constant per head in each half of the score, ``a_dst · W_h x_i + b_dst``
            and ``a_src · W_h x_j + b_src``, as GAT's code (its score vectors are 1x1 convolutions
            with a bias each); ``b_dst, b_src (H,)``.
    """

    def __init__(self, d_model: int, n_classes: int, n_heads: int = 1, attention_dropout: float = 0.0,
                 negative_slope: float = 0.2, value_dropout: float = 0.0, projection_bias: bool = True,
                 score_bias: bool = False):
        super().__init__()
        self.n_heads, self.n_classes = n_heads, n_classes
        self.attention_dropout = attention_dropout
        self.value_dropout = value_dropout
        self.negative_slope = negative_slope
        self.proj = nn.Linear(d_model, n_heads * n_classes, bias=projection_bias)
        self.bias = None if projection_bias else nn.Parameter(torch.zeros(n_classes))
        self.a_dst = nn.Parameter(nn.init.xavier_uniform_(torch.empty(n_heads, n_classes)))
        self.a_src = nn.Parameter(nn.init.xavier_uniform_(torch.empty(n_heads, n_classes)))
        self.b_dst = nn.Parameter(torch.zeros(n_heads)) if score_bias else None
        self.b_src = nn.Parameter(torch.zeros(n_heads)) if score_bias else None

    def forward(self, x: Tensor, mask: EdgeMask) -> Tensor:
        b, n, _ = x.shape
        wx = self.proj(x).view(b, n, self.n_heads, self.n_classes).transpose(1, 2)  # (B, N, H·C) -> (B, H, N, C)
        dst = (wx * self.a_dst[:, None]).sum(-1)  # (B, H, N, C) * (H, 1, C) -> (B, H, N)
        src = (wx * self.a_src[:, None]).sum(-1)  # (B, H, N)
        if self.b_dst is not None:
            dst, src = dst + self.b_dst[:, None], src + self.b_src[:, None]  # (B, H, N) + (H, 1)
        qi, ki = mask.pairs(x.device)  # (E,), (E,)
        scores = F.leaky_relu(dst.index_select(2, qi) + src.index_select(2, ki), self.negative_slope)  # (B, H, E)
        p = self.attention_dropout if self.training else 0.0
        if self.training and self.value_dropout > 0:
            wx = F.dropout(wx, self.value_dropout)
        out = mask.mix(scores, wx, p).mean(1)  # (B, H, N, C) -> (B, N, C)
        return out if self.bias is None else out + self.bias


@dataclass(kw_only=True)
class NodeClassifierConfig(EncoderConfig):
    """``EncoderConfig`` plus the classes and the attention pattern.

    Fields:
        n_classes: number of node classes C (from the data).
        attention: ``"edges"`` — each node attends to itself and the nodes with an edge into it
            (``modules.attention.adjacency_mask``); ``"full"`` — to every node of its graph.
        attention_dropout: dropout on the attention weights; None = ``dropout``. Full attention
            over a few thousand nodes with dropout on its ``(N, N)`` weights cannot use the fused
            kernel and costs several times more on a CPU; along the edges it is cheap.
        encoder_dropout: dropout inside the encoder, on the front end's vectors and on the
            layers' sublayer outputs; None = ``dropout``. A graph attention network has none
            there: its dropouts are on the features (the front end's ``input_dropout``), the
            attention weights and the output layer's input (``dropout``).
        residual, feed_forward, layer_norm: the encoder layers' switches
            (``models.transformer.EncoderLayer``); all three off with ``activation="elu"`` is a
            graph attention network's layer (Velickovic et al. 2018).
        degree_bias: along the edges, add GCN's ``log(1 / sqrt(d_i d_j))`` to the attention scores
            (``modules.attention.EdgeMask``).
        attention_score: ``"dot"`` (the Transformer's scaled dot product) or ``"additive"``
            (GAT's score, ``modules.attention.AdditiveAttention``: one projection for score and value).
        output: ``"linear"`` (a linear layer per node) or ``"attention"`` (``EdgeAttentionOutput``:
            GAT's second layer, attention along the edges onto the classes; with ``attention="full"``
            it still attends along the edges).
        output_heads: the output attention's heads, averaged (GAT: 1 on Cora and CiteSeer).
        attention_projections: False (with ``attention_score="additive"``) makes the network GAT's
            exactly (the authors' ``attn_head``): the front end's linear map, without bias, is the
            layer's ``W``, heads are slices of it, and the attention has no ``W`` or ``W_o`` of its
            own (``AdditiveAttention(projections=False)``), a bias after the weighted sum. Dropout
            as GAT places it: ``dropout`` on the values ``W x_j`` (not on the front end's vectors or
            the layer's output, unless ``encoder_dropout`` is set), and the attention output layer
            drops its values too and adds its bias after the heads' mean. Each head's ``W`` (the
            front end's map, the output layer's) and score vectors are Xavier-initialised over
            that head's own fans, as the authors' 1x1 convolutions are.
        score_bias: with ``attention_projections=False``, GAT's bias in each of a layer's two score
            products (the authors' ``f_1``, ``f_2`` are 1x1 convolutions with a bias each), in both
            layers; two learned constants per head inside the LeakyReLU. Off: the scores without.
        frontend: required: ``NodeFeatures`` or ``LaplacianNodeFeatures``.
        positional: nodes have no order; ``None`` here means ``NoPositionalEncoding``.
    """

    n_classes: int = hp(within=Range(1, 2**20))
    attention: str = "edges"
    attention_dropout: float | None = hp(None, within=Probability())
    encoder_dropout: float | None = hp(None, within=Probability())
    residual: bool = True
    feed_forward: bool = True
    layer_norm: bool = True
    attention_score: str = "dot"
    degree_bias: bool = False
    output: str = "linear"
    output_heads: int = hp(1, within=Range(1, 1024))
    attention_projections: bool = True
    score_bias: bool = True
    vocab_size: int = hp(1, within=Range(1, 2**24))
    pad_id: int = hp(0, within=Range(0, 2**24))
    scale_embeddings: bool = False
    max_len: int = 1 << 20


class NodeClassifier(nn.Module):
    """Node front end + Transformer encoder (attention masked by the adjacency, or full) +
    a linear classifier per node or GAT's attention output layer (``EdgeAttentionOutput``).

    ``forward(src (B, N, F), edge_index (2, E) long, src_lengths (B,) | None) -> logits
    (B, N, C)``: a batch is one graph (or B feature sets of one graph: the edges are shared); with ``need_weights=True`` also each layer's attention weights ``(B, H, N, N)``
    (what ``transformer-inspect`` shows for a node).

    Args:
        cfg: sizes, classes and attention pattern (``NodeClassifierConfig``).
    """

    config_class = NodeClassifierConfig

    def __init__(self, cfg: NodeClassifierConfig):
        super().__init__()
        if cfg.attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {cfg.attention!r}")
        if cfg.output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {cfg.output!r}")
        if cfg.frontend is None:
            raise ValueError("a node classifier needs a node front end (frontend: NodeFeatures)")
        if cfg.degree_bias and cfg.attention != "edges":
            raise ValueError("degree_bias weighs the graph's edges: use attention=edges")
        if cfg.window is not None:
            raise ValueError("window: nodes have no order to take a window along; use attention=edges")
        if cfg.positional is None:
            cfg = dataclasses.replace(cfg, positional=functools.partial(NoPositionalEncoding))
        gat = not cfg.attention_projections
        if gat:
            # The front end's map is GAT's W x, which has no bias (the attention adds its own after the mean).
            cfg = dataclasses.replace(cfg, frontend=functools.partial(cfg.frontend, bias=False))
        self.cfg = cfg
        self.attention = cfg.attention
        self.n_classes = cfg.n_classes
        self.encoder = TransformerEncoder(cfg, cfg.n_layers, residual=cfg.residual, feed_forward=cfg.feed_forward,
                                          layer_norm=cfg.layer_norm, attention_score=cfg.attention_score,
                                          attention_projections=cfg.attention_projections,
                                          score_bias=gat and cfg.score_bias)
        for layer in self.encoder.layers:
            if cfg.attention_dropout is not None:
                layer.self_attn.dropout = cfg.attention_dropout
            if gat:
                layer.self_attn.value_dropout = cfg.dropout
        # GAT drops nothing between its layer's input (the features) and its output's ELU.
        encoder_dropout = 0.0 if gat and cfg.encoder_dropout is None else cfg.encoder_dropout
        if encoder_dropout is not None:
            self.encoder.dropout.p = encoder_dropout
            for layer in self.encoder.layers:
                layer.dropout.p = encoder_dropout
        self.dropout = nn.Dropout(cfg.dropout)
        if cfg.output == "attention":
            output_dropout = cfg.dropout if cfg.attention_dropout is None else cfg.attention_dropout
            self.classifier = EdgeAttentionOutput(cfg.d_model, cfg.n_classes, cfg.output_heads, output_dropout,
                                                  value_dropout=cfg.dropout if gat else 0.0, projection_bias=not gat,
                                                  score_bias=gat and cfg.score_bias)
        else:
            self.classifier = nn.Linear(cfg.d_model, cfg.n_classes)
        init_weights(self, cfg.d_model)
        if gat:
            # The authors' code makes each head's W a 1x1 convolution of its own, Xavier over that
            # head's fans (Cora: 1433 in, 8 out, a bound of 0.0645 against 0.0633 over all 64 columns).
            xavier_uniform_per_head_(self.encoder.frontend.proj.weight, cfg.n_heads)  # (D, F): H blocks of d_head
            if cfg.output == "attention":
                for weight in (self.classifier.proj.weight, self.classifier.a_dst, self.classifier.a_src):
                    xavier_uniform_per_head_(weight, cfg.output_heads)  # (H·C, D), (H, C), (H, C)

    def forward(self, src: Tensor, edge_index: Tensor | None = None, src_lengths: Tensor | None = None,
                need_weights: bool = False):
        x, real = self.encoder.embed(src, src_lengths)  # (B, N, D), (B, N)
        edges = None
        if self.attention == "edges" or self.cfg.output == "attention":
            if edge_index is None:
                raise ValueError(f"attention={self.attention} with output={self.cfg.output} needs the graph's edges")
            # The adjacency with self-loops, computed along the edges (modules.attention.EdgeMask).
            edges = EdgeMask(edge_index.to(src.device), src.size(1), degree_bias=self.cfg.degree_bias)
        mask = edges if self.attention == "edges" else None
        out = self.encoder.forward_embeddings(x, real, need_weights, attn_mask=mask)
        h, weights = out if need_weights else (out, None)  # (B, N, D)
        h = self.dropout(h)
        logits = self.classifier(h, edges) if self.cfg.output == "attention" else self.classifier(h)  # (B, N, C)
        return (logits, weights) if need_weights else logits


__all__ = ["ATTENTIONS", "OUTPUTS", "EdgeAttentionOutput", "NodeClassifier", "NodeClassifierConfig",
           "xavier_uniform_per_head_"]
