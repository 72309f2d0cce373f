"""Models: the Transformer (``models.transformer``: encoder, decoder, their layers, the
encoder-decoder) and the models built on its stacks (NAT, CTC, tagger, classifier, masked LM). Plain
``torch.nn``, no Lightning or Hydra."""

from transformer.models.ctc import CTCNonAutoregressiveModel
from transformer.models.nat import LengthPredictor, NonAutoregressiveDecoder, NonAutoregressiveModel
from transformer.models.tagger import Tagger
from transformer.models.transformer import (
    AutoregressiveDecoder,
    EncoderDecoder,
    EncoderOut,
    TransformerEncoder,
    VocabProjection,
    count_parameters,
    init_weights,
)

__all__ = [
    "AutoregressiveDecoder",
    "CTCNonAutoregressiveModel",
    "EncoderDecoder",
    "EncoderOut",
    "LengthPredictor",
    "NonAutoregressiveDecoder",
    "NonAutoregressiveModel",
    "Tagger",
    "TransformerEncoder",
    "VocabProjection",
    "count_parameters",
    "init_weights",
]
