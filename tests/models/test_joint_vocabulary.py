"""Every encoder-decoder model class refuses shared embeddings over two vocabularies and keeps a
separate target vocabulary when embeddings are not shared."""

import pytest

from transformer.models import CTCNonAutoregressiveModel, EncoderDecoder, NonAutoregressiveModel

SIZES = dict(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32, max_len=64)
EXTRA = {EncoderDecoder: {}, NonAutoregressiveModel: {"mask_id": 4}, CTCNonAutoregressiveModel: {"blank_id": 4}}


@pytest.mark.parametrize("cls", list(EXTRA))
def test_shared_embeddings_need_one_vocabulary(cls):
    with pytest.raises(ValueError, match="share_embeddings needs one joint vocabulary.*30 source vs 40 target"):
        cls(cls.config_class(vocab_size=30, tgt_vocab_size=40, pad_id=0, share_embeddings=True, **SIZES, **EXTRA[cls]))


@pytest.mark.parametrize("cls", list(EXTRA))
def test_separate_vocabularies_without_sharing(cls):
    model = cls(cls.config_class(vocab_size=30, tgt_vocab_size=40, pad_id=0, share_embeddings=False,
                                 tie_output=False, **SIZES, **EXTRA[cls]))
    assert (model.src_vocab_size, model.vocab_size) == (30, 40)
