"""Tiny Hugging Face folders of the forms users have besides a masked LM: an encoder alone
(``BertModel``, ``RobertaModel``, ``DistilBertModel``, with or without BERT's pooler) and the
fine-tuned heads (``*ForSequenceClassification``, ``*ForTokenClassification``) with their
``id2label``; the tokenizer as ``folders.py`` trains it. Weights drawn as there, away from their
initial values, so a head read wrongly shows far above the tolerances."""

from __future__ import annotations

from pathlib import Path

import torch

from folders import train_tokenizer

#: The forms, by the ``transformers`` class that writes them: ``encoder`` (the base model),
#: ``sequence`` and ``token`` (the fine-tuned heads).
CLASSES = {
    "bert": {"encoder": "BertModel", "sequence": "BertForSequenceClassification",
             "token": "BertForTokenClassification"},
    "roberta": {"encoder": "RobertaModel", "sequence": "RobertaForSequenceClassification",
                "token": "RobertaForTokenClassification"},
    "distilbert": {"encoder": "DistilBertModel", "sequence": "DistilBertForSequenceClassification",
                   "token": "DistilBertForTokenClassification"},
}
SEQUENCE_LABELS = ["NEGATIVE", "NEUTRAL", "POSITIVE"]
TOKEN_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def config(family: str, vocab_size: int, pad_id: int, labels: list[str] | None = None):
    """The family's tiny config (hidden 32, 2 layers, 2 heads), with ``labels`` as ``id2label``."""
    import transformers as tf

    sizes = dict(vocab_size=vocab_size, pad_token_id=pad_id)
    if labels is not None:
        sizes.update(id2label=dict(enumerate(labels)), label2id={x: i for i, x in enumerate(labels)})
    if family == "bert":
        return tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=64, **sizes)
    if family == "roberta":
        return tf.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                max_position_embeddings=66, type_vocab_size=1, bos_token_id=0, eos_token_id=2, **sizes)
    return tf.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64, **sizes)


def write_head_folder(family: str, form: str, path: Path, labels: list[str] | None = None, pooler: bool = True,
                      seed: int = 0) -> Path:
    """Save a random ``CLASSES[family][form]`` and the family's tokenizer to ``path``; ``pooler``
    (BERT and RoBERTa encoders): keep the base model's pooler."""
    import transformers as tf

    tok = train_tokenizer(family)
    if labels is None and form != "encoder":
        labels = SEQUENCE_LABELS if form == "sequence" else TOKEN_LABELS
    cfg = config(family, len(tok), tok.pad_token_id, labels)
    torch.manual_seed(seed)
    cls = getattr(tf, CLASSES[family][form])
    model = cls(cfg, add_pooling_layer=pooler) if form == "encoder" and family != "distilbert" else cls(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name.lower():
                p.add_(torch.randn_like(p) * 0.3)
            else:
                p.normal_(0, 0.2)
    model.eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path
