"""Models: the Transformer (``models.transformer``: its config, encoder, decoder, their layers, the
encoder-decoder) and the models built on its stacks (NAT, CTC, tagger, classifier, masked LM), each
built from one config dataclass. Plain ``torch.nn``, no Lightning or Hydra."""

from transformer.models.ctc import CTCConfig, CTCNonAutoregressiveModel, JointCTCEncoderDecoder
from transformer.models.nat import LengthPredictor, NATConfig, NonAutoregressiveDecoder, NonAutoregressiveModel
from transformer.models.tagger import Tagger, TaggerConfig
from transformer.models.transformer import (
    AutoregressiveDecoder,
    EncoderConfig,
    EncoderDecoder,
    EncoderOut,
    StackConfig,
    TransformerConfig,
    TransformerEncoder,
    VocabProjection,
    count_parameters,
    init_weights,
)

__all__ = [
    "AutoregressiveDecoder",
    "CTCConfig",
    "CTCNonAutoregressiveModel",
    "EncoderConfig",
    "EncoderDecoder",
    "EncoderOut",
    "JointCTCEncoderDecoder",
    "LengthPredictor",
    "NATConfig",
    "NonAutoregressiveDecoder",
    "NonAutoregressiveModel",
    "StackConfig",
    "Tagger",
    "TaggerConfig",
    "TransformerConfig",
    "TransformerEncoder",
    "VocabProjection",
    "count_parameters",
    "init_weights",
]
