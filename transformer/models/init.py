"""Weight initialisation and parameter counting, in one place."""

from __future__ import annotations

import torch
from torch import nn


def init_weights(module: nn.Module, d_model: int | None = None) -> None:
    """Initialise every Linear and Embedding under ``module`` in place.

    * Linear: Xavier-uniform weights (Glorot & Bengio 2010, as in tensor2tensor), zero bias.
    * Embedding: normal(0, d_model^-0.5), so that after the ×√d_model input scaling
      (Vaswani et al. 2017, sec. 3.4) token vectors have unit variance; the
      ``padding_idx`` row is zeroed. ``d_model`` defaults to each table's width.
    * LayerNorm: ones and zeros.

    Embeddings are initialised after Linears so that an output projection tied to
    an embedding ends up with the embedding initialisation.
    """
    modules = list(module.modules())
    for m in modules:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm) and m.elementwise_affine:
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    for m in modules:
        if isinstance(m, nn.Embedding):
            std = (d_model or m.embedding_dim) ** -0.5
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()


def count_parameters(module: nn.Module, trainable_only: bool = True) -> int:
    """Number of parameters; shared (tied) tensors are counted once."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def target_vocab_size(vocab_size: int, tgt_vocab_size: int | None, share_embeddings: bool) -> int:
    """The target vocabulary size (the source's when not given); shared embeddings need one
    joint vocabulary, else a ``ValueError`` says how to fix the config."""
    tgt_vocab_size = vocab_size if tgt_vocab_size is None else tgt_vocab_size
    if share_embeddings and tgt_vocab_size != vocab_size:
        raise ValueError(f"share_embeddings needs one joint vocabulary, got {vocab_size} source vs "
                         f"{tgt_vocab_size} target ids; set share_embeddings=false")
    return tgt_vocab_size
