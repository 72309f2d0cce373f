"""Tiny Hugging Face folders for the hub tests: a WordPiece (BERT, DistilBERT) or byte-level BPE
(RoBERTa) tokenizer trained here with ``tokenizers``, a randomly initialised ``*ForMaskedLM`` of
that vocabulary (hidden 32, 2 layers, 2 heads), both saved as ``transformers`` saves them.

Random weights are made large enough (LayerNorms and biases included) that a wrong key, a
missing LayerNorm or a wrong epsilon shows far above the 1e-5 tolerance."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

FAMILIES = ("bert", "roberta", "distilbert")
#: The slow tokenizer ``transformers`` reads a family's vocabulary files with.
CLASSES = {"bert": "BertTokenizer", "distilbert": "DistilBertTokenizer", "roberta": "RobertaTokenizer"}

#: Training text for the tokenizers, and the sentences the tests read: accents, CJK, emoji.
WORDS = ("the movie was great . the film was bad . a good day and a good night . she said "
         "that it was fine , but he did not agree . café naïve résumé crème brûlée Ångström "
         "日本語 中文 한국어 東京 北京 😀 🎉 👍 ça va très bien . über straße").split()


def sentences(n: int = 300) -> list[str]:
    """``n`` varied sentences, reproducibly: words of :data:`WORDS`, unseen words, digits,
    punctuation against words, doubled spaces and emoji joined to text."""
    g = torch.Generator().manual_seed(0)
    extra = ["Zürich", "naïveté", "東京タワー", "🤖robots", "x²", "e-mail", "don't", "U.S.A.", "42", "3.14",
             "MiXeD", "emoji🙂", "ÉCOLE", "漢字かな", "—dash", "(paren)", "\"quote\""]
    vocab = list(WORDS) + extra
    out = []
    for _ in range(n):
        k = int(torch.randint(1, 12, (1,), generator=g))
        idx = torch.randint(0, len(vocab), (k,), generator=g).tolist()
        sep = " " if int(torch.randint(0, 5, (1,), generator=g)) else "  "
        out.append(sep.join(vocab[i] for i in idx))
    return out


def _corpus() -> list[str]:
    return [" ".join(WORDS)] * 3 + sentences(200)


def train_tokenizer(family: str):
    """A ``PreTrainedTokenizerFast`` of the family's kind and special tokens."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if family in ("bert", "distilbert"):
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=None, handle_chinese_chars=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        tok.train_from_iterator(_corpus(), trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials,
                                                                     show_progress=False))
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                           special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]",
                                       cls_token="[CLS]", mask_token="[MASK]")
    from tokenizers import AddedToken

    # RoBERTa's <mask> takes the space before it (lstrip), as roberta-base's tokenizer does.
    specials = ["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(_corpus(), trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True,
                                                      add_prefix_space=False)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", sep_token="</s>",
                                 cls_token="<s>", unk_token="<unk>", pad_token="<pad>",
                                 mask_token=AddedToken("<mask>", lstrip=True, special=True))
    return hf


def tiny_model(family: str, vocab_size: int, pad_id: int, seed: int = 0):
    """A random ``*ForMaskedLM`` of the family, every parameter drawn away from its init value."""
    import transformers as tf

    sizes = dict(vocab_size=vocab_size, pad_token_id=pad_id)
    if family == "bert":
        cfg = tf.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                            max_position_embeddings=64, **sizes)
        cls = tf.BertForMaskedLM
    elif family == "roberta":
        cfg = tf.RobertaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=66, type_vocab_size=1, bos_token_id=0, eos_token_id=2,
                               **sizes)
        cls = tf.RobertaForMaskedLM
    else:
        cfg = tf.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64, **sizes)
        cls = tf.DistilBertForMaskedLM
    torch.manual_seed(seed)
    model = cls(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "layer_norm" in name.lower():
                p.add_(torch.randn_like(p) * 0.3)
            elif name.endswith("bias"):
                p.normal_(0, 0.2)
            else:
                p.normal_(0, 0.2)
    return model.eval()


def write_folder(family: str, path: Path, weights: str = "safetensors") -> Path:
    """Save a tiny family model and its tokenizer to ``path`` (``weights``: ``"safetensors"`` or
    ``"bin"``, ``pytorch_model.bin``)."""
    tok = train_tokenizer(family)
    model = tiny_model(family, len(tok), tok.pad_token_id)
    model.save_pretrained(path, safe_serialization=weights == "safetensors")
    tok.save_pretrained(path)
    return path


def vocabulary_files(folder: Path, out: Path, family: str, **config) -> Path:
    """``folder`` with its ``tokenizer.json`` replaced by the files an older snapshot keeps:
    ``vocab.txt`` (one piece a line, by id) or ``vocab.json`` + ``merges.txt``, and a
    ``tokenizer_config.json`` of the slow tokenizer's settings."""
    shutil.copytree(folder, out)
    state = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (out / name).unlink(missing_ok=True)
    vocab = state["model"]["vocab"]
    if family == "roberta":
        (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        merges = [m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]]
        (out / "merges.txt").write_text("#version: 0.2\n" + "".join(m + "\n" for m in merges), encoding="utf-8")
    else:
        (out / "vocab.txt").write_text("".join(t + "\n" for t in sorted(vocab, key=vocab.get)), encoding="utf-8")
        config = {"do_lower_case": True, **config}
    (out / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": CLASSES[family], **config}),
                                               encoding="utf-8")
    return out
