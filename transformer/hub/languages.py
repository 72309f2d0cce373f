"""The language codes of the multilingual translation families, and our names for them.

M2M100, NLLB and mBART-50 name a language by a token of their vocabulary: the source starts
with its own language's code, and ``generate`` forces the target language's code as the first
token after the decoder's start (``transformer.data.parallel.languages``, ``tag_side=codes``).
Each family spells the codes its own way:

=========  ===================  =============================================================
family     code of French       where the folder lists them
=========  ===================  =============================================================
M2M100     ``__fr__``           not in the files: the ids follow the vocabulary in the order of
                                :data:`M2M100_LANGUAGES` (``language_codes: m2m100``) or
                                :data:`WMT21_LANGUAGES` (``wmt21``), as ``M2M100Tokenizer``
                                numbers them
NLLB       ``fra_Latn``         special tokens of ``tokenizer.json`` (ISO 639-3 and script)
mBART-50   ``fr_XX``            special tokens of ``tokenizer.json`` (ISO 639-1 and region)
=========  ===================  =============================================================

Our ``src_lang=`` / ``tgt_lang=`` are the short ISO 639-1 names (``fr``) wherever one name
picks one code of the folder, else the family's code spelled in full (NLLB's ``zho_Hans`` and
``zho_Hant``, ``ast_Latn``): :func:`names_of`.
"""

from __future__ import annotations

import re
from typing import Iterable

#: M2M100's languages (fairseq's ``m2m_100`` list), in the order of their ids after the vocabulary.
M2M100_LANGUAGES = (
    "af", "am", "ar", "ast", "az", "ba", "be", "bg", "bn", "br", "bs", "ca", "ceb", "cs", "cy", "da", "de", "el",
    "en", "es", "et", "fa", "ff", "fi", "fr", "fy", "ga", "gd", "gl", "gu", "ha", "he", "hi", "hr", "ht", "hu", "hy",
    "id", "ig", "ilo", "is", "it", "ja", "jv", "ka", "kk", "km", "kn", "ko", "lb", "lg", "ln", "lo", "lt", "lv", "mg",
    "mk", "ml", "mn", "mr", "ms", "my", "ne", "nl", "no", "ns", "oc", "or", "pa", "pl", "ps", "pt", "ro", "ru", "sd",
    "si", "sk", "sl", "so", "sq", "sr", "ss", "su", "sv", "sw", "ta", "th", "tl", "tn", "tr", "uk", "ur", "uz", "vi",
    "wo", "xh", "yi", "yo", "zh", "zu",
)
#: The WMT21 M2M100 models' languages, in the order of their ids.
WMT21_LANGUAGES = ("en", "ha", "is", "ja", "cs", "ru", "zh", "de")
#: ``tokenizer_config.json``'s ``language_codes`` -> the languages of an M2M100 vocabulary.
M2M100_CODE_SETS = {"m2m100": M2M100_LANGUAGES, "wmt21": WMT21_LANGUAGES}
#: M2M100's ``num_madeup_words``: ids after the language codes that no piece has.
M2M100_MADEUP_WORDS = 8

#: ISO 639-3 (NLLB's codes, macrolanguage members included) -> ISO 639-1, for our short names.
ISO_639_1 = {
    "afr": "af", "aka": "ak", "als": "sq", "amh": "am", "arb": "ar", "asm": "as", "azj": "az", "bak": "ba",
    "bam": "bm", "bel": "be", "ben": "bn", "bod": "bo", "bos": "bs", "bul": "bg", "cat": "ca", "ces": "cs",
    "cym": "cy", "dan": "da", "deu": "de", "dzo": "dz", "ell": "el", "eng": "en", "epo": "eo", "est": "et",
    "eus": "eu", "ewe": "ee", "fao": "fo", "fij": "fj", "fin": "fi", "fra": "fr", "gaz": "om", "gla": "gd",
    "gle": "ga", "glg": "gl", "grn": "gn", "guj": "gu", "hat": "ht", "hau": "ha", "heb": "he", "hin": "hi",
    "hrv": "hr", "hun": "hu", "hye": "hy", "ibo": "ig", "ind": "id", "isl": "is", "ita": "it", "jav": "jv",
    "jpn": "ja", "kan": "kn", "kas": "ks", "kat": "ka", "kaz": "kk", "khk": "mn", "khm": "km", "kik": "ki",
    "kin": "rw", "kir": "ky", "kmr": "ku", "kon": "kg", "kor": "ko", "lao": "lo", "lim": "li", "lin": "ln",
    "lit": "lt", "ltz": "lb", "lug": "lg", "lvs": "lv", "mal": "ml", "mar": "mr", "mkd": "mk", "mlt": "mt",
    "mri": "mi", "mya": "my", "nld": "nl", "nno": "nn", "nob": "nb", "npi": "ne", "nya": "ny", "oci": "oc",
    "ory": "or", "pan": "pa", "pbt": "ps", "pes": "fa", "plt": "mg", "pol": "pl", "por": "pt", "ron": "ro",
    "run": "rn", "rus": "ru", "sag": "sg", "san": "sa", "sin": "si", "slk": "sk", "slv": "sl", "smo": "sm",
    "sna": "sn", "snd": "sd", "som": "so", "sot": "st", "spa": "es", "srd": "sc", "srp": "sr", "ssw": "ss",
    "sun": "su", "swe": "sv", "swh": "sw", "tam": "ta", "tat": "tt", "tel": "te", "tgk": "tg", "tgl": "tl",
    "tha": "th", "tir": "ti", "tsn": "tn", "tso": "ts", "tuk": "tk", "twi": "tw", "uig": "ug", "ukr": "uk",
    "urd": "ur", "uzn": "uz", "vie": "vi", "wol": "wo", "xho": "xh", "ydd": "yi", "yor": "yo", "zho": "zh",
    "zsm": "ms", "zul": "zu",
}

#: The shape of each family's codes: M2M100's ``__fr__``, NLLB's ``fra_Latn``, mBART-50's ``fr_XX``.
CODE_PATTERNS = {
    "m2m100": re.compile(r"^__([a-z]{2,3})__$"),
    "nllb": re.compile(r"^([a-z]{3})_[A-Z][a-z]{3}$"),
    "mbart50": re.compile(r"^([a-z]{2})_[A-Z]{2}$"),
}


def m2m100_code(lang: str) -> str:
    """M2M100's token for ``lang``: ``__fr__``."""
    return f"__{lang}__"


def short_name(style: str, code: str) -> str | None:
    """The ISO 639-1 name of a family ``style``'s ``code`` (``fra_Latn`` -> ``fr``); None where it
    has none (or the code is not of that family's shape)."""
    m = CODE_PATTERNS[style].match(code)
    if m is None:
        return None
    return ISO_639_1.get(m.group(1)) if style == "nllb" else m.group(1)


def codes_in(style: str, tokens: Iterable[str]) -> list[str]:
    """The family's language codes among ``tokens`` (a tokenizer's special tokens), in order."""
    return [t for t in tokens if CODE_PATTERNS[style].match(t)]


def names_of(style: str, codes: Iterable[str]) -> dict[str, str]:
    """Our name of each language -> its code: the short name where only that code has it, the
    code itself otherwise (NLLB's two scripts of Chinese are ``zho_Hans`` and ``zho_Hant``)."""
    codes = list(dict.fromkeys(codes))
    short = {c: short_name(style, c) for c in codes}
    counts: dict[str, int] = {}
    for name in short.values():
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return {(s if s is not None and counts[s] == 1 else c): c for c, s in short.items()}


__all__ = ["CODE_PATTERNS", "ISO_639_1", "M2M100_CODE_SETS", "M2M100_LANGUAGES", "M2M100_MADEUP_WORDS",
           "WMT21_LANGUAGES", "codes_in", "m2m100_code", "names_of", "short_name"]
