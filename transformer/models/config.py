"""The Transformer's config: every size and switch of the encoder and decoder, declared once
with its type and range.

``StackConfig`` holds what every stack reads, ``TransformerConfig`` adds the encoder-decoder's
depths and vocabularies, ``EncoderConfig`` is the encoder-only models' (tagger, classifier,
masked LM). The models take one config; ``tasks.build`` checks a flat dict of these fields
(``transformer.ranges``) and builds the config. The hub reader checks a ``config.json`` against
the same declarations before anything is built.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any, Callable

from torch import Tensor, nn

from transformer.ranges import Probability, Range

# Maps an encoder's input vectors (token embeddings, before positions) to the ones to encode:
# adversarial training perturbs them there (``tasks.adversarial``).
InputHook = Callable[[Tensor], Tensor]
# A ``_partial_`` positional-encoding class: the stack calls it with
# ``d_model, n_heads, max_len, causal`` (``modules.positional.build_positional``).
PositionalFactory = Callable[..., nn.Module]


# ----------------------------------------------------------------------------- the config
def hp(default: Any = MISSING, *, within: Range | Probability | None = None, factory: bool = False) -> Any:
    """A config field: its type is its annotation; ``within`` is the range ``tasks.build`` checks
    before a model is built (``transformer.ranges``: the one way a setting declares its range);
    ``factory``: the value is a ``_partial_`` class that the model calls. No ``default``: the
    field is required (the data fills in vocabulary sizes and special ids)."""
    metadata = {"range": within, "factory": factory}
    return field(default=default, metadata={k: v for k, v in metadata.items() if v})


# Upper bounds keep a typo (d_model=10**9) from allocating the machine's memory before anything
# is said; a subclass that only changes a default re-annotates the field and keeps these. The
# defaults that are not a size (d_model ... dropout) are the presets' shared base
# (conf/model/*.yaml), so the Python API and the command line build the same model
# (tests/models/test_config_defaults.py holds them equal).
@dataclass(kw_only=True)
class StackConfig:
    """What every stack reads: vocabulary, widths, depth-independent switches.

    Fields:
        vocab_size: source vocabulary (and target too unless ``tgt_vocab_size``); pad_id: the
            padding id of every vocabulary (both from the tokenizer).
        d_model, n_heads, d_ff: model width, attention heads (they divide ``d_model``) and the
            feed-forward width.
        dropout: on sublayer outputs, attention weights, the FFN's hidden units and the inputs.
        positional: a factory ``(d_model, n_heads, max_len, causal) -> module``; ``None`` =
            sinusoidal. In YAML: ``{_target_: transformer.modules.positional.RelativePositionBias,
            _partial_: true}``. Each stack builds its own instance.
        norm_first: True = pre-norm layers plus a final LayerNorm per stack (Xiong et al. 2020),
            stable at higher learning rates; False = post-norm layers (the paper).
        activation: ``"relu"``, ``"gelu"`` or ``"silu"`` in the FFN (``"gelu"`` is the exact erf form,
            BERT's; ``"silu"`` is x·sigmoid(x), Marian's ``swish``).
        window: if set, each encoder position attends only to positions within ``window``
            (restricted self-attention, Vaswani et al. 2017, Table 1; linear in S: ``LocalWindow``); None = full.
            Over image patches (a front end with a ``grid``) the window is 2-D: a patch attends to
            the patches within ``window`` rows and columns of it (``grid_window_mask``).
        max_len: longest sequence the positional encoding covers.
        norm_eps: the epsilon of every LayerNorm of the stacks (BERT's is 1e-12).
        scale_embeddings: multiply token embeddings by √d_model (Vaswani et al. 2017, sec. 3.4);
            BERT and RoBERTa do not.
        embedding_norm: a LayerNorm over the summed input embeddings (tokens, positions, token
            types), before the input dropout (BERT, RoBERTa, DistilBERT).
        type_vocab_size: the encoder adds a learned token-type (segment) embedding; every piece
            is of type 0, one text per input (BERT; RoBERTa's table has one row). 0 = none.
        frontend: the encoder's input front end for an input kind other than text
            (``transformer.kinds``): a factory called with ``d_model`` whose module maps
            ``(src (B, T, F), src_lengths (B,))`` to ``(B, T', D)`` vectors and their padding mask
            (``modules.frontends.ConvSubsampling`` for speech frames, ``PatchEmbedding`` for
            images); None = token ids through the embedding table.
    """

    vocab_size: int = hp(within=Range(1, 2**24))
    pad_id: int = hp(within=Range(0, 2**24))
    d_model: int = hp(512, within=Range(1, 2**16))
    n_heads: int = hp(8, within=Range(1, 2**12))
    d_ff: int = hp(2048, within=Range(1, 2**18))
    dropout: float = hp(0.1, within=Probability())
    positional: PositionalFactory | None = hp(None, factory=True)
    norm_first: bool = True
    activation: str = "relu"
    window: int | None = hp(None, within=Range(0, 2**20))
    max_len: int = hp(512, within=Range(1, 2**20))
    norm_eps: float = hp(1e-5, within=Range(0.0, 1.0))
    scale_embeddings: bool = True
    embedding_norm: bool = False
    type_vocab_size: int = hp(0, within=Range(0, 2**16))
    frontend: Callable[..., nn.Module] | None = hp(None, factory=True)


@dataclass(kw_only=True)
class TransformerConfig(StackConfig):
    """The encoder-decoder's config: ``StackConfig`` plus the two depths and the vocabularies.

    Fields:
        n_encoder_layers, n_decoder_layers: the depth of each stack.
        tgt_vocab_size: target vocabulary size when vocabularies are separate.
        share_embeddings: one embedding matrix for source and target (joint vocabulary;
            requires equal sizes: ``models.transformer.target_vocab_size``).
        tie_output: output projection = target embedding (Press & Wolf 2017).
        output_bias: a learned bias per target piece added to the decoder's vocabulary scores
            (Marian's ``final_logits_bias``); off: the projection alone, as the paper.
        mask_target_padding: teacher forcing hides target padding from the decoder's
            self-attention; off: only the future is hidden (Marian, whose decoder starts from the
            padding id). Right-padded targets give the same scores at every real position either way.
        memory_positions: the decoder adds sinusoidal positions to the encoder output it attends
            to (its cross-attention keys and values), so that each step can find where in the
            source it is. A text encoder's output keeps the positions it was given; a speech
            encoder trained with a CTC head gives the decoder little of them, and its decoder then
            attends to the same frames at every step (docs/experiments.md). Off: the paper's.
    """

    n_encoder_layers: int = hp(6, within=Range(1, 256))
    n_decoder_layers: int = hp(6, within=Range(1, 256))
    tgt_vocab_size: int | None = hp(None, within=Range(1, 2**24))
    share_embeddings: bool = True
    tie_output: bool = True
    output_bias: bool = False
    mask_target_padding: bool = True
    memory_positions: bool = False


@dataclass(kw_only=True)
class EncoderConfig(StackConfig):
    """An encoder-only model's config (tagger, classifier, masked LM): ``StackConfig`` at a
    smaller default size, plus ``n_layers``, the encoder's depth."""

    n_layers: int = hp(4, within=Range(1, 256))
    d_model: int = 256
    n_heads: int = 4
    d_ff: int = 1024


__all__ = ["EncoderConfig", "InputHook", "PositionalFactory", "StackConfig", "TransformerConfig", "hp"]
