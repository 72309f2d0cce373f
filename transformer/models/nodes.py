"""Node classification: one label per node of a graph, the lectures' n -> n shape (as tagging,
with a graph's nodes for a sentence's words).

A graph is one "sequence" of its nodes. A front end (``modules.frontends.NodeFeatures``) makes
each node's feature row a vector; the encoder's self-attention then either runs along the
graph's edges only (``attention="edges"``: the adjacency with self-loops is the attention mask,
which is what graph attention networks do) or over every node (``attention="full"``), which
needs the graph told another way: ``LaplacianNodeFeatures`` adds Laplacian eigenvectors as
positions. A linear layer scores each node's classes.

Shape legend: B graphs, N nodes, F features per node, D = d_model, H heads, C classes.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from torch import Tensor, nn

from transformer.models.transformer import EncoderConfig, TransformerEncoder, hp, init_weights
from transformer.modules.attention import EdgeMask
from transformer.modules.positional import NoPositionalEncoding
from transformer.ranges import Probability, Range

#: What each node attends to: its neighbours and itself, or every node.
ATTENTIONS = ("edges", "full")


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
        residual, feed_forward, layer_norm: the encoder layers' switches
            (``models.transformer.EncoderLayer``); all three off with ``activation="elu"`` is a
            graph attention network's layer (Velickovic et al. 2018).
        degree_bias: along the edges, add GCN's ``log(1 / sqrt(d_i d_j))`` to the attention scores
            (``modules.attention.EdgeMask``).
        attention_score: ``"dot"`` (the Transformer's scaled dot product) or ``"additive"``
            (GAT's score, ``modules.attention.AdditiveAttention``: one projection for score and value).
        frontend: required: ``NodeFeatures`` or ``LaplacianNodeFeatures``.
        positional: nodes have no order; ``None`` here means ``NoPositionalEncoding``.
    """

    n_classes: int = hp(within=Range(1, 2**20))
    attention: str = "edges"
    attention_dropout: float | None = hp(None, within=Probability())
    residual: bool = True
    feed_forward: bool = True
    layer_norm: bool = True
    attention_score: str = "dot"
    degree_bias: bool = False
    vocab_size: int = hp(1, within=Range(1, 2**24))
    pad_id: int = hp(0, within=Range(0, 2**24))
    scale_embeddings: bool = False
    max_len: int = 1 << 20


class NodeClassifier(nn.Module):
    """Node front end + Transformer encoder (attention masked by the adjacency, or full) +
    linear classifier per node.

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
        if cfg.frontend is None:
            raise ValueError("a node classifier needs a node front end (frontend: NodeFeatures)")
        if cfg.degree_bias and cfg.attention != "edges":
            raise ValueError("degree_bias weighs the graph's edges: use attention=edges")
        if cfg.window is not None:
            raise ValueError("window: nodes have no order to take a window along; use attention=edges")
        if cfg.positional is None:
            cfg = dataclasses.replace(cfg, positional=functools.partial(NoPositionalEncoding))
        self.cfg = cfg
        self.attention = cfg.attention
        self.n_classes = cfg.n_classes
        self.encoder = TransformerEncoder(cfg, cfg.n_layers, residual=cfg.residual, feed_forward=cfg.feed_forward,
                                          layer_norm=cfg.layer_norm, attention_score=cfg.attention_score)
        if cfg.attention_dropout is not None:
            for layer in self.encoder.layers:
                layer.self_attn.dropout = cfg.attention_dropout
        self.dropout = nn.Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.d_model, cfg.n_classes)
        init_weights(self, cfg.d_model)

    def forward(self, src: Tensor, edge_index: Tensor | None = None, src_lengths: Tensor | None = None,
                need_weights: bool = False):
        x, real = self.encoder.embed(src, src_lengths)  # (B, N, D), (B, N)
        mask = None
        if self.attention == "edges":
            if edge_index is None:
                raise ValueError("attention=edges needs the graph's edges")
            # The adjacency with self-loops, computed along the edges (modules.attention.EdgeMask).
            mask = EdgeMask(edge_index.to(src.device), src.size(1), degree_bias=self.cfg.degree_bias)
        out = self.encoder.forward_embeddings(x, real, need_weights, attn_mask=mask)
        h, weights = out if need_weights else (out, None)  # (B, N, D)
        logits = self.classifier(self.dropout(h))  # (B, N, C)
        return (logits, weights) if need_weights else logits


__all__ = ["ATTENTIONS", "NodeClassifier", "NodeClassifierConfig"]
