"""Search: greedy and beam search for autoregressive models (and ``EnsembleModel``, several of
them seen as one), one-pass / length-beam / Mask-Predict decoding for non-autoregressive ones,
best-path decoding for CTC ones. Talks to models only through the API in ``decoding.api`` (and
``decoding.ctc.CTCModel``)."""

from transformer.decoding.api import EncoderOutLike, KVCacheLike, NATModel, Seq2SeqModel
from transformer.decoding.beam import Hypothesis, beam_search, normalized_score
from transformer.decoding.ctc import collapse_paths, ctc_beam, ctc_collapse, ctc_one_pass
from transformer.decoding.ensemble import EnsembleModel
from transformer.decoding.greedy import greedy_search
from transformer.decoding.nat import (
    NATStats,
    mask_predict,
    nat_length_beam,
    nat_one_pass,
    predict_lengths,
    top_k_lengths,
)

__all__ = [
    "EncoderOutLike",
    "EnsembleModel",
    "Hypothesis",
    "KVCacheLike",
    "NATModel",
    "NATStats",
    "Seq2SeqModel",
    "beam_search",
    "collapse_paths",
    "ctc_beam",
    "ctc_collapse",
    "ctc_one_pass",
    "greedy_search",
    "mask_predict",
    "nat_length_beam",
    "nat_one_pass",
    "normalized_score",
    "predict_lengths",
    "top_k_lengths",
]
