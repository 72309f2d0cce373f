"""Initialisation and parameter counting."""

import torch
from torch import nn
from tiny_models import POSITIONALS

from transformer.models import EncoderDecoder, StackConfig, TransformerConfig, TransformerEncoder
from transformer.models.transformer import count_parameters, init_weights


def test_count_parameters_equals_hand_count():
    enc = TransformerEncoder(StackConfig(vocab_size=10, pad_id=0, d_model=4, n_heads=2, d_ff=8), n_layers=1)
    embedding = 10 * 4
    attention = 4 * (4 * 4 + 4)  # W_q, W_k, W_v, W_o with biases
    ffn = (4 * 8 + 8) + (8 * 4 + 4)
    norms = 3 * (4 + 4)  # two per layer, and the pre-norm stack's final one
    assert count_parameters(enc) == embedding + attention + ffn + norms  # sinusoids have none
    enc.embedding.weight.requires_grad_(False)
    assert count_parameters(enc) == attention + ffn + norms
    assert count_parameters(enc, trainable_only=False) == embedding + attention + ffn + norms


def test_tied_model_counts_shared_matrix_once():
    m = EncoderDecoder(TransformerConfig(vocab_size=10, pad_id=0, d_model=4, n_heads=2, n_encoder_layers=1,
                                         n_decoder_layers=1, d_ff=8, positional=POSITIONALS["learned"], max_len=6))
    enc_layer = 4 * 20 + 76 + 16  # attention + FFN + 2 LayerNorms
    dec_layer = 2 * 4 * 20 + 76 + 24  # self + cross attention, FFN, 3 LayerNorms
    final_norms = 2 * 8  # each pre-norm stack's last LayerNorm
    # One 10x4 matrix serves source, target and output; two 6x4 learned position tables.
    assert count_parameters(m) == 10 * 4 + 2 * 6 * 4 + enc_layer + dec_layer + final_norms


def test_init_weights_rules():
    m = EncoderDecoder(TransformerConfig(vocab_size=50, pad_id=1, d_model=64, n_heads=4, n_encoder_layers=1,
                                         n_decoder_layers=1, d_ff=128))
    emb = m.encoder.embedding.weight
    assert torch.equal(emb[1], torch.zeros(64))  # pad row
    assert abs(emb.std().item() - 64**-0.5) < 0.03
    lin = m.encoder.layers[0].ffn.w_1
    bound = (6 / (64 + 128)) ** 0.5  # Xavier-uniform
    assert lin.weight.abs().max() <= bound and lin.weight.abs().max() > 0.9 * bound
    assert torch.equal(lin.bias, torch.zeros(128))
    layer = nn.Linear(3, 3)
    init_weights(layer)
    assert torch.equal(layer.bias, torch.zeros(3))
