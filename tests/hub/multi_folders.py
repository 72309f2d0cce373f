"""Tiny folders of the multilingual translation families for the hub tests, saved as
``transformers`` saves them:

* M2M100: a SentencePiece model trained here (``sentencepiece.bpe.model``), its ``vocab.json``
  (fairseq's ``<s> <pad> </s> <unk>`` first) and ``M2M100Tokenizer``'s 100 language codes after it;
* NLLB: the same architecture (``model_type: m2m_100``) with a byte-pair ``tokenizer.json``
  (``NllbTokenizer``, trained here with ``tokenizers``) holding its 202 codes;
* mBART-50: a unigram ``tokenizer.json`` (``MBart50Tokenizer`` of the SentencePiece model) with
  its 52 codes, and learned positions, an embedding LayerNorm and ``final_logits_bias``.

Models are random (d_model 32, 2 + 2 layers, 2 heads); weights, LayerNorms and biases are drawn
large enough that a wrong key or switch shows far above the 1e-5 tolerance, and the EOS logit is
raised so that some sentences end before the length cap and some reach it."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from folders import WORDS, sentences
from marian_folder import _train_spm

FAMILIES = ("m2m100", "nllb", "mbart50")
#: Each family's codes of English and French.
CODES = {"m2m100": ("__en__", "__fr__"), "nllb": ("eng_Latn", "fra_Latn"), "mbart50": ("en_XX", "fr_XX")}


def _text() -> list[str]:
    return [" ".join(WORDS)] * 3 + sentences(200)


def _m2m100_tokenizer(path: Path):
    import sentencepiece
    import transformers as tf

    model = _train_spm(_text(), 120)
    (path / "sentencepiece.bpe.model").write_bytes(model)
    sp = sentencepiece.SentencePieceProcessor(model_proto=model)
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (path / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    return tf.M2M100Tokenizer(str(path / "vocab.json"), str(path / "sentencepiece.bpe.model"), src_lang="en",
                              tgt_lang="fr")


def _nllb_tokenizer(path: Path):
    import transformers as tf
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    bpe.train_from_iterator(_text(), trainers.BpeTrainer(vocab_size=150, special_tokens=["<s>", "<pad>", "</s>",
                                                                                        "<unk>"]))
    state = json.loads(bpe.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    return tf.NllbTokenizer(vocab=state["vocab"], merges=merges, src_lang="eng_Latn", tgt_lang="fra_Latn")


def _mbart50_tokenizer(path: Path):
    import sentencepiece
    import transformers as tf

    sp = sentencepiece.SentencePieceProcessor(model_proto=_train_spm(_text(), 120))
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]
    return tf.MBart50Tokenizer(vocab=vocab, src_lang="en_XX", tgt_lang="fr_XX")


def write_multi_folder(path: Path, family: str, **config) -> Path:
    """Save a tiny random model of ``family`` (:data:`FAMILIES`) and its tokenizer to ``path``;
    ``config``: more settings of its config class."""
    import transformers as tf

    path.mkdir(parents=True, exist_ok=True)
    tok = {"m2m100": _m2m100_tokenizer, "nllb": _nllb_tokenizer, "mbart50": _mbart50_tokenizer}[family](path)
    sizes = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
                 encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=tok.pad_token_id,
                 eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
                 decoder_start_token_id=tok.eos_token_id, encoder_layerdrop=0.0, decoder_layerdrop=0.0)
    # M2M100's codes follow its vocabulary, then 8 made-up words
    vocab_size = max(tok.lang_token_to_id.values()) + 1 + 8 if family == "m2m100" else len(tok)
    if family == "mbart50":
        cfg = tf.MBartConfig(vocab_size=vocab_size, scale_embedding=True, **{**sizes, **config})
        model = tf.MBartForConditionalGeneration(cfg)
    else:
        cfg = tf.M2M100Config(vocab_size=vocab_size, **{**sizes, **config})
        model = tf.M2M100ForConditionalGeneration(cfg)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(1 + torch.randn_like(p) * 0.3)
            else:
                p.normal_(0, 0.3)
        if family == "mbart50":
            model.final_logits_bias.normal_(0, 0.1)
            model.final_logits_bias[0, tok.eos_token_id] += 2.0
        else:  # the output projection is the shared embedding
            model.lm_head.weight[tok.eos_token_id] += 0.3
            if family == "m2m100":  # codes and made-up words after the pieces: rarely chosen, as in a trained model
                model.lm_head.weight[len(tok.encoder):] *= 0.1
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path
