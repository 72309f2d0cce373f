"""Models assembled from ``transformer.modules``: plain ``torch.nn``, no Lightning or Hydra."""

from transformer.models.ctc import CTCNonAutoregressiveModel
from transformer.models.decoder import AutoregressiveDecoder
from transformer.models.encoder import EncoderOut, TransformerEncoder
from transformer.models.encoder_decoder import EncoderDecoder
from transformer.models.init import count_parameters, init_weights
from transformer.models.nat import LengthPredictor, NonAutoregressiveDecoder, NonAutoregressiveModel
from transformer.models.tagger import Tagger

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
    "count_parameters",
    "init_weights",
]
