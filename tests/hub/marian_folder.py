"""A tiny Marian folder for the hub tests: two SentencePiece unigram models trained here
(``source.spm``, ``target.spm``) on :func:`folders.sentences`, a ``vocab.json`` of both, and a
random ``MarianMTModel`` (d_model 32, 2 + 2 layers, 2 heads), saved with ``MarianTokenizer`` and
``save_pretrained`` as ``transformers`` saves them.

Weights, LayerNorms and biases are drawn large enough that a wrong key or switch shows far above
the 1e-5 tolerance; the EOS logit bias is raised so that some sentences end before the length cap and some
reach it."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch

from folders import WORDS, sentences


def _train_spm(seed_text: list[str], vocab_size: int) -> bytes:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(seed_text), model_writer=model,
                                             vocab_size=vocab_size, character_coverage=1.0, model_type="unigram",
                                             minloglevel=2)
    return model.getvalue()


def write_marian_folder(path: Path, activation: str = "swish", scale_embedding: bool = True,
                        share: bool = True) -> Path:
    """Save a tiny random Marian model and its tokenizer to ``path``."""
    import sentencepiece
    import transformers as tf

    path.mkdir(parents=True, exist_ok=True)
    text = [" ".join(WORDS)] * 3 + sentences(200)
    models = {"source": _train_spm(text, 120), "target": _train_spm(text[::-1], 110)}
    vocab = {"</s>": 0, "<unk>": 1}
    for side, model in models.items():
        (path / f"{side}.spm").write_bytes(model)
        sp = sentencepiece.SentencePieceProcessor(model_proto=model)
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if piece not in vocab and piece not in ("<s>", "</s>", "<unk>"):
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    tok = tf.MarianTokenizer(str(path / "source.spm"), str(path / "target.spm"), str(path / "vocab.json"))
    cfg = tf.MarianConfig(vocab_size=len(tok), decoder_vocab_size=len(tok), d_model=32, encoder_layers=2,
                          decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                          decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                          eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
                          forced_eos_token_id=tok.eos_token_id, activation_function=activation,
                          scale_embedding=scale_embedding, share_encoder_decoder_embeddings=share)
    torch.manual_seed(0)
    model = tf.MarianMTModel(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "embed_positions" in name:
                continue
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1 + torch.randn_like(p) * 0.3)
            else:
                p.normal_(0, 0.3)
        model.final_logits_bias.normal_(0, 0.1)
        model.final_logits_bias[0, tok.eos_token_id] += 2.0
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path
