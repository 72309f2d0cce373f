"""Translating into a chosen language with a multilingual model, directly or through a pivot.

A multilingual checkpoint (Johnson et al. 2017) reads the target language as a ``<2xx>`` token
in front of the source (``data.parallel.languages``): a
:class:`~transformer.inference.translator.Translator` puts one language's tag on every source
(``set_target_language``, :func:`translator_into`), :func:`tagging_encode` each sentence's own
(the server batches sentences into several languages together); every search stays as it is. A direction the model was not trained on can be reached
through a third language both legs know (pivot translation, as Johnson et al. compare with
zero-shot): de→en with the model, then en→fr with the same model and the same decoding
settings (:func:`pivot_translate`, ``transformer-decode src_lang=de tgt_lang=fr decode.pivot=en``).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from transformer.data.parallel import languages
from transformer.decoding.settings import DecodeSettings


def target_of(text: str, default: str | None) -> str | None:
    """The language ``text`` is to be translated into: its own ``tgt_lang`` attribute (the
    server's per-sentence sources), else ``default``."""
    return getattr(text, "tgt_lang", default)


def tagging_encode(translator, tokenizer, default: str | None, default_src: str | None = None):
    """``translator.encode`` with each sentence's ``<2xx>`` tag in front of its pieces
    (``languages.tag_ids``; the language: :func:`target_of`, None leaves the pieces as they
    are), or with a pretrained family's model (``translator.coded``) the codes of its target and
    source languages (the sentence's ``src_lang``, else ``default_src``); a source cut to the
    model's length keeps its tag and loses its last piece."""
    encode = translator.encode
    coded = translator.coded

    def tagged(text: str) -> list[int]:
        before = translator.truncated
        target = target_of(text, default)
        if coded is not None and target is not None:
            ids = coded(getattr(text, "src_lang", None) or default_src, target) + encode(text)
        else:
            ids = languages.tag_ids(tokenizer, encode(text), target)
        limit = translator.max_src_len
        if limit is not None and len(ids) + 1 > limit:
            translator.truncated = before + 1  # counted once, whether encode cut it or the tag did
            ids = ids[: limit - 1]
        return ids

    return tagged


def translator_into(task, decode: DecodeSettings | Mapping[str, Any] | None, tgt_lang: str, device="cpu",
                    src_lang: str | None = None):
    """``task.translator(decode)`` translating every sentence into ``tgt_lang`` (checked
    against the checkpoint's languages: a ``ValueError`` naming them); ``src_lang``: the
    sentences' language, which a pretrained family's model reads as a code."""
    target = task.languages.check_target(tgt_lang)
    return task.translator(decode, device=device).set_target_language(target, src_lang)


def pivot_translate(task, decode: DecodeSettings | Mapping[str, Any], sentences: Sequence[str], src_lang: str | None,
                    tgt_lang: str | None, device="cpu") -> tuple[list[list[tuple[str, float]]], int]:
    """``sentences`` translated into ``decode.pivot``, the best of each then into
    ``tgt_lang``, by the same checkpoint with the same decoding settings: the second leg's
    n-best lists (its scores), and the inputs either leg cut to the model's length. An empty
    line stays empty through both legs."""
    decode = DecodeSettings.of(decode)
    src_lang, _ = task.languages.check_pivot(src_lang, decode.pivot, tgt_lang)
    first = translator_into(task, decode, decode.pivot, device, src_lang)
    middle = [hyps[0][0] if hyps else "" for hyps in first.translate(sentences)]
    second = translator_into(task, decode, tgt_lang, device, decode.pivot)
    return second.translate(middle), first.truncated + second.truncated


__all__ = ["pivot_translate", "tagging_encode", "target_of", "translator_into"]
